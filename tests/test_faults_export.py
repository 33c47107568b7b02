"""Faults of issue #41 in policy export and rendering: an export never writes into a run
folder; Sebulba, IPPO and recurrent runs export; exported and loaded policies take one
observation or a batch; team runs render."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jrl
from jrl.app import api as experiment
from jrl.app import export
from jrl.run import evaluation

QUIET = dict(progress=False, num_reports=1)
# a host env batch of 4 envs, as tests/test_sebulba.py trains it
SEBULBA = dict(num_envs=4, num_steps=16, num_minibatches=2, num_epochs=2, hidden_sizes=(16, 16))
MPE = "jaxmarl:MPE_simple_spread_v3"


def cli(*args, cwd, timeout=300):
    """``jrl ARGS`` in a fresh process, run in ``cwd``."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def snapshot(folder):
    """Every file under ``folder``: relative path -> bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def one_line_error(out, *fragments):
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr[-2000:]
    assert lines and lines[-1].startswith("jrl: error: ") and "Traceback" not in out.stderr
    for fragment in fragments:
        assert fragment in lines[-1], lines[-1]


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("cartpole") / "run"
    jrl.train("ppo", "CartPole-v1", 2, out=run, total_steps=1024, **QUIET)
    return run


@pytest.fixture(scope="module")
def mpe_run(tmp_path_factory):
    pytest.importorskip("jaxmarl")
    run = tmp_path_factory.mktemp("mpe") / "run"
    jrl.train("ippo", MPE, out=run, total_steps=256, num_envs=2, num_steps=16, **QUIET)
    return run


# --- 1. an export never writes into a run folder -------------------------------------------


def test_export_into_the_run_folder_is_refused_and_writes_nothing(cartpole_run):
    before = snapshot(cartpole_run)
    out = cli("export", cartpole_run.name, "--out", cartpole_run.name, cwd=cartpole_run.parent)
    one_line_error(out, "is a run folder")
    for inside in ("checkpoints", "checkpoints/new", "tb", "config.json"):
        with pytest.raises(FileExistsError, match="lies in the run folder"):
            export.export_policy(cartpole_run, cartpole_run / inside)
    assert snapshot(cartpole_run) == before  # params.msgpack of both seeds untouched
    # a folder of its own inside the run folder is fine, and leaves the run's files alone
    export.export_policy(cartpole_run, cartpole_run / "policy", run=1)
    after = snapshot(cartpole_run)
    assert {k: v for k, v in after.items() if not k.startswith("policy/")} == before
    assert sorted(p.name for p in (cartpole_run / "policy").iterdir()) == sorted(
        export.EXPORT_FILES
    )


def test_export_overwrites_no_files_but_a_previous_exports(cartpole_run, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "params.msgpack").write_bytes(b"someone else's")
    with pytest.raises(FileExistsError, match="params.msgpack, not written by jrl export"):
        export.export_policy(cartpole_run, foreign)
    assert snapshot(foreign) == {"params.msgpack": b"someone else's"}
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a folder"):
        export.export_policy(cartpole_run, tmp_path / "file")
    # a previous export is replaced (here by the other run's policy)
    export.export_policy(cartpole_run, tmp_path / "policy", run=0)
    export.export_policy(cartpole_run, tmp_path / "policy", run=1)
    assert json.loads((tmp_path / "policy" / export.INFO_FILE).read_text())["run"] == 1


# --- 2. Sebulba (host env) runs export ----------------------------------------------------


def test_export_of_a_sebulba_run(tmp_path):
    pytest.importorskip("gymnasium")
    flags = [
        x
        for k, v in SEBULBA.items()
        for x in (f"--{k.replace('_', '-')}", *(v if isinstance(v, tuple) else (v,)))
    ]
    env = ("--env", "gymnasium:CartPole-v1", "--runner", "sebulba")
    trained = cli("train", "ppo", *env, "--total-steps", 256, *flags, "--out", "r", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    out = cli("export", "r", "--out", "p", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    policy = jrl.load_policy(tmp_path / "p")
    loaded = experiment.load_run(tmp_path / "r")
    obs = np.asarray(jax.random.normal(jax.random.key(1), (64, 4)) * 2.0, np.float32)
    actions = policy(obs)
    assert actions.shape == (64,) and len(np.unique(actions)) == 2  # both actions occur
    np.testing.assert_array_equal(actions, loaded.policy()(obs))
    info = json.loads((tmp_path / "p" / export.INFO_FILE).read_text())
    assert info["env_id"] == "gymnasium:CartPole-v1" and info["observation_space"].startswith("Box")


# --- 3. an IPPO export takes the env's own observation (with its global state) --------------


def test_ippo_export_takes_the_envs_observation(mpe_run, tmp_path):
    out = export.export_policy(mpe_run, tmp_path / "policy")
    policy = jrl.load_policy(out)
    loaded = experiment.load_run(mpe_run)
    env = evaluation.evaluation_env(loaded.built.env)
    params = loaded.built.env_params
    _, ts = env.reset(jax.random.key(0), params)
    assert set(ts.observation) == {"observation", "global_state"}  # as the env produces it
    action = policy(ts.observation)
    assert action.shape == (3,)  # one action per agent
    np.testing.assert_array_equal(action, loaded.policy()(ts.observation))
    key = jax.random.key(5)  # whole episodes: the exported policy plays as the run's
    got = evaluation.episode_returns(policy, env, key, 4, params)
    want = evaluation.episode_returns(loaded.policy(), env, key, 4, params)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


# --- 4. recurrent policies export with their core state as input and output ----------------


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_recurrent_export_carries_its_core_state(core, tmp_path):
    run = tmp_path / "run"
    kw = dict(total_steps=2048, num_envs=8, num_steps=16, core_size=8, hidden_sizes=(8,))
    jrl.train("ppo", "MemoryChain-v0", 2, out=run, recurrent=core, **kw, **QUIET)
    out = export.export_policy(run, tmp_path / "policy", run=1)
    info = json.loads((out / export.INFO_FILE).read_text())
    leaves = 2 if core == "lstm" else 1  # (c, h) or h
    assert info["memory"] and info["signature"].startswith("(state [B, ...], observations")
    assert info["state"] == [[["batch", "8"], "float32"]] * leaves
    assert info["initial_state"] == [[0.0] * 8] * leaves

    policy = jrl.load_policy(out)
    loaded = experiment.load_run(run)
    assert isinstance(policy, evaluation.StatefulPolicy)
    env = evaluation.evaluation_env(loaded.built.env)
    key, params = jax.random.key(3), loaded.built.env_params
    got = evaluation.episode_returns(policy, env, key, 16, params)
    want = evaluation.episode_returns(loaded.policy(1), env, key, 16, params)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))

    # one observation (no batch axis, state likewise) or a batch; the state carries the cue
    cue = jnp.array([1.0, 0.0, 0.0])
    action, state = policy.step(policy.initial_state(), cue)
    assert action.shape == () and jax.tree.leaves(state)[0].shape == (8,)
    assert np.abs(jax.tree.leaves(state)[0]).max() > 0
    batch_action, batch_state = policy.step(policy.initial_state(2), jnp.stack([cue, -cue]))
    assert batch_action.shape == (2,) and int(batch_action[0]) == int(action)
    for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(batch_state)):
        np.testing.assert_allclose(x, y[0], rtol=1e-6)
    want_action, want_state = loaded.policy(1).step(loaded.policy(1).initial_state(), cue)
    assert int(want_action) == int(action)

    # the artifact alone: (state, observations, key_data) -> (actions, state)
    raw = jax.export.deserialize(bytearray((out / export.POLICY_FILE).read_bytes()))
    zeros = jax.tree.map(lambda x: jnp.zeros((5, 8)), state)
    actions, next_state = raw.call(zeros, jnp.zeros((5, 3)), jnp.zeros((2,), jnp.uint32))
    assert actions.shape == (5,)
    assert jax.tree.structure(next_state) == jax.tree.structure(zeros)


# --- 5. one signature: one observation or a batch, key optional -------------------------------


def test_exported_and_loaded_policies_take_one_observation_or_a_batch(cartpole_run, tmp_path):
    out = export.export_policy(cartpole_run, tmp_path / "policy", run=1)
    loaded = experiment.load_run(cartpole_run)
    batch = np.asarray(jax.random.normal(jax.random.key(2), (32, 4)) * 2.0, np.float64)
    for policy in (jrl.load_policy(out), loaded.policy(1)):
        actions = policy(batch)  # float64 is cast to the env's float32
        assert actions.shape == (32,) and len(np.unique(actions)) == 2
        np.testing.assert_array_equal(actions, policy(batch, jax.random.key(9)))  # greedy
        for i in (0, 7):
            action = policy(batch[i])
            assert action.shape == () and int(action) == int(actions[i])
        with pytest.raises(ValueError, match="one observation"):
            policy(batch[:, :3])
    np.testing.assert_array_equal(jrl.load_policy(out)(batch), loaded.policy(1)(batch))
    # a stochastic export: the key matters, for one observation as for a batch
    sampled = jrl.load_policy(export.export_policy(cartpole_run, tmp_path / "s", greedy=False))
    many = [int(sampled(batch[0], jax.random.key(k))) for k in range(32)]
    assert set(many) == {0, 1}


# --- 6. team runs render ------------------------------------------------------------------


def test_render_of_an_ippo_run_on_mpe(mpe_run):
    import imageio.v3 as iio

    out = cli("render", mpe_run, "--out", "ep.gif", cwd=mpe_run.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "26 steps; 27 frames" in out.stdout  # MPE episodes end after 26 steps
    frames = iio.imread(mpe_run.parent / "ep.gif", index=None)
    assert frames.shape[:3] == (27, 400, 400) and not np.array_equal(frames[0], frames[-1])

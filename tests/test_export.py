"""Policy export: one run's policy as a jax.export artifact that reproduces the run's greedy
returns, loads without jrl's training code, and is reachable from the CLI."""

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

CASES = {
    "ppo": dict(total_steps=4 * 128 * 8, normalize_observations=True),  # normaliser inside
    "dqn": dict(total_steps=3000, learning_starts=1000, buffer_size=2000),
    "sac_discrete": dict(total_steps=3000, learning_starts=1000, buffer_size=2000),
}


@pytest.mark.parametrize("agent", sorted(CASES))
def test_exported_policy_reproduces_the_runs_greedy_returns(agent, tmp_path):
    run = tmp_path / "run"
    jrl.train(agent, "CartPole-v1", 2, out=run, progress=False, num_reports=2, **CASES[agent])
    out = export.export_policy(run, tmp_path / "policy", run=1)
    info = json.loads((out / "policy.json").read_text())
    assert info["agent"] == agent and info["run"] == 1 and info["seed"] == 1 and info["greedy"]
    exported = jrl.load_policy(out)
    loaded = experiment.load_run(run)
    env = evaluation.evaluation_env(loaded.built.env)
    key, params = jax.random.key(7), loaded.built.env_params
    want = evaluation.episode_returns(loaded.policy(1), env, key, 16, params)
    got = evaluation.episode_returns(exported, env, key, 16, params)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
    # any batch size, and the other run's policy is another function (not vacuous)
    obs = jax.random.normal(jax.random.key(1), (257, 4)) * 2.0
    np.testing.assert_array_equal(exported(obs), loaded.policy(1)(obs, jax.random.key(0)))
    if agent == "ppo":
        assert not np.array_equal(exported(obs), loaded.policy(0)(obs, jax.random.key(0)))


def test_the_artifact_runs_without_jrl(tmp_path):
    run = tmp_path / "run"
    jrl.train("ppo", "CartPole-v1", out=run, progress=False, total_steps=1024, num_reports=1)
    export.export_policy(run, tmp_path / "policy")
    code = (
        "import sys, jax, jax.numpy as jnp\n"
        "e = jax.export.deserialize(bytearray(open(sys.argv[1], 'rb').read()))\n"
        "a = e.call(jnp.zeros((5, 4)), jnp.zeros((2,), jnp.uint32))\n"
        "assert a.shape == (5,), a.shape\n"
        "assert not any(m == 'jrl' or m.startswith('jrl.') for m in sys.modules)\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "policy" / export.POLICY_FILE)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        cwd=tmp_path,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_cli_export(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    run_cli = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "jrl.app.cli", *map(str, a)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert run_cli("train", "ppo", "--total-steps", "1024", "--out", "r", "--quiet").returncode == 0
    out = run_cli("export", "r", "--out", "p", "--stochastic")
    assert out.returncode == 0, out.stderr
    assert "stochastic policy -> p" in out.stdout
    policy = jrl.load_policy(tmp_path / "p")
    a1 = policy(jnp.zeros((64, 4)), jax.random.key(1))
    a2 = policy(jnp.zeros((64, 4)), jax.random.key(2))
    assert a1.shape == (64,) and not np.array_equal(a1, a2)  # sampled: the key matters
    bad = run_cli("export", "r", "--out", "p2", "--run", "3")
    assert bad.returncode == 2 and "run must lie in [0, 1)" in bad.stderr
    with pytest.raises(FileNotFoundError, match="no exported policy"):
        jrl.load_policy(tmp_path / "nothing")

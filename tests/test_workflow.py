"""A researcher's workflow through the CLI and the Python API: the same command twice,
submodules reachable from ``import jrl``, the step budget's rounding said up front, cheap
refusals before any folder is looked at."""

import json
import os
import subprocess
import sys

import pytest

JRL = [sys.executable, "-m", "jrl.app.cli"]


def cli(*args, cwd, timeout=600):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    return subprocess.run(
        JRL + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def test_the_same_command_twice_keeps_both_runs(tmp_path):
    args = ["train", "ppo", "--seeds", "2", "--total-steps", "1024", "--quiet"]
    first, second = cli(*args, cwd=tmp_path), cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    runs = tmp_path / "runs"
    assert (runs / "ppo-CartPole-v1-seeds0-1" / "params.msgpack").is_file()
    assert (runs / "ppo-CartPole-v1-seeds0-1-2" / "params.msgpack").is_file()
    assert os.readlink(runs / "latest") == "ppo-CartPole-v1-seeds0-1-2"
    assert "ppo-CartPole-v1-seeds0-1-2" in second.stdout
    one = cli("train", "ppo", "--seed", "4", "--total-steps", "512", "--quiet", cwd=tmp_path)
    assert one.returncode == 0 and (runs / "ppo-CartPole-v1-seed4").is_dir()
    assert os.readlink(runs / "latest") == "ppo-CartPole-v1-seed4"


def test_submodules_are_reachable_from_import_jrl():
    code = "import jrl; print(jrl.app.api.evaluate_run.__name__, jrl.envs.names()[0])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "evaluate_run"


def test_the_rounding_of_total_steps_is_said_once_at_the_start(tmp_path):
    out = cli(
        "train", "ppo", "--total-steps", "1500", "--num-reports", "2", "--out", "r", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    # 4 envs x 128 steps = 512 per iteration: 1500 -> 2 iterations, 1024 steps
    assert out.stderr.count("total_steps 1,500 rounds down to 1,024 env steps per run") == 1
    assert "(training return, mean of the last 5% of iterations)" in out.stdout


def test_too_many_devices_is_refused_before_the_run_folder_is_looked_at(tmp_path):
    """Even when the default run folder is taken (as after the Quick start line)."""
    (tmp_path / "runs" / "ppo-CartPole-v1-seed0").mkdir(parents=True)
    (tmp_path / "runs" / "ppo-CartPole-v1-seed0" / "config.json").write_text("{}")
    out = cli("train", "ppo", "--devices", "64", cwd=tmp_path)
    assert out.returncode == 2 and "devices requested but only" in out.stderr
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["ppo-CartPole-v1-seed0"]


def test_a_sweep_is_reported_per_swept_value(tmp_path):
    """The progress line, the summary and jrl eval show each swept value's return, and eval's
    per-run lines name the value of each run."""
    out = cli(
        "train",
        "ppo",
        "--sweep",
        "learning_rate=0.001,0.0003",
        "--seeds",
        "2",
        "--total-steps",
        "2048",
        "--num-reports",
        "2",
        "--out",
        "r",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    progress = [line for line in out.stderr.splitlines() if "steps/s" in line]
    assert progress and "learning_rate=0.001: " in progress[-1]
    assert "learning_rate=0.0003: " in progress[-1]
    assert "[learning_rate=0.001] final return" in out.stdout
    ev = cli("eval", "r", "--episodes", "2", cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    assert "[learning_rate=0.001] mean" in ev.stdout and "[learning_rate=0.0003] mean" in ev.stdout
    assert "run 3 (seed 1, learning_rate=0.0003)" in ev.stdout


def test_jrl_envs_fits_100_columns_and_lists_gymnax_with_all(tmp_path):
    short = cli("envs", cwd=tmp_path)
    full = cli("envs", "--all", cwd=tmp_path)
    assert short.returncode == 0 and full.returncode == 0, (short.stderr, full.stderr)
    for out in (short, full):
        assert max(len(line) for line in out.stdout.splitlines()) <= 100
    assert "CartPole-v1" in short.stdout and "Box(4,) float32" in short.stdout
    assert "gymnax:" not in short.stdout and "gymnax:Breakout-MinAtar" in full.stdout


def test_train_accepts_an_env_object_with_params(tmp_path, monkeypatch):
    """An Environment object (or (env, params)) trains like an id: a jrl env's object uses its
    registered id; the params' changed fields become recorded overrides."""
    import jax.numpy as jnp
    from jrl.envs import registry
    from jrl.envs.cartpole import CartPole

    import jrl
    from jrl.core import spaces
    from jrl.core.env import Environment

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # for this test only

    class Flat(Environment):  # no id: registered under its class name
        default_params = None

        def reset_env(self, key, params):
            return jnp.zeros((), jnp.int32), jnp.zeros((1,), jnp.float32)

        def step_env(self, key, state, action, params):
            done = state + 1 >= 5
            return state + 1, jnp.zeros((1,), jnp.float32), jnp.float32(1.0), done, {}

        def observation_space(self, params=None):
            return spaces.Box(0.0, 1.0, (1,), jnp.float32)

        def action_space(self, params=None):
            return spaces.Discrete(2)

    res = jrl.train("reinforce", Flat(), total_steps=4096, progress=False)
    assert res.env_id == "Flat" and float(res.final_returns()[0]) == 5.0
    env = CartPole()
    params = env.default_params.replace(gravity=12.0)
    res = jrl.train("ppo", (env, params), total_steps=1024, progress=False, out=tmp_path / "r")
    assert res.env_id == "CartPole-v1"
    record = json.loads((tmp_path / "r" / "config.json").read_text())
    assert record["run"]["env_overrides"] == {"gravity": 12.0}
    with pytest.raises(TypeError, match="env must be a registered id"):
        jrl.train("ppo", 3, progress=False)

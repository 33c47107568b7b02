"""The `jrl` command line, run as a user would (subprocesses)."""

import os
import subprocess
import sys

import pytest

JRL = [sys.executable, "-m", "jrl.cli"]


def run(*args, cwd=None, timeout=600):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    return subprocess.run(
        JRL + list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def test_console_script_is_installed():
    import shutil

    exe = shutil.which("jrl") or os.path.join(os.path.dirname(sys.executable), "jrl")
    assert os.path.exists(exe), "the `jrl` console script is not installed"


def test_envs_lists_registered_envs():
    out = run("envs")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["id", "observation"]
    for env_id in [
        "CartPole-v1",
        "Acrobot-v1",
        "MountainCar-v0",
        "MountainCarContinuous-v0",
        "Pendulum-v1",
    ]:
        row = next(line for line in lines if line.startswith(env_id + " "))
        assert "jrl" in row.split()[-1]
    assert "Discrete(2)" in next(line for line in lines if line.startswith("CartPole-v1"))


def test_train_help_lists_fields_with_docstrings():
    out = run("train", "ppo", "--help")
    assert out.returncode == 0, out.stderr
    for text in [
        "--total-steps",
        "--lr",
        "--num-minibatches",
        "Discount factor",
        "--seeds",
        "--sweep",
    ]:
        assert text in out.stdout


def test_train_writes_run_folder(tmp_path):
    out = run(
        "train",
        "ppo",
        "--total-steps",
        "2048",
        "--seeds",
        "2",
        "--out",
        str(tmp_path / "r"),
        "--lr",
        "1e-3",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ppo on CartPole-v1: final return" in out.stdout
    for name in [
        "config.json",
        "metrics.csv",
        "learning_curve.png",
        "params.msgpack",
        "summary.json",
    ]:
        assert (tmp_path / "r" / name).is_file()
    assert '"learning_rate": 0.001' in (tmp_path / "r" / "config.json").read_text()
    assert "steps/s" in out.stderr  # the progress line
    again = run("train", "ppo", "--total-steps", "2048", "--out", str(tmp_path / "r"))
    assert again.returncode == 2 and "already holds a run" in again.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["train", "ppoo"], "Did you mean 'ppo'"),
        (["train", "ppo", "--env", "CartPol-v1"], "Did you mean 'CartPole-v1'"),
        (["train", "ppo", "--lr", "-1"], "learning_rate must be positive"),
        (["train", "ppo", "--gamma", "1.5"], "gamma must lie in [0, 1]"),
        (["train", "ppo", "--num-envs", "0"], "num_envs must be positive"),
        (["train", "ppo", "--num-minibatches", "3"], "not divisible by num_minibatches"),
        (["train", "ppo", "--sweep", "num_envs=1,2"], "cannot sweep"),
        (["train", "ppo", "--seeds", "0"], "seeds must be >= 1"),
        (["trian"], "did you mean 'train'"),
        (["train", "ppo", "--lrr", "1e-3"], "Perhaps you meant"),
        (["train", "dqn", "--gamma", "-0.1"], "gamma must lie in [0, 1]"),
        (["train", "dqn", "--batch-size", "0"], "batch_size must be positive"),
        (["train", "ppo", "--log", "tensorbord"], "Did you mean 'tensorboard'"),
        (["train", "ppo", "--checkpoint-every", "-5"], "checkpoint_every must be >= 0"),
        (["eval", "no/such/run"], "does not exist"),
        (["render", "no/such/run"], "does not exist"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tmp_path):
    out = (
        run(*args, "--out", str(tmp_path / "x"))
        if args[0] == "train" and len(args) > 2
        else run(*args)
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "x").exists()


def test_ill_typed_value_rejected():
    out = run("train", "ppo", "--lr", "abc")
    assert out.returncode == 2 and "--lr" in out.stderr

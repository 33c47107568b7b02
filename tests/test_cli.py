"""The `jrl` command line, run as a user would (subprocesses, each in a temporary folder)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import jax
import jrl.agents
import numpy as np
import pytest

import jrl
from conftest import PipeLines, free_port
from jrl.app import api as experiment
from jrl.app import checkpoint

JRL = [sys.executable, "-m", "jrl.app.cli"]
# the CLI runs in subprocesses, forked from a process where JAX has started threads
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


def run(*args, cwd, timeout=600, env=None, exe=JRL):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.run(
        exe + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


@pytest.mark.parametrize("args", [["envs"], ["train", "ppo", "--help"], ["--help"]])
def test_output_to_a_reader_that_went_away_ends_quietly(tmp_path, args):
    """``jrl envs | head -1``: once the reader has closed the pipe, the command ends with exit
    141 (128 + SIGPIPE, as a shell reports it) and no traceback. The pipe here is closed
    before the command writes, so every write fails; the console script and ``python -m``."""
    from jrl.app.cli import EXIT_CLOSED_PIPE

    for exe in ([str(Path(sys.executable).parent / "jrl")], JRL):
        read, write = os.pipe()
        os.close(read)
        try:
            out = subprocess.run(
                exe + args,
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=300,
                cwd=tmp_path,
                env={**os.environ, "JAX_PLATFORMS": "cpu"},
            )
        finally:
            os.close(write)
        assert out.returncode == EXIT_CLOSED_PIPE, out.stderr[-2000:]
        assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr


def test_console_script_is_installed(tmp_path):
    """The `jrl` script of this environment (next to its python, not any `jrl` on PATH) runs
    this jrl."""
    exe = Path(sys.executable).parent / "jrl"
    assert exe.is_file(), "the `jrl` console script is not installed in this environment"
    shebang = exe.read_text().splitlines()[0]
    interpreter = Path(shebang.removeprefix("#!").strip())
    assert interpreter.parent == Path(sys.executable).parent  # this environment's python
    out = run("-V", cwd=tmp_path, exe=[str(exe)])
    assert out.returncode == 0 and out.stdout.strip() == f"jrl {jrl.__version__}", out
    out = run("agents", cwd=tmp_path, exe=[str(exe)])
    assert out.returncode == 0 and [line.split()[0] for line in out.stdout.splitlines()] == (
        jrl.agents.names()
    )


def test_version_usage_and_bare_jrl(tmp_path):
    for flag in ("-V", "--version"):
        out = run(flag, cwd=tmp_path)
        assert (out.returncode, out.stdout.strip()) == (0, f"jrl {jrl.__version__}"), out
    out = run(cwd=tmp_path)  # bare `jrl`: the usage, on stderr, and exit 2
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage:") and "jrl train AGENT" in out.stderr
    out = run("--help", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("usage:") and "jrl eval" in out.stdout


def test_agents_lists_every_agent_with_its_summary(tmp_path):
    out = run("agents", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = [line.split(None, 1) for line in out.stdout.splitlines()]
    assert rows == [[name, jrl.agents.summary(name)] for name in jrl.agents.names()]


def test_envs_gymnax_lists_the_gymnax_envs(tmp_path):
    import gymnax

    out = run("envs", "--gymnax", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # (envs registered by other tests in this process are not in the CLI's process)
    builtin = [n for n in jrl.envs.names() if jrl.envs.entry(n).source != "user"]
    for env_id in builtin + [f"gymnax:{n}" for n in gymnax.registered_envs]:
        assert any(line.startswith(env_id + " ") for line in lines), env_id
    row = next(line for line in out.stdout.splitlines() if line.startswith("gymnax:CartPole-v1 "))
    assert "Discrete(2)" in row and row.split()[-1] == "gymnax"
    plain = run("envs", cwd=tmp_path)
    assert "gymnax:" not in plain.stdout


def test_debug_shows_the_traceback(tmp_path):
    """Without --debug a user error is one line (exit 2); with it, the traceback."""
    for args in (["train", "ppo", "--lr", "-1"], ["eval", "no/such/run"]):
        quiet = run(*args, cwd=tmp_path)
        assert quiet.returncode == 2 and "Traceback" not in quiet.stderr, quiet.stderr
        loud = run(*args, "--debug", cwd=tmp_path)
        assert loud.returncode == 1 and "Traceback (most recent call last)" in loud.stderr
        assert quiet.stderr.strip().splitlines()[-1].removeprefix("jrl: error: ") in loud.stderr


def test_envs_lists_registered_envs(tmp_path):
    out = run("envs", cwd=tmp_path)
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
    assert "gymnasium:<id>" in out.stdout and "--runner sebulba" in out.stdout  # host envs


def test_train_help_lists_fields_with_docstrings(tmp_path):
    out = run("train", "ppo", "--help", cwd=tmp_path)
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
        cwd=tmp_path,
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
    again = run("train", "ppo", "--total-steps", "2048", "--out", str(tmp_path / "r"), cwd=tmp_path)
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
        (
            ["train", "dqn", "--env", "Pendulum-v1"],
            "dqn needs a Discrete action space, but Pendulum-v1 has Box(-2.0, 2.0, (1,), float32);"
            " agents for a Box action space: a2c, cma_es, ddpg, impala, openai_es, ppo, reinforce,"
            " sac, snes, td3",
        ),
        (
            ["train", "sac", "--env", "CartPole-v1"],
            "sac needs a Box action space, but CartPole-v1 has Discrete(2); agents for a "
            "Discrete action space: a2c, apex, bc, c51, cma_es, cql, dqn, impala, iql, muzero, "
            "openai_es, ppo, pqn, qrdqn, rainbow, reinforce, sac_discrete, snes",
        ),
        (["train", "td3", "--env", "Pendulum-v1", "--num-critics", "0"], "num_critics must be"),
        (["train", "sac", "--env", "Pendulum-v1", "--actor-q", "max"], "actor_q must be"),
        (["eval", "no/such/run"], "does not exist"),
        (["render", "no/such/run"], "does not exist"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tmp_path):
    out = (
        run(*args, "--out", str(tmp_path / "x"), cwd=tmp_path)
        if args[0] == "train" and len(args) > 2
        else run(*args, cwd=tmp_path)
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "x").exists()


UNBOUNDED = """
import jax.numpy as jnp

import jrl.envs
from jrl.core import spaces
from jrl.envs.pendulum import Pendulum


class FreePendulum(Pendulum):
    id = "FreePendulum-v0"

    def action_space(self, params=None):
        return spaces.Box(-jnp.inf, jnp.inf, (1,), jnp.float32)


jrl.envs.register("FreePendulum-v0", FreePendulum, max_episode_steps=200, overwrite=True)
"""


@pytest.mark.parametrize("agent", ["sac", "td3", "ddpg"])
def test_an_action_space_with_infinite_bounds_is_one_clear_line(agent, tmp_path):
    (tmp_path / "freependulum.py").write_text(UNBOUNDED)
    out = run(
        "train",
        agent,
        "--env",
        "FreePendulum-v0",
        "--import",
        "freependulum",
        "--out",
        tmp_path / "x",
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"{agent} squashes its actions into the action space's bounds" in out.stderr
    assert "must be finite; got Box(-inf, inf, (1,), float32)" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def test_ill_typed_value_rejected(tmp_path):
    out = run("train", "ppo", "--lr", "abc", cwd=tmp_path)
    assert out.returncode == 2 and "--lr" in out.stderr


# ------------------------------------------------------------------------- eval and render


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A PPO run folder of 2 seeds with checkpoints after iterations 4 and 8."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    experiment.train(
        "ppo",
        "CartPole-v1",
        2,
        out=run_dir,
        total_steps=4096,
        num_reports=4,
        checkpoint_every=2048,
        progress=False,
    )
    assert checkpoint.steps(run_dir) == [4, 8]
    return run_dir


def test_eval_step_seed_and_stochastic(trained, tmp_path):
    """`jrl eval --step --seed --episodes [--stochastic]` evaluates what the Python API does with
    the same arguments, and writes it to eval.json."""
    out = run("eval", trained, "--step", "4", "--seed", "3", "--episodes", "5", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stats = json.loads((trained / "eval.json").read_text())
    assert (stats["checkpoint_iteration"], stats["seed"], stats["policy"]) == (4, 3, "greedy")
    expected = experiment.evaluate_run(trained, episodes=5, seed=3, step=4)
    assert stats["returns"] == expected["returns"] and np.shape(stats["returns"]) == (2, 5)
    assert "checkpoint at iteration 4" in out.stdout
    other_seed = experiment.evaluate_run(trained, episodes=5, seed=0, step=4)
    assert other_seed["returns"] != stats["returns"]  # the seed reaches the episodes

    out = run("eval", trained, "--stochastic", "--episodes", "5", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stats = json.loads((trained / "eval.json").read_text())
    assert (stats["checkpoint_iteration"], stats["policy"]) == (8, "stochastic")
    stochastic = experiment.evaluate_run(trained, episodes=5, greedy=False)
    greedy = experiment.evaluate_run(trained, episodes=5)
    assert stats["returns"] == stochastic["returns"] != greedy["returns"]


def _episode_length(loaded, greedy: bool, seed: int) -> int:
    """The length of the episode `jrl render --seed` plays (the key of episode_returns)."""
    from jrl.run.evaluation import episode_returns, evaluation_env

    env = evaluation_env(loaded.built.env)
    _, length = episode_returns(
        loaded.policy(0, greedy), env, jax.random.key(seed), 1, loaded.built.env_params
    )
    return int(length[0])


def test_render_stochastic_fps_and_mp4(trained, tmp_path):
    """`jrl render --stochastic --seed S --fps F`: the behaviour policy's episode (a seed where
    it is not the greedy one's), at F frames per second, as GIF and as MP4."""
    import imageio.v3 as iio

    loaded = experiment.load_run(trained)
    seed = next(
        s
        for s in range(20)
        if _episode_length(loaded, False, s) != _episode_length(loaded, True, s)
    )
    length = _episode_length(loaded, False, seed)
    args = ["render", trained, "--stochastic", "--seed", seed, "--max-steps", 1000]
    out = run(*args, "--out", tmp_path / "ep.gif", "--fps", "10", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"over {length} steps" in out.stdout
    assert iio.imread(tmp_path / "ep.gif", index=None).shape[0] == length + 1
    assert iio.immeta(tmp_path / "ep.gif", index=0)["duration"] == 100  # 1/10 s per frame
    out = run(*args, "--out", tmp_path / "ep.mp4", "--fps", "24", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert iio.immeta(tmp_path / "ep.mp4", plugin="FFMPEG")["fps"] == 24
    assert iio.imread(tmp_path / "ep.mp4", plugin="FFMPEG", index=None).shape[0] == length + 1


def test_render_refuses_an_unknown_extension(trained, tmp_path):
    out = run("render", trained, "--out", tmp_path / "ep.avi", cwd=tmp_path)
    assert out.returncode == 2 and "--out must end in .gif or .mp4" in out.stderr
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------------- overwrite and sweep


SMALL = ["--total-steps", "2048", "--num-reports", "2", "--quiet"]


def test_overwrite_replaces_the_run_and_keeps_other_files(tmp_path):
    run_dir = tmp_path / "run"
    experiment.train(
        "ppo",
        "CartPole-v1",
        2,
        out=run_dir,
        total_steps=4096,
        checkpoint_every=1024,
        progress=False,
    )
    (run_dir / "eval.json").write_text("{}")  # an output of the old run
    (run_dir / "notes.txt").write_text("mine")  # not a run output
    out = run("train", "ppo", "--out", run_dir, "--overwrite", "--seed", "5", *SMALL, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    spec = experiment.read_spec(run_dir)
    assert (spec.options.seed, spec.options.seeds, spec.config.total_steps) == (5, 1, 2048)
    assert checkpoint.steps(run_dir) == [4]  # the old run's 2, 4, 6, 8 are gone
    rows = (run_dir / "metrics.csv").read_text().splitlines()[1:]
    assert len(rows) == 4 and all(r.split(",")[:2] == ["0", "5"] for r in rows)  # run 0, seed 5
    assert not (run_dir / "eval.json").exists()
    assert (run_dir / "notes.txt").read_text() == "mine"


def test_sweep_through_the_cli_and_its_exact_resume(tmp_path):
    """A swept run from the CLI, stopped and resumed: the same parameters and metrics as the
    uninterrupted sweep; its runs are every seed of every value."""
    sweep = ["--sweep", "learning_rate=0.001,0.0003", "--seeds", "2"]
    split = tmp_path / "split"
    out = run(
        "train", "ppo", *sweep, *SMALL, "--out", split, "--stop-at-steps", "1024", cwd=tmp_path
    )
    assert out.returncode == 0 and "Resume with" in out.stderr, out.stderr
    out = run("train", "--resume", split, "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    # the uninterrupted sweep through the same command: on a multi-core machine both spread
    # their 4 runs over the cores alike (a one-device program rounds otherwise)
    whole = tmp_path / "whole"
    out = run("train", "ppo", *sweep, *SMALL, "--out", whole, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for name in ("params.msgpack", "metrics.csv"):
        assert (whole / name).read_bytes() == (split / name).read_bytes(), name
    spec = experiment.read_spec(split)
    assert spec.run_sweep == {"learning_rate": [1e-3, 1e-3, 3e-4, 3e-4]}
    assert spec.run_seeds == [0, 1, 0, 1]
    out = run("train", "--resume", split, "--sweep", "learning_rate=0.1,0.2", cwd=tmp_path)
    assert out.returncode == 2 and "--sweep cannot change when resuming" in out.stderr


@pytest.mark.parametrize(
    "item,message",
    [
        ("learning_rate", "--sweep expects FIELD=v1,v2,..., got 'learning_rate'"),
        ("learning_rate=", "--sweep expects FIELD=v1,v2,..., got 'learning_rate='"),
        ("learning_rate=fast,slow", "--sweep learning_rate: values must be numbers"),
        ("num_envs=2,4", "cannot sweep ['num_envs']"),
    ],
)
def test_sweep_parse_errors(item, message, tmp_path):
    out = run("train", "ppo", "--sweep", item, "--out", tmp_path / "x", cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------ multi-host


def test_two_hosts_from_flags_and_from_jrl_variables(tmp_path):
    """Process 0 from --coordinator/--num-processes/--process-id, process 1 from
    --multihost and the JRL_* variables: one learner over both processes' devices, one run
    folder, which process 0 writes (process 1 takes part in its checkpoint and prints no
    summary)."""
    address = f"127.0.0.1:{free_port()}"
    common = ["train", "ppo", "--num-envs", "4", "--total-steps", "2048", "--num-reports", "2"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    flags = ["--coordinator", address, "--num-processes", "2", "--process-id", "0"]
    variables = {"JRL_COORDINATOR": address, "JRL_NUM_PROCESSES": "2", "JRL_PROCESS_ID": "1"}
    procs = [
        subprocess.Popen(
            JRL + common + flags + ["--out", "run", "--quiet"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
        subprocess.Popen(
            JRL + common + ["--multihost", "--out", "run"],
            cwd=tmp_path,
            env={**env, **variables},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
    ]
    # every pipe drained while both run: neither process blocks writing while the other
    # waits for it in a collective
    pipes = [(PipeLines(p.stdout), PipeLines(p.stderr)) for p in procs]
    try:
        for p in procs:
            p.wait(timeout=600)
    finally:
        for p in procs:
            p.kill()
    outs = [(out.rest(timeout=60), err.rest(timeout=60)) for out, err in pipes]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert "final return" in outs[0][0] and "final return" not in outs[1][0]
    assert "steps/s" not in outs[1][1]  # no progress line from process 1 either
    spec = experiment.read_spec(tmp_path / "run")
    assert spec.options.devices == 2  # one CPU device per process
    for name in experiment.RUN_FILES:
        assert (tmp_path / "run" / name).is_file(), name
    assert experiment.checkpoint.steps(tmp_path / "run") == [spec.config.num_iterations]


def test_initialize_reads_the_jrl_variables(monkeypatch):
    """`jrl.app.distributed.initialize()` takes what is not given from JRL_COORDINATOR,
    JRL_NUM_PROCESSES and JRL_PROCESS_ID (explicit arguments win), and refuses a partial set;
    the heartbeat bound on a dead peer comes from peer_timeout or JRL_PEER_TIMEOUT."""
    import types

    import jrl.app.distributed

    calls = []
    fake = types.SimpleNamespace(
        config=types.SimpleNamespace(update=lambda *a: calls.append(("config", a))),
        distributed=types.SimpleNamespace(initialize=lambda **kw: calls.append(("init", kw))),
    )
    monkeypatch.setattr(jrl.app.distributed, "jax", fake)
    monkeypatch.setenv("JRL_COORDINATOR", "127.0.0.1:1234")
    monkeypatch.setenv("JRL_NUM_PROCESSES", "3")
    monkeypatch.setenv("JRL_PROCESS_ID", "0")  # process 0 hosts the coordinator: no probe
    jrl.app.distributed.initialize()
    init = dict(calls[-1][1])
    assert (init["coordinator_address"], init["num_processes"], init["process_id"]) == (
        "127.0.0.1:1234",
        3,
        0,
    )
    assert ("config", ("jax_cpu_collectives_implementation", "gloo")) in calls
    jrl.app.distributed.initialize("127.0.0.1:999", 2, 0)  # explicit arguments win
    assert calls[-1][1]["coordinator_address"] == "127.0.0.1:999"
    assert calls[-1][1]["num_processes"] == 2
    assert calls[-1][1]["heartbeat_timeout_seconds"] == 100  # jax's default, the bound on a
    monkeypatch.setenv("JRL_PEER_TIMEOUT", "7.5")  # dead peer, unless $JRL_PEER_TIMEOUT says
    jrl.app.distributed.initialize("127.0.0.1:999", 2, 0)
    assert calls[-1][1]["heartbeat_timeout_seconds"] == 8  # whole seconds, rounded up
    jrl.app.distributed.initialize("127.0.0.1:999", 2, 0, peer_timeout=3)
    assert calls[-1][1]["heartbeat_timeout_seconds"] == 3
    with pytest.raises(ValueError, match="peer_timeout must be positive"):
        jrl.app.distributed.initialize("127.0.0.1:999", 2, 0, peer_timeout=0)
    monkeypatch.setenv("JRL_PEER_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="JRL_PEER_TIMEOUT"):
        jrl.app.distributed.initialize("127.0.0.1:999", 2, 0)
    with pytest.raises(ValueError, match="JRL_PEER_TIMEOUT"):  # before process 1's probe of
        jrl.app.distributed.initialize("127.0.0.1:1", 2, 1, timeout=30)  # a closed port
    monkeypatch.delenv("JRL_PEER_TIMEOUT")
    monkeypatch.delenv("JRL_PROCESS_ID")
    with pytest.raises(ValueError, match="needs all of"):
        jrl.app.distributed.initialize()


def test_render_a_gymnax_run_and_refuse_one_that_cannot_draw(tmp_path):
    """`jrl render` on gymnax runs: MinAtar draws its observation cells; Catch cannot be drawn,
    said in one line, exit 2."""
    small = ["--total-steps", "1024", "--num-reports", "1", "--quiet"]
    out = run(
        "train",
        "ppo",
        "--env",
        "gymnax:Breakout-MinAtar",
        "--out",
        "b",
        "--num-envs",
        "4",
        "--num-steps",
        "32",
        *small,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    out = run("render", "b", "--out", "b.gif", "--max-steps", "20", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    frames = iio.imread(tmp_path / "b.gif", index=None)
    assert frames.shape[1:] == (160, 160, 3) and 2 <= len(frames) <= 21
    out = run("train", "ppo", "--env", "gymnax:Catch-bsuite", "--out", "c", *small, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = run("render", "c", "--out", "c.gif", cwd=tmp_path)
    assert out.returncode == 2 and "Catch-bsuite cannot render" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "c.gif").exists()

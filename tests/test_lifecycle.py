"""Experiment lifecycle: exact resume, checkpoints (atomic, checked), signals, NaN stops,
periodic and after-the-fact evaluation, rendering, logging sinks wired into training."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs
import numpy as np
import pytest

from conftest import PipeLines
from jrl.app import api as experiment
from jrl.app import checkpoint
from jrl.app import chunk_work as training
from jrl.core import spaces
from jrl.core.env import Environment
from jrl.run import anakin, evaluation

JRL = [sys.executable, "-m", "jrl.app.cli"]
QUIET = dict(progress=False)


def cli(*args, timeout=600):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    return subprocess.run(
        JRL + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env
    )


def assert_same_run(a: experiment.TrainResult, b: experiment.TrainResult):
    """Bitwise-equal final parameters and metric histories."""
    for x, y in zip(jax.tree.leaves(a.final_params), jax.tree.leaves(b.final_params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert sorted(a.metrics) == sorted(b.metrics)
    for k in a.metrics:
        np.testing.assert_array_equal(a.metrics[k], b.metrics[k], err_msg=k)


RESUME_CASES = {
    "ppo": dict(total_steps=6144, num_reports=6),
    "dqn-per": dict(
        total_steps=3000, num_reports=6, learning_starts=500, prioritized=True, buffer_size=2000
    ),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_interrupted_and_resumed_run_equals_uninterrupted(case, tmp_path):
    """2 seeds vmapped: stopped at a third of the run (checkpoint), resumed from the folder:
    the same parameters, metric histories and metrics.csv as the run that never stopped."""
    agent = case.split("-")[0]
    kw = RESUME_CASES[case]
    whole = experiment.train(agent, "CartPole-v1", 2, out=tmp_path / "whole", **QUIET, **kw)
    with pytest.raises(experiment.TrainingInterrupted) as stopped:
        experiment.train(
            agent,
            "CartPole-v1",
            2,
            out=tmp_path / "split",
            stop_at_steps=kw["total_steps"] // 3,
            **QUIET,
            **kw,
        )
    assert stopped.value.exit_code == 0 and stopped.value.checkpoint.is_dir()
    first = checkpoint.steps(tmp_path / "split")
    assert len(first) == 1 and 0 < first[0] < whole.metrics["train/loss"].shape[1]
    resumed = experiment.resume(tmp_path / "split", **QUIET)
    assert_same_run(whole, resumed)
    assert (tmp_path / "whole" / "metrics.csv").read_text() == (
        tmp_path / "split" / "metrics.csv"
    ).read_text()
    if (
        case == "dqn-per"
    ):  # the replay contents and the priorities' sum tree travel with the checkpoint
        saved = {
            path
            for path, _, _ in json.loads(
                (
                    tmp_path / "split" / "checkpoints" / str(first[0]) / "meta" / "metadata"
                ).read_text()
            )["leaves"]
        }
        assert {"buffer_state/tree", "buffer_state/max_priority", "buffer_state/position"} <= saved


def test_sharded_run_resumes_exactly(tmp_path):
    """PPO data-parallel over 2 (fake) devices: stopped and resumed through the CLI, the same
    parameters (params.msgpack bytes) and metrics.csv as the run that never stopped."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "MPLBACKEND": "Agg",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }

    def run(*args):
        out = subprocess.run(
            JRL + ["train", *map(str, args)], capture_output=True, text=True, timeout=600, env=env
        )
        return out

    common = [
        "ppo",
        "--devices",
        "2",
        "--seeds",
        "2",
        "--total-steps",
        "4096",
        "--num-reports",
        "4",
        "--quiet",
        "--eval-every",
        "2048",
        "--eval-episodes",
        "2",
    ]
    assert run(*common, "--out", tmp_path / "whole").returncode == 0
    stopped = run(*common, "--out", tmp_path / "split", "--stop-at-steps", "1024")
    assert stopped.returncode == 0 and "Resume with" in stopped.stderr, stopped.stderr[-2000:]
    assert checkpoint.steps(tmp_path / "split") == [2]
    resumed = run("--resume", tmp_path / "split", "--quiet")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for name in ("params.msgpack", "metrics.csv"):
        assert (tmp_path / "whole" / name).read_bytes() == (
            tmp_path / "split" / name
        ).read_bytes(), name


def test_resuming_from_an_older_checkpoint_replaces_the_later_history(tmp_path):
    """A finished run continued from its checkpoint at iteration 4 of 8: the later checkpoints
    are dropped, the run is replayed to the same end, and the folder ends as it was."""
    run = tmp_path / "r"
    kw = dict(
        total_steps=4096, num_reports=8, checkpoint_every=1024, keep_checkpoints=5, log=["jsonl"]
    )
    whole = experiment.train("ppo", "CartPole-v1", 1, out=run, **QUIET, **kw)
    assert checkpoint.steps(run) == [2, 4, 6, 8]
    files = {
        name: (run / name).read_bytes()
        for name in ("metrics.csv", "metrics.jsonl", "params.msgpack")
    }
    with pytest.raises(checkpoint.CheckpointError, match="already complete"):
        experiment.resume(run, **QUIET)
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.resume(run, step=4, stop_at_steps=2560, keep_checkpoints=5, **QUIET)
    assert checkpoint.steps(run) == [2, 4, 5]  # 6 and 8 belonged to the replaced history
    again = experiment.resume(run, keep_checkpoints=5, **QUIET)
    assert_same_run(whole, again)
    assert checkpoint.steps(run) == [2, 4, 5, 6, 8]
    for name, data in files.items():
        assert (run / name).read_bytes() == data, name


def test_overwrite_checks_before_it_deletes_and_only_deletes_a_jrl_run(tmp_path):
    run = tmp_path / "r"
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train(
            "ppo",
            "CartPole-v1",
            1,
            out=run,
            total_steps=2048,
            num_reports=2,
            stop_at_steps=1024,
            **QUIET,
        )
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    pytest.importorskip("tensorboardX")
    try:
        import wandb  # noqa: F401

        has_wandb = True
    except ImportError:
        has_wandb = False
    if not has_wandb:  # the sink cannot be built: refused before the old run is touched
        out = cli("train", "ppo", "--out", run, "--overwrite", "--log", "wandb")
        assert out.returncode == 2 and "pip install jrl-jax[wandb]" in out.stderr
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    out = cli("train", "ppo", "--out", run, "--total-steps", "2048")
    assert out.returncode == 2 and f"jrl train --resume {run}" in out.stderr
    foreign = tmp_path / "foreign"
    (foreign / "checkpoints").mkdir(parents=True)
    (foreign / "checkpoints" / "mine.txt").write_text("not jrl's")
    with pytest.raises(FileExistsError, match="no jrl config.json"):
        experiment.train(
            "ppo", "CartPole-v1", out=foreign, overwrite=True, total_steps=2048, **QUIET
        )
    assert (foreign / "checkpoints" / "mine.txt").read_text() == "not jrl's"


def test_a_signal_during_the_final_save_does_not_lose_the_run(tmp_path, monkeypatch):
    """SIGTERM arriving while the last checkpoint is written only asks to stop: the save
    completes and the finished run is returned."""
    real_save = checkpoint.Checkpointer.save

    def save_with_signal(self, step, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_save(self, step, *args, **kwargs)

    monkeypatch.setattr(checkpoint.Checkpointer, "save", save_with_signal)
    result = experiment.train(
        "ppo", "CartPole-v1", 1, out=tmp_path, total_steps=2048, num_reports=2, **QUIET
    )
    assert int(result.env_steps[-1]) == 2048 and checkpoint.steps(tmp_path) == [4]


def test_a_failing_sink_stops_training_with_a_checkpoint_of_the_last_good_chunk(
    tmp_path, monkeypatch
):
    from jrl.app import sinks

    calls = []

    def failing_write(self, records):  # a chunk's records
        calls.append(records[-1].iteration)
        if len(calls) == 3:
            raise OSError("disk full")

    monkeypatch.setattr(sinks.CSVSink, "write_many", failing_write)
    with pytest.raises(OSError, match="disk full"):
        experiment.train(
            "ppo", "CartPole-v1", 1, out=tmp_path, total_steps=4096, num_reports=8, **QUIET
        )
    assert checkpoint.steps(tmp_path) == [calls[-1]] == [3]


def _init_states(agent: str, seeds: int = 2, env_id: str = "CartPole-v1", **overrides):
    config = experiment.make_config(agent, env_id, total_steps=20_000, **overrides)
    env, params = jrl.envs.make(env_id)
    built = jrl.agents.get(agent).build(config, env, params)
    keys = jax.random.split(jax.random.key(1), seeds)
    return built, keys, anakin.init_runs(built.algorithm, keys)


@pytest.mark.parametrize("agent", jrl.agents.names())
def test_every_agent_state_round_trips_through_a_checkpoint(agent, env_for, dataset_for, tmp_path):
    """Every leaf of every agent's stacked train state (keys, buffers, normalisers, counters)
    comes back bit for bit, typed keys as keys."""
    built, keys, states = _init_states(agent, env_id=env_for(agent), **dataset_for(agent))
    ck = checkpoint.Checkpointer(tmp_path, keep=2)
    ck.save(3, states, {"m": np.arange(6.0).reshape(2, 3)}, {"note": "x"})
    ck.close()
    loaded = checkpoint.load(tmp_path, anakin.abstract_states(built.algorithm, keys))
    assert loaded.step == 3 and loaded.meta["note"] == "x"
    np.testing.assert_array_equal(loaded.history["m"], np.arange(6.0).reshape(2, 3))
    assert jax.tree.structure(loaded.state) == jax.tree.structure(states)
    for x, y in zip(jax.tree.leaves(loaded.state), jax.tree.leaves(states)):
        if jnp.issubdtype(y.dtype, jax.dtypes.prng_key):
            assert jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_checkpointer_keeps_the_last_k_and_ignores_an_unfinished_save(tmp_path):
    built, keys, states = _init_states("ppo", 1)
    like = anakin.abstract_states(built.algorithm, keys)
    ck = checkpoint.Checkpointer(tmp_path, keep=2)
    for step in (1, 2, 3):
        ck.save(step, states, {}, {})
    ck.close()
    assert checkpoint.steps(tmp_path) == [2, 3]
    # a save killed half-way leaves orbax's temporary folder (and maybe a step folder without its
    # items)
    shutil.copytree(
        tmp_path / "checkpoints" / "3", tmp_path / "checkpoints" / "4.orbax-checkpoint-tmp-99"
    )
    (tmp_path / "checkpoints" / "5").mkdir()
    assert checkpoint.steps(tmp_path) == [2, 3]
    assert checkpoint.load(tmp_path, like).step == 3


def _corrupt(run: Path, step: int):
    data = sorted(
        p
        for p in (run / "checkpoints" / str(step) / "arrays").rglob("*")
        if p.is_file() and p.parent.name == "d"
    )
    assert data
    for p in data:
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def test_bad_checkpoints_are_refused_with_a_clear_error(tmp_path):
    built, keys, states = _init_states("ppo", 1)
    like = anakin.abstract_states(built.algorithm, keys)
    ck = checkpoint.Checkpointer(tmp_path, keep=3)
    ck.save(1, states, {}, {})
    ck.save(2, states, {}, {})
    ck.close()
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint at iteration 7"):
        checkpoint.load(tmp_path, like, step=7)
    # another agent's state: the differing leaves are named
    other, other_keys, _ = _init_states("dqn", 1)
    with pytest.raises(
        checkpoint.CheckpointError, match="different train state.*(missing|only|is)"
    ):
        checkpoint.load(tmp_path, anakin.abstract_states(other.algorithm, other_keys))
    # a newer format
    meta = tmp_path / "checkpoints" / "2" / "meta" / "metadata"
    record = json.loads(meta.read_text())
    meta.write_text(json.dumps({**record, "format_version": checkpoint.FORMAT_VERSION + 1}))
    with pytest.raises(checkpoint.CheckpointError, match="newer than this jrl"):
        checkpoint.load(tmp_path, like)
    meta.write_text(json.dumps(record))
    assert checkpoint.load(tmp_path, like).step == 2
    # truncated data files: refused, the older checkpoint named
    _corrupt(tmp_path, 2)
    with pytest.raises(checkpoint.CheckpointError, match=r"corrupt.*other checkpoints: \[1\]"):
        checkpoint.load(tmp_path, like)
    assert checkpoint.load(tmp_path, like, step=1).step == 1
    with pytest.raises(checkpoint.CheckpointError, match="has no checkpoint"):
        checkpoint.load(tmp_path / "nothing", like)


def test_resume_refuses_another_config_and_changes_nothing(tmp_path):
    run = tmp_path / "r"
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train(
            "ppo",
            "CartPole-v1",
            1,
            out=run,
            total_steps=4096,
            num_reports=4,
            stop_at_steps=1024,
            **QUIET,
        )
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(
        checkpoint.CheckpointError, match="learning_rate: saved 0.00025, given 0.001"
    ):
        experiment.resume(run, learning_rate=1e-3, **QUIET)
    with pytest.raises(checkpoint.CheckpointError, match="agent: saved 'ppo', given 'a2c'"):
        experiment.resume(run, agent="a2c", **QUIET)
    out = cli("train", "--resume", run, "--gamma", "0.9")
    assert (
        out.returncode == 2
        and "gamma: saved 0.99, given 0.9" in out.stderr
        and "Traceback" not in out.stderr
    )
    meta = run / "checkpoints" / str(checkpoint.steps(run)[-1]) / "meta" / "metadata"
    record = meta.read_text()
    meta.write_text(
        json.dumps({**json.loads(record), "format_version": checkpoint.FORMAT_VERSION + 1})
    )
    out = cli("train", "--resume", run)
    assert (
        out.returncode == 2
        and "newer than this jrl" in out.stderr
        and "Traceback" not in out.stderr
    )
    meta.write_text(record)
    _corrupt(run, checkpoint.steps(run)[-1])
    corrupted = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    out = cli("train", "--resume", run)
    assert out.returncode == 2 and "is corrupt" in out.stderr and "Traceback" not in out.stderr, (
        out.stderr
    )
    assert {
        p: p.read_bytes() for p in run.rglob("*") if p.is_file()
    } == corrupted  # nothing written
    assert set(before) == set(corrupted)
    out = cli("train", "--resume", run, "--seeds", "3")
    assert out.returncode == 2 and "--seeds cannot change when resuming" in out.stderr
    out = cli("train", "--resume", run, "--num-reports", "20")  # the CLI's default, not the run's 4
    assert out.returncode == 2 and "--num-reports cannot change when resuming" in out.stderr
    out = cli("train", "ppo", "--resume-step", "2", "--out", tmp_path / "other")
    assert out.returncode == 2 and "--resume-step goes with --resume" in out.stderr
    out = cli("train", "--resume", tmp_path / "missing")
    assert out.returncode == 2 and "does not exist" in out.stderr
    out = cli("train", "ppo", "--out", run, "--total-steps", "2048")
    assert out.returncode == 2 and "--resume" in out.stderr  # an occupied folder points at --resume


class NaNAfter(Environment):
    """Reward 1 per step, never ends; the reward is NaN from step 600 of an episode on."""

    def reset_env(self, key, params):
        return jnp.zeros((), jnp.int32), jnp.zeros((1,), jnp.float32)

    def step_env(self, key, state, action, params):
        t = state + 1
        reward = jnp.where(t >= 600, jnp.nan, 1.0).astype(jnp.float32)
        return t, jnp.zeros((1,), jnp.float32), reward, jnp.zeros((), bool), {}

    def observation_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)


def test_nan_stops_training_at_its_chunk_and_keeps_the_last_good_checkpoint(tmp_path):
    """4 envs x 128 steps per iteration: env step 600 falls in iteration 5, so checkpoints after
    iterations 1-4 are good, the NaN is reported at iteration 5 and no later checkpoint is
    written."""
    jrl.envs.register("NaNAfter-v0", NaNAfter, overwrite=True)
    with pytest.raises(
        experiment.NonFiniteError, match=r"became non-finite .* at iteration 5 .*checkpoints/4"
    ):
        experiment.train(
            "ppo",
            "NaNAfter-v0",
            1,
            out=tmp_path,
            total_steps=8 * 512,
            num_reports=8,
            checkpoint_every=512,
            num_envs=4,
            num_steps=128,
            **QUIET,
        )
    assert checkpoint.steps(tmp_path)[-1] == 4


def test_lifecycle_options_are_checked_before_anything_runs(tmp_path):
    for kwargs, message in [
        (dict(checkpoint_every=100), "pass out=DIR"),
        (dict(log=["jsonl"]), "pass out=DIR"),
        (dict(out=tmp_path, eval_every=-1), "eval_every must be >= 0"),
        (dict(out=tmp_path, eval_episodes=0), "eval_episodes must be >= 1"),
        (dict(out=tmp_path, log=["csvv"]), "Did you mean 'csv'"),
        (dict(out=tmp_path, keep_checkpoints=0), "keep_checkpoints must be >= 1"),
        (dict(out=tmp_path, stop_at_steps=-1), "stop_at_steps must be >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            experiment.train("ppo", "CartPole-v1", total_steps=2048, **QUIET, **kwargs)
    assert not any(tmp_path.iterdir())


def test_a_bad_cpu_opt_level_fails_before_the_run_folder_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv(anakin.CPU_OPT_LEVEL_ENV, "fast")
    with pytest.raises(ValueError, match="JRL_CPU_OPT_LEVEL must be 0, 1, 2 or 3"):
        experiment.train("ppo", "CartPole-v1", total_steps=2048, out=tmp_path / "run", **QUIET)
    assert not (tmp_path / "run").exists()


def test_nan_from_the_cli_exits_3_without_a_traceback(tmp_path):
    out = cli(
        "train",
        "ppo",
        "--total-steps",
        "2048",
        "--out",
        tmp_path,
        "--lr",
        "1e30",
        "--max-grad-norm",
        "1e30",
    )
    assert out.returncode == 3, out.stderr
    assert "became non-finite" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_finishes_the_chunk_checkpoints_and_says_how_to_resume(sig, code, tmp_path):
    run = tmp_path / "r"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    proc = subprocess.Popen(
        JRL
        + ["train", "ppo", "--total-steps", "2000000", "--num-reports", "2000", "--out", str(run)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    err = PipeLines(proc.stderr)
    try:
        err.wait_for("steps/s", timeout=300)  # the first progress line: training has started
        proc.send_signal(sig)
        err = err.rest(timeout=300)
        assert proc.wait(timeout=300) == code, err
    finally:
        proc.kill()
    assert (
        f"{sig.name} received" in err
        and f"jrl train --resume {run}" in err
        and "Traceback" not in err
    )
    steps = checkpoint.steps(run)
    assert steps and 0 < steps[-1] < 2000
    assert (run / "metrics.csv").is_file() and (run / "learning_curve.png").is_file()


def test_periodic_evaluation_and_eval_and_render_commands(tmp_path):
    """eval_every=2048 with 8192 steps: evaluations after 2048, 4096, 6144 and 8192 steps, logged,
    drawn and written; then `jrl eval` and `jrl render` load the folder."""
    run = tmp_path / "r"
    res = experiment.train(
        "ppo",
        "CartPole-v1",
        2,
        out=run,
        total_steps=8192,
        num_reports=16,
        eval_every=2048,
        eval_episodes=4,
        log=["jsonl"],
        **QUIET,
    )
    assert [e["env_steps"] for e in res.evals] == [2048, 4096, 6144, 8192]
    # The last evaluation is of the final parameters' greedy policy (argmax of the logits),
    # 4 episodes per run on the CartPole-v1 env with the keys of the evaluation stream:
    # fold_in(fold_in(key(seed), EVAL_SALT), iteration), split over the runs.
    env, params = jrl.envs.make("CartPole-v1")
    network = jrl.agents.get("ppo").build(res.config, env, params).network
    last = res.evals[-1]
    key = jax.random.fold_in(
        jax.random.fold_in(jax.random.key(0), training.EVAL_SALT), last["iteration"]
    )
    for r, run_key in enumerate(jax.random.split(key, 2)):
        p = jax.tree.map(lambda x, r=r: x[r], res.final_params)
        greedy = lambda obs, k, p=p: jnp.argmax(network.apply(p, obs)[0].logits, axis=-1)  # noqa: E731
        expected, _ = evaluation.episode_returns(greedy, env, run_key, 4, params)
        assert last["returns"][r] == pytest.approx(float(expected.mean()), rel=1e-6), r
    # the policy changes during training, and so do the evaluations
    assert len({tuple(e["returns"]) for e in res.evals}) > 1
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert training.EVAL_KEY in header
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (
        len(lines) == 2 * 16
        and lines[-1]["metrics"][training.EVAL_KEY] == res.evals[-1]["returns"][1]
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["evaluations"] == res.evals

    out = cli("eval", run, "--episodes", "6")
    assert out.returncode == 0, out.stderr
    stats = json.loads((run / "eval.json").read_text())
    returns = np.asarray(stats["returns"])
    assert returns.shape == (2, 6) and stats["policy"] == "greedy"
    assert stats["mean"] == pytest.approx(returns.mean()) and stats["median"] == pytest.approx(
        np.median(returns)
    )
    flat = np.sort(returns.ravel())
    assert stats["iqm"] == pytest.approx(flat[3:9].mean())  # the middle half of 12 episodes
    assert "IQM" in out.stdout

    out = cli("render", run, "--out", tmp_path / "ep.gif", "--run", "1", "--max-steps", "40")
    assert out.returncode == 0, out.stderr
    import imageio.v3 as iio

    frames = iio.imread(tmp_path / "ep.gif", index=None)
    length = int(out.stdout.split(" over ")[1].split(" steps")[0])
    assert frames.shape[0] == length + 1 and 1 <= length <= 40
    out = cli("render", run, "--run", "5")
    assert out.returncode == 2 and "run must lie in [0, 2)" in out.stderr


def test_evaluation_uses_the_training_normaliser_frozen():
    """PPO with observation normalisation: the evaluation policy sees
    (obs - mean) / sqrt(var + eps), clipped, with the statistics of the train state, and stepping
    it does not change them."""
    config = experiment.make_config(
        "ppo", "CartPole-v1", total_steps=4096, normalize_observations=True
    )
    env, params = jrl.envs.make("CartPole-v1")
    built = jrl.agents.get("ppo").build(config, env, params)
    state = built.algorithm.init(jax.random.key(0))
    stats = state.env_state.stats
    stats = stats.replace(
        mean=jnp.asarray([1.0, -1.0, 0.5, 0.0]), var=jnp.asarray([4.0, 1.0, 0.25, 1e-12])
    )
    normalize = evaluation.observation_normalizer(built.env, state.env_state.replace(stats=stats))
    obs = jnp.asarray([[3.0, 0.0, 0.5, 1.0]])
    expected = np.clip([[2.0 / 2.0, 1.0, 0.0, 1.0 / np.sqrt(1e-12 + 1e-8)]], -10, 10)
    np.testing.assert_allclose(normalize(obs), expected, rtol=1e-5)
    assert isinstance(evaluation.evaluation_env(built.env), Environment)
    assert evaluation.evaluation_env(built.env).num_envs is None


def test_env_overrides_travel_with_the_run(tmp_path):
    """``env_overrides`` (a time limit of 20 and a heavier gravity) are part of the run: the
    episodes of training and of evaluation last at most 20 steps, a stopped run resumes to the
    bits of the one that never stopped, ``load_run`` rebuilds the overridden env, and a resume
    asking for other overrides is refused."""
    from jrl.core.wrappers import TimeLimit

    overrides = {"max_episode_steps": 20, "gravity": 12.0}
    kw = dict(total_steps=3072, num_reports=6, env_overrides=overrides, **QUIET)
    whole = experiment.train("ppo", "CartPole-v1", 2, out=tmp_path / "whole", **kw)
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train("ppo", "CartPole-v1", 2, out=tmp_path / "split", stop_at_steps=1024, **kw)
    with pytest.raises(checkpoint.CheckpointError, match="env_overrides"):
        experiment.resume(tmp_path / "split", env_overrides={"max_episode_steps": 30}, **QUIET)
    resumed = experiment.resume(tmp_path / "split", **QUIET)
    assert_same_run(whole, resumed)
    lengths = whole.metrics["train/episode_length"]
    assert np.nanmax(lengths) <= 20 and np.nanmax(lengths) > 10  # cut at 20, not by CartPole

    loaded = experiment.load_run(tmp_path / "split")
    assert float(loaded.built.env_params.gravity) == 12.0
    env, limits = evaluation.evaluation_env(loaded.built.env), []
    while hasattr(env, "env"):
        if isinstance(env, TimeLimit):
            limits.append(env.max_episode_steps)
        env = env.env
    assert limits == [20]
    stats = experiment.evaluate_run(tmp_path / "split", episodes=8)
    assert stats["max"] <= 20 and stats["mean_length"] <= 20

"""Issue #41: bad run options refused before anything is written, and honest progress and
summary lines.

A. Refused with one line (exit code 2 from ``jrl train``, ``ValueError`` from ``jrl.train``)
before a run folder exists: PBT settings that make no sense (non-finite or non-positive
perturb factors, a fraction outside (0, 0.5], an interval below 1), PBT flags without
``--pbt``, a config field both given and swept even at its preset value, seeds beyond the
32-bit integers run keys are made from, and an odd OpenAI-ES population. PBT's perturbed
hyperparameters stay in the ranges their config fields declare (gamma <= 1).

B. The ETA leaves out an off-policy agent's warm-up chunks; a PBT population is labelled by
run index and seed, not by the values its runs started from; the progress line and the
summary count the same env steps (DQN's n-step warm-up included); DQN logs the epsilon it
acts with during its warm-up; the summary prints the last periodic evaluation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import re

import jax
import jax.numpy as jnp
import jrl.agents
import numpy as np
import pytest
from flax import struct

import jrl
from jrl.app import api as experiment
from jrl.app import cli
from jrl.app.result import Progress, TrainResult
from jrl.app.run_options import RunOptions
from jrl.core import parallel
from jrl.parts.agent import replace_hparams
from jrl.parts.agent_config import POSITIVE, UNIT_INTERVAL, Range
from jrl.run import anakin, pbt
from jrl.run.loops import Algorithm


def _train_cli(args, tmp_path, monkeypatch, capsys):
    """``jrl train ARGS`` in this process, in ``tmp_path``: ``(exit code, stdout, stderr)``."""
    monkeypatch.chdir(tmp_path)
    jax.devices()  # backends started: `jrl train` leaves this process's CPU devices alone
    code = cli.main(["train", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_refused(result, message, tmp_path):
    """Exit code 2, one line on stderr holding ``message``, and no run folder written."""
    code, out, err = result
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "x").exists()


# ---------------------------------------------------------------------- A1: PBT settings

PBT_SWEEP = ["ppo", "--sweep", "learning_rate=1e-3,3e-4", "--pbt"]


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--pbt-perturb", "nan", "1"], "PBT perturb must be two finite positive factors"),
        (["--pbt-perturb", "inf", "1"], "PBT perturb must be two finite positive factors"),
        (["--pbt-perturb", "0", "1.2"], "PBT perturb must be two finite positive factors"),
        (["--pbt-perturb", "-0.5", "1.2"], "PBT perturb must be two finite positive factors"),
        (["--pbt-fraction", "nan"], "PBT fraction must lie in (0, 0.5]"),
        (["--pbt-fraction", "0.75"], "PBT fraction must lie in (0, 0.5]"),
        (["--pbt-interval", "0"], "PBT interval must be >= 1 env step"),
    ],
)
def test_cli_refuses_nonsensical_pbt_settings(flags, message, tmp_path, monkeypatch, capsys):
    result = _train_cli([*PBT_SWEEP, *flags], tmp_path, monkeypatch, capsys)
    _assert_refused(result, message, tmp_path)


def test_pbt_validate_refuses_each_setting_on_its_own(tmp_path):
    for bad, match in [
        (dict(perturb=(math.nan, 1.0)), "perturb"),
        (dict(perturb=(1.2, math.inf)), "perturb"),
        (dict(perturb=(0.8, "x")), "perturb"),
        (dict(perturb=(0.8, 1.2, 1.5)), "perturb"),
        (dict(fraction=math.nan), "fraction"),
        (dict(fraction=0.0), "fraction"),
        (dict(interval=0), "interval"),
        (dict(interval=2.5), "whole number"),
        (dict(interval=True), "whole number"),
        (dict(fields=("gamma", "gamma")), "more than once"),
    ]:
        with pytest.raises(ValueError, match=match):
            pbt.PBT(**bad).validate()
        with pytest.raises(ValueError, match=match):  # and so does every check_pbt
            pbt.check_pbt(pbt.PBT(**bad), ["learning_rate", "gamma"], {}, 4)
    pbt.PBT(interval=1, fraction=0.5, perturb=(0.5, 2)).validate()  # the edges are fine
    # the Python API refuses them too, before its run folder exists
    with pytest.raises(ValueError, match="perturb must be two finite positive factors"):
        jrl.train(
            "ppo",
            seeds=2,
            pbt=pbt.PBT(perturb=(math.nan, 1.0)),
            out=tmp_path / "x",
            progress=False,
        )
    assert not (tmp_path / "x").exists()


# ----------------------------------------------------------- A2: perturbed values clipped


def test_a_hand_computed_perturbation_is_clipped_into_the_fields_range():
    """0.99 * 1.2 = 1.188 is clipped to gamma's upper bound 1; a positive field's open lower
    bound 0 keeps it above 0; the bounds come from the configs' declared ranges."""
    gamma = UNIT_INTERVAL.float32_bounds()
    assert float(pbt.perturb_value(jnp.float32(0.99), 1.2, gamma)) == 1.0
    assert float(pbt.perturb_value(jnp.float32(0.5), 1.2, gamma)) == pytest.approx(0.6)
    low, high = POSITIVE.float32_bounds()
    assert 0.0 < low <= np.finfo(np.float32).tiny and high == np.finfo(np.float32).max
    assert float(pbt.perturb_value(jnp.float32(1e-38), 1e-3, (low, high))) == low
    tau = Range(0.0, 1.0, low_open=True)
    assert tau.float32_bounds() == (float(np.finfo(np.float32).tiny), 1.0)
    ppo = jrl.agents.get("ppo").config_cls.field_ranges()
    assert ppo["gamma"] == UNIT_INTERVAL and ppo["gae_lambda"] == UNIT_INTERVAL
    assert jrl.agents.get("dqn").config_cls.field_ranges()["tau"] == tau
    assert jrl.agents.get("pqn").config_cls.field_ranges()["q_lambda"] == UNIT_INTERVAL


def test_declared_ranges_are_what_validate_enforces():
    """Every declared range of every agent's config: a value at a closed end passes the range
    check, a value beyond either end (or at an open end) is refused naming the field."""
    for name in jrl.agents.names():
        config = experiment.make_config(name, "CartPole-v1")
        for field, r in type(config).field_ranges().items():
            for end, is_open, beyond in ((r.low, r.low_open, -0.5), (r.high, r.high_open, 0.5)):
                if math.isinf(end):
                    continue
                if not is_open:
                    try:  # another check may refuse it (an ES has no use for gamma), not this one
                        dataclasses.replace(config, **{field: end}).validate()
                    except ValueError as e:
                        assert f"{field} must" not in str(e), (name, e)
                for value in [end, end + beyond] if is_open else [end + beyond]:
                    with pytest.raises(ValueError, match=re.escape(f"{field} must {r.describe()}")):
                        dataclasses.replace(config, **{field: value}).validate()


def test_every_sweepable_field_pbt_can_push_out_of_range_declares_its_range():
    """PBT multiplies a sweepable field by positive factors; every field whose validate()
    refuses a large or a tiny positive multiple of its preset value declares the Range that
    PBT clips it into (so a hand-written check cannot leave it unclipped)."""
    for name in jrl.agents.names():
        env = "Pendulum-v1" if name in ("sac", "td3", "ddpg") else "CartPole-v1"
        config = experiment.make_config(name, env)
        ranges = type(config).field_ranges()
        for field in jrl.agents.get(name).sweepable:
            value = getattr(config, field)
            for factor in (1e6, 1e-30):
                try:
                    dataclasses.replace(config, **{field: value * factor}).validate()
                except ValueError as e:
                    assert field in ranges, f"{name}.{field} is bounded ({e}) but declares no Range"


@struct.dataclass
class _HP:
    gamma: jax.Array


@struct.dataclass
class _Agent:
    hparams: _HP


@struct.dataclass
class _State:
    agent_state: _Agent
    env_state: tuple
    key: jax.Array
    iteration: jax.Array
    last_episode_return: jax.Array


def _toy_loop():
    """A loop of 10 env steps per iteration whose runs' returns are their index."""

    def init(key):
        zero = jax.random.randint(key, (), 0, 1)
        return _State(_Agent(_HP(jnp.float32(0.99))), (), key, zero, jnp.float32(0))

    def step(s):
        ret = jax.lax.axis_index(parallel.runs_axis_name()).astype(jnp.float32)
        return s.replace(iteration=s.iteration + 1, last_episode_return=ret), {}

    def with_hparams(s, v):
        return s.replace(agent_state=replace_hparams(s.agent_state, v))

    return Algorithm(init, step, 10, with_hparams)


def test_the_compiled_pbt_step_clips_a_perturbed_gamma():
    """4 runs with gamma 0.99, the worst half copying the best and multiplying gamma by 1.5
    or 2 every iteration: with the configs' ranges, gamma stops at 1; without, it passes."""
    spec = pbt.PBT(10, 0.5, (1.5, 2.0), ("gamma",))
    keys = jax.random.split(jax.random.key(0), 4)
    ranges = {"gamma": UNIT_INTERVAL}
    res = anakin.run(pbt.with_pbt(_toy_loop(), spec, 4, ranges), keys, 3, num_reports=1)
    gamma = res.metrics["pbt/gamma"]
    np.testing.assert_array_equal(gamma[:2], 1.0)  # runs 0 and 1 (worst) copied and clipped
    np.testing.assert_allclose(gamma[2:], 0.99)
    unclipped = anakin.run(pbt.with_pbt(_toy_loop(), spec, 4), keys, 1, num_reports=1)
    assert unclipped.metrics["pbt/gamma"][:2].min() > 1.4  # what the ranges prevent


@pytest.fixture(scope="module")
def pbt_run(tmp_path_factory):
    """PBT PPO, 2 learning rates x 2 seeds, perturbing learning_rate and gamma by 1.5 or 2
    every iteration (the worst half copies the best half): its result, run folder and
    progress output."""
    out = tmp_path_factory.mktemp("pbt") / "run"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        result = jrl.train(
            "ppo",
            seeds=2,
            sweep={"learning_rate": [1e-3, 3e-4]},
            num_envs=4,
            num_steps=32,
            total_steps=4 * 32 * 6,
            num_reports=3,
            pbt=pbt.PBT(128, 0.5, (1.5, 2.0), ("learning_rate", "gamma")),
            out=out,
        )
    return result, out, err.getvalue()


def test_a_pbt_run_keeps_gamma_in_0_1(pbt_run):
    result, _, _ = pbt_run
    gamma = result.metrics["pbt/gamma"]
    assert gamma.max() == 1.0, gamma  # perturbed up to the bound, never past it
    assert (gamma >= 0.99 - 1e-6).all()
    assert float(np.max(result.final_state.agent_state.hparams.gamma)) <= 1.0
    for value in np.unique(gamma):  # every value PBT set is one validate() accepts
        dataclasses.replace(result.config, gamma=float(value)).validate()


# --------------------------------------------------- A3: a field both given and swept


@pytest.mark.parametrize(
    "flags",
    [
        ["--learning-rate", "2.5e-4"],  # ppo's CartPole-v1 preset value
        ["--lr", "2.5e-4"],
        ["--learning_rate=2.5e-4"],
        ["--learning-rate", "1e-3"],  # a value of its own: refused as before
    ],
)
def test_a_field_given_and_swept_is_refused_whatever_its_value(
    flags, tmp_path, monkeypatch, capsys
):
    assert experiment.make_config("ppo", "CartPole-v1").learning_rate == 2.5e-4
    args = ["ppo", *flags, "--sweep", "learning_rate=1e-3,3e-4"]
    result = _train_cli(args, tmp_path, monkeypatch, capsys)
    _assert_refused(result, "learning_rate is both set", tmp_path)


def test_given_fields_are_read_from_every_spelling():
    config_cls = jrl.agents.get("ppo").config_cls
    given = {"--lr", "--gae-lambda", "--clip_eps", "--no-clip-value", "--seeds", "--out"}
    assert cli._given_fields(config_cls, given) == {
        "learning_rate",
        "gae_lambda",
        "clip_eps",
        "clip_value",
    }


# ----------------------------------------------------------- A4: PBT flags without --pbt


@pytest.mark.parametrize(
    "flags",
    [
        ["--pbt-interval", "5000"],
        ["--pbt_interval", "5000"],
        ["--pbt-fraction", "0.5"],
        ["--pbt-perturb", "0.5", "2"],
        ["--pbt-fields", "learning_rate"],
    ],
)
def test_pbt_flags_without_pbt_are_refused(flags, tmp_path, monkeypatch, capsys):
    args = ["ppo", "--sweep", "learning_rate=1e-3,3e-4", *flags]
    result = _train_cli(args, tmp_path, monkeypatch, capsys)
    flag = "--" + flags[0][2:].replace("_", "-")
    _assert_refused(result, f"{flag} sets population-based training: add --pbt", tmp_path)


def test_pbt_flags_with_resume_are_refused(pbt_run, tmp_path, monkeypatch, capsys):
    _, run_dir, _ = pbt_run
    for flags in (["--pbt"], ["--pbt-interval", "64"]):
        args = ["--resume", str(run_dir), *flags]
        code, _, err = _train_cli(args, tmp_path, monkeypatch, capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"{flags[0]} does not apply with --resume" in err


# --------------------------------------------------------------------- A5: seeds


def test_seeds_beyond_32_bit_integers_are_refused(tmp_path, monkeypatch, capsys):
    for ok in (dict(seed=2**31 - 1), dict(seed=-(2**31)), dict(seed=2**31 - 2, seeds=2)):
        RunOptions(**ok).validate()
    for bad, match in [
        (dict(seed=2**31), "seed must lie in"),
        (dict(seed=-(2**31) - 1), "seed must lie in"),
        (dict(seed=99999999999999999999), "seed must lie in"),
        (dict(seed=2**31 - 1, seeds=2), "seed \\+ seeds - 1 = 2147483648"),
    ]:
        with pytest.raises(ValueError, match=match):
            RunOptions(**bad).validate()
    with pytest.raises(ValueError, match="seed must lie in"):
        jrl.train("ppo", seed=99999999999999999999, out=tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()
    result = _train_cli(["ppo", "--seed", "99999999999999999999"], tmp_path, monkeypatch, capsys)
    _assert_refused(result, "seed must lie in [-2147483648, 2147483647]", tmp_path)


# ------------------------------------------------------------ A6: evolution strategies


def test_openai_es_refuses_an_odd_population(tmp_path, monkeypatch, capsys):
    for size in (3, 5):
        with pytest.raises(ValueError, match="openai_es needs an even population_size"):
            experiment.make_config("openai_es", "CartPole-v1", population_size=size)
    with pytest.raises(ValueError, match="population_size must be >= 2"):
        experiment.make_config("openai_es", "CartPole-v1", population_size=1)
    experiment.make_config("openai_es", "CartPole-v1", population_size=2, antithetic=False)
    result = _train_cli(["openai_es", "--population-size", "3"], tmp_path, monkeypatch, capsys)
    _assert_refused(result, "openai_es needs an even population_size", tmp_path)


@pytest.mark.parametrize("agent", ["snes", "cma_es"])
def test_snes_and_cma_es_train_small_odd_populations(agent):
    """evosax's SNES and separable CMA-ES take any population of 2 or more (the configs
    refuse 0 and 1): a population of 3 trains a generation."""
    for size in (0, 1):
        with pytest.raises(ValueError, match="population_size must be >= 2"):
            experiment.make_config(agent, "CartPole-v1", population_size=size)
    result = jrl.train(agent, population_size=3, episode_steps=5, total_steps=15, progress=False)
    assert np.isfinite(result.metrics["train/sigma"]).all()


# ---------------------------------------------------------------------- B7: the ETA


def _report(iteration, elapsed, updates=None, num_iterations=100, start=0):
    metrics = {"train/episode_return": np.asarray([1.0, 2.0])}
    if updates is not None:
        metrics["train/updates"] = np.asarray([updates, updates])
    return anakin.Report(iteration, num_iterations, iteration * 10, elapsed, 1.0, metrics, start)


def _eta_text(progress, report):
    progress(report)
    line = progress.stream.getvalue().splitlines()[-1]
    return line.rsplit("|", 1)[1].strip()


def test_the_eta_leaves_out_the_warm_up_chunks():
    """Chunks of 5 iterations of 100: iterations 1-7 are warm-up (0.01 s each, no update),
    the others learn (1 s each). The ETA waits for a chunk in which every iteration learned
    (11-15), then extrapolates its time per iteration: 85 s left after 15, not the 46 s the
    average since the start gives."""
    progress = Progress("sac", 1000, stream=io.StringIO())
    assert _eta_text(progress, _report(5, 0.05, updates=0)) == "ETA   n/a"
    # iterations 6-10: 2 of warm-up, 3 learning; updates have begun by the end
    assert _eta_text(progress, _report(10, 3.07, updates=3)) == "ETA   n/a"
    assert _eta_text(progress, _report(15, 8.07, updates=8)) == "ETA  85.0s"
    assert _eta_text(progress, _report(20, 13.07, updates=13)) == "ETA  80.0s"
    assert _eta_text(progress, _report(100, 93.07, updates=93)) == "ETA   0.0s"


def test_the_eta_of_an_agent_that_learns_from_the_start():
    """Without train/updates (an on-policy agent) every chunk counts, from the run's start
    (a resumed run's start iteration)."""
    progress = Progress("ppo", 1000, stream=io.StringIO())
    assert _eta_text(progress, _report(10, 5.0)) == "ETA  45.0s"
    resumed = Progress("ppo", 1000, stream=io.StringIO())
    assert _eta_text(resumed, _report(60, 5.0, start=50)) == "ETA  20.0s"


# -------------------------------------------------------------------- B8: PBT labels


def test_a_pbt_population_is_labelled_by_run_not_by_starting_values(pbt_run):
    result, run_dir, err = pbt_run
    lines = [line for line in err.splitlines() if "steps/s" in line]
    assert lines and all("learning_rate=" not in line for line in lines), lines
    assert all("best: run" in line for line in lines if "n/a" not in line.split("|")[2])
    summary = result.summary()
    assert "PBT population of 4 runs: final return" in summary, summary
    assert "[learning_rate=" not in summary
    best = re.search(r"best run (\d) \(seed (\d)\) [-\d.]+, ending with (.*) \(training", summary)
    assert best, summary
    r = int(best.group(1))
    assert int(best.group(2)) == result.seeds[r]
    ended = dict(item.split("=") for item in best.group(3).split(", "))
    assert ended == {
        f: f"{result.metrics['pbt/' + f][r, -1]:.3g}" for f in ("learning_rate", "gamma")
    }
    [(label, idx)] = result.groups()
    assert label == "PBT population of 4 runs" and idx.tolist() == [0, 1, 2, 3]
    labels = json.loads((run_dir / "pbt_lineage.json").read_text())["runs"]
    assert labels == [
        "run 0 (seed 0, initial learning_rate=0.001)",
        "run 1 (seed 1, initial learning_rate=0.001)",
        "run 2 (seed 0, initial learning_rate=0.0003)",
        "run 3 (seed 1, initial learning_rate=0.0003)",
    ]


def test_progress_of_a_population_names_its_best_run():
    progress = Progress("ppo", 1000, stream=io.StringIO(), population=True)
    report = _report(10, 5.0)
    report.metrics["train/episode_return"] = np.asarray([3.0, 9.0, np.nan, 1.0])
    progress(report)
    line = progress.stream.getvalue()
    assert "return      4.3 ±    3.4 (best: run 1, 9.0)" in line, line


# ------------------------------------------------ B9, B10, B11: a DQN run with a warm-up

DQN = dict(
    num_envs=4,
    steps_per_iteration=4,
    n_step=3,  # an n-step window of 2 warm-up steps per env before the first iteration
    total_steps=16 * 12,
    learning_starts=64,
    buffer_size=128,
    batch_size=16,
    updates_per_iteration=2,
    hidden_sizes=(16,),
    epsilon_start=1.0,
    epsilon_end=0.1,
    exploration_fraction=0.5,
    num_reports=4,
    eval_every=96,
    eval_episodes=2,
)


@pytest.fixture(scope="module")
def dqn_run():
    """A DQN run of 12 iterations of 16 env steps, learning from iteration 4 on, with
    evaluations: its result and progress output."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        result = jrl.train("dqn", seeds=2, **DQN)
    return result, err.getvalue()


def test_progress_and_summary_count_the_same_env_steps(dqn_run):
    """The progress line's steps and total and the summary's steps/run are the env steps the
    runs took: 12 iterations of 16 and the n-step window's 2 warm-up steps in 4 envs."""
    result, err = dqn_run
    took = 12 * 16 + (3 - 1) * 4
    assert int(result.env_steps[-1]) == took
    last = [line for line in err.splitlines() if "steps/s" in line][-1]
    steps, total = re.search(r"([\d,]+)/([\d,]+) steps", last).groups()
    assert steps == total == f"{took:,}", last
    assert f"| {took:,} steps/run in" in result.summary()


def test_dqn_logs_the_epsilon_it_acts_with_during_warm_up(dqn_run):
    """epsilon_start (1.0: random actions) while no update runs, then the schedule at the
    updates made before each iteration: from 1.0 to 0.1 over half of the run's updates."""
    result, _ = dqn_run
    eps, updates = result.metrics["train/epsilon"], result.metrics["train/updates"]
    warm_up = updates[0] == 0
    assert warm_up[:3].all() and not warm_up[3:].any(), updates[0]
    np.testing.assert_array_equal(eps[:, warm_up], 1.0)
    total = result.config.num_updates
    before = np.concatenate([np.zeros((2, 1)), updates[:, :-1]], axis=1)
    expected = 1.0 + np.clip(before / (0.5 * total), 0.0, 1.0) * (0.1 - 1.0)
    np.testing.assert_allclose(eps, expected, rtol=1e-6)


def test_the_summary_prints_the_last_evaluation(dqn_run):
    result, _ = dqn_run
    last = result.evals[-1]
    assert last["iteration"] == 12
    returns = np.asarray(last["returns"])
    text = f"greedy evaluation return at {int(result.env_steps[-1]):,} steps/run: "
    text += f"{returns.mean():.1f} ± {returns.std():.1f} |"
    assert text in result.summary(), result.summary()


def _result(sweep, metrics, evals=()):
    runs = len(next(iter(metrics.values())))
    return TrainResult(
        "ppo",
        "CartPole-v1",
        None,
        [0, 1] * (runs // 2),
        sweep,
        np.asarray([100, 200]),
        metrics,
        None,
        1.0,
        2.0,
        evals=list(evals),
    )


def test_the_summary_prints_the_last_evaluation_per_sweep_group():
    ret = np.asarray([[0.0, 10.0], [0.0, 20.0], [0.0, 30.0], [0.0, 50.0]])
    evals = [
        {"iteration": 1, "env_steps": 100, "returns": [0.0, 0.0, 0.0, 0.0]},
        {"iteration": 2, "env_steps": 200, "returns": [100.0, 200.0, 300.0, 500.0]},
    ]
    sweep = {"learning_rate": [1e-3, 1e-3, 3e-4, 3e-4]}
    summary = _result(sweep, {"train/episode_return": ret}, evals).summary()
    assert (
        "| greedy evaluation return at 200 steps/run: [learning_rate=0.001] 150.0 ± 50.0; "
        "[learning_rate=0.0003] 400.0 ± 100.0 |"
    ) in summary, summary
    assert "greedy" not in _result(sweep, {"train/episode_return": ret}).summary()
    metrics = {
        "train/episode_return": ret,
        "pbt/source": np.asarray([[0, 0], [1, 3], [2, 2], [3, 3]]),
        "pbt/learning_rate": np.asarray([[1e-3, 1e-3], [1e-3, 4e-4], [3e-4, 3e-4], [3e-4, 3e-4]]),
    }
    summary = _result(sweep, metrics, evals).summary()
    assert "PBT population of 4 runs: final return 27.5 ± 14.8; best run 3 (seed 1) 50.0, " in (
        summary
    )
    assert "ending with learning_rate=0.0003 (training return" in summary
    assert "greedy evaluation return at 200 steps/run: [PBT population of 4 runs] 275.0" in (
        summary
    )

"""What the learning tests' agents reach on seeds other than the tests' own: for each learning
test's configuration, the return of each of >= 8 seeds (from base seed 1000, vmapped in one
``jrl.train`` call where the test vmaps its seeds), their mean, spread, minimum, the worst group
of the test's seed count, the test's threshold and the margin between the two.

A learning test takes its base seed from ``JRL_LEARNING_SEED`` (tests/conftest.py, the
``learning_seed`` fixture) and must pass for whichever seeds it is given, so its threshold is
set from seeds it does not run by default. The worst group is what the test's statistic (the
mean, the median or the minimum of its ``k`` seeds) gives on the ``k`` lowest of the measured
seeds: no group of ``k`` of them does worse. The margin is how far that worst group lies beyond
the threshold (a negative margin: some group of measured seeds would fail). A vmapped seed's
trajectory depends a little on the seed count (another batch shape, other float rounding), so a
seed of the test may differ from the same seed here; the measured spread covers that.

Usage::

    python benchmarks/learning_reach.py [--seeds N] [--base 1000] [--only NAME ...]
        [--output reach.jsonl] [--write]
    python benchmarks/learning_reach.py --from reach.jsonl [--write]   # the table of saved runs

Each configuration prints one JSON line (name, seeds, base, per-seed returns, mean, std, min,
max, seconds of the whole ``jrl.train`` call with compile, and the seconds of the greedy
evaluation where the test evaluates) and its row of the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import statistics
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

from common import machine, publish

HEADING = "## Learning reach"


@dataclasses.dataclass(frozen=True)
class Check:
    """One assertion of a learning test: ``stat`` over its ``seeds`` seeds (of ``group``, a
    swept value's label) is ``>= threshold`` (or ``< threshold`` where ``below``)."""

    threshold: float
    stat: str = "mean"  # "mean", "median" or "min" (every seed)
    group: str | None = None
    below: bool = False


@dataclasses.dataclass(frozen=True)
class Config:
    """A learning test's ``jrl.train`` call and its checks; ``steps`` None: the preset's
    budget. ``metric``: "final" (``final_returns(fraction)``: the last ``fraction`` of the
    iterations), "last" (the last report's training return) or "greedy" (``jrl eval``'s mean
    greedy return per seed, ``episodes`` episodes)."""

    test: str
    agent: str
    env: str
    steps: int | None
    seeds: int
    checks: tuple[Check, ...]
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    metric: str = "final"
    episodes: int = 64
    num_reports: int | None = 4
    fraction: float = 0.05
    dataset: float | None = None  # an offline agent's: the epsilon of offline_dataset's data


@functools.cache
def _data_folder() -> str:
    """This process's folder of offline datasets (made once, shared by the configurations)."""
    return tempfile.mkdtemp(prefix="reach-data-")


def offline_dataset(epsilon: float, folder: str) -> str:
    """The offline learning tests' dataset (tests/test_offline.py, fixtures ``expert_run``,
    ``expert_data``, ``mixed_data``): 4,000 transitions of a PPO run on CartPole-v1 (60k steps,
    seed 0), collected on 8 envs by its greedy policy (epsilon 0, collection seed 0) or mixed
    with uniformly random actions (epsilon 0.5, collection seed 1). Written into ``folder``."""
    import jrl
    from jrl.app import collect

    run = Path(folder) / "expert-ppo"
    if not run.exists():
        jrl.train(
            "ppo", "CartPole-v1", 1, out=run, total_steps=60_000, num_reports=2, progress=False
        )
    out = Path(folder) / f"data-{epsilon:g}.npz"
    if not out.exists():
        collect.collect_run(run, 4000, out, envs=8, epsilon=epsilon, seed=int(epsilon > 0))
    return str(out)


MINATAR = dict(num_envs=32, num_steps=64, num_epochs=2, num_minibatches=4, learning_rate=1e-3)
R2D2_MEMORY = dict(
    core_size=16,
    hidden_sizes=(16,),
    num_envs=8,
    batch_size=16,
    buffer_size=8 * 250,
    learning_starts=8 * 40,
    steps_per_iteration=4,
    updates_per_iteration=1,
    sequence_length=16,
    burn_in=4,
    n_step=3,
    learning_rate=1e-3,
    target_update_interval=100,
    exploration_fraction=0.3,
    epsilon_end=0.05,
)

L = "tests/test_learning.py::"


def offline_config(agent: str, epsilon: float, threshold: float) -> Config:
    """tests/test_offline.py::test_offline_agents_reach_their_returns for ``agent`` on the
    dataset of ``epsilon`` (:func:`offline_dataset`): 4 seeds, 16k greedy env steps (2,000
    updates of 128), a 64x64 network, the mean greedy return of 16 episodes per seed."""
    return Config(
        "tests/test_offline.py::test_offline_agents_reach_their_returns",
        agent,
        "CartPole-v1",
        16_000,
        4,
        (Check(threshold),),
        dict(hidden_sizes=(64, 64), batch_size=128),
        metric="greedy",
        episodes=16,
        num_reports=2,
        dataset=epsilon,
    )


CONFIGS: dict[str, Config] = {
    # the slowest tests first: the order they are measured in
    "qrdqn-cartpole": Config(
        L + "test_value_based_thresholds", "qrdqn", "CartPole-v1", 100_000, 4, (Check(320),)
    ),
    "sac-brax-inverted-pendulum": Config(
        "tests/test_brax.py::test_sac_brax_inverted_pendulum",
        "sac",
        "brax:inverted_pendulum",
        None,
        2,
        (Check(900),),
    ),
    "rainbow-cartpole": Config(
        L + "test_value_based_thresholds", "rainbow", "CartPole-v1", 100_000, 4, (Check(340),)
    ),
    "td3-pendulum": Config(
        L + "test_continuous_pendulum_thresholds", "td3", "Pendulum-v1", 20_000, 2, (Check(-250),)
    ),
    "ppo-craftax-classic": Config(
        "tests/test_craftax.py::test_ppo_craftax_classic_beats_random",
        "ppo",
        "craftax:Craftax-Classic-Symbolic-v1",
        16_384,
        2,
        (Check(1.8, "min"), Check(2.0)),
        dict(num_envs=16, num_steps=64, num_epochs=2, num_minibatches=4, learning_rate=1e-3),
        num_reports=None,
        fraction=0.25,
    ),
    "pqn-jumanji-game2048": Config(
        "tests/test_jumanji.py::test_pqn_game2048_beats_random",
        "pqn",
        "jumanji:Game2048-v1",
        65_536,
        2,
        (Check(1200, "min"), Check(1500)),
        num_reports=None,
    ),
    "ppo-xminigrid-empty": Config(
        "tests/test_xminigrid.py::test_ppo_empty_6x6_beats_random",
        "ppo",
        "xminigrid:MiniGrid-Empty-6x6",
        16_384,
        2,
        (Check(0.7, "min"), Check(0.8)),
        dict(num_envs=16, num_steps=64, learning_rate=1e-3),
        metric="last",
        num_reports=None,
    ),
    "ppo-breakout-minatar": Config(
        "tests/test_minatar.py::test_ppo_breakout_minatar_beats_random",
        "ppo",
        "gymnax:Breakout-MinAtar",
        49_152,
        2,
        (Check(0.7, "min"), Check(0.9)),
        MINATAR,
        metric="last",
        num_reports=None,
    ),
    "c51-cartpole": Config(
        L + "test_value_based_thresholds", "c51", "CartPole-v1", 100_000, 4, (Check(360),)
    ),
    "ddpg-pendulum": Config(
        L + "test_continuous_pendulum_thresholds", "ddpg", "Pendulum-v1", 20_000, 2, (Check(-250),)
    ),
    "sac-pendulum": Config(
        L + "test_continuous_pendulum_thresholds", "sac", "Pendulum-v1", 20_000, 2, (Check(-230),)
    ),
    "dqn-cartpole": Config(
        L + "test_value_based_thresholds", "dqn", "CartPole-v1", 100_000, 4, (Check(320),)
    ),
    "ppo-cartpole": Config(
        L + "test_ppo_cartpole_475", "ppo", "CartPole-v1", 500_000, 4, (Check(475),)
    ),
    "a2c-cartpole": Config(
        L + "test_a2c_cartpole", "a2c", "CartPole-v1", 500_000, 4, (Check(260),)
    ),
    "ppo-pendulum": Config(
        L + "test_ppo_pendulum_continuous",
        "ppo",
        "Pendulum-v1",
        150_000,
        8,
        (Check(-200, "median"),),
    ),
    "reinforce-cartpole": Config(
        "tests/test_reinforce.py::test_reinforce_cartpole_400",
        "reinforce",
        "CartPole-v1",
        500_000,
        4,
        (Check(400),),
    ),
    "pqn-cartpole": Config(
        "tests/test_pqn.py::test_pqn_cartpole_450", "pqn", "CartPole-v1", 131_072, 4, (Check(450),)
    ),
    "dqn-acrobot": Config(
        L + "test_value_based_thresholds", "dqn", "Acrobot-v1", 60_000, 4, (Check(-115),)
    ),
    "ppo-lr-sweep": Config(
        L + "test_sweep_learning_rate_in_one_program",
        "ppo",
        "CartPole-v1",
        100_000,
        4,
        (
            Check(450, group="learning_rate=0.0025"),
            Check(30, group="learning_rate=1e-07", below=True),
        ),
        {"sweep": {"learning_rate": [1e-7, 2.5e-3]}},
        num_reports=2,
    ),
    "ppo-cartpole-novel": Config(
        "tests/test_recurrent.py::test_recurrent_ppo_balances_cartpole_without_velocities",
        "ppo",
        "CartPoleNoVel-v1",
        None,
        2,
        (Check(400, "min"),),
        metric="greedy",
        episodes=16,
        num_reports=None,
    ),
    "ppo-memory-chain-lstm": Config(
        "tests/test_recurrent.py::test_recurrent_ppo_solves_memory_chain_and_feed_forward_cannot",
        "ppo",
        "MemoryChain-v0",
        None,
        2,
        (Check(1.0, "min"),),
        metric="greedy",
        num_reports=None,
    ),
    "ppo-memory-chain-ff": Config(
        "tests/test_recurrent.py::test_recurrent_ppo_solves_memory_chain_and_feed_forward_cannot",
        "ppo",
        "MemoryChain-v0",
        None,
        2,
        (Check(0.5, "min", below=True),),
        {"recurrent": "none"},
        metric="greedy",
        num_reports=None,
    ),
    "r2d2-memory-chain-gru": Config(
        "tests/test_r2d2.py::test_r2d2_solves_memory_chain_and_feed_forward_dqn_cannot",
        "dqn",
        "MemoryChain-v0",
        48_000,
        2,
        (Check(1.0, "min"),),
        {**R2D2_MEMORY, "recurrent": "gru"},
        metric="greedy",
        num_reports=None,
    ),
    "r2d2-memory-chain-ff": Config(
        "tests/test_r2d2.py::test_r2d2_solves_memory_chain_and_feed_forward_dqn_cannot",
        "dqn",
        "MemoryChain-v0",
        12_000,
        2,
        (Check(0.5, "min", below=True),),
        {**R2D2_MEMORY, "hidden_sizes": (16, 16)},
        metric="greedy",
        num_reports=None,
    ),
    "sac_discrete-cartpole": Config(
        "tests/test_sac_discrete.py::test_learns_cartpole",
        "sac_discrete",
        "CartPole-v1",
        None,
        2,
        (Check(150),),
    ),
    "bc-expert-cartpole": offline_config("bc", 0.0, 250),
    "bc-mixed-cartpole": dataclasses.replace(  # a comparison for CQL and IQL, not a test
        offline_config("bc", 0.5, 250), test="(comparison with cql/iql-mixed-cartpole)"
    ),
    "cql-mixed-cartpole": offline_config("cql", 0.5, 250),
    "iql-mixed-cartpole": offline_config("iql", 0.5, 250),
}
"""Each learning test's configuration as the test runs it, with its seed count and thresholds
(copied from the test: change both together)."""


def measure(name: str, seeds: int, base: int, steps: int | None = None) -> dict:
    import numpy as np

    import jrl

    c = CONFIGS[name]
    kw: dict[str, Any] = dict(seeds=seeds, seed=base, progress=False, **c.overrides)
    if (steps or c.steps) is not None:
        kw["total_steps"] = steps or c.steps
    if c.num_reports is not None:
        kw["num_reports"] = c.num_reports
    eval_seconds = None
    with tempfile.TemporaryDirectory(prefix="reach-") as tmp:
        if c.dataset is not None:  # an offline agent: its dataset is made first, not timed
            kw["dataset"] = offline_dataset(c.dataset, _data_folder())
        start = time.perf_counter()
        res = jrl.train(c.agent, c.env, out=tmp if c.metric == "greedy" else None, **kw)
        seconds = time.perf_counter() - start
        if c.metric == "greedy":
            start = time.perf_counter()
            stats = jrl.app.api.evaluate_run(tmp, episodes=c.episodes)
            eval_seconds = round(time.perf_counter() - start, 1)
            returns = np.array([r["mean"] for r in stats["runs"]], np.float64)
        elif c.metric == "last":
            returns = np.asarray(res.metrics["train/episode_return"][:, -1], np.float64)
        else:
            returns = np.asarray(res.final_returns(c.fraction), np.float64)
    groups = {label: [int(i) for i in idx] for label, idx in res.groups() if label}
    # the learning curve: each seed's (rows) training return over each twentieth of the run
    # (columns), to see how early it gets there
    ret = np.asarray(res.metrics["train/episode_return"], np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a twentieth without an episode's end
        parts = np.array_split(np.arange(ret.shape[1]), min(20, ret.shape[1]))
        curve = np.round(np.stack([np.nanmean(ret[:, i], axis=1) for i in parts], 1), 2)
    return {
        "name": name,
        "agent": c.agent,
        "env": c.env,
        "total_steps": int(res.config.total_steps),
        "seeds": seeds,
        "base": base,
        "final": [round(float(x), 3) for x in returns],
        "seconds": round(seconds, 1),
        **({"eval_seconds": eval_seconds} if eval_seconds is not None else {}),
        **({"groups": groups} if groups else {}),
        "curve": np.where(np.isfinite(curve), curve, None).tolist(),
        "date": datetime.date.today().isoformat(),
    }


def _stat(values: list[float], stat: str) -> float:
    return {"mean": statistics.fmean, "median": statistics.median, "min": min}[stat](values)


def rows_of(run: dict) -> list[dict]:
    """One row per check of the run's configuration: the seeds' figures, the worst group of the
    test's seed count and the margin to the threshold."""
    c = CONFIGS[run["name"]]
    out = []
    for check in c.checks:
        idx = run.get("groups", {}).get(check.group, range(len(run["final"])))
        values = [run["final"][i] for i in idx]
        k = min(c.seeds, len(values))
        worst_k = sorted(values, reverse=check.below)[:k]
        stat = "max" if check.below and check.stat == "min" else check.stat  # every seed
        worst = max(worst_k) if stat == "max" else _stat(worst_k, stat)
        margin = (check.threshold - worst) if check.below else (worst - check.threshold)
        out.append(
            {
                "name": run["name"] + (f" ({check.group})" if check.group else ""),
                "what": f"{c.agent} {c.env}, {run['total_steps']:,} steps",
                "measured": len(values),
                "base": run["base"],
                "mean": statistics.fmean(values),
                "std": statistics.pstdev(values),
                "min": min(values),
                "max": max(values),
                "test_seeds": c.seeds,
                "stat": stat,
                "worst": worst,
                "threshold": ("< " if check.below else ">= ") + f"{check.threshold:g}",
                "margin": margin,
                "seconds": run["seconds"],
                "date": run.get("date", ""),
            }
        )
    return out


def _num(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def table(runs: list[dict]) -> str:
    lines = [
        "| configuration | seeds measured | mean ± std | min .. max | test: seeds, statistic "
        "| worst group | threshold | margin | s | date |",
        "|---|---|---|---|---|---:|---|---:|---:|---|",
    ]
    for run in runs:
        for r in rows_of(run):
            seeds = f"{r['measured']} ({r['base']} ..)"
            lines.append(
                f"| {r['what']} ({r['name']}){run.get('note', '')} | {seeds} "
                f"| {_num(r['mean'])} ± {_num(r['std'])} "
                f"| {_num(r['min'])} .. {_num(r['max'])} | {r['test_seeds']}, {r['stat']} "
                f"| {_num(r['worst'])} | {r['threshold']} | {_num(r['margin'])} "
                f"| {r['seconds']} | {r['date']} |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=8, help="seeds per configuration (default 8)")
    p.add_argument("--base", type=int, default=1000, help="the first seed (default 1000)")
    p.add_argument("--only", nargs="*", choices=list(CONFIGS), default=None)
    p.add_argument(
        "--steps", type=int, default=None, help="env steps per seed (default: the test's)"
    )
    p.add_argument("--output", default=None, help="append the JSON lines to this file too")
    p.add_argument("--from", dest="saved", nargs="*", default=None, help="JSON lines saved before")
    p.add_argument("--write", action="store_true", help="write the table to BENCHMARKS.md")
    a = p.parse_args(argv)
    runs = []
    if a.saved is not None:
        runs = [json.loads(line) for f in a.saved for line in Path(f).read_text().splitlines()]
    else:
        for name in a.only or list(CONFIGS):
            runs.append(measure(name, a.seeds, a.base, a.steps))
            print(json.dumps(runs[-1]), flush=True)
            if a.output:
                with open(a.output, "a") as f:
                    f.write(json.dumps(runs[-1]) + "\n")
            print(table(runs[-1:]).splitlines()[-1], flush=True)
    latest = {r["name"]: r for r in runs}  # a configuration measured again: its latest run
    order = list(CONFIGS)
    runs = sorted(latest.values(), key=lambda r: order.index(r["name"]))
    absent = [name for name in CONFIGS if name not in latest]
    missing = (
        "\n"
        + textwrap.fill(
            "Not measured here (their tests keep the thresholds written beside them): "
            + ", ".join(absent)
            + ".",
            width=96,
            break_on_hyphens=False,
        )
        + "\n"
        if absent
        else ""
    )
    shared = textwrap.fill(
        f"The machine: {machine()}; other engineers' test runs shared it (1-minute load "
        "average 8-25), so the seconds are several times those of an idle machine. A row whose "
        "configuration says so was read from the per-iteration returns of a longer run (no "
        "schedule of that agent's preset depends on the budget, so the shorter run is its "
        "beginning; here TD3 and DDPG, from 30k-step runs, the tests' former budget).",
        width=96,
    )
    text = f"""{HEADING}

What each learning test's configuration reaches on seeds the test does not run by default
(from 1000 on), to set its threshold so that any seeds it is given pass
(`JRL_LEARNING_SEED`, tests/conftest.py). Per configuration the seeds are vmapped in one
`jrl.train` call, as the test vmaps its own; the return per seed is the test's: the final
training return (`final_returns()`: the episodes ending in the last 5% of iterations, 25% for
Craftax), the last report's training return (MinAtar) or the mean greedy return of `jrl eval`
(the memory tasks). "worst group" is the test's statistic over the test's seed count taken
from the lowest measured seeds (the highest for an upper bound): no group of that many
measured seeds does worse. "margin" is how far it lies beyond the threshold, in the return's
units (0 for the memory tasks, whose tests ask every seed for the optimum, 1). Seconds are the
whole `jrl.train` call with compile, on 2 cores shared with other work. Reproduce with:

    python benchmarks/learning_reach.py --write

{shared}

{table(runs)}
{missing}"""
    publish(HEADING, text, a.write)


if __name__ == "__main__":
    main(sys.argv[1:])

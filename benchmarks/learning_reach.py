"""What the learning tests' agents reach: the configurations of the learning tests with their
seeds (or ``--seeds``), the final return of each seed, mean, spread and wall time.

The learning thresholds in ``tests/test_learning.py``, ``tests/test_reinforce.py``,
``tests/test_impala.py`` and ``tests/test_pqn.py`` are set from these figures (written beside
each threshold): a threshold sits about 10-15% below the measured mean, so a clearly degraded
agent fails while the test, which runs these very seeds, passes here and, elsewhere (another jax
or CPU), moves by about the spread over the square root of the seed count. A vmapped seed's
trajectory depends on the seed count (another batch shape, other float rounding), so measure
with the test's count.

Usage::

    python benchmarks/learning_reach.py [--seeds N] [--only NAME ...] [--output reach.jsonl]
        [--write]
    python benchmarks/learning_reach.py --from reach.jsonl [--write]   # the table of saved runs

Each configuration prints one JSON line: name, seeds, final returns, mean, std, min, max and the
seconds of the whole ``jrl.train`` call (compile included); a swept configuration also the mean
and std of each swept value.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common import machine, measured_on, publish

HEADING = "## Learning reach"

CONFIGS = {
    # name: (agent, env, total_steps, seeds, overrides) -- as the learning tests run them
    "ppo-cartpole": ("ppo", "CartPole-v1", 500_000, 8, {}),
    "ppo-pendulum": ("ppo", "Pendulum-v1", 150_000, 8, {}),
    "a2c-cartpole": ("a2c", "CartPole-v1", 500_000, 16, {}),
    "reinforce-cartpole": ("reinforce", "CartPole-v1", 500_000, 8, {}),
    "impala-cartpole": ("impala", "CartPole-v1", 600_000, 2, {}),
    "pqn-cartpole": ("pqn", "CartPole-v1", 131_072, 8, {}),
    "dqn-cartpole": ("dqn", "CartPole-v1", 100_000, 16, {}),
    "rainbow-cartpole": ("rainbow", "CartPole-v1", 100_000, 8, {}),
    "c51-cartpole": ("c51", "CartPole-v1", 100_000, 8, {}),
    "qrdqn-cartpole": ("qrdqn", "CartPole-v1", 100_000, 16, {}),
    "dqn-acrobot": ("dqn", "Acrobot-v1", 60_000, 8, {}),
    "sac-pendulum": ("sac", "Pendulum-v1", 20_000, 4, {}),
    "td3-pendulum": ("td3", "Pendulum-v1", 30_000, 4, {}),
    "ddpg-pendulum": ("ddpg", "Pendulum-v1", 30_000, 4, {}),
    # tests/test_learning.py::test_sweep_learning_rate_in_one_program: a useless and a good rate
    "ppo-lr-sweep": (
        "ppo",
        "CartPole-v1",
        100_000,
        8,
        {"sweep": {"learning_rate": [1e-7, 2.5e-3]}},
    ),
}


def measure(name: str, seeds: int | None = None) -> dict:
    import numpy as np

    import jrl

    agent, env, steps, test_seeds, overrides = CONFIGS[name]
    seeds = seeds or test_seeds
    start = time.perf_counter()
    res = jrl.train(
        agent, env, seeds=seeds, total_steps=steps, progress=False, num_reports=4, **overrides
    )
    seconds = time.perf_counter() - start
    final = np.asarray(res.final_returns(), np.float64)
    groups = {
        label: {"mean": round(float(final[i].mean()), 1), "std": round(float(final[i].std()), 1)}
        for label, i in res.groups()
        if label
    }
    return {
        "name": name,
        "agent": agent,
        "env": env,
        "total_steps": steps,
        "seeds": seeds,
        "final": [round(float(x), 1) for x in final],
        "mean": round(float(final.mean()), 1),
        "std": round(float(final.std()), 1),
        "min": round(float(final.min()), 1),
        "max": round(float(final.max()), 1),
        "seconds": round(seconds, 1),
        **({"groups": groups} if groups else {}),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| configuration | steps per seed | seeds | final return, mean ± std | min .. max | s |",
        "|---|---:|---:|---|---|---:|",
    ]
    for r in rows:
        what = f"{r['agent']} {r['env']}"
        if r.get("groups"):
            spread = "; ".join(f"{k}: {g['mean']} ± {g['std']}" for k, g in r["groups"].items())
            lines.append(
                f"| {what}, {r['name']} | {r['total_steps']:,} | {r['seeds']} per value "
                f"| {spread} | {r['min']} .. {r['max']} | {r['seconds']} |"
            )
        else:
            lines.append(
                f"| {what} | {r['total_steps']:,} | {r['seeds']} | {r['mean']} ± {r['std']} "
                f"| {r['min']} .. {r['max']} | {r['seconds']} |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=None, help="default: the test's seed count")
    p.add_argument("--only", nargs="*", choices=sorted(CONFIGS), default=None)
    p.add_argument("--output", default=None, help="append the JSON lines to this file too")
    p.add_argument("--from", dest="saved", nargs="*", default=None, help="JSON lines saved before")
    p.add_argument("--write", action="store_true", help="write the table to BENCHMARKS.md")
    a = p.parse_args(argv)
    rows = []
    if a.saved is not None:
        rows = [json.loads(line) for f in a.saved for line in Path(f).read_text().splitlines()]
    else:
        for name in a.only or list(CONFIGS):
            rows.append(measure(name, a.seeds))
            print(json.dumps(rows[-1]), flush=True)
            if a.output:
                with open(a.output, "a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
    order = list(CONFIGS)
    rows.sort(key=lambda r: order.index(r["name"]) if r["name"] in order else len(order))
    when = measured_on() if a.saved is None else f"Read from saved runs; the machine: {machine()}."
    text = f"""{HEADING}

What the configurations of the learning tests reach: the final training return (the mean
return of the episodes finishing in the last iteration) of each seed, the seeds vmapped in one
`jrl.train` call with seed 0 and the test's seed count, so the test runs these very seeds. The
thresholds of `tests/test_learning.py`, `test_reinforce.py` and `test_pqn.py` sit 10-15% below
these means. Seconds are the whole call, with two configurations running at a time and the
persistent compilation cache already holding most programs. Reproduce with:

    python benchmarks/learning_reach.py --write

{when}

{table(rows)}
"""
    publish(HEADING, text, a.write)


if __name__ == "__main__":
    main(sys.argv[1:])

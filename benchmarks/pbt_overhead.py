"""PBT's overhead: PPO CartPole-v1 with a sweep of 8 learning rates, with and without PBT.

The same program (PPO's CartPole preset, 8 runs: the 8 swept values x 1 seed) is trained
with ``pbt=PBT(interval=...)`` and without, alternately, ``--repeats`` times each, in one
process; steps/s over all runs excludes compilation (``TrainResult.steps_per_second``). The
overhead is ``1 - with / without`` of the median rates. PBT's exploit/explore step runs every
``--interval`` env steps inside the compiled chunk (a ``cond``); every iteration also writes
the two lineage metrics.

    python benchmarks/pbt_overhead.py --write      # BENCHMARKS.md, "PBT overhead"
    python benchmarks/pbt_overhead.py --quick      # a smoke run
"""

from __future__ import annotations

import argparse

import common
import numpy as np

HEADING = "## PBT overhead"
LRS = [1e-6, 1e-5, 1e-4, 2.5e-4, 1e-3, 3e-3, 1e-2, 1e-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=200_000)
    p.add_argument("--interval", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.total_steps, a.repeats = 20_000, 1
    import jrl
    from jrl.run.pbt import PBT

    kw = dict(
        seeds=1,
        sweep={"learning_rate": LRS},
        total_steps=a.total_steps,
        progress=False,
        num_reports=1,
        compile_cache=False,
    )
    rates: dict[str, list[float]] = {"without PBT": [], "with PBT": []}
    for _ in range(a.repeats):
        for name in rates:
            extra = {"pbt": PBT(interval=a.interval)} if name == "with PBT" else {}
            res = jrl.train("ppo", "CartPole-v1", **kw, **extra)
            rates[name].append(res.steps_per_second)
            print(name, f"{res.steps_per_second:,.0f} steps/s", flush=True)
    median = {k: float(np.median(v)) for k, v in rates.items()}
    overhead = 1.0 - median["with PBT"] / median["without PBT"]
    rows = [
        f"| {name} | {common.rate(median[name])} | "
        f"{', '.join(common.rate(x) for x in rates[name])} |"
        for name in rates
    ]
    text = "\n".join(
        [
            HEADING,
            "",
            f"PPO's CartPole-v1 preset, 8 runs (learning rates {', '.join(map(str, LRS))}, one "
            f"seed each), {a.total_steps:,} env steps per run, with PBT every "
            f"{a.interval:,} env steps (exploit/explore in the compiled chunk) and without, "
            f"alternately, {a.repeats} times each in one process; steps/s over all runs, "
            "compilation excluded. Reproduce with `python benchmarks/pbt_overhead.py --write`.",
            "",
            common.measured_on() + f" Commit {common.git_commit()}.",
            "",
            "| program | median steps/s | each repeat |",
            "|---|---:|---|",
            *rows,
            "",
            f"Overhead of PBT: {100 * overhead:.1f}% (target <= 5%).",
        ]
    )
    common.publish(HEADING, text, a.write and not a.quick)


if __name__ == "__main__":
    main()

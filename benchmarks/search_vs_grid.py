"""A TPE search of half the trials against a grid: PPO CartPole-v1's learning rate.

For each base seed, a grid of ``--grid`` learning rates, log-spaced over ``--low`` .. ``--high``,
trains as one sweep (``--seeds`` seeds each, seeds base .. base + seeds - 1); a search
(``jrl.train(search_space={"learning_rate": "log:LOW:HIGH"}, trials=grid / 2, ...)``, TPE
seeded by the base seed) trains half as many trials in batches of ``--batch``, on the same
seeds. A value is a trial's final training return (mean of the last 5% of iterations),
averaged over its seeds; the search holds (issue 45's criterion) when its best value is at
least the grid's best. tests/test_search.py::test_search_matches_a_grid_of_twice_the_trials
runs the default setting on the learning tests' base seed.

    python benchmarks/search_vs_grid.py --write    # BENCHMARKS.md, "Search against a grid"
    python benchmarks/search_vs_grid.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import time

import common
import numpy as np

HEADING = "## Search against a grid"


def one_base(jrl, a: argparse.Namespace, base: int) -> tuple[float, float, float, dict]:
    """(grid's best value, its learning rate, search's best value, search's best params)."""
    kw = dict(
        seeds=a.seeds,
        seed=base,
        total_steps=a.total_steps,
        num_reports=1,
        progress=False,
    )
    lrs = np.geomspace(a.low, a.high, a.grid)
    grid = jrl.train("ppo", "CartPole-v1", sweep={"learning_rate": list(lrs)}, **kw)
    values = grid.final_returns().reshape(a.grid, a.seeds).mean(axis=1)
    search = jrl.train(
        "ppo",
        "CartPole-v1",
        search_space={"learning_rate": f"log:{a.low}:{a.high}"},
        trials=a.grid // 2,
        search_batch=a.batch,
        **kw,
    )
    best = int(np.argmax(values))
    return float(values[best]), float(lrs[best]), search.best_value, search.best_params


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=65_536)
    p.add_argument("--seeds", type=int, default=2, help="seeds per trial")
    p.add_argument("--grid", type=int, default=16, help="grid points (the search: half)")
    p.add_argument("--batch", type=int, default=2, help="search trials per program")
    p.add_argument("--low", type=float, default=1e-4)
    p.add_argument("--high", type=float, default=1e-2)
    p.add_argument("--base-seeds", type=int, nargs="+", default=list(range(1000, 1008)))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.total_steps, a.base_seeds = 4096, a.base_seeds[:1]
    import jrl

    rows, margins = [], []
    for base in a.base_seeds:
        t = time.perf_counter()
        grid_best, grid_lr, search_best, params = one_base(jrl, a, base)
        margins.append(search_best - grid_best)
        row = (
            f"| {base} | {grid_best:.1f} (lr {grid_lr:.2e}) | {search_best:.1f} "
            f"(lr {params['learning_rate']:.2e}) | {margins[-1]:+.1f} |"
        )
        rows.append(row)
        print(row, f"{time.perf_counter() - t:.0f}s", flush=True)
    held = sum(m >= 0 for m in margins)
    text = "\n".join(
        [
            HEADING,
            "",
            f"PPO's CartPole-v1 preset, {a.total_steps:,} env steps per run, {a.seeds} seeds "
            f"per trial. Grid: {a.grid} learning rates log-spaced over [{a.low:g}, {a.high:g}] "
            f"in one sweep. Search: {a.grid // 2} TPE trials over log:{a.low:g}:{a.high:g} in "
            f"batches of {a.batch} (each batch one program), on the same seeds. A value is "
            "the final training return (last 5% of iterations) averaged over the trial's "
            "seeds; margin = search's best - grid's best. Reproduce with "
            "`python benchmarks/search_vs_grid.py --write`.",
            "",
            common.measured_on() + f" Commit {common.git_commit()}.",
            "",
            "| base seed | grid's best | search's best | margin |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            f"The search's best is at least the grid's on {held} of {len(margins)} base seeds; "
            f"margin mean {np.mean(margins):+.1f}, worst {min(margins):+.1f}.",
        ]
    )
    common.publish(HEADING, text, a.write and not a.quick)


if __name__ == "__main__":
    main()

"""Cost of the per-chunk lifecycle work (logging, checks) against the bare runner.

PPO on CartPole-v1 with PureJaxRL's configuration (4 envs x 128 steps, 4
epochs, 4 minibatches; ``--total-steps`` per seed, ``--seeds`` vmapped),
cut into ``--chunks`` chunks, timed three ways in one process (compile
excluded, the programs compiled once and shared):

- **bare**: ``jrl.run.anakin.run`` alone: one host sync per chunk, nothing else;
- **train, no folder**: ``jrl.train`` without a run folder: progress
  bookkeeping and the NaN/inf checks of metrics and parameters every chunk;
- **train, all sinks**: ``jrl.train`` with a run folder and every local sink
  (``metrics.csv``, ``metrics.jsonl``, TensorBoard with one run per seed)
  given every iteration's metrics of every seed, a chunk's records at once;
  checkpoints only at the end, outside the timed loop.

Each variant runs ``--repeats`` times, interleaved; the table gives the
median run seconds, the ratio to bare, and the host seconds spent in the
per-chunk work itself (timed around ``jrl.train``'s ``on_chunk`` callback),
which is steadier than a difference of two noisy run times. ``--write``
puts the table in BENCHMARKS.md.

Usage::

    python benchmarks/logging_overhead.py [--chunks 100] [--repeats 5] [--write]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import measured_on, publish

HEADING = "## Logging overhead"
CONFIG = dict(num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4, learning_rate=2.5e-4)
PER_ITERATION = CONFIG["num_envs"] * CONFIG["num_steps"]  # env steps per iteration


@contextlib.contextmanager
def timing_chunk_work(host: dict[str, float]):
    """Adds the seconds ``jrl.train`` spends in its per-chunk host work to ``host["seconds"]``
    while the block runs.

    ``jrl.train`` takes no hooks of its own: it passes its per-chunk work to
    ``jrl.run.anakin.run`` as ``RunHooks.on_chunk``. So ``anakin.run`` is wrapped for
    the block (and restored after it), timing that callback; the runner itself is
    unchanged.
    """
    from jrl.run import anakin

    real_run = anakin.run

    def timed_run(*args, hooks=anakin.RunHooks(), **kwargs):
        on_chunk = hooks.on_chunk

        def timed(*x):
            t = time.perf_counter()
            try:
                on_chunk(*x)
            finally:
                host["seconds"] += time.perf_counter() - t

        hooks = hooks._replace(on_chunk=None if on_chunk is None else timed)
        return real_run(*args, hooks=hooks, **kwargs)

    anakin.run = timed_run
    try:
        yield
    finally:
        anakin.run = real_run


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--total-steps", type=int, default=500_000, help="env steps per seed")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--chunks", type=int, default=100, help="chunks (= log writes) over the run")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--write", action="store_true", help="write the table to BENCHMARKS.md")
    a = p.parse_args(argv)

    import jax
    import jrl.agents
    import jrl.envs

    import jrl
    from jrl.app import api as experiment
    from jrl.run import anakin

    config = experiment.make_config("ppo", "CartPole-v1", total_steps=a.total_steps, **CONFIG)
    env, params = jrl.envs.make("CartPole-v1")
    built = jrl.agents.get("ppo").build(config, env, params)
    keys = jax.random.split(jax.random.key(0), a.seeds)
    host = {"seconds": 0.0}
    options = dict(
        seeds=a.seeds,
        num_reports=a.chunks,
        progress=False,
        compile_cache=False,
        total_steps=a.total_steps,
        **CONFIG,
    )

    def bare() -> float:
        return anakin.run(
            built.algorithm, keys, config.num_iterations, num_reports=a.chunks
        ).run_seconds

    def no_folder() -> float:
        return jrl.train("ppo", "CartPole-v1", **options).run_seconds

    def all_sinks() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            return jrl.train(
                "ppo", "CartPole-v1", out=Path(tmp) / "run", log=["jsonl", "tensorboard"], **options
            ).run_seconds

    variants = {"bare runner": bare, "train, no folder": no_folder, "train, all sinks": all_sinks}
    times: dict[str, list[float]] = {k: [] for k in variants}
    hosts: dict[str, list[float]] = {k: [] for k in variants}
    with timing_chunk_work(host):
        for fn in variants.values():  # warm-up: compile every program once
            fn()
        for r in range(a.repeats):
            for name, fn in variants.items():
                host["seconds"] = 0.0
                times[name].append(fn())
                hosts[name].append(host["seconds"])
            print(
                f"repeat {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
                flush=True,
            )
    base = float(np.median(times["bare runner"]))
    steps = a.total_steps * a.seeds
    rows = [
        "| variant | median run s | steps/s | vs bare | per-chunk host work | share of run |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, ts in times.items():
        med, h = float(np.median(ts)), float(np.median(hosts[name]))
        rows.append(
            f"| {name} | {med:.2f} | {steps / med:,.0f} | {med / base:.3f}x | "
            f"{1000 * h / a.chunks:.2f} ms | {100 * h / med:.2f}% |"
        )
    table = "\n".join(rows)
    text = f"""{HEADING}

What the training loop does on the host between chunks (progress, the
NaN/inf checks of metrics and parameters, and the metric sinks) against the
bare runner, one host sync per chunk in all three. PPO CartPole-v1,
PureJaxRL's configuration, {a.seeds} seeds vmapped, {a.total_steps:,} steps per
seed in {a.chunks} chunks; median of {a.repeats} interleaved repeats, compile
excluded. "All sinks" writes every iteration of every seed
({a.total_steps // PER_ITERATION:,} per seed) to metrics.csv, metrics.jsonl and
TensorBoard (a run per seed, on a background thread), handed over once per
chunk. Target: at most 3% over the bare runner. The run-time ratios carry
this shared machine's noise (a few percent between repeats); the last two
columns time the per-chunk host work directly. Reproduce with:

    python benchmarks/logging_overhead.py --write

{measured_on()}

{table}
"""
    publish(HEADING, text, a.write)


if __name__ == "__main__":
    main(sys.argv[1:])

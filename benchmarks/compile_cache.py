"""Compile time of the main job, first run vs a second run with the persistent compilation cache.

Runs the README's training command (``jrl train ppo --env CartPole-v1
--seeds 4``) ``--repeats`` times in fresh processes against one new, empty
cache directory, and reports each run's compile seconds (what ``jrl train``
measures: trace, lower and compile of the training program, or its load
from the cache) and run seconds. Run 1 fills the cache; the later runs load
from it. ``--write`` puts the table in BENCHMARKS.md.

Usage::

    python benchmarks/compile_cache.py [--repeats 3] [--total-steps 500000] [--write] [--check]

``--check`` exits with 1 unless every run after the first compiles in under half the first
run's compile seconds (the wall-clock claim the test suite no longer makes: the tests check
that the second process loads the program from the cache and writes nothing new).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import measured_on, publish

HEADING = "## Compilation cache"


def one_run(cache: Path, out: Path, total_steps: int) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "jrl.app.cli",
        "train",
        "ppo",
        "--env",
        "CartPole-v1",
        "--seeds",
        "4",
        "--quiet",
        "--total-steps",
        str(total_steps),
        "--out",
        str(out),
        "--overwrite",
        "--compile-cache-dir",
        str(cache),
    ]
    env = {k: v for k, v in os.environ.items() if k != "JRL_COMPILE_CACHE"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode:
        raise SystemExit(f"jrl train failed:\n{done.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return summary


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--repeats", type=int, default=3, help="runs against the same cache (the first fills it)"
    )
    p.add_argument("--total-steps", type=int, default=500_000, help="env steps per seed")
    p.add_argument("--write", action="store_true", help="write the table to BENCHMARKS.md")
    p.add_argument(
        "--check", action="store_true", help="fail unless later runs compile in < 0.5x the first"
    )
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        for i in range(a.repeats):
            s = one_run(cache, Path(tmp) / "run", a.total_steps)
            size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
            rows.append((i + 1, s["compile_seconds"], s["run_seconds"], size))
            print(
                f"run {i + 1}: compile {s['compile_seconds']:.2f} s, run {s['run_seconds']:.2f} s, "
                f"cache {size / 2**20:.1f} MiB",
                flush=True,
            )

    table = "\n".join(
        ["| run | cache | compile s | run s | cache size |", "|---:|---|---:|---:|---:|"]
        + [
            f"| {i} | {'empty (fills it)' if i == 1 else 'filled'} | {c:.2f} | {r:.2f} "
            f"| {sz / 2**20:.1f} MiB |"
            for i, c, r, sz in rows
        ]
    )
    text = f"""{HEADING}

`jrl train` turns on JAX's persistent compilation cache by default
(`~/.cache/jrl/jax-cache`, or `$JRL_COMPILE_CACHE`; `--no-compile-cache` to
turn it off). The README's main job, `jrl train ppo --env CartPole-v1 --seeds 4`
({a.total_steps:,} steps per seed), run {a.repeats} times in fresh processes
against one new cache directory. Compile seconds are what `jrl train`
reports: tracing, lowering and compiling the training program, or loading
it from the cache. Reproduce with:

    python benchmarks/compile_cache.py --write

{measured_on()}

{table}
"""
    publish(HEADING, text, a.write)
    if a.check:
        first = rows[0][1]
        slow = [(i, c) for i, c, _, _ in rows[1:] if not c < 0.5 * first]
        if slow:
            raise SystemExit(f"check failed: runs {slow} compiled in >= 0.5 x {first:.2f} s")
        print(f"check passed: later runs compile in < 0.5 x the first ({first:.2f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])

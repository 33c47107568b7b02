"""Data-parallel overhead: PPO CartPole on 1, 2, 4 fake CPU devices.

    python benchmarks/devices.py [--quick] [--write]

Each configuration runs in its own interpreter (fake devices need XLA_FLAGS
before jax starts): the plain single-device program, the sharded program on
1 device (its overhead vs the plain one is the cost of the shard_map path),
and the sharded program on 2 and 4 fake devices. The global batch is the
same everywhere (16 envs x 128 steps, 4 seeds vmapped inside each device),
so steps/s compare directly. On a 2-core CPU more fake devices cannot be
faster: the point is correctness and overhead. ``--write`` puts the table in
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import sys

from common import measured_on, publish, run_json_worker

HEADING = "## Data-parallel overhead (fake CPU devices)"

CHILD = r"""
import os, sys, json, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=%(fake)d"
import jax
import jrl
res = jrl.train("ppo", "CartPole-v1", seeds=4, num_envs=16, num_steps=128, total_steps=%(steps)d,
                devices=%(devices)s, progress=False, num_reports=4, compile_cache=False)
best = res.run_seconds
res2 = jrl.train("ppo", "CartPole-v1", seeds=4, num_envs=16, num_steps=128, total_steps=%(steps)d,
                 devices=%(devices)s, progress=False, num_reports=4, compile_cache=False)
print(json.dumps({"compile": res.compile_seconds, "run": min(best, res2.run_seconds),
                  "steps": int(res.env_steps[-1]) * res.num_runs}))
"""


def measure(devices: int | None, fake: int, steps: int, repeats: int) -> dict:
    best = None
    for _ in range(repeats):
        code = CHILD % {
            "fake": fake,
            "devices": "None" if devices is None else devices,
            "steps": steps,
        }
        r = run_json_worker(
            [sys.executable, "-c", code], {**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=1800
        )
        if isinstance(r, str):
            raise RuntimeError(r)
        if best is None or r["run"] < best["run"]:
            best = r
    best["sps"] = best["steps"] / best["run"]
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument("--write", action="store_true", help="write the table into BENCHMARKS.md")
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    steps = 16 * 128 * (8 if a.quick else 60)
    rows = [
        ("plain (no shard_map)", None, 1),
        ("sharded, 1 device", 1, 1),
        ("sharded, 2 devices", 2, 2),
        ("sharded, 4 devices", 4, 4),
    ]
    results = {}
    for name, devices, fake in rows:
        results[name] = measure(devices, fake, steps, 1 if a.quick else a.repeats)
        print(name, results[name], flush=True)
    base = results["plain (no shard_map)"]["sps"]
    lines = [
        "| configuration | compile s | run s | steps/s | vs plain |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, _, _ in rows:
        r = results[name]
        lines.append(
            f"| {name} | {r['compile']:.1f} | {r['run']:.2f} | {r['sps']:,.0f} "
            f"| {r['sps'] / base:.2f}x |"
        )
    table = "\n".join(lines)
    text = (
        f"{HEADING}\n\nPPO CartPole-v1, 16 envs x 128 steps, 4 seeds vmapped, "
        f"{steps:,} steps per seed, best of {1 if a.quick else a.repeats} runs (compile excluded). "
        "Reproduce with:\n\n"
        "    python benchmarks/devices.py --write\n\n"
        f"{measured_on()}\n\n{table}\n\n"
        "The sharded program on one device measures the shard_map path's overhead (target <= 5%). "
        "Two fake devices can use both cores; more share the same two cores.\n"
    )
    publish(HEADING, text, a.write)


if __name__ == "__main__":
    main()

"""Central inference (SEED RL, ``--inference learner``) against actor-side inference, by actor
count: PPO's env steps/s and the bytes that cross between processes per env step.

One process runs every configuration in turn on one local Ray (4 CPUs declared, so 4 workers
can be placed even on a smaller machine; no dashboard). All runs are PPO on
``gymnasium:CartPole-v1`` (Gymnasium's Python env, stepped on the host), one seed, 16 envs x
32 steps per update (split over the actors), 4 epochs x 4 minibatches, 64x64 tanh, max
staleness 1 and queue 2 (as benchmarks/ray_actors.py):

- **Ray, N = 1, 2, 4 processes**: actor-side (``--actors ray:N``: each process acts with its
  own copy of the parameters and sends trajectories) against central
  (``--actors ray:N --inference learner``: the processes only step envs; the learner's
  device acts for all of them). Bytes per env step is ``ray/bytes_per_step`` at the end of
  the run: everything that crossed between the learner's process and the Ray processes
  (actor-side: trajectories, env snapshots and each parameter version once per actor;
  central: actions down, observations and step results up, env snapshots), over the env steps.
- **Threads, N = 1, 2, 4**: the same two modes with actor threads / env-worker threads in the
  learner's process (nothing crosses a process boundary).

Steps/s excludes the first update (compilation), as in benchmarks/sebulba.py. ``inference/
batch_size`` is the mean number of workers the server acted for per call.

    python benchmarks/central_inference.py --write
    python benchmarks/central_inference.py --quick      # a smoke run, prints only
"""

from __future__ import annotations

import argparse
import os
import warnings

import common

HEADING = "## Central inference (SEED RL) against actor-side inference"
ENV = "gymnasium:CartPole-v1"


def run(steps: int, **options) -> dict:
    """Env steps/s, bytes per env step and batch size of one PPO run on the Sebulba runner."""
    import numpy as np

    options = dict(queue_size=2, max_staleness=1, **options)
    config, res = common.sebulba_once("ppo", ENV, steps, options, num_envs=16, num_steps=32)
    seconds = max(res.timings["run_s"], 1e-9)
    timed = res.iterations - 1  # the first update (compilation) excluded
    m = res.metrics
    last = lambda k: float(m[k][0, -1]) if k in m else None
    batch = m.get("inference/batch_size")
    return {
        "steps_per_s": timed * config.num_steps * config.num_envs / seconds,
        "bytes_per_step": last("ray/bytes_per_step"),
        "batch": None if batch is None else float(np.mean(batch[0, 1:])),
    }


def measure(steps: int, counts: list[int]) -> list[dict]:
    rows = []
    for n in counts:
        for where, place in (("ray", {"actors": f"ray:{n}"}), ("threads", {"actor_threads": n})):
            side = run(steps, **place)
            central = run(steps, inference="learner", **place)
            rows.append({"n": n, "where": where, "actor": side, "central": central})
            print(rows[-1], flush=True)
    return rows


def tables(rows: list[dict]) -> list[str]:
    fmt = lambda x, f="{:,.0f}": "–" if x is None else f.format(x)
    ray = [r for r in rows if r["where"] == "ray"]
    threads = [r for r in rows if r["where"] == "threads"]
    text = [
        "Ray processes:",
        "",
        "| processes | actor-side: env steps/s | actor-side: bytes/step | central: env steps/s "
        "| central: bytes/step | central: workers per call | central / actor-side (steps/s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in ray:
        a, c = r["actor"], r["central"]
        text.append(
            f"| {r['n']} | {fmt(a['steps_per_s'])} | {fmt(a['bytes_per_step'], '{:,.1f}')} "
            f"| {fmt(c['steps_per_s'])} | {fmt(c['bytes_per_step'], '{:,.1f}')} "
            f"| {fmt(c['batch'], '{:.2f}')} | {c['steps_per_s'] / a['steps_per_s']:.2f} |"
        )
    text += [
        "",
        "Threads in the learner's process:",
        "",
        "| threads | actor-side: env steps/s | central: env steps/s | central: workers per call "
        "| central / actor-side |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in threads:
        a, c = r["actor"], r["central"]
        text.append(
            f"| {r['n']} | {fmt(a['steps_per_s'])} | {fmt(c['steps_per_s'])} "
            f"| {fmt(c['batch'], '{:.2f}')} | {c['steps_per_s'] / a['steps_per_s']:.2f} |"
        )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per run")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true", help="write BENCHMARKS.md")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import jax
    import ray

    steps = 8_192 if args.quick else args.steps
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    counts = [1, 2] if args.quick else [1, 2, 4]
    rows = measure(steps, counts)
    ray_version = ray.__version__
    ray.shutdown()
    device = jax.devices()[0]
    text = [
        HEADING,
        "",
        f"PPO on {ENV} (16 envs x 32 steps per update, split over the actors; 4 epochs x 4 "
        f"minibatches; 64x64 tanh), one seed, {steps:,} env steps per run, max staleness 1, "
        "queue 2; the learner (and central inference) on "
        f"{device.platform} ({device.device_kind}). Steps/s excludes compilation (the first "
        "update). Bytes/step: `ray/bytes_per_step` at the end of the run, everything that "
        "crossed between the learner's process and the Ray processes per env step. "
        "Reproduce with `python benchmarks/central_inference.py --write`.",
        "",
        common.measured_on() + f" Peers: ray {ray_version}; commit {common.git_commit()}.",
        "",
    ]
    text += tables(rows)
    cores = os.cpu_count() or 1
    text += [
        "",
        f"This machine has {cores} cores for the learner, the inference server and every env "
        "process, so the rows by count show the overhead of each setting, not scaling. "
        "Actor-side Ray sends each parameter version to every process and the whole "
        "trajectory back: its bytes per step grow with the processes (the parameters, "
        "about 110 kB per version, dominate for this small env). Central inference sends "
        "only what an env step needs (an action down; an observation, a reward and the "
        "episode flags up), the same per step at any count, and pays one round trip per step "
        "of every process instead of one per trajectory.",
    ]
    if device.platform == "cpu":
        text += [
            "",
            "No GPU was lent when this was measured: on a GPU machine the same command puts "
            "the learner and the inference server on the GPU while the env processes stay on "
            "CPUs.",
        ]
    common.publish(HEADING, "\n".join(text) + "\n", args.write and not args.quick)


if __name__ == "__main__":
    main()

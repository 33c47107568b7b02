"""Ape-X DQN on the Sebulba runner: env steps/s and learner updates/s by actors (Ray processes
or threads), and the bytes on the wire.

One process runs every configuration in turn on one local Ray (4 CPUs declared, no
dashboard). All runs are ``apex`` with its CartPole preset on ``gymnasium:CartPole-v1``, one
seed: 8 envs pushing blocks of 8 steps each (split over the actors), 6 updates of 128 per
block, 120-84 ReLU, synchronous (max staleness 0: a run is reproducible, actors and learner
take turns):

- **Ray actors** (``--actors ray:N``, N = 1, 2) and **actor threads** (N = 1, 2): env steps/s
  (pushed transitions) and learner updates/s, both over the timed part of the run (the first
  block, which compiles the learner, excluded).
- **Bytes on the wire** with 2 Ray actors, float32 and bfloat16 transfers: replay items and
  priorities per block (all actors), parameters per version, and ``sebulba/bytes_per_s``.

There is no side-by-side peer: RLlib, Ray's own RL library (installed with ``ray[rllib]``),
lists no Ape-X DQN among its algorithms in the Ray version measured here.

    python benchmarks/apex.py --write
    python benchmarks/apex.py --quick      # a smoke run, prints only
"""

from __future__ import annotations

import argparse
import os
import warnings

import common
import jax
import numpy as np

HEADING = "## Ape-X DQN: actors filling the learner's replay"
ENV = "gymnasium:CartPole-v1"


def run(steps: int, **options):
    """``(env steps/s, updates/s, metrics)`` of one Ape-X run on the Sebulba runner."""
    import jrl.agents
    import jrl.envs
    from jrl import experiment
    from jrl.run import sebulba

    env, params = jrl.envs.make(ENV)
    config = experiment.make_config("apex", "CartPole-v1", total_steps=steps, learning_starts=0)
    built = jrl.agents.get("apex").build(config, env, params)
    res = sebulba.run(
        built.agent,
        env,
        built.spec,
        jax.random.key(0)[None],
        config.num_iterations,
        config.num_steps,
        config.num_envs,
        sebulba.SebulbaOptions(**options),
        num_reports=4,
        replay=built.replay,
    )
    seconds = max(res.timings["run_s"], 1e-9)
    timed = res.iterations - 1  # the first block (compilation) excluded
    rate = timed * config.env_steps_per_iteration / seconds
    return rate, timed * config.updates_per_iteration / seconds, res.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40_000, help="env steps per run")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true", help="write BENCHMARKS.md")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import ray

    steps = 4_096 if args.quick else args.steps
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    rows = []
    for n in (1, 2):
        ray_rate, ray_updates, m = run(steps, actors=f"ray:{n}")
        ray_bytes = float(np.median(m["sebulba/bytes_per_s"][0, 1:]))
        thread_rate, thread_updates, _ = run(steps, actor_threads=n)
        rows.append((n, ray_rate, ray_updates, ray_bytes, thread_rate, thread_updates))
        print(rows[-1], flush=True)
    wire = []
    for transfer in ("float32", "bfloat16"):
        rate, _, m = run(steps, actors="ray:2", transfer=transfer)
        last = lambda k: float(m[k][0, -1])
        per_s = float(np.median(m["sebulba/bytes_per_s"][0, 1:]))
        wire.append(
            (transfer, last("sebulba/trajectory_bytes"), last("sebulba/params_bytes"), per_s, rate)
        )
        print(wire[-1], flush=True)
    ray_version = ray.__version__
    ray.shutdown()

    text = [
        HEADING,
        "",
        f"`apex` (its CartPole preset: 8 envs x blocks of 8 steps, split over the actors; 6 "
        f"updates of 128 per block; 120-84 ReLU; prioritized replay) on {ENV}, one seed, "
        f"{steps:,} env steps per run, synchronous (max staleness 0), updates from the first "
        "block on. Steps/s and updates/s exclude the first block (compilation). Bytes/s: the "
        "median over blocks of `sebulba/bytes_per_s` (replay items and priorities in, the new "
        "parameters out to every actor). Reproduce with `python benchmarks/apex.py --write`.",
        "",
        common.measured_on() + f" Peers: ray {ray_version}; commit {common.git_commit()}.",
        "",
        "| actors | Ray: env steps/s | Ray: updates/s | Ray: bytes/s | threads: env steps/s "
        "| threads: updates/s | Ray / threads |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, rr, ru, rb, tr, tu in rows:
        text.append(
            f"| {n} | {rr:,.0f} | {ru:,.1f} | {rb:,.0f} | {tr:,.0f} | {tu:,.1f} | {rr / tr:.2f} |"
        )
    text += [
        "",
        "Bytes on the wire with 2 Ray actors:",
        "",
        "| transfer | replay items + priorities per block (all actors) | bytes per parameter "
        "version | bytes/s | env steps/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for transfer, tb, pb, per_s, rate in wire:
        text.append(f"| {transfer} | {tb:,.0f} | {pb:,.0f} | {per_s:,.0f} | {rate:,.0f} |")
    cores = os.cpu_count() or 1
    text += [
        "",
        f"This machine has {cores} cores for the learner and every actor process: the rows "
        "show the overhead of each setting, not scaling. A synchronous run alternates the "
        "actors' block and the learner's 6 updates, so its rate is bounded by their sum; Ape-X "
        "proper lets the learner run freely beside its actors (see ARCHITECTURE.md, why jrl "
        "bounds the replay ratio).",
        "",
        "A parameter version is the whole DQN agent state the learner publishes (parameters, "
        "target parameters, which the actors' priorities need, and Adam's two moments, which "
        "they do not): about 3x the parameters' bytes. bfloat16 halves it and cuts a block's "
        "bytes by about 30% (observations; rewards, discounts and priorities stay float32).",
    ]
    common.publish(HEADING, "\n".join(text) + "\n", args.write and not args.quick)


if __name__ == "__main__":
    main()

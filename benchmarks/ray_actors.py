"""Ray actors against Sebulba's actor threads: PPO's env steps/s and updates/s by actor count.

One process runs every configuration in turn on one local Ray (4 CPUs declared, so 4 actors
can be placed even on a smaller machine; no dashboard). All runs are PPO on
``gymnasium:CartPole-v1`` (Gymnasium's Python env, stepped on the host), one seed, 16 envs x
32 steps per update (split over the actors), 4 epochs x 4 minibatches, 64x64 tanh:

- **Ray actors** (``--actors ray:N``, N = 1, 2, 4), max staleness 1 and queue 2 (actors act
  one version ahead of the learner).
- **Actor threads** (``actor_threads=N``), the same staleness and queue: the overhead of
  processes and the object store against threads sharing the learner's process.
- **Bytes on the wire** with 2 Ray actors, float32 and bfloat16 transfers: trajectory bytes
  and parameter bytes per update, and ``sebulba/bytes_per_s`` (trajectories in plus the new
  version out to every actor, per second of an update).

Steps/s and updates/s exclude the first update (compilation), as in benchmarks/sebulba.py.

    python benchmarks/ray_actors.py --write
    python benchmarks/ray_actors.py --quick      # a smoke run, prints only
"""

from __future__ import annotations

import argparse
import os
import warnings

import common

HEADING = "## Ray actors: Sebulba's actors as processes"
ENV = "gymnasium:CartPole-v1"


def run(steps: int, **options):
    """``(env steps/s, updates/s, metrics)`` of one PPO run on the Sebulba runner."""
    options = dict(queue_size=2, max_staleness=1, **options)
    config, res = common.sebulba_once("ppo", ENV, steps, options, num_envs=16, num_steps=32)
    seconds = max(res.timings["run_s"], 1e-9)
    timed = res.iterations - 1  # the first update (compilation) excluded
    return timed * config.num_steps * config.num_envs / seconds, timed / seconds, res.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true", help="write BENCHMARKS.md")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import ray

    steps = 8_192 if args.quick else args.steps
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    counts = [1, 2] if args.quick else [1, 2, 4]
    rows = common.ray_against_threads(run, steps, counts)
    wire = common.wire_bytes(run, steps)
    ray_version = ray.__version__
    ray.shutdown()

    text = [
        HEADING,
        "",
        f"PPO on {ENV} (16 envs x 32 steps per update, split over the actors; 4 epochs x 4 "
        "minibatches; 64x64 tanh), one seed, max staleness 1, queue 2. Steps/s and updates/s "
        "exclude compilation (the first update). Bytes/s: the median over updates of "
        "`sebulba/bytes_per_s` (trajectories in, the new parameters out to every actor). "
        "Reproduce with `python benchmarks/ray_actors.py --write`.",
        "",
        common.measured_on() + f" Peers: ray {ray_version}; commit {common.git_commit()}.",
        "",
    ]
    text += common.ray_tables(rows, wire, "trajectory bytes per update (all actors)")
    cores = os.cpu_count() or 1
    text += [
        "",
        f"This machine has {cores} cores for the learner and every actor process (and, when "
        "the load average above exceeds them, for other work too): more actors cannot step "
        "more envs per second here, so the rows by actor count show the overhead of each "
        "setting, not scaling, which needs a core per actor (a larger machine or a Ray "
        "cluster). Ray / threads is the cost of processes, pickling and the object store "
        "against threads sharing the learner's process at the same actor count.",
    ]
    common.publish(HEADING, "\n".join(text) + "\n", args.write and not args.quick)


if __name__ == "__main__":
    main()

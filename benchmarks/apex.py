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
- **Where the replay lives**: one learner update's replay traffic (sample a batch, then write
  its new priorities) on jrl's prioritised buffer at the preset's capacity and batch, held on
  the learner's device (one jitted call each, the buffer state donated), against the same
  buffer held by a Ray actor (the learner fetches the batch with ``ray.get`` and sends the
  priorities without waiting). The learner's gradient step is the same either way and left out.

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
    config, res = common.sebulba_once("apex", ENV, steps, options, learning_starts=0)
    seconds = max(res.timings["run_s"], 1e-9)
    timed = res.iterations - 1  # the first block (compilation) excluded
    rate = timed * config.env_steps_per_iteration / seconds
    return rate, timed * config.updates_per_iteration / seconds, res.metrics


def replay_holders(rounds: int) -> tuple[int, int, float, float]:
    """``(capacity, batch, learner-device µs, Ray-actor µs)`` per sample + priority update of a
    full prioritised buffer of CartPole transitions (best of ``rounds`` rounds of 200)."""
    import time

    import jax.numpy as jnp
    import ray

    from jrl.app import api as experiment
    from jrl.parts import buffers

    config = experiment.make_config("apex", "CartPole-v1")
    capacity, batch = config.buffer_size, config.batch_size

    class Holder:
        """A prioritised buffer and its jitted sample / update, on the learner or in a Ray
        actor."""

        def __init__(self):
            item = dict(
                obs=jnp.zeros(4), action=jnp.zeros((), jnp.int32), reward=jnp.zeros(()),
                discount=jnp.zeros(()), next_obs=jnp.zeros(4),
            )  # fmt: skip
            self.buffer = buffers.prioritized_buffer(capacity)
            state = self.buffer.init(item)
            items = jax.tree.map(lambda x: jnp.ones((capacity, *x.shape), x.dtype), item)
            self.state = jax.jit(self.buffer.add)(state, items)
            self._sample = jax.jit(lambda s, k: self.buffer.sample(s, k, batch))
            self._update = jax.jit(self.buffer.update_priorities, donate_argnums=0)
            self.key = jax.random.key(0)

        def sample(self):
            self.key, k = jax.random.split(self.key)
            got = self._sample(self.state, k)
            return jax.device_get((got.items, got.indices, got.weights))

        def update(self, indices, priorities):
            self.state = self._update(self.state, indices, priorities)
            jax.block_until_ready(self.state)

    def best(step) -> float:
        out = []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(200):
                step()
            out.append((time.perf_counter() - t) / 200 * 1e6)
        return min(out)

    priorities = np.random.default_rng(0).uniform(0.1, 2.0, batch).astype(np.float32)
    local = Holder()

    def on_learner():
        _, indices, _ = local.sample()
        local.update(indices, priorities)

    remote = ray.remote(num_cpus=1)(Holder).remote()
    ray.get(remote.sample.remote())

    def in_actor():
        _, indices, _ = ray.get(remote.sample.remote())
        remote.update.remote(indices, priorities)  # not waited for: the next sample queues after it

    for step in (on_learner, in_actor):
        step()  # compiles
    result = (capacity, batch, best(on_learner), best(in_actor))
    ray.get(remote.sample.remote())  # the last updates done
    ray.kill(remote)
    return result


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
    rows = common.ray_against_threads(run, steps, (1, 2))
    wire = common.wire_bytes(run, steps)
    holders = replay_holders(2 if args.quick else 5)
    print(holders, flush=True)
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
    ]
    text += common.ray_tables(rows, wire, "replay items + priorities per block (all actors)")
    capacity, batch, on_learner, in_actor = holders
    text += [
        "",
        f"Where the replay lives: one update's sample of {batch} and its priority update on a "
        f"full prioritised buffer of {capacity:,} CartPole transitions (best of 5 rounds of "
        "200):",
        "",
        "| replay held | µs per update | vs the learner's device |",
        "|---|---:|---:|",
        f"| on the learner's device (jrl's choice) | {on_learner:,.0f} | 1.00x |",
        f"| in a Ray actor (batch fetched, priorities sent back) | {in_actor:,.0f} "
        f"| {in_actor / on_learner:.1f}x |",
        "",
        "A Ray-held replay adds an object-store round trip to every update (the batch comes "
        "back through Ray; the priorities go out without waiting), on top of the same sampling "
        "work, so jrl holds the replay on the learner's device.",
    ]
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

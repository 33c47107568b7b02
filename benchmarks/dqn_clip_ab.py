"""What gradient clipping costs a DQN CartPole iteration, measured as a paired ratio.

This 2-core machine's speed drifts by up to 2x from moment to moment, so
separate runs disagree by 15-30%. Here one process compiles DQN on
PureJaxRL's CartPole configuration (``dqn_cartpole.CONFIG``) twice, with
``max_grad_norm = 0`` (no clipping, no ``train/grad_norm`` metric) and with
``max_grad_norm = 10`` (jrl's default clip and its metric), runs both past
``learning_starts``, then alternates ``--chunk``-iteration runs of the two,
``--rounds`` times. It prints the median of the paired time ratios (clipped /
unclipped; each pair runs back to back) and each variant's min and 10th
percentile time per iteration.

Usage::

    python benchmarks/dqn_clip_ab.py [--seeds 1] [--rounds 150] [--chunk 50]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jrl.agents
import jrl.envs
from dqn_cartpole import CONFIG

from jrl.app.api import make_config
from jrl.run import anakin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--chunk", type=int, default=50, help="iterations per timed run")
    args = parser.parse_args()
    env, params = jrl.envs.make("CartPole-v1")
    keys = jax.random.split(jax.random.key(0), args.seeds)
    options = anakin.compiler_options()
    variants = {}
    for name, clip in (("no clipping", 0.0), ("clip at 10", 10.0)):
        config = make_config("dqn", "CartPole-v1", **{**CONFIG, "max_grad_norm": clip})
        algorithm = jrl.agents.get("dqn").build(config, env, params).algorithm
        states = anakin.init_runs(algorithm, keys)
        # every timed iteration learns
        warm_iterations = config.learning_starts // algorithm.env_steps_per_iteration + 1
        states, _ = (
            anakin.make_chunk(algorithm, warm_iterations).lower(states).compile(options)(states)
        )
        run = anakin.make_chunk(algorithm, args.chunk).lower(states).compile(options)
        variants[name] = [run, jax.block_until_ready(states), []]
        print(f"compiled {name}", flush=True)
    for _ in range(args.rounds):
        for entry in variants.values():
            start = time.perf_counter()
            entry[1], _ = entry[0](entry[1])
            jax.block_until_ready(entry[1])
            entry[2].append(time.perf_counter() - start)
    base = variants["no clipping"][2]
    for name, (_, _, times) in variants.items():
        ordered = sorted(times)
        ratio = statistics.median(t / b for t, b in zip(times, base))
        print(
            f"{name:12s} seeds={args.seeds}: "
            f"min {ordered[0] / args.chunk * 1e6:7.1f} us/iteration, "
            f"p10 {ordered[len(ordered) // 10] / args.chunk * 1e6:7.1f}, "
            "median paired ratio vs no clipping "
            f"{ratio:.3f}"
        )


if __name__ == "__main__":
    main()

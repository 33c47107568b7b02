"""PPO CartPole throughput on an accelerator: many envs, many vmapped seeds.

    python benchmarks/gpu_scaling.py [--envs 2048] [--seeds 16 256] [--steps-per-seed N]

Runs PPO on CartPole-v1 with 2048 envs per seed (128-step rollouts, 4
epochs, 32 minibatches) for 16 and 256 vmapped seeds in one compiled program
each, and prints compile seconds, run seconds and env steps/s (all seeds
together). Meant for a GPU/TPU machine; on a CPU use small numbers.
"""

from __future__ import annotations

import argparse
import time

import jax

import jrl


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", type=int, default=2048)
    p.add_argument("--seeds", type=int, nargs="+", default=[16, 256])
    p.add_argument("--steps-per-seed", type=int, default=2048 * 128 * 10)
    p.add_argument("--minibatches", type=int, default=32)
    a = p.parse_args()
    print(f"jax {jax.__version__}, devices: {jax.devices()}")
    print("| seeds | envs/seed | compile s | run s | steps/s (all seeds) | final return |")
    print("|---:|---:|---:|---:|---:|---:|")
    for seeds in a.seeds:
        t = time.perf_counter()
        res = jrl.train(
            "ppo",
            "CartPole-v1",
            seeds=seeds,
            num_envs=a.envs,
            num_steps=128,
            num_minibatches=a.minibatches,
            total_steps=a.steps_per_seed,
            progress=False,
            num_reports=2,
        )
        print(
            f"| {seeds} | {a.envs} | {res.compile_seconds:.1f} | {res.run_seconds:.2f} | "
            f"{res.steps_per_second:,.0f} | {res.final_returns().mean():.1f} |  "
            f"(wall {time.perf_counter() - t:.0f}s)",
            flush=True,
        )


if __name__ == "__main__":
    main()

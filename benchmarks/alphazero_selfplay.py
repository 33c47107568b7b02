"""AlphaZero self-play throughput on pgx:connect_four (needs the pgx extra).

For each batch (game slots) B in ``--batches`` (default 1, 64, 1024): builds alphazero with
the pgx:connect_four preset's network and search and ``num_envs=B``, ``num_steps=--moves``,
``num_simulations=--sims`` and times its training iteration (search for every move of every
slot, the game steps, value targets and the learning step), compiled once and then run
``--repeats`` times. Reports moves/s, finished games/s and simulations/s (moves/s x
simulations) from the fastest repeat.

The side by side with pgx's own AlphaZero example is ``benchmarks/alphazero_vs_pgx.py``.

Usage::

    python benchmarks/alphazero_selfplay.py [--batches 1 64 1024] [--sims 32] [--moves 16]
"""

from __future__ import annotations

import argparse
import time

import jax
import jrl.envs
import numpy as np
from jrl.agents.search import alphazero

from jrl.app import api as experiment


def measure(batch: int, sims: int, moves: int, repeats: int) -> dict:
    env, params = jrl.envs.make("pgx:connect_four")
    config = experiment.make_config(
        "alphazero",
        "pgx:connect_four",
        num_envs=batch,
        num_steps=moves,
        num_simulations=sims,
        num_minibatches=1,
        replay_rollouts=1,
        num_epochs=1,
        total_steps=batch * moves,
    )
    built = alphazero.build(config, env, params)
    state = jax.jit(built.algorithm.init)(jax.random.key(0))
    step = jax.jit(built.algorithm.step)
    t0 = time.perf_counter()
    state, metrics = jax.block_until_ready(step(state))
    compile_s = time.perf_counter() - t0
    best, games = float("inf"), 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        state, metrics = jax.block_until_ready(step(state))
        best = min(best, time.perf_counter() - t0)
        games = int(metrics["train/episodes"])
    per_iteration = batch * moves
    return {
        "batch": batch,
        "compile_s": compile_s,
        "moves_per_s": per_iteration / best,
        "games_per_s": games / best,
        "simulations_per_s": per_iteration * sims / best,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64, 1024])
    p.add_argument("--sims", type=int, default=32)
    p.add_argument("--moves", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}; {a.sims} simulations, "
        f"{a.moves} moves per slot per iteration",
        flush=True,
    )
    print("| batch | moves/s | games/s | simulations/s | compile s |")
    print("|---:|---:|---:|---:|---:|")
    for b in a.batches:
        r = measure(b, a.sims, a.moves, a.repeats)
        print(
            f"| {b} | {r['moves_per_s']:,.0f} | {r['games_per_s']:,.1f} | "
            f"{r['simulations_per_s']:,.0f} | {np.round(r['compile_s'], 1)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""jrl's AlphaZero against the clock, for the side-by-side with pgx's AlphaZero example.

Trains ``alphazero`` on a ``pgx:<game>`` (the preset, then ``key=value`` overrides), one seed,
iteration by iteration: each iteration (self-play, value targets, learning) is timed, the first
one with its compilation, as pgx's example counts its "hours". Every ``--eval-every``
iterations (and before the first) the network is judged by ``games_vs_random.py``'s protocol
(its most likely legal move, no search, against the uniformly random player; the evaluation
is not timed). Prints one JSON object per evaluation: iteration, training seconds, moves
played and the win, draw and loss rates. ``benchmarks/pgx_az_checkpoints.py`` judges the
example's checkpoints the same way; BENCHMARKS.md "AlphaZero side by side with pgx" has both.

Usage::

    python benchmarks/alphazero_vs_pgx.py --env pgx:othello --seconds 600 --eval-every 5 \\
        num_envs=64 num_steps=64 num_simulations=16
"""

from __future__ import annotations

import argparse
import ast
import json
import time

import jax
import jrl.envs
import pgx
from games_vs_random import win_rate
from jrl.agents.search import alphazero

from jrl.app import api as experiment


def overrides(pairs: list[str]) -> dict:
    """``["num_envs=64", "torso='mlp'"]`` -> ``{"num_envs": 64, "torso": "mlp"}`` (values
    read as Python literals, else kept as strings)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"overrides are key=value, got {pair!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="pgx:othello")
    p.add_argument("--seconds", type=float, default=600.0, help="training budget")
    p.add_argument("--eval-every", type=int, default=5, help="iterations between evaluations")
    p.add_argument("--games", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("overrides", nargs="*", help="config key=value")
    a = p.parse_args()
    if not a.env.startswith("pgx:"):
        raise SystemExit(f"--env must be a pgx:<game>, got {a.env!r}")
    env, params = jrl.envs.make(a.env)
    config = experiment.make_config("alphazero", a.env, **overrides(a.overrides))
    built = alphazero.build(config, env, params)
    game = pgx.make(a.env.split(":", 1)[1])
    n_params = sum(
        x.size for x in jax.tree.leaves(built.agent.init(jax.random.key(0), None).params)
    )
    print(json.dumps({"config": str(config), "network_parameters": int(n_params)}), flush=True)

    def logits(params, obs):
        dist, _ = built.network.apply(params, obs.astype("float32"), None)
        return dist.log_probs

    judge = jax.jit(lambda params, k: win_rate(game, lambda o: logits(params, o), a.games, k))
    init, step = jax.jit(built.algorithm.init), jax.jit(built.algorithm.step)
    state = jax.block_until_ready(init(jax.random.key(a.seed)))
    seconds, iteration = 0.0, 0
    while True:
        if iteration % a.eval_every == 0 or seconds >= a.seconds:
            rates = judge(state.agent_state.params, jax.random.key(1))
            row = {
                "iteration": iteration,
                "seconds": round(seconds, 2),
                "moves": int(state.env_steps),
                **{k: round(float(v), 4) for k, v in rates.items()},
            }
            print(json.dumps(row), flush=True)
        if seconds >= a.seconds:
            break
        t0 = time.perf_counter()
        state, _ = jax.block_until_ready(step(state))
        seconds += time.perf_counter() - t0
        iteration += 1


if __name__ == "__main__":
    main()

"""A network's prior against the uniformly random player on a pgx game, with jax and pgx only.

Shared by both sides of the AlphaZero side-by-side (``benchmarks/alphazero_vs_pgx.py`` runs
jrl, ``benchmarks/pgx_az_checkpoints.py`` reads pgx's example's checkpoints in that example's
own environment, where jrl is not installed), so that both are judged by one protocol: the
network plays its most likely legal move (no search, no sampling), the opponent a uniformly
random legal move; in half the games the network moves first.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

Logits = Callable[[jax.Array], jax.Array]
"""``logits(observation [B, *obs]) -> [B, A]`` for the player to move."""


def win_rate(env, logits: Logits, num_games: int, key: jax.Array) -> dict:
    """Plays ``num_games`` (even) games of the pgx ``env``; returns the network's win, draw
    and loss rates (scalar arrays; jittable). The network's logits are masked to the legal
    moves."""
    k_init, k_play = jax.random.split(key)
    state = jax.vmap(env.init)(jax.random.split(k_init, num_games))
    # pgx draws the first mover at random: the network plays whichever seat moves first in
    # the first half of the games and the other seat in the second half
    first = state.current_player
    me = jnp.where(jnp.arange(num_games) < num_games // 2, first, 1 - first)

    def body(carry):
        state, key, ret = carry
        key, k = jax.random.split(key)
        mask = state.legal_action_mask
        mine = jnp.where(mask, logits(state.observation), -jnp.inf).argmax(-1)
        rand = jax.random.categorical(k, jnp.where(mask, 0.0, -jnp.inf))  # [B]; 0 once over
        action = jnp.where(state.current_player == me, mine, rand)
        state = jax.vmap(env.step)(state, action)
        ret = ret + state.rewards[jnp.arange(num_games), me]
        return state, key, ret

    def running(carry):
        return ~(carry[0].terminated | carry[0].truncated).all()

    _, _, ret = jax.lax.while_loop(running, body, (state, k_play, jnp.zeros(num_games)))
    return {
        "win": (ret > 0).mean(),
        "draw": (ret == 0).mean(),
        "loss": (ret < 0).mean(),
    }

"""Evaluation games for two-player turn-based envs.

A *player* is ``play(env_state [G], obs [G], key) -> action int32[G]``: it chooses a move
in each of G games (it is only asked in games where it is to move, but computes all).
:func:`play_games` plays G games between two players, the first half with player A moving
first and the second half with A moving second, and :func:`game_report` turns the
outcomes into win/draw/loss rates. The opponents: :func:`random_player` (uniform over the
legal moves), :func:`perfect_player` (exact minimax, for games with
:meth:`~jrl.core.two_player_env.TwoPlayerEnv.perfect_play`, ties broken at random) and
:func:`mcts_player` (a search with a uniform prior and value 0, knowing only the rules).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jrl.agents.search.mcts import game_recurrent_fn, search, uniform_evaluate

from jrl.core.two_player_env import CURRENT_PLAYER, PLAYER_REWARDS
from jrl.core.types import PRNGKey, PyTree, split_action_mask

__all__ = [
    "Player",
    "baseline_players",
    "game_report",
    "mcts_player",
    "perfect_player",
    "play_games",
    "random_player",
]

Player = Callable[[PyTree, PyTree, PRNGKey], jax.Array]


def random_player(env) -> Player:
    """Uniform over the legal moves."""

    def play(state, obs, key):
        _, mask = split_action_mask(obs)
        logits = jnp.where(mask, 0.0, -jnp.inf)
        return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)

    return play


def perfect_player(env) -> Player:
    """A best move by exact minimax (``env.perfect_play``), uniformly among the best."""

    def play(state, obs, key):
        values = jax.vmap(env.perfect_play)(state)
        best = values >= values.max(axis=-1, keepdims=True)
        return jax.random.categorical(key, jnp.where(best, 0.0, -jnp.inf), axis=-1).astype(
            jnp.int32
        )

    return play


def mcts_player(env, env_params, num_simulations: int) -> Player:
    """PUCT search with a uniform prior and value 0 and ``num_simulations`` simulations,
    playing its most visited move."""
    num_actions = int(env.action_space(env_params).n)
    evaluate = uniform_evaluate(num_actions)
    recurrent_fn = game_recurrent_fn(env, env_params, evaluate)

    def play(state, obs, key):
        keys = jax.random.split(key, jax.tree.leaves(obs)[0].shape[0])
        return search(
            "puct", recurrent_fn, evaluate, None, keys, state, obs, num_simulations, greedy=True
        )[0]

    return play


def baseline_players(env, env_params, num_simulations: int = 64) -> dict[str, Player]:
    """The opponents ``jrl eval`` plays against: ``random``, and ``minimax`` where the game
    has perfect play, else ``mcts{num_simulations}`` (:func:`mcts_player`)."""
    out = {"random": random_player(env)}
    if env.unwrapped.has_perfect_play:
        out["minimax"] = perfect_player(env)
    else:
        out[f"mcts{num_simulations}"] = mcts_player(env, env_params, num_simulations)
    return out


def play_games(
    env, env_params, player_a: Player, player_b: Player, num_games: int, key: PRNGKey
) -> tuple[jax.Array, jax.Array]:
    """Plays ``num_games`` (even) games of ``env`` between A and B; A moves first in the
    first half and second in the second half. Returns ``(outcome [G], a_first [G] bool)``:
    A's total reward in each game (+1 win, 0 draw, -1 loss) and whether A moved first."""
    if num_games < 2 or num_games % 2:
        raise ValueError(f"num_games must be a positive even number, got {num_games}")
    k_reset, k_play = jax.random.split(key)
    state, ts = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(k_reset, num_games), env_params
    )
    a_first = jnp.arange(num_games) < num_games // 2
    first = ts.info[CURRENT_PLAYER]
    a_id = jnp.where(a_first, first, 1 - first)

    def cond(carry):
        return ~jnp.all(carry[2])

    def body(carry):
        state, obs, done, total, key = carry
        key, k_a, k_b, k_env = jax.random.split(key, 4)
        to_move = jax.vmap(env.current_player)(state)
        action = jnp.where(
            to_move == a_id, player_a(state, obs, k_a), player_b(state, obs, k_b)
        ).astype(jnp.int32)
        new_state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_env, num_games), state, action, env_params
        )
        keep = lambda old, new: jax.vmap(jnp.where)(done, old, new)
        reward = jnp.take_along_axis(ts.info[PLAYER_REWARDS], a_id[:, None], axis=1)[:, 0]
        total = total + jnp.where(done, 0.0, reward)
        state = jax.tree.map(keep, state, new_state)
        obs = jax.tree.map(keep, obs, ts.observation)
        return state, obs, done | ts.terminated | ts.truncated, total, key

    init = (state, ts.observation, jnp.zeros(num_games, bool), jnp.zeros(num_games), k_play)
    _, _, _, total, _ = jax.lax.while_loop(cond, body, init)
    return total, a_first


def game_report(outcome: Any, a_first: Any) -> dict[str, Any]:
    """Win/draw/loss rates of A (``outcome`` > 0, == 0, < 0) overall, as first and as
    second player, with the game counts (``outcome`` and ``a_first`` of any shape, e.g.
    ``[runs, games]``, are pooled)."""
    outcome = np.asarray(outcome, np.float64).reshape(-1)
    a_first = np.asarray(a_first, bool).reshape(-1)

    def rates(x):
        n = len(x)
        return {
            "games": n,
            "win": float((x > 0).mean()) if n else float("nan"),
            "draw": float((x == 0).mean()) if n else float("nan"),
            "loss": float((x < 0).mean()) if n else float("nan"),
        }

    return {
        **rates(outcome),
        "as_first": rates(outcome[a_first]),
        "as_second": rates(outcome[~a_first]),
    }

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


def _uniform_among(key: PRNGKey, allowed: jax.Array) -> jax.Array:
    """int32[...]: a move drawn uniformly among the allowed ones (``allowed`` bool [..., A]),
    a categorical over the logits log 1 = 0 (allowed) and log 0 = -inf."""
    return jax.random.categorical(key, jnp.log(allowed.astype(jnp.float32))).astype(jnp.int32)


def random_player(env) -> Player:
    """Uniform over the legal moves."""

    def play(state, obs, key):
        _, mask = split_action_mask(obs)
        return _uniform_among(key, mask)

    return play


def perfect_player(env) -> Player:
    """A best move by exact minimax (``env.perfect_play``), uniformly among the best."""

    def best_moves(state):  # one game: the moves of the highest value
        values = env.perfect_play(state)
        return values >= values.max()

    def play(state, obs, key):
        return _uniform_among(key, jax.vmap(best_moves)(state))

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
    env,
    env_params,
    player_a: Player,
    player_b: Player,
    num_games: int,
    key: PRNGKey,
    max_moves: int = 10_000,
) -> tuple[jax.Array, jax.Array]:
    """Plays ``num_games`` (even) games of ``env`` between A and B; A moves first in the
    first half and second in the second half. Returns ``(outcome [G], a_first [G] bool)``:
    A's total reward in each game (+1 win, 0 draw, -1 loss) and whether A moved first.
    Play stops after ``max_moves`` moves: a game still running then (a game that never
    ends) has outcome NaN (:func:`game_report` counts it as unfinished)."""
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
        _, _, done, _, _, moves = carry
        return ~jnp.all(done) & (moves < max_moves)

    def body(carry):
        state, obs, done, total, key, moves = carry
        key, k_a, k_b, k_env = jax.random.split(key, 4)
        to_move = jax.vmap(env.current_player)(state)
        action = jnp.where(
            to_move == a_id, player_a(state, obs, k_a), player_b(state, obs, k_b)
        ).astype(jnp.int32)
        new_state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_env, num_games), state, action, env_params
        )
        keep = lambda old, new: jax.vmap(jnp.where)(done, old, new)
        reward = jnp.take_along_axis(ts.info[PLAYER_REWARDS], a_id[:, None], axis=1)
        reward = reward.reshape(a_id.shape)
        total = total + jnp.where(done, 0.0, reward)
        state = jax.tree.map(keep, state, new_state)
        obs = jax.tree.map(keep, obs, ts.observation)
        return state, obs, done | ts.terminated | ts.truncated, total, key, moves + 1

    zeros = jnp.zeros(num_games)
    init = (state, ts.observation, jnp.zeros(num_games, bool), zeros, k_play, jnp.int32(0))
    _, _, done, total, _, _ = jax.lax.while_loop(cond, body, init)
    return jnp.where(done, total, jnp.nan), a_first


def game_report(outcome: Any, a_first: Any) -> dict[str, Any]:
    """Win/draw/loss rates of A (``outcome`` > 0, == 0, < 0) and the rate of unfinished
    games (``outcome`` NaN, see :func:`play_games`) overall, as first and as second player,
    with the game counts (``outcome`` and ``a_first`` of any shape, e.g. ``[runs, games]``,
    are pooled)."""
    outcome = np.ravel(np.asarray(outcome, np.float64))
    a_first = np.ravel(np.asarray(a_first, bool))

    def rates(x):
        n = len(x)
        return {
            "games": n,
            "win": float((x > 0).mean()) if n else float("nan"),
            "draw": float((x == 0).mean()) if n else float("nan"),
            "loss": float((x < 0).mean()) if n else float("nan"),
            "unfinished": float(np.isnan(x).mean()) if n else float("nan"),
        }

    return {
        **rates(outcome),
        "as_first": rates(outcome[a_first]),
        "as_second": rates(outcome[~a_first]),
    }

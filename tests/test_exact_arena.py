"""Exact games of the arena (agents/search/arena.py) on TicTacToe-v0 with scripted players:
who moves first, whose reward counts, when a game stops, and the report's rates, all by hand
(tools/mutation.py's targets)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jrl.envs
from jrl.envs.tictactoe import TicTacToe
from jrl.agents.search import arena
from jrl.core.two_player_env import CURRENT_PLAYER
from jrl.core.types import split_action_mask


def lowest_legal(state, obs, key):
    _, mask = split_action_mask(obs)
    return jnp.argmax(mask, axis=-1).astype(jnp.int32)


def highest_legal(state, obs, key):
    _, mask = split_action_mask(obs)
    return (mask.shape[-1] - 1 - jnp.argmax(mask[..., ::-1], axis=-1)).astype(jnp.int32)


def test_scripted_games_by_hand():
    """A plays the lowest free cell, B the highest. A first: X 0, O 8, X 1, O 7, X 2 wins the
    top row (+1 for A). B first: X 8, O 0, X 7, O 1, X 6 wins the bottom row (-1 for A). The
    first half of the games has A first."""
    env, params = jrl.envs.make("TicTacToe-v0")
    outcome, a_first = jax.jit(
        lambda k: arena.play_games(env, params, lowest_legal, highest_legal, 6, k)
    )(jax.random.key(0))
    np.testing.assert_array_equal(a_first, [True] * 3 + [False] * 3)
    np.testing.assert_array_equal(outcome, [1.0] * 3 + [-1.0] * 3)
    # the same player on both sides: the first mover completes 2-4-6 on its fourth move
    outcome, _ = arena.play_games(env, params, lowest_legal, lowest_legal, 2, jax.random.key(1))
    np.testing.assert_array_equal(outcome, [1.0, -1.0])
    with pytest.raises(ValueError, match="positive even"):
        arena.play_games(env, params, lowest_legal, lowest_legal, 3, jax.random.key(0))


class OFirst(TicTacToe):
    """Tic-tac-toe where player 1 (O) moves first."""

    def reset_env(self, key, params):
        state, _ = super().reset_env(key, params)
        state = state.replace(player=jnp.ones((), jnp.int32))
        return state, self._obs(state)


def test_scripted_games_where_player_one_moves_first():
    """The games of test_scripted_games_by_hand with player 1 to move first in every game:
    A is player 1 where A moves first and player 0 where it moves second, and the outcomes
    are the same, +1 for A first, -1 for A second (player 1's rewards are A's in the first
    half, player 0's in the second)."""
    env = OFirst()
    _, ts = env.reset(jax.random.key(0), env.default_params)
    assert int(ts.info[CURRENT_PLAYER]) == 1
    outcome, a_first = arena.play_games(
        env, env.default_params, lowest_legal, highest_legal, 4, jax.random.key(0)
    )
    np.testing.assert_array_equal(a_first, [True, True, False, False])
    np.testing.assert_array_equal(outcome, [1.0, 1.0, -1.0, -1.0])


def test_play_stops_after_max_moves_and_reports_unfinished_games():
    """The scripted games end on their 5th move (the first mover's third mark completes a
    row): with max_moves 5 they all finish (+1 for A first, -1 for A second); with 4 none
    does, and an unfinished game's outcome is NaN, counted by the report as unfinished."""
    env, params = jrl.envs.make("TicTacToe-v0")
    play = lambda n: arena.play_games(
        env, params, lowest_legal, highest_legal, 4, jax.random.key(0), max_moves=n
    )
    outcome, _ = play(5)
    np.testing.assert_array_equal(outcome, [1.0, 1.0, -1.0, -1.0])
    outcome, a_first = play(4)
    assert np.all(np.isnan(np.asarray(outcome)))
    report = arena.game_report(outcome, a_first)
    assert report["unfinished"] == 1.0 and report["games"] == 4
    assert (report["win"], report["draw"], report["loss"]) == (0.0, 0.0, 0.0)


def test_random_player_plays_only_legal_moves_and_perfect_player_takes_the_win():
    """X at 0 1, O at 3 4, X to move: the random player picks among the 5 free cells only
    (over many keys, each of them); minimax takes 2, the only winning move (5 loses to O)."""
    env, params = jrl.envs.make("TicTacToe-v0")
    state, ts = env.reset(jax.random.key(0), params)
    for a in (0, 3, 1, 4):
        state, ts = env.step(jax.random.key(0), state, a, params)
    batch = lambda x: jnp.stack([x] * 64)
    states, obs = jax.tree.map(batch, state), jax.tree.map(batch, ts.observation)
    keys = jax.random.split(jax.random.key(3), 64)
    moves = jax.vmap(lambda k: arena.random_player(env)(states, obs, k))(keys)
    assert set(np.asarray(moves).ravel().tolist()) == {2, 5, 6, 7, 8}
    perfect = jax.vmap(lambda k: arena.perfect_player(env)(states, obs, k))(keys[:4])
    assert np.all(np.asarray(perfect) == 2)


def test_game_report_rates_by_hand():
    """Rates of 5 games (A first in the first 2): wins 2 of 5, a draw, losses 2; as first
    one win and one draw; as second one win, two losses; the outcomes of a [runs, games]
    array are pooled; no games as second gives NaN rates."""
    outcome = np.array([1.0, 0.0, -1.0, 1.0, -1.0])
    first = np.array([True, True, False, False, False])
    report = arena.game_report(outcome, first)
    assert report["games"] == 5
    assert (report["win"], report["draw"], report["loss"]) == (0.4, 0.2, 0.4)
    assert report["as_first"] == {
        "games": 2,
        "win": 0.5,
        "draw": 0.5,
        "loss": 0.0,
        "unfinished": 0.0,
    }
    second = report["as_second"]
    assert second["games"] == 3 and second["draw"] == 0.0
    np.testing.assert_allclose([second["win"], second["loss"]], [1 / 3, 2 / 3])
    pooled = arena.game_report(outcome[None].repeat(2, 0), first[None].repeat(2, 0))
    assert pooled["games"] == 10 and pooled["as_first"]["games"] == 4
    assert (pooled["win"], pooled["draw"], pooled["loss"]) == (0.4, 0.2, 0.4)
    empty = arena.game_report(np.array([1.0]), np.array([True]))["as_second"]
    assert empty["games"] == 0 and np.isnan(empty["win"])

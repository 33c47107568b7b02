"""Tic-tac-toe as a two-player turn-based game (:class:`jrl.core.two_player_env.TwoPlayerEnv`).

Cells are numbered 0-8 row by row. Player 0 moves first and plays X. The observation is
``{"observation": float32[3, 3, 2], "action_mask": bool[9]}``: channel 0 holds the marks
of the player to move, channel 1 the opponent's; the mask marks the empty cells. A line
of three wins (+1 to the winner, -1 to the loser); a full board without one is a draw. An
illegal move (an occupied cell) ends the game as a loss for the player who made it.

:meth:`TicTacToe.perfect_play` gives the exact minimax value of every move, from a table
of every position computed once (a few thousand positions, in NumPy) on first use.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import spaces
from jrl.core.two_player_env import ILLEGAL, TwoPlayerEnv
from jrl.core.types import ACTION_MASK, OBSERVATION
from jrl.envs import raster

__all__ = ["TicTacToe", "minimax_table"]

LINES = np.array(
    [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]]
)
"""The eight winning lines (cell indices)."""
_POW3 = 3 ** np.arange(9)


@struct.dataclass
class TicTacToeState:
    board: jax.Array  # [9] int32: -1 empty, else the player (0 or 1) whose mark it is
    player: jax.Array  # [] int32, the player to move
    done: jax.Array  # [] bool, the game is over
    moves: jax.Array  # [] int32, moves played


def _wins(board: jax.Array, player) -> jax.Array:
    """[] bool: ``player`` holds a whole line of ``board`` [9]."""
    return jnp.any(jnp.all(board[LINES] == player, axis=-1))


class TicTacToe(TwoPlayerEnv):
    """Tic-tac-toe (see the module docstring)."""

    id = "TicTacToe-v0"

    def reset_env(self, key, params):
        state = TicTacToeState(
            jnp.full((9,), -1, jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((), bool),
            jnp.zeros((), jnp.int32),
        )
        return state, self._obs(state)

    def game_step(self, state, action, params):
        action = jnp.asarray(action, jnp.int32)
        me = state.player
        legal = state.board[action] < 0
        board = state.board.at[action].set(jnp.where(legal, me, state.board[action]))
        won = _wins(board, me)
        full = jnp.all(board >= 0)
        ended = ~legal | won | full
        # +1 to the mover on a win, -1 on an illegal move, 0 on a draw or a running game
        mine = jnp.where(~legal, -1.0, jnp.where(won, 1.0, 0.0))
        rewards = jnp.where(me == 0, jnp.stack([mine, -mine]), jnp.stack([-mine, mine]))
        new = TicTacToeState(board, 1 - me, ended, state.moves + 1)
        over = state.done  # a finished game does not change
        new = jax.tree.map(lambda old, n: jnp.where(over, old, n), state, new)
        rewards = jnp.where(over, 0.0, rewards).astype(jnp.float32)
        return new, self._obs(new), rewards, new.done

    def current_player(self, state):
        return state.player

    @staticmethod
    def _obs(state):
        mine = (state.board == state.player).astype(jnp.float32)
        theirs = (state.board == 1 - state.player).astype(jnp.float32)
        obs = jnp.stack([mine, theirs], axis=-1).reshape(3, 3, 2)
        return {OBSERVATION: obs, ACTION_MASK: (state.board < 0) & ~state.done}

    def perfect_play(self, state):
        relative = jnp.where(
            state.board < 0, 0, jnp.where(state.board == state.player, 1, 2)
        ).astype(jnp.int32)
        index = jnp.sum(relative * jnp.asarray(_POW3, jnp.int32))
        return jnp.asarray(minimax_table())[index]

    def observation_space(self, params=None):
        return spaces.Dict(
            {
                OBSERVATION: spaces.Box(0.0, 1.0, (3, 3, 2), jnp.float32),
                ACTION_MASK: spaces.Box(0, 1, (9,), jnp.bool_),
            }
        )

    def action_space(self, params=None):
        return spaces.Discrete(9)

    def render(self, state, params=None):
        size, cell = 120, 40.0
        px, py = raster.pixel_grid(size, size)
        canvas = raster.blank(size, size)
        for i in (1, 2):  # the grid
            canvas = raster.paint(
                canvas, raster.sd_segment(px, py, i * cell, 4, i * cell, size - 4, 1.5), (0,) * 3
            )
            canvas = raster.paint(
                canvas, raster.sd_segment(px, py, 4, i * cell, size - 4, i * cell, 1.5), (0,) * 3
            )
        for c in range(9):
            cx, cy = (c % 3 + 0.5) * cell, size - (c // 3 + 0.5) * cell
            r = 0.3 * cell
            cross = jnp.minimum(
                raster.sd_segment(px, py, cx - r, cy - r, cx + r, cy + r, 3.0),
                raster.sd_segment(px, py, cx - r, cy + r, cx + r, cy - r, 3.0),
            )
            ring = jnp.abs(raster.sd_circle(px, py, cx, cy, r)) - 3.0
            far = jnp.full_like(px, 1e3)
            canvas = raster.paint(canvas, jnp.where(state.board[c] == 0, cross, far), (200, 40, 40))
            canvas = raster.paint(canvas, jnp.where(state.board[c] == 1, ring, far), (40, 60, 200))
        return raster.to_uint8(canvas)


def _relative_value(board: tuple, memo: dict) -> np.ndarray:
    """Minimax value of each move for the player to move on ``board`` (9 cells: 0 empty,
    1 the mover's, 2 the opponent's); ``ILLEGAL`` for occupied cells."""
    if board in memo:
        return memo[board]
    values = np.full(9, ILLEGAL, np.float32)
    for a in range(9):
        if board[a]:
            continue
        after = list(board)
        after[a] = 1
        if any(all(after[i] == 1 for i in line) for line in LINES):
            values[a] = 1.0
        elif all(after):
            values[a] = 0.0
        else:
            flipped = tuple(0 if v == 0 else 3 - v for v in after)
            values[a] = -_relative_value(flipped, memo).max()
    memo[board] = values
    return values


@functools.lru_cache(maxsize=1)
def minimax_table() -> np.ndarray:
    """``float32[3**9, 9]``: for every board seen from the mover's side (cell ``i`` is digit
    ``i`` in base 3: 0 empty, 1 mover, 2 opponent) the minimax value of each move; rows of
    boards that cannot occur in play or are already decided hold ``ILLEGAL``."""
    memo: dict = {}
    _relative_value((0,) * 9, memo)
    table = np.full((3**9, 9), ILLEGAL, np.float32)
    for board, values in memo.items():
        table[int(np.dot(board, _POW3))] = values
    return table

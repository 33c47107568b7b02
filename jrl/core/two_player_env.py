"""Two-player, turn-based, zero-sum games in the functional env API (the core layer).

A :class:`TwoPlayerEnv` is an :class:`~jrl.core.env.Environment` whose state has a player to
move. Its contract, on top of the single-agent one:

- the observation is seen from the view of the player to move, as a masked observation
  ``{"observation": x, "action_mask": bool[A]}`` (the legal moves are the action mask);
- ``TimeStep.info[CURRENT_PLAYER]`` (``int32[]``, 0 or 1) is the player to move in the new
  state (after a terminal step: the one who would move next);
- ``TimeStep.info[PLAYER_REWARDS]`` (``float32[2]``) is each player's reward for the step,
  zero-sum (``r[0] == -r[1]``); ``TimeStep.reward`` is the reward of the player who moved;
- stepping a finished game changes nothing and pays nothing (a search may expand past the
  end of a game); an illegal move loses the game for the player who made it.

A concrete game implements ``reset_env(key, params) -> (state, obs)``,
``game_step(state, action, params) -> (state, obs, rewards float32[2], terminated)`` and
``current_player(state)``. It may implement ``perfect_play(state) -> float32[A]``: the
exact game value of every move for the player to move (+1 win, 0 draw, -1 loss, -2
illegal), which the game evaluation uses as a perfect opponent.

This is the turn-based game API only: one player acts per step. Envs where several agents
act at once are another API.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jrl.core.env import Environment
from jrl.core.types import PRNGKey, PyTree, TimeStep

__all__ = [
    "CURRENT_PLAYER",
    "PLAYER_REWARDS",
    "TwoPlayerEnv",
    "is_two_player",
    "player_returns",
]

CURRENT_PLAYER = "current_player"
"""``TimeStep.info`` key of a two-player game: ``int32[]`` the player to move next."""
PLAYER_REWARDS = "player_rewards"
"""``TimeStep.info`` key of a two-player game: ``float32[2]`` both players' rewards."""
ILLEGAL = -2.0
""":meth:`TwoPlayerEnv.perfect_play`'s value of an illegal move (below any game value)."""


class TwoPlayerEnv(Environment):
    """Base class of two-player, turn-based, zero-sum games (see the module docstring)."""

    num_players: int = 2

    def game_step(
        self, state: PyTree, action: jax.Array, params: PyTree
    ) -> tuple[PyTree, PyTree, jax.Array, jax.Array]:
        """``(state, observation, rewards float32[2], terminated)`` after the player to move
        plays ``action`` (no change and zero rewards on a finished game)."""
        raise NotImplementedError

    def current_player(self, state: PyTree) -> jax.Array:
        """``int32[]``: the player to move in ``state``."""
        raise NotImplementedError

    def perfect_play(self, state: PyTree) -> jax.Array:
        """``float32[A]`` exact value of every move for the player to move (optional)."""
        raise NotImplementedError(f"{self.id} has no perfect play")

    @property
    def has_perfect_play(self) -> bool:
        return type(self).perfect_play is not TwoPlayerEnv.perfect_play

    def step_env(self, key, state, action, params):
        mover = self.current_player(state)
        state, obs, rewards, terminated = self.game_step(state, action, params)
        info = self._info(state, rewards)
        return state, obs, rewards[mover], terminated, info

    def _info(self, state, rewards) -> dict[str, Any]:
        return {
            CURRENT_PLAYER: jnp.asarray(self.current_player(state), jnp.int32),
            PLAYER_REWARDS: jnp.asarray(rewards, jnp.float32),
        }

    def reset(self, key: PRNGKey, params: PyTree | None = None) -> tuple[PyTree, TimeStep]:
        """A new game; ``info`` has the same keys as a step's (rewards zero)."""
        state, ts = super().reset(key, params)
        return state, ts.replace(info=self._info(state, jnp.zeros((2,), jnp.float32)))


def is_two_player(env: Environment) -> bool:
    """Whether ``env`` (under any wrappers) is a :class:`TwoPlayerEnv`."""
    return isinstance(env.unwrapped, TwoPlayerEnv)


def player_returns(
    player_rewards: jax.Array, done: jax.Array, gamma: float | jax.Array = 1.0
) -> tuple[jax.Array, jax.Array]:
    """Each player's return from every step of a time-major rollout of games.

    ``G_t[p] = R_t[p] + gamma * (1 - done_t) * G_{t+1}[p]``, with ``G_T = 0`` after the
    rollout's last step, where ``R_t`` (``player_rewards [T, N, 2]``) is the step's reward
    to each player and ``done [T, N]`` marks the steps that ended a game. Returns
    ``(returns [T, N, 2], complete [T, N] bool)``: ``complete`` is True where the game the
    step belongs to ended within the rollout, so its return is the game's outcome and not
    cut off by the rollout's end.
    """
    done = done.astype(bool)

    def back(carry, x):
        g, finished = carry
        r, d = x
        g = r + gamma * jnp.where(d, 0.0, 1.0)[..., None] * g
        finished = d | finished
        return (g, finished), (g, finished)

    init = (
        jnp.zeros(player_rewards.shape[1:], player_rewards.dtype),
        jnp.zeros(done.shape[1:], done.dtype),
    )
    _, (returns, complete) = jax.lax.scan(back, init, (player_rewards, done), reverse=True)
    return returns, complete

"""pgx board games as jrl two-player games (:class:`jrl.core.two_player_env.TwoPlayerEnv`).

``jrl.envs.make("pgx:connect_four")`` builds a :class:`PgxGame` around ``pgx.make(name)``
for the two-player games of :data:`GAMES` (``tic_tac_toe``, ``connect_four``, ``othello``,
``go_9x9``). Needs the optional extra: ``pip install jrl-jax[pgx]``.

The mapping: the state is pgx's ``State``; the observation is pgx's (already from the
view of the player to move) as float32, with pgx's ``legal_action_mask`` as the action
mask; ``current_player`` and ``rewards`` are pgx's; a game is over (``terminated``) when
pgx reports it terminated or truncated (go's move limit). pgx itself makes an illegal
move lose for its player and leaves a finished game as it is with zero rewards, as the
two-player contract asks. pgx draws which player id moves first at random, so the first
mover is ``info["current_player"]`` of the reset. No ``render`` (pgx draws SVG on the host).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jrl.core import spaces
from jrl.core.two_player_env import TwoPlayerEnv
from jrl.core.types import ACTION_MASK, OBSERVATION
from jrl.envs.entries import (
    PGX_PREFIX,
    EnvEntry,
    ExtraMissingError,
    UnknownEnvError,
    import_extra,
    install_hint,
)

__all__ = ["GAMES", "INSTALL", "PGX_PREFIX", "PgxGame", "PgxMissingError", "pgx_entry"]

INSTALL = install_hint("pgx")
GAMES = ("tic_tac_toe", "connect_four", "othello", "go_9x9")
"""The pgx games jrl adapts (two-player, turn-based, deterministic)."""


class PgxMissingError(ExtraMissingError):
    """pgx cannot be imported: a user error (``jrl`` exits with 2) naming the extra."""


@functools.cache
def _make(name: str):
    if name not in GAMES:
        raise UnknownEnvError(
            name, list(GAMES), prefix=PGX_PREFIX, listing=f"jrl adapts: {', '.join(GAMES)}."
        )
    return import_extra("pgx", "pgx", "pgx games", PgxMissingError).make(name)


def pgx_entry(name: str) -> EnvEntry:
    """The :class:`~jrl.envs.EnvEntry` of ``pgx:<name>`` (no time limit: games end)."""
    _make(name)
    return EnvEntry(PGX_PREFIX + name, PgxGame, None, source="pgx", kwargs=(("game", name),))


class PgxGame(TwoPlayerEnv):
    """A pgx two-player game (see the module docstring)."""

    def __init__(self, game: str):
        self.pgx_env = _make(game)
        self.id = PGX_PREFIX + game
        shape = jax.eval_shape(self.pgx_env.init, jax.random.key(0)).observation.shape
        self._obs_space = spaces.Dict(
            {
                OBSERVATION: spaces.Box(0.0, 1.0, tuple(shape), jnp.float32),
                ACTION_MASK: spaces.Box(0, 1, (int(self.pgx_env.num_actions),), jnp.bool_),
            }
        )

    @staticmethod
    def _obs(state):
        return {
            OBSERVATION: state.observation.astype(jnp.float32),
            ACTION_MASK: state.legal_action_mask & ~(state.terminated | state.truncated),
        }

    def reset_env(self, key, params):
        state = self.pgx_env.init(key)
        return state, self._obs(state)

    def game_step(self, state, action, params):
        state = self.pgx_env.step(state, jnp.asarray(action, jnp.int32))
        over = state.terminated | state.truncated
        return state, self._obs(state), state.rewards.astype(jnp.float32), over

    def current_player(self, state):
        return jnp.asarray(state.current_player, jnp.int32)

    def observation_space(self, params=None):
        return self._obs_space

    def action_space(self, params=None):
        return spaces.Discrete(int(self.pgx_env.num_actions))

"""Probe environments: tiny envs whose correct values are known in closed form.

They check one property of a learner each, fast (in the spirit of Andy
Jones' "debugging RL" probes).

``TruncationProbe-v0``: reward 1 on every step, never terminates, cut by the
time limit after ``horizon`` steps (truncated). The observation is the
fraction of the episode elapsed, ``t / horizon``, so a learner *could* fit a
value that shrinks toward the end. Because truncation is not termination,
the correct value of every state is the continuing one,
``V = 1 / (1 - gamma)``; a learner that treats truncation as termination
learns ``(1 - gamma^(horizon - t)) / (1 - gamma)`` instead, far below it
near the end of the episode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jrl import spaces
from jrl.env import Environment

__all__ = ["TruncationProbe"]


@struct.dataclass
class TruncationProbeParams:
    horizon: float = 20.0  # steps per episode (the registered time limit must match)


@struct.dataclass
class TruncationProbeState:
    time: jax.Array  # [] int32 steps taken in this episode


class TruncationProbe(Environment):
    """Constant reward, truncated only (see the module docstring).

    Observation ``float32[1]``: ``t / horizon`` in [0, 1). Action: Discrete(2), ignored.
    """

    id = "TruncationProbe-v0"

    @property
    def default_params(self) -> TruncationProbeParams:
        return TruncationProbeParams()

    def reset_env(self, key, params):
        state = TruncationProbeState(jnp.zeros((), jnp.int32))
        return state, self._obs(state, params)

    def step_env(self, key, state, action, params):
        state = TruncationProbeState(state.time + 1)
        # after the last step the observation would be 1.0; the TimeLimit truncates there
        return state, self._obs(state, params), jnp.ones((), jnp.float32), jnp.zeros((), bool), {}

    @staticmethod
    def _obs(state, params):
        return jnp.reshape(state.time / params.horizon, (1,)).astype(jnp.float32)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)

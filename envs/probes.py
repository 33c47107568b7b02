"""Probe environments: tiny envs whose correct values are known in closed form.

They check one property of a learner each, fast (in the spirit of Andy
Jones' "debugging RL" probes).

``TruncationProbe-v0`` (and ``ContinuousTruncationProbe-v0``, the same with a Box action
for the continuous-action agents): reward 1 on every step, never terminates, cut by the
time limit after ``horizon`` steps (truncated). The observation is the
fraction of the episode elapsed, ``t / horizon``, so a learner *could* fit a
value that shrinks toward the end. Because truncation is not termination,
the correct value of every state is the continuing one,
``V = 1 / (1 - gamma)``; a learner that treats truncation as termination
learns ``(1 - gamma^(horizon - t)) / (1 - gamma)`` instead, far below it
near the end of the episode.

``MaskedProbe-v0``: action masking. Each step shows a fresh random set of
valid actions (at least one) out of 4; a valid action ``a`` pays
``(a + 1) / 4`` and an invalid one ``-10``. The observation is
``{"observation": mask as float32[4], "action_mask": bool[4]}``, so the best
action, the highest valid index, is visible. A learner that honours the mask
never takes an invalid action (its episodes of ``horizon`` steps return at
least ``horizon / 4``) and learns to pick the highest valid index; masked
actions get no data, so only masked argmax and masked targets keep their
arbitrary Q-values out of action choice and bootstraps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import ACTION_MASK, OBSERVATION

__all__ = ["ContinuousTruncationProbe", "MaskedProbe", "TruncationProbe"]


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


class ContinuousTruncationProbe(TruncationProbe):
    """``TruncationProbe-v0`` with one continuous action in [-1, 1] (ignored), for the
    continuous-action agents: the correct ``Q(s, a)`` is ``1 / (1 - gamma)`` everywhere."""

    id = "ContinuousTruncationProbe-v0"

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


@struct.dataclass
class MaskedProbeParams:
    horizon: int = 8  # steps per episode (terminates)
    invalid_reward: float = -10.0  # reward of an action outside the mask


@struct.dataclass
class MaskedProbeState:
    time: jax.Array  # [] int32 steps taken in this episode
    mask: jax.Array  # [4] bool valid actions on this step


class MaskedProbe(Environment):
    """Random valid-action sets (see the module docstring).

    Observation: Dict ``observation float32[4]`` (the mask as 0/1) and
    ``action_mask bool[4]``. Action: Discrete(4). ``info["invalid_action"]``
    marks a step whose action was outside the mask.
    """

    id = "MaskedProbe-v0"
    num_actions = 4

    @property
    def default_params(self) -> MaskedProbeParams:
        return MaskedProbeParams()

    def _draw_mask(self, key):
        k_bits, k_one = jax.random.split(key)
        bits = jax.random.bernoulli(k_bits, 0.5, (self.num_actions,))
        return bits | (
            jnp.arange(self.num_actions) == jax.random.randint(k_one, (), 0, self.num_actions)
        )

    def _obs(self, state):
        return {OBSERVATION: state.mask.astype(jnp.float32), ACTION_MASK: state.mask}

    def reset_env(self, key, params):
        state = MaskedProbeState(jnp.zeros((), jnp.int32), self._draw_mask(key))
        return state, self._obs(state)

    def step_env(self, key, state, action, params):
        valid = state.mask[action]
        reward = jnp.where(valid, (action + 1) / self.num_actions, params.invalid_reward).astype(
            jnp.float32
        )
        new = MaskedProbeState(state.time + 1, self._draw_mask(key))
        return new, self._obs(new), reward, new.time >= params.horizon, {"invalid_action": ~valid}

    def observation_space(self, params=None):
        return spaces.Dict(
            {
                OBSERVATION: spaces.Box(0.0, 1.0, (self.num_actions,), jnp.float32),
                ACTION_MASK: spaces.Box(0, 1, (self.num_actions,), jnp.bool_),
            }
        )

    def action_space(self, params=None):
        return spaces.Discrete(self.num_actions)

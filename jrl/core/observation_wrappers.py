"""Wrappers that change what an agent observes: :class:`FlattenObservation` (a Box, or a
Dict/Tuple of Boxes, as one float32 vector) and :class:`FrameStack` (the last ``n``
observations).

Both sit inside AutoReset in the composition order of :mod:`jrl.core.wrappers`; the
normalisers (:mod:`jrl.core.normalization`) are the observation wrappers that sit outside it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import spaces
from jrl.core.env import Environment, Wrapper
from jrl.core.types import FINAL_OBSERVATION, PyTree, TimeStep
from jrl.core.wrappers import AutoReset, has_wrapper

__all__ = ["FlattenObservation", "FrameStack", "FrameStackState"]


class _ObservationMap(Wrapper):
    """Applies ``self.observation(obs)`` to observations and final observations."""

    def observation(self, obs: PyTree) -> PyTree:
        raise NotImplementedError

    def _map(self, ts: TimeStep) -> TimeStep:
        info = dict(ts.info)
        if FINAL_OBSERVATION in info:
            info[FINAL_OBSERVATION] = self.observation(info[FINAL_OBSERVATION])
        return ts.replace(observation=self.observation(ts.observation), info=info)

    def reset(self, key, params=None):
        state, ts = self.env.reset(key, params)
        return state, self._map(ts)

    def step(self, key, state, action, params=None):
        state, ts = self.env.step(key, state, action, params)
        return state, self._map(ts)


class FlattenObservation(_ObservationMap):
    """Flattens a Box (or a Dict/Tuple of Boxes) observation into one float32 vector."""

    def __init__(self, env: Environment):
        super().__init__(env)
        space = env.observation_space(env.default_params)
        self._leaves = self._box_leaves(space)
        self._dim = int(sum(np.prod(b.shape, dtype=np.int64) for b in self._leaves))

    @staticmethod
    def _box_leaves(space: spaces.Space) -> list[spaces.Box]:
        if isinstance(space, spaces.Box):
            return [space]
        if isinstance(space, spaces.Tuple):
            return [b for s in space.spaces for b in FlattenObservation._box_leaves(s)]
        if isinstance(space, spaces.Dict):  # jax flattens dicts in sorted key order
            return [
                b
                for k in sorted(space.spaces)
                for b in FlattenObservation._box_leaves(space.spaces[k])
            ]
        raise TypeError(f"FlattenObservation supports Box/Tuple/Dict of Box, got {space!r}")

    def observation_space(self, params=None):
        low = np.concatenate([b.low.reshape(-1) for b in self._leaves])
        high = np.concatenate([b.high.reshape(-1) for b in self._leaves])
        return spaces.Box(low, high, (self._dim,), jnp.float32)

    def observation(self, obs):
        leaves = jax.tree.leaves(obs)
        batch = jnp.shape(leaves[0])[: jnp.ndim(leaves[0]) - len(self._leaves[0].shape)]
        return jnp.concatenate(
            [jnp.reshape(x, batch + (-1,)).astype(jnp.float32) for x in leaves], axis=-1
        )


@struct.dataclass
class FrameStackState:
    env_state: PyTree
    frames: jax.Array  # [num_stack, *obs_shape] the last num_stack observations, oldest first


class FrameStack(Wrapper):
    """Observations become the last ``num_stack`` observations, ``[num_stack, *obs_shape]``.

    A fresh episode's stack is filled with copies of its first observation.
    Must sit inside AutoReset (enforced), for an unbatched Box observation.
    """

    def __init__(self, env: Environment, num_stack: int):
        super().__init__(env)
        if has_wrapper(env, AutoReset):
            raise ValueError(
                "FrameStack must be applied inside AutoReset (stacks would mix episodes)"
            )
        if env.num_envs is not None:
            raise ValueError("FrameStack must be applied before VmapEnv")
        if int(num_stack) < 1:
            raise ValueError(f"num_stack must be >= 1, got {num_stack}")
        self._space = env.observation_space(env.default_params)
        if not isinstance(self._space, spaces.Box):
            raise TypeError(f"FrameStack needs a Box observation space, got {self._space!r}")
        self.num_stack = int(num_stack)

    def inner_state(self, state: FrameStackState) -> PyTree:
        return state.env_state

    def observation_space(self, params=None):
        reps = (self.num_stack,) + (1,) * len(self._space.shape)
        return spaces.Box(
            np.tile(self._space.low[None], reps),
            np.tile(self._space.high[None], reps),
            (self.num_stack,) + self._space.shape,
            self._space.dtype,
        )

    def reset(self, key, params=None):
        env_state, ts = self.env.reset(key, params)
        frames = jnp.repeat(ts.observation[None], self.num_stack, axis=0)
        return FrameStackState(env_state, frames), ts.replace(observation=frames)

    def step(self, key, state: FrameStackState, action, params=None):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        frames = jnp.concatenate([state.frames[1:], ts.observation[None]], axis=0)
        return FrameStackState(env_state, frames), ts.replace(observation=frames)

"""Memory tasks: environments whose optimal policy has to remember what it saw.

``MemoryChain-v0``: a T-maze in time. The first observation shows a context
``c``, +1 or -1 with equal chance, which no later observation repeats; after
``length`` more steps the agent is asked for it. The observation
``float32[3]`` is ``(cue, query, t / length)``: ``cue = c`` at ``t = 0`` and 0
afterwards, ``query = 1`` only at ``t = length``. Actions (Discrete(2)) are
ignored and pay 0 before the query; at the query action ``a`` pays +1 when
``2a - 1 = c`` (action 1 for +1, 0 for -1) and -1 otherwise, and the episode
terminates: ``length + 1`` steps, optimal return 1. A policy without memory
sees the same observation at the query whatever ``c`` was, so it is right
with probability 1/2 at best: its expected return is 0.

``CartPoleNoVel-v1``: ``CartPole-v1`` with the velocities hidden: the
observation is ``(x, theta)``; dynamics, reward, termination, time limit (500)
and picture are CartPole's. A policy has to infer the velocities from the
positions it has seen.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.envs.cartpole import CartPole, CartPoleParams, CartPoleState
from jrl.envs.params import concrete_params

__all__ = ["CartPoleNoVel", "MemoryChain", "MemoryChainParams", "MemoryChainState"]


@struct.dataclass
class MemoryChainParams:
    length: float = 10.0  # steps between the cue and the query (>= 1)


@struct.dataclass
class MemoryChainState:
    context: jax.Array  # [] float32, +1 or -1: what the query asks for
    time: jax.Array  # [] int32 steps taken in this episode


class MemoryChain(Environment):
    """Remember the first observation's cue for ``length`` steps (see the module docstring)."""

    id = "MemoryChain-v0"

    @property
    def default_params(self) -> MemoryChainParams:
        return MemoryChainParams()

    def reset_env(self, key, params: MemoryChainParams):
        context = jnp.where(jax.random.bernoulli(key), 1.0, -1.0).astype(jnp.float32)
        state = MemoryChainState(context, jnp.zeros((), jnp.int32))
        return state, self._obs(state, params)

    def step_env(self, key, state: MemoryChainState, action, params: MemoryChainParams):
        query = state.time >= params.length  # this action answers
        correct = (2.0 * jnp.asarray(action, jnp.float32) - 1.0) == state.context
        reward = jnp.where(query, jnp.where(correct, 1.0, -1.0), 0.0).astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        return state, self._obs(state, params), reward, query, {}

    @staticmethod
    def _obs(state: MemoryChainState, params: MemoryChainParams) -> jax.Array:
        cue = jnp.where(state.time == 0, state.context, 0.0)
        query = (state.time == params.length).astype(jnp.float32)
        # after the query the episode has ended; that observation is never acted on
        elapsed = jnp.minimum(state.time / params.length, 1.0)
        return jnp.stack([cue, query, elapsed]).astype(jnp.float32)

    def observation_space(self, params: MemoryChainParams | None = None) -> spaces.Box:
        p = concrete_params(params, self.default_params)
        if p.length < 1 or p.length != int(p.length):
            raise ValueError(f"MemoryChain length must be a whole number >= 1, got {p.length}")
        low, high = np.array([-1.0, 0.0, 0.0], np.float32), np.ones(3, np.float32)
        return spaces.Box(low, high, (3,), jnp.float32)

    def action_space(self, params: MemoryChainParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)


class CartPoleNoVel(CartPole):
    """CartPole observed without its velocities: ``float32[2] = (x, theta)``."""

    id = "CartPoleNoVel-v1"

    @staticmethod
    def _obs(state: CartPoleState) -> jax.Array:
        return jnp.stack([state.x, state.theta]).astype(jnp.float32)

    def observation_space(self, params: CartPoleParams | None = None) -> spaces.Box:
        full = super().observation_space(params)
        low, high = full.low[[0, 2]], full.high[[0, 2]]
        return spaces.Box(low, high, (2,), jnp.float32)

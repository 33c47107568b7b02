"""Small cooperative multi-agent environments of our own
(:class:`jrl.core.multi_agent_env.MultiAgentEnvironment`).

``Coordination-v0``: a team of ``A = 2`` agents plays ``horizon`` rounds (8) of a
coordination game with ``K = 3`` actions. Each round draws a cue ``g`` uniformly from
``{0, ..., K-1}``, which every agent sees; the round succeeds when *every* agent ``i``
picks action ``(g + i) mod K``, and then each agent is paid 1 (else 0). Agent ``i`` also sees
its own one-hot id, so one shared policy can tell the agents apart. One action per agent,
``(g + i + 1) mod K``, is invalid in each round (the per-agent action mask); an agent that
takes it anyway is paid -1. The reward depends on the joint action, so no agent can succeed
alone.

- observation of agent ``i``: ``[one_hot(g, K), one_hot(i, A), t / horizon]`` (6 floats);
- global state: ``[one_hot(g, K), t / horizon]``;
- every agent terminates after ``horizon`` rounds.

The optimal joint return is known: every round succeeds, so each agent's return is
``horizon`` and the team's (summed) return ``A * horizon = 16``; agents that pick uniformly
among their valid actions succeed in a quarter of the rounds (team return 4).

``TeamTruncationProbe-v0``: the truncation probe for a team. Two agents, each paid 1 on
every step; the episode never terminates and the time limit cuts it after 20 steps. Each
agent observes ``t / 20``; the correct value of every state is ``1 / (1 - gamma)`` for each
agent (a learner that treated truncation as termination would learn less near the end).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jrl.core import spaces
from jrl.core.multi_agent_env import MultiAgentEnvironment
from jrl.envs import raster as R

__all__ = ["Coordination", "TeamTruncationProbe"]


@struct.dataclass
class CoordinationParams:
    horizon: int = 8  # rounds per episode


@struct.dataclass
class CoordinationState:
    time: jax.Array  # [] int32 rounds played
    cue: jax.Array  # [] int32 this round's cue g
    last_action: jax.Array  # [A] int32 the previous round's actions (-1 before the first)


class Coordination(MultiAgentEnvironment):
    """The cooperative coordination game of the module docstring."""

    id = "Coordination-v0"
    agents = ("agent_0", "agent_1")
    has_action_mask = True
    num_actions = 3

    @property
    def default_params(self) -> CoordinationParams:
        return CoordinationParams()

    def _obs(self, state: CoordinationState, params) -> jax.Array:
        a, k = self.num_agents, self.num_actions
        cue = jnp.broadcast_to(jax.nn.one_hot(state.cue, k), (a, k))
        ids = jnp.eye(a, dtype=jnp.float32)
        t = jnp.full((a, 1), state.time / params.horizon, jnp.float32)
        return jnp.concatenate([cue, ids, t], axis=-1)

    def targets(self, cue: jax.Array) -> jax.Array:
        """``[A]`` int32: the action each agent must pick for cue ``g``."""
        return (cue + jnp.arange(self.num_agents)) % self.num_actions

    def reset_env(self, key, params):
        cue = jax.random.randint(key, (), 0, self.num_actions)
        state = CoordinationState(
            jnp.zeros((), jnp.int32), cue, jnp.full((self.num_agents,), -1, jnp.int32)
        )
        return state, self._obs(state, params)

    def step_env(self, key, state: CoordinationState, action, params):
        action = jnp.asarray(action, jnp.int32)
        valid = jnp.take_along_axis(self.action_mask(state, params), action[:, None], axis=1)[:, 0]
        success = jnp.all(action == self.targets(state.cue))
        reward = jnp.where(valid, success.astype(jnp.float32), -1.0)
        time = state.time + 1
        new = CoordinationState(time, jax.random.randint(key, (), 0, self.num_actions), action)
        terminated = jnp.full((self.num_agents,), time >= params.horizon)
        return new, self._obs(new, params), reward, terminated, {}

    def action_mask(self, state: CoordinationState, params) -> jax.Array:
        invalid = (self.targets(state.cue) + 1) % self.num_actions
        return jnp.arange(self.num_actions)[None, :] != invalid[:, None]

    def global_state(self, state: CoordinationState, obs, params) -> jax.Array:
        cue = jax.nn.one_hot(state.cue, self.num_actions)
        return jnp.concatenate([cue, jnp.reshape(state.time / params.horizon, (1,))])

    def global_state_space(self, params=None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.num_actions + 1,), jnp.float32)

    def agent_observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.num_actions + self.num_agents + 1,), jnp.float32)

    def agent_action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def render(self, state: CoordinationState, params=None) -> jax.Array:
        """One row per agent, one cell per action: the cell the cue asks of the agent is
        green, its invalid one grey, and a dot marks the action it took last round."""
        cell, a, k = 60, self.num_agents, self.num_actions
        h, w = a * cell, k * cell
        px, py = R.pixel_grid(h, w)
        canvas = R.blank(h, w)
        target = self.targets(state.cue)
        for i in range(a):
            cy = h - (i + 0.5) * cell
            for j in range(k):
                cx = (j + 0.5) * cell
                square = jnp.maximum(jnp.abs(px - cx), jnp.abs(py - cy)) - 0.42 * cell
                color = jnp.where(
                    target[i] == j, 1.0, jnp.where((target[i] + 1) % k == j, 0.5, 0.0)
                )
                fill = (
                    R.blank(h, w, (120, 200, 120)) * (color == 1.0)
                    + R.blank(h, w, (190, 190, 190)) * (color == 0.5)
                    + R.blank(h, w, (235, 235, 235)) * (color == 0.0)
                )
                cover = jnp.clip(0.5 - square, 0.0, 1.0)[..., None]
                canvas = canvas + cover * (fill - canvas)
                dot = R.sd_circle(px, py, cx, cy, 0.18 * cell)
                took = (state.last_action[i] == j).astype(jnp.float32)
                canvas = canvas + took * jnp.clip(0.5 - dot, 0.0, 1.0)[..., None] * (
                    jnp.asarray(R.BLACK, jnp.float32) - canvas
                )
        return R.to_uint8(canvas)


@struct.dataclass
class TeamProbeParams:
    horizon: float = 20.0  # steps per episode (the registered time limit must match)


class TeamTruncationProbe(MultiAgentEnvironment):
    """Every agent paid 1 on every step, never terminated (see the module docstring).
    Agent observation ``float32[1]``: ``t / horizon``; actions Discrete(2), ignored."""

    id = "TeamTruncationProbe-v0"
    agents = ("agent_0", "agent_1")

    @property
    def default_params(self) -> TeamProbeParams:
        return TeamProbeParams()

    def _obs(self, time, params):
        return jnp.full((self.num_agents, 1), time / params.horizon, jnp.float32)

    def reset_env(self, key, params):
        time = jnp.zeros((), jnp.int32)
        return time, self._obs(time, params)

    def step_env(self, key, state, action, params):
        time = state + 1
        a = self.num_agents
        return time, self._obs(time, params), jnp.ones(a), jnp.zeros(a, bool), {}

    def agent_observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    def agent_action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(2)

"""Simultaneous-move multi-agent environments: the API and the wrappers training needs.

A :class:`MultiAgentEnvironment` is a team of ``A`` agents, named in a fixed order
(:attr:`~MultiAgentEnvironment.agents`), that all act at every step. Everything per agent
carries a leading agent axis in that order, so one shared policy is one ``vmap`` (or one
batched network call) over agents:

- ``reset_env(key, params) -> (state, obs [A, *obs_shape])``;
- ``step_env(key, state, actions [A, *act_shape], params) -> (state, obs [A, ...],
  rewards [A], terminated [A], info)``: ``terminated[i]`` marks agent ``i`` as done for
  good (absorbing: it keeps acting, its reward stays 0); the episode ends when every agent
  has terminated, or when a time limit truncates it for all of them;
- ``agent_observation_space`` / ``agent_action_space``: one agent's spaces (every agent
  has the same; an adapter pads observations of different sizes);
- optionally ``global_state(state, obs, params) -> [S]`` for a centralised critic (default:
  every agent's observation, concatenated) and ``action_mask(state, params) -> bool [A, n]``
  (set ``has_action_mask``) for per-agent valid actions.

Its public ``reset``/``step`` are those of any jrl :class:`~jrl.core.env.Environment`, seen as a
team (the *team view*), so the ordinary wrappers (TimeLimit, AutoReset,
EpisodeStatistics, VmapEnv) and evaluation work on it unchanged:

- ``observation`` is a dict ``{"observation": [A, *obs_shape], "global_state": [S]}``
  plus ``"action_mask": bool [A, n]`` when the env has masks;
- ``reward`` is the team's reward, the sum over agents, and ``terminated`` is True when
  every agent has terminated;
- ``info[AGENT_REWARD]`` ``[A]`` and ``info[AGENT_TERMINATED]`` ``[A]`` keep the per-agent
  values;
- ``action_space`` is the joint action: ``MultiDiscrete([n] * A)`` for Discrete agents,
  ``Box [A, d]`` for Box agents.

Learners see the *agent view*: :func:`wrap_agents_for_training` puts :class:`AgentSteps`
outside the training wrappers, whose time steps have ``reward``, ``terminated`` and
``truncated`` ``[N, A]`` (the episode's truncation copied to every agent) and whose
``info[AGENT_EPISODE_RETURN]`` ``[N, A]`` holds each agent's return of the episodes that
ended (``info["episode_return"]``, from EpisodeStatistics, is the team's: the sum). A learner
without a centralised critic asks for the agent view without the global state
(``global_state=False``): its observations and final observations then lack the
``"global_state"`` entry, so a rollout neither stores nor carries it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import spaces
from jrl.core.env import Environment, Wrapper
from jrl.core.types import (
    ACTION_MASK,
    EPISODE_DONE,
    FINAL_OBSERVATION,
    OBSERVATION,
    PRNGKey,
    PyTree,
    TimeStep,
)
from jrl.core.wrappers import wrap_for_training

__all__ = [
    "AGENT_EPISODE_RETURN",
    "AGENT_REWARD",
    "AGENT_TERMINATED",
    "AgentSteps",
    "GLOBAL_STATE",
    "MultiAgentEnvironment",
    "agent_names",
    "is_multi_agent",
    "joint_action_space",
    "wrap_agents_for_training",
]

GLOBAL_STATE = "global_state"
"""Key of the ``[S]`` global state (for a centralised critic) in the team observation."""
AGENT_REWARD = "agent_reward"
"""``info`` key of the per-agent rewards ``[A]`` behind the team reward."""
AGENT_TERMINATED = "agent_terminated"
"""``info`` key of the per-agent terminal flags ``[A]``."""
AGENT_EPISODE_RETURN = "agent_episode_return"
"""``info`` key (set by :class:`AgentSteps`) of each agent's return of the episodes that ended
on this step ``[..., A]`` (0 where none ended)."""


class MultiAgentEnvironment(Environment):
    """Base class of simultaneous-move multi-agent envs (see the module docstring).

    Subclasses set ``agents`` (names, in the order of the agent axis) and implement
    ``reset_env``, ``step_env``, ``agent_observation_space`` and ``agent_action_space``;
    ``global_state``/``global_state_space``, ``action_mask`` (with ``has_action_mask``) and
    ``render`` are optional.
    """

    id = "MultiAgentEnvironment"
    agents: tuple[str, ...] = ()
    has_action_mask: bool = False

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    # -- to implement ------------------------------------------------------------------
    def agent_observation_space(self, params: PyTree | None = None) -> spaces.Space:
        """One agent's observation space (a Box)."""
        raise NotImplementedError

    def agent_action_space(self, params: PyTree | None = None) -> spaces.Space:
        """One agent's action space (Discrete or Box)."""
        raise NotImplementedError

    def global_state(self, state: PyTree, obs: jax.Array, params: PyTree) -> jax.Array:
        """``[S]`` float32: what a centralised critic sees; every agent's observation
        ``obs [A, ...]``, flattened and concatenated, unless overridden."""
        return jnp.reshape(obs, (-1,)).astype(jnp.float32)

    def global_state_space(self, params: PyTree | None = None) -> spaces.Box:
        size = self.num_agents * int(np.prod(self.agent_observation_space(params).shape))
        return spaces.Box(-np.inf, np.inf, (size,), jnp.float32)

    def action_mask(self, state: PyTree, params: PyTree) -> jax.Array:
        """``bool [A, n]`` valid actions of every agent (True = valid); only called when
        ``has_action_mask``."""
        raise NotImplementedError(f"{self.id} has no action masks")

    # -- the team view ----------------------------------------------------------------
    def observation_space(self, params: PyTree | None = None) -> spaces.Dict:
        one = self.agent_observation_space(params)
        items = {
            OBSERVATION: spaces.Box(
                np.broadcast_to(one.low, (self.num_agents, *one.shape)),
                np.broadcast_to(one.high, (self.num_agents, *one.shape)),
                (self.num_agents, *one.shape),
                one.dtype,
            ),
            GLOBAL_STATE: self.global_state_space(params),
        }
        if self.has_action_mask:
            n = int(self.agent_action_space(params).n)
            items[ACTION_MASK] = spaces.Box(0, 1, (self.num_agents, n), jnp.bool_)
        return spaces.Dict(items)

    def action_space(self, params: PyTree | None = None) -> spaces.Space:
        return joint_action_space(self.agent_action_space(params), self.num_agents)

    def _team_observation(self, state, obs, params) -> dict[str, jax.Array]:
        out = {OBSERVATION: obs, GLOBAL_STATE: self.global_state(state, obs, params)}
        if self.has_action_mask:
            out[ACTION_MASK] = jnp.asarray(self.action_mask(state, params), bool)
        return out

    def reset(self, key: PRNGKey, params: PyTree | None = None) -> tuple[PyTree, TimeStep]:
        params = self.default_params if params is None else params
        state, obs = self.reset_env(key, params)
        a = self.num_agents
        return state, TimeStep(
            observation=self._team_observation(state, obs, params),
            reward=jnp.zeros((), jnp.float32),
            terminated=jnp.zeros((), bool),
            truncated=jnp.zeros((), bool),
            info={AGENT_REWARD: jnp.zeros((a,), jnp.float32), AGENT_TERMINATED: jnp.zeros(a, bool)},
        )

    def step(self, key: PRNGKey, state: PyTree, action: Any, params: PyTree | None = None):
        params = self.default_params if params is None else params
        state, obs, reward, terminated, info = self.step_env(key, state, action, params)
        reward = jnp.asarray(reward, jnp.float32)
        terminated = jnp.asarray(terminated, bool)
        if reward.shape != (self.num_agents,) or terminated.shape != (self.num_agents,):
            raise ValueError(
                f"{self.id}: step_env must return rewards and terminated flags of shape "
                f"({self.num_agents},), got {reward.shape} and {terminated.shape}"
            )
        return state, TimeStep(
            observation=self._team_observation(state, obs, params),
            reward=reward.sum(),
            terminated=terminated.all(),
            truncated=jnp.zeros((), bool),
            info={**info, AGENT_REWARD: reward, AGENT_TERMINATED: terminated},
        )


def joint_action_space(space: spaces.Space, num_agents: int) -> spaces.Space:
    """The joint action space of ``num_agents`` agents acting in ``space``:
    ``MultiDiscrete([n] * A)`` for ``Discrete(n)``, ``Box [A, *shape]`` for a Box."""
    if isinstance(space, spaces.Discrete):
        return spaces.MultiDiscrete([int(space.n)] * num_agents)
    if isinstance(space, spaces.Box):
        shape = (num_agents, *space.shape)
        return spaces.Box(
            np.broadcast_to(space.low, shape),
            np.broadcast_to(space.high, shape),
            shape,
            space.dtype,
        )
    raise TypeError(f"agents act in a Discrete or Box space, got {space!r}")


def is_multi_agent(env: Environment) -> bool:
    """True when ``env`` (under any wrappers) is a :class:`MultiAgentEnvironment`."""
    return isinstance(env.unwrapped, MultiAgentEnvironment)


def agent_names(env: Environment) -> tuple[str, ...]:
    """The agents of a multi-agent env, in the order of the agent axis (``()`` for a
    single-agent env)."""
    return tuple(env.unwrapped.agents) if is_multi_agent(env) else ()


@struct.dataclass
class AgentStepsState:
    env_state: PyTree
    agent_return: jax.Array  # [..., A] float32 each agent's return so far in the episode


class AgentSteps(Wrapper):
    """The agent view of a (batched, auto-resetting) team env: ``reward``, ``terminated``
    and ``truncated`` become ``[..., A]`` (see the module docstring) and
    ``info[AGENT_EPISODE_RETURN]`` ``[..., A]`` holds each agent's return of the episodes
    that ended here. Sits outside EpisodeStatistics (whose ``episode_done`` it reads).
    With ``global_state=False`` the observations (and ``info["final_observation"]``) and
    the observation space leave out the global state."""

    def __init__(self, env: Environment, global_state: bool = True):
        super().__init__(env)
        if not is_multi_agent(env):
            raise ValueError(f"AgentSteps wraps a multi-agent env, got {env!r}")
        self.global_state = bool(global_state)

    def inner_state(self, state: AgentStepsState) -> PyTree:
        return state.env_state

    def observation_space(self, params: PyTree | None = None) -> spaces.Space:
        space = self.env.observation_space(params)
        if self.global_state:
            return space
        return spaces.Dict({k: s for k, s in space.spaces.items() if k != GLOBAL_STATE})

    def _observation(self, obs: dict) -> dict:
        if self.global_state:
            return obs
        return {k: v for k, v in obs.items() if k != GLOBAL_STATE}

    def _agent_view(self, ts: TimeStep, agent_return: jax.Array):
        info = ts.info
        done = info[EPISODE_DONE][..., None]
        reward = info[AGENT_REWARD]
        total = agent_return + reward
        terminated = info[AGENT_TERMINATED] | ts.terminated[..., None]
        info = {**info, AGENT_EPISODE_RETURN: jnp.where(done, total, 0.0)}
        if FINAL_OBSERVATION in info:
            info[FINAL_OBSERVATION] = self._observation(info[FINAL_OBSERVATION])
        ts = ts.replace(
            observation=self._observation(ts.observation),
            reward=reward,
            terminated=terminated,
            truncated=jnp.broadcast_to(ts.truncated[..., None], terminated.shape),
            info=info,
        )
        return ts, jnp.where(done, 0.0, total)

    def reset(self, key, params=None):
        env_state, ts = self.env.reset(key, params)
        zeros = jnp.zeros_like(ts.info[AGENT_REWARD])
        ts, agent_return = self._agent_view(ts, zeros)
        return AgentStepsState(env_state, agent_return), ts

    def step(self, key, state: AgentStepsState, action, params=None):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        ts, agent_return = self._agent_view(ts, state.agent_return)
        return AgentStepsState(env_state, agent_return), ts


def wrap_agents_for_training(
    env: Environment, num_envs: int | None, global_state: bool = True
) -> Environment:
    """``num_envs`` copies of the multi-agent ``env`` (with its TimeLimit, as
    :func:`jrl.envs.make` returns it) ready for a learner: auto-reset, episode statistics
    of the team, the batch (:func:`jrl.core.wrappers.wrap_for_training`) and the agent view
    (:class:`AgentSteps`; without the global state unless ``global_state``)."""
    if not is_multi_agent(env):
        raise ValueError(f"wrap_agents_for_training takes a multi-agent env, got {env!r}")
    return AgentSteps(wrap_for_training(env, num_envs), global_state)

"""Loops: an agent plus an environment become an algorithm.

An :class:`Algorithm` is ``init(key) -> train_state`` and
``step(train_state) -> (train_state, metrics)``, both pure and jittable; a
runner (:mod:`jrl.run.anakin`) decides how to execute them (scan, vmap over
seeds, devices). ``metrics`` is a flat dict of scalars per step.

This module holds the on-policy (:func:`on_policy`) and off-policy (:func:`off_policy`) loops;
the pieces they are built from (:class:`Algorithm`, :func:`collect_step`,
:func:`episode_metrics`, ...) live in :mod:`jrl.run.algorithm` and are re-exported here.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jrl.core import parallel
from jrl.core.env import Environment
from jrl.core.multi_agent_env import agent_names
from jrl.core.types import PRNGKey, PyTree, Transition
from jrl.parts.agent import Agent, EnvSpec
from jrl.parts.buffers import ReplayBuffer
from jrl.parts.nstep import NStepState, nstep_accumulator
from jrl.run.algorithm import (
    NO_EPISODE,
    PER_AGENT_RETURN,
    Algorithm,
    agent_episode_metrics,
    agent_hparams,
    collect_recurrent_step,
    collect_step,
    episode_metrics,
)

__all__ = [
    "Algorithm",
    "NO_EPISODE",
    "OnPolicyState",
    "OffPolicyState",
    "PER_AGENT_RETURN",
    "RecurrentOnPolicyState",
    "ReplaySchedule",
    "ReplayUpdates",
    "StatefulOffPolicyState",
    "TeamOnPolicyState",
    "agent_episode_metrics",
    "collect_recurrent_step",
    "collect_step",
    "episode_metrics",
    "off_policy",
    "on_policy",
]


@struct.dataclass
class OnPolicyState:
    """Everything an on-policy run carries from one iteration to the next."""

    agent_state: PyTree  # the agent's params, optimiser state, hparams
    env_state: PyTree  # batched env state [N, ...] (wrappers included)
    observation: PyTree  # [N, *obs_shape] current observations
    key: PRNGKey  # the loop's key; split every iteration
    iteration: jax.Array  # [] int32 iterations done
    env_steps: jax.Array  # [] int32 env transitions collected (all envs)
    last_episode_return: jax.Array  # [] float32 mean return of the latest episodes (or NaN)
    last_episode_length: jax.Array  # [] float32 mean length of the latest episodes (or NaN)


@struct.dataclass
class RecurrentOnPolicyState(OnPolicyState):
    """An on-policy run of an agent with memory (:class:`jrl.parts.agent.Recurrent`): also the
    agent's acting state, as it is after the last step (already back to the initial state
    for every env whose episode ended there)."""

    acting_state: PyTree  # [N, ...] per leaf, e.g. a recurrent policy's hidden state


@struct.dataclass
class TeamOnPolicyState(OnPolicyState):
    """An on-policy run on a multi-agent env (:mod:`jrl.core.multi_agent_env`): also each agent's
    mean
    return of the latest episodes (``last_episode_return`` is the team's, the sum)."""

    last_agent_returns: jax.Array  # [A] float32 (NaN before the first episode)


def on_policy(
    agent: Agent, env: Environment, num_steps: int, env_params: PyTree = None, num_devices: int = 1
) -> Algorithm:
    """Collect ``num_steps`` steps from each of the env's N envs, then learn once.

    ``env`` must be batched (a :class:`~jrl.core.wrappers.VmapEnv` inside, as
    :func:`jrl.core.wrappers.wrap_for_training` builds) with AutoReset and
    EpisodeStatistics. The batch handed to ``agent.learn`` is a time-major
    ``Transition`` ``[T, N]`` whose ``next_observation`` is the true successor
    (the final observation where an episode ended), ``extras`` the agent's
    ``act_info``.

    With ``num_devices > 1`` the env holds one device's share of the envs
    and ``step`` must run inside a sharded trace (:mod:`jrl.run.anakin`).
    """
    loop = _OnPolicyLoop(agent, env, num_steps, env_params, num_devices)
    return Algorithm(loop.init, loop.step, loop.per_iteration, agent_hparams(agent))


class _OnPolicyLoop:
    """The pieces of :func:`on_policy`'s ``init`` and ``step`` (see its docstring)."""

    def __init__(self, agent, env, num_steps, env_params, num_devices):
        num_envs = env.num_envs
        if num_envs is None:
            raise ValueError(
                "on_policy needs a batched env: wrap it with "
                "jrl.core.wrappers.wrap_for_training(env, num_envs)"
            )
        if int(num_steps) <= 0:
            raise ValueError(f"num_steps must be positive, got {num_steps}")
        self.agent, self.env, self.num_steps = agent, env, num_steps
        self.num_envs, self.num_devices = num_envs, num_devices
        self.params = env.default_params if env_params is None else env_params
        self.spec = EnvSpec.from_env(env, self.params)
        self.recurrent = agent.recurrent
        self.names = agent_names(env)
        self.per_iteration = int(num_steps) * num_envs * int(num_devices)

    def init(self, key: PRNGKey) -> OnPolicyState:
        return _on_policy_init(self.agent, self.env, self.params, self.spec, key)

    def env_step(self, agent_state, carry, key):
        """One step of the N envs; ``carry``: ``(env_state, obs)``, and the acting state for
        an agent with memory."""
        if self.recurrent is not None:
            carry, transition, episodes = collect_recurrent_step(
                self.agent, self.env, self.params, agent_state, carry, key
            )
            return carry, (transition, episodes)
        env_state, obs, transition, episodes = collect_step(
            self.agent, self.env, self.params, agent_state, *carry, key
        )
        return (env_state, obs), (transition, episodes)

    def step(self, state: OnPolicyState) -> tuple[OnPolicyState, dict[str, jax.Array]]:
        key, k_rollout, k_learn = jax.random.split(state.key, 3)
        carry = (state.env_state, state.observation)
        if self.recurrent is not None:
            carry += (state.acting_state,)
        carry, (batch, episodes) = jax.lax.scan(
            lambda c, k: self.env_step(state.agent_state, c, k),
            carry,
            jax.random.split(k_rollout, self.num_steps),
        )
        agent_state, metrics, _ = self.agent.learn(state.agent_state, batch, k_learn)
        ret, length, ep_metrics = episode_metrics(
            episodes, state.last_episode_return, state.last_episode_length
        )
        new_state = state.replace(
            agent_state=agent_state,
            env_state=carry[0],
            observation=carry[1],
            key=key,
            iteration=state.iteration + 1,
            env_steps=state.env_steps + self.num_steps * self.num_envs * self.num_devices,
            last_episode_return=ret,
            last_episode_length=length,
        )
        if self.recurrent is not None:
            new_state = new_state.replace(acting_state=carry[2])
        if self.names:
            agent_returns, agent_metrics = agent_episode_metrics(
                episodes, state.last_agent_returns, self.names
            )
            new_state = new_state.replace(last_agent_returns=agent_returns)
            ep_metrics = {**ep_metrics, **agent_metrics}
        metrics = {**metrics, **ep_metrics, "train/env_steps": new_state.env_steps}
        return new_state, metrics


def _on_policy_init(agent: Agent, env: Environment, params, spec: EnvSpec, key: PRNGKey):
    """:func:`on_policy`'s first train state: ``OnPolicyState``, ``TeamOnPolicyState`` on a
    multi-agent env, or ``RecurrentOnPolicyState`` (every env at the agent's initial acting
    state) for an agent with memory."""
    k_agent, k_env, k_loop = jax.random.split(key, 3)
    env_state, ts = env.reset(k_env, params)
    nan = jnp.full((), NO_EPISODE, jnp.float32)
    fields = (
        agent.init(k_agent, spec),
        env_state,
        ts.observation,
        k_loop,
        jnp.zeros((), jnp.int32),
        jnp.zeros((), jnp.int32),
        nan,
        nan,
    )
    names = agent_names(env)
    if names and agent.recurrent is None:
        return TeamOnPolicyState(*fields, jnp.full((len(names),), NO_EPISODE, jnp.float32))
    if agent.recurrent is None:
        return OnPolicyState(*fields)
    return RecurrentOnPolicyState(*fields, agent.recurrent.initial_state(env.num_envs))


class ReplaySchedule(NamedTuple):
    """How an off-policy loop interleaves collection and updates."""

    steps_per_iteration: int  # steps collected from each env per iteration
    updates_per_iteration: int  # updates per iteration (once learning has started)
    learning_starts: int  # env steps (all envs, all devices) before the first update
    batch_size: int  # items per update, summed over devices
    n_step: int = 1  # steps summed into each stored transition


@struct.dataclass
class OffPolicyState:
    """Everything an off-policy run carries from one iteration to the next."""

    agent_state: PyTree  # the agent's params, target params, optimiser state, hparams
    env_state: PyTree  # batched env state [N, ...] (wrappers included)
    observation: PyTree  # [N, *obs_shape] current observations
    buffer_state: PyTree  # this device's replay buffer of NStepTransitions
    nstep_state: NStepState  # the n-step window of the last n steps of the N envs
    key: PRNGKey  # the loop's key; split every iteration
    iteration: jax.Array  # [] int32 iterations done
    env_steps: jax.Array  # [] int32 env transitions collected (all envs, all devices)
    num_updates: jax.Array  # [] int32 gradient updates done
    last_episode_return: jax.Array  # [] float32 mean return of the latest episodes (or NaN)
    last_episode_length: jax.Array  # [] float32 mean length of the latest episodes (or NaN)


@struct.dataclass
class StatefulOffPolicyState(OffPolicyState):
    """An off-policy run of an agent that acts from a per-env acting state
    (:class:`jrl.parts.agent.Recurrent`, e.g. temporally correlated exploration noise): also that
    state as it is after the last step (back to the initial state where an episode ended)."""

    acting_state: PyTree  # [N, ...] per leaf


def off_policy(
    agent: Agent,
    env: Environment,
    buffer: ReplayBuffer,
    schedule: ReplaySchedule,
    *,
    discount: Callable[[PyTree], jax.Array] | None = None,
    beta: Callable[[PyTree], jax.Array] | None = None,
    env_params: PyTree = None,
    num_devices: int = 1,
) -> Algorithm:
    """Collect ``steps_per_iteration`` steps from each of the N envs into replay, then
    do ``updates_per_iteration`` gradient updates on sampled batches.

    Collection acts with ``agent.act`` (the behaviour policy, e.g.
    epsilon-greedy) and pushes each step's ``Transition`` (``next_observation``
    the true successor, ``info[FINAL_OBSERVATION]``) through an
    :func:`~jrl.parts.nstep.nstep_accumulator`; the buffer stores the resulting
    :class:`~jrl.parts.nstep.NStepTransition`s (with ``n_step=1`` these are
    one-step transitions with ``discount = gamma * (1 - terminated)``), so a
    learner's target is always ``reward + discount * V(next_observation)`` and
    truncated episodes bootstrap from their final observation. The
    accumulator's ``gamma`` is ``discount(agent_state)`` (default
    ``agent_state.hparams.gamma``), so a swept gamma stays consistent. ``init``
    steps the envs ``n_step - 1`` times to fill the window (counted in
    ``env_steps``), so every later push is a valid transition.

    Updates run once ``env_steps >= learning_starts`` (a global count, equal on
    every device and in every run; reduced with :func:`jrl.core.parallel.all_runs`,
    so under the runner's ``vmap`` over runs the gate stays a branch and no
    update is computed before learning starts). Each update samples ``batch_size /
    num_devices`` items from this device's buffer (with ``beta(agent_state)``
    for a prioritised buffer) and calls ``agent.learn(agent_state, Sample,
    key)``; the :attr:`~jrl.parts.agent.Learned.priorities` it returns (``[batch]``,
    when not None) are written back with ``buffer.update_priorities``.
    The replay ratio (samples learned per env step) is
    ``updates_per_iteration * batch_size / (steps_per_iteration * num_envs)``.

    An agent with an acting state (``agent.recurrent``, e.g. DDPG's Ornstein-Uhlenbeck
    noise) acts through ``recurrent.act``; the loop carries that state in a
    :class:`StatefulOffPolicyState` and puts each env's row back to the initial state where
    its episode ends. Replay sees the state only where the agent puts it in its ``act_info``
    (a recurrent DQN stores the core state each step was acted from, to replay sequences of a
    :func:`~jrl.parts.buffers.trajectory_buffer` from it); DDPG's noise never reaches ``learn``.
    """
    loop = _OffPolicyLoop(agent, env, buffer, schedule, discount, beta, env_params, num_devices)
    return Algorithm(loop.init, loop.step, loop.per_iteration, agent_hparams(agent))


class ReplayUpdates:
    """``updates`` gradient updates of ``agent`` on batches of ``local_batch`` items sampled
    from this device's replay buffer (with ``beta(agent_state)`` for a prioritised one), the
    :attr:`~jrl.parts.agent.Learned.priorities` ``learn`` returns written back: the learning half of
    :func:`off_policy`, shared with the Sebulba learner of agents whose actors push
    transitions (Ape-X, ``agents/value/apex.py``)."""

    def __init__(self, agent: Agent, buffer: ReplayBuffer, updates: int, local_batch: int, beta):
        self.agent, self.buffer = agent, buffer
        self.num_updates, self.local_batch = int(updates), int(local_batch)
        self.beta_of = beta or (lambda agent_state: None)

    def update(self, carry, key):
        """One gradient update on a batch sampled from this device's buffer."""
        agent_state, buffer_state = carry
        k_sample, k_learn = jax.random.split(key)
        sample = self.buffer.sample(
            buffer_state, k_sample, self.local_batch, self.beta_of(agent_state)
        )
        agent_state, metrics, priorities = self.agent.learn(agent_state, sample, k_learn)
        if priorities is not None and self.buffer.update_priorities is not None:
            buffer_state = self.buffer.update_priorities(buffer_state, sample.indices, priorities)
        return (agent_state, buffer_state), metrics

    def learn_phase(self, agent_state, buffer_state, key):
        """All the updates in a ``scan``; metrics averaged over them."""
        (agent_state, buffer_state), metrics = jax.lax.scan(
            self.update,
            (agent_state, buffer_state),
            jax.random.split(key, self.num_updates),
        )
        return agent_state, buffer_state, jax.tree.map(jnp.mean, metrics)

    def skip_phase(self, agent_state, buffer_state, key):
        """No update: the states unchanged, the metrics zero."""
        shapes = jax.eval_shape(self.learn_phase, agent_state, buffer_state, key)[2]
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return agent_state, buffer_state, zeros

    def gated(self, ready, agent_state, buffer_state, key):
        """``(agent_state, buffer_state, metrics)`` after the updates where ``ready`` (a
        ``[]`` bool equal in every run, e.g. from :func:`jrl.core.parallel.all_runs`, so it stays
        a branch under the runner's ``vmap``), unchanged with zero metrics otherwise."""
        return jax.lax.cond(
            ready, self.learn_phase, self.skip_phase, agent_state, buffer_state, key
        )


class _OffPolicyLoop:
    """The pieces of :func:`off_policy`'s ``init`` and ``step`` (see its docstring)."""

    def __init__(self, agent, env, buffer, schedule, discount, beta, env_params, num_devices):
        self.agent, self.env, self.buffer, self.schedule = agent, env, buffer, schedule
        self.recurrent = agent.recurrent
        num_envs = env.num_envs
        if num_envs is None:
            raise ValueError(
                "off_policy needs a batched env: wrap it with "
                "jrl.core.wrappers.wrap_for_training(env, num_envs)"
            )
        for name, value in schedule._asdict().items():
            if name != "learning_starts" and int(value) <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if schedule.batch_size % num_devices:
            raise ValueError(
                f"batch_size = {schedule.batch_size} is not divisible by {num_devices} devices"
            )
        self.params = env.default_params if env_params is None else env_params
        self.spec = EnvSpec.from_env(env, self.params)
        self.accumulator = nstep_accumulator(int(schedule.n_step), 1.0)
        self.gamma_of = discount or (lambda agent_state: agent_state.hparams.gamma)
        self.updates = ReplayUpdates(
            agent,
            buffer,
            int(schedule.updates_per_iteration),
            int(schedule.batch_size) // int(num_devices),
            beta,
        )
        self.num_envs, self.num_devices = num_envs, int(num_devices)
        self.per_iteration = int(schedule.steps_per_iteration) * num_envs * int(num_devices)

    def env_step(self, agent_state, carry, key):
        """One step of the N envs: act, step, push to the n-step window, add to replay.
        ``carry``: ``(env_state, obs, nstep_state, buffer_state, acting_state)``, the last
        None for an agent without an acting state."""
        env_state, obs, nstep_state, buffer_state, acting = carry
        if self.recurrent is None:
            env_state, obs, transition, episodes = collect_step(
                self.agent, self.env, self.params, agent_state, env_state, obs, key
            )
        else:
            (env_state, obs, acting), transition, episodes = collect_recurrent_step(
                self.agent, self.env, self.params, agent_state, (env_state, obs, acting), key
            )
        nstep_state, item, _ = self.accumulator.push(
            nstep_state, transition, self.gamma_of(agent_state)
        )
        if buffer_state is not None:
            buffer_state = self.buffer.add(buffer_state, item)
        return (env_state, obs, nstep_state, buffer_state, acting), episodes

    def _empty_buffer(self, agent_state, ts, key):
        """The n-step window and an empty buffer, shaped from one traced transition."""
        if self.recurrent is None:
            action, act_info = jax.eval_shape(self.agent.act, agent_state, ts.observation, key)
        else:
            acting = self.recurrent.initial_state(self.num_envs)
            action, act_info, _ = jax.eval_shape(
                self.recurrent.act, agent_state, acting, ts.observation, key
            )
        example = jax.eval_shape(
            lambda: Transition(
                ts.observation,
                jnp.zeros(action.shape, action.dtype),
                ts.reward,
                ts.terminated,
                ts.truncated,
                ts.observation,
                jax.tree.map(jnp.zeros_like, act_info),
            )
        )
        nstep_state = self.accumulator.init(example)
        item = jax.eval_shape(lambda s, t: self.accumulator.push(s, t)[1], nstep_state, example)
        shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), item)
        return nstep_state, self.buffer.init(shapes)

    def init(self, key: PRNGKey) -> OffPolicyState:
        k_agent, k_env, k_warm, k_loop = jax.random.split(key, 4)
        agent_state = self.agent.init(k_agent, self.spec)
        env_state, ts = self.env.reset(k_env, self.params)
        nstep_state, buffer_state = self._empty_buffer(agent_state, ts, k_warm)
        n_step = int(self.schedule.n_step)
        acting = None if self.recurrent is None else self.recurrent.initial_state(self.num_envs)
        (env_state, obs, nstep_state, _, acting), _ = jax.lax.scan(  # fill the n-step window
            lambda c, k: self.env_step(agent_state, c, k),
            (env_state, ts.observation, nstep_state, None, acting),
            jax.random.split(k_warm, n_step - 1),
        )
        nan = jnp.full((), NO_EPISODE, jnp.float32)
        zero = jnp.zeros((), jnp.int32)
        warm = jnp.asarray((n_step - 1) * self.num_envs * self.num_devices, jnp.int32)
        extra = () if acting is None else (acting,)
        cls = OffPolicyState if acting is None else StatefulOffPolicyState
        return cls(
            agent_state,
            env_state,
            obs,
            buffer_state,
            nstep_state,
            k_loop,
            zero,
            warm,
            zero,
            nan,
            nan,
            *extra,
        )

    def step(self, state: OffPolicyState) -> tuple[OffPolicyState, dict[str, jax.Array]]:
        key, k_rollout, k_learn = jax.random.split(state.key, 3)
        acting = None if self.recurrent is None else state.acting_state
        carry = (state.env_state, state.observation, state.nstep_state, state.buffer_state)
        (env_state, obs, nstep_state, buffer_state, acting), episodes = jax.lax.scan(
            lambda c, k: self.env_step(state.agent_state, c, k),
            (*carry, acting),
            jax.random.split(k_rollout, int(self.schedule.steps_per_iteration)),
        )
        env_steps = state.env_steps + self.per_iteration
        # unbatched over runs: a real branch under the runner's vmap
        ready = parallel.all_runs(env_steps >= self.schedule.learning_starts)
        agent_state, buffer_state, metrics = self.updates.gated(
            ready, state.agent_state, buffer_state, k_learn
        )
        ret, length, ep_metrics = episode_metrics(
            episodes, state.last_episode_return, state.last_episode_length
        )
        updates = jnp.where(ready, int(self.schedule.updates_per_iteration), 0).astype(jnp.int32)
        num_updates = state.num_updates + updates
        extra = () if acting is None else (acting,)
        new_state = type(state)(
            agent_state,
            env_state,
            obs,
            buffer_state,
            nstep_state,
            key,
            state.iteration + 1,
            env_steps,
            num_updates,
            ret,
            length,
            *extra,
        )
        metrics = {
            **metrics,
            **ep_metrics,
            "train/env_steps": env_steps,
            "train/updates": num_updates,
        }
        return new_state, metrics

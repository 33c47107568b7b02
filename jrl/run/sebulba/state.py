"""The Sebulba learner's train states: :class:`SebulbaState` stacked ``[R, ...]`` (replicated
over learner devices, never with a device axis), so the run folder, metrics, checkpoints and
evaluation of :mod:`jrl.app.execution` serve both runners."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

from jrl.core.types import PRNGKey, PyTree, Transition
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec
from jrl.run.anakin import compiler_options
from jrl.run.algorithm import NO_EPISODE

__all__ = ["SebulbaState", "abstract_states", "init_states"]


@struct.dataclass
class SebulbaState:
    """One run's learner state (stacked ``[R, ...]`` for R runs)."""

    agent_state: PyTree
    key: PRNGKey  # the learner's key (learn keys fold in the iteration)
    act_key: PRNGKey  # actors' keys fold in iteration, thread and step
    env_seed: jax.Array  # [] int32 the run's host env seed (env i of thread a: seed + a*n + i)
    iteration: jax.Array  # [] int32 updates done (= the parameter version)
    env_steps: jax.Array  # [] int32 env transitions learned from (all envs)
    last_episode_return: jax.Array  # [] float32 (NaN before the first episode)
    last_episode_length: jax.Array  # [] float32
    replay: PyTree = None  # the learner's replay buffer (agents with an ActorReplay), or None

    @property
    def env_state(self):  # evaluation reads no env statistics from a host-env run
        return None


def _init(agent: Agent, spec: EnvSpec, replay=None) -> Callable[[PRNGKey], SebulbaState]:
    def init(key):
        k_agent, k_env, k_loop, k_act = jax.random.split(key, 4)
        nan = jnp.full((), NO_EPISODE, jnp.float32)
        agent_state = agent.init(k_agent, spec)
        return SebulbaState(
            agent_state,
            k_loop,
            k_act,
            jax.random.randint(k_env, (), 0, 2**30, jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((), jnp.int32),
            nan,
            nan,
            None if replay is None else _empty_replay(replay, agent_state, spec, k_act),
        )

    return init


def _empty_replay(replay, agent_state, spec: EnvSpec, key) -> PyTree:
    """The learner's empty buffer, its items shaped as ``replay.prepare`` makes them from a
    trajectory of one step of one env."""
    obs = networks.example_observation(spec.observation_space)  # [1, ...]
    action, info = jax.eval_shape(replay.act, agent_state, obs, key, jnp.zeros(1, jnp.int32))

    def one_step():
        zeros = lambda x: jnp.zeros((1,) + tuple(x.shape), x.dtype)
        flags = jnp.zeros((1, 1), bool)
        return Transition(
            jax.tree.map(lambda x: x[None], obs),
            zeros(action),
            jnp.zeros((1, 1), jnp.float32),
            flags,
            flags,
            jax.tree.map(lambda x: x[None], obs),
            jax.tree.map(zeros, info),
        )

    items, _ = jax.eval_shape(lambda b: replay.prepare(agent_state, b, key), one_step())
    return replay.buffer.init(
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[2:], x.dtype), items)
    )


def init_states(agent: Agent, spec: EnvSpec, keys: jax.Array, replay=None) -> SebulbaState:
    """``[R]`` states, one per key (sequential ``lax.map``, as the Anakin runner does); with
    ``replay`` (:class:`jrl.run.builders.ActorReplay`) each holds an empty replay buffer."""
    init = _init(agent, spec, replay)
    program = jax.jit(lambda ks: jax.lax.map(init, ks)).lower(keys).compile(compiler_options())
    return program(keys)


def abstract_states(agent: Agent, spec: EnvSpec, keys: jax.Array, replay=None) -> SebulbaState:
    """Shapes and dtypes of :func:`init_states`'s result; nothing is allocated."""
    return jax.eval_shape(lambda ks: jax.lax.map(_init(agent, spec, replay), ks), keys)

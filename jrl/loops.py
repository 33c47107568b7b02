"""Loops: an agent plus an environment become an algorithm.

An :class:`Algorithm` is ``init(key) -> train_state`` and
``step(train_state) -> (train_state, metrics)``, both pure and jittable; a
runner (:mod:`jrl.run.anakin`) decides how to execute them (scan, vmap over
seeds, devices). ``metrics`` is a flat dict of scalars per step.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jrl.agent import Agent, EnvSpec
from jrl.env import Environment
from jrl.types import EPISODE_DONE, EPISODE_LENGTH, EPISODE_RETURN, FINAL_OBSERVATION, PRNGKey, PyTree, Transition

__all__ = ["Algorithm", "OnPolicyState", "on_policy", "episode_metrics"]


class Algorithm(NamedTuple):
    """A pure training algorithm; ``env_steps_per_step`` is the number of env
    transitions one ``step`` collects (for one seed)."""

    init: Callable[[PRNGKey], PyTree]
    step: Callable[[PyTree], tuple[PyTree, dict[str, jax.Array]]]
    env_steps_per_step: int


@struct.dataclass
class OnPolicyState:
    """Everything an on-policy run carries from one iteration to the next."""

    agent_state: PyTree  # the agent's params, optimiser state, hparams
    env_state: PyTree  # batched env state [N, ...] (wrappers included)
    observation: PyTree  # [N, *obs_shape] current observations
    key: PRNGKey  # the loop's key; split every iteration
    iteration: jax.Array  # [] int32 iterations done
    env_steps: jax.Array  # [] int32 env transitions collected (all envs)
    last_episode_return: jax.Array  # [] float32 mean return of the latest finished episodes (NaN before any)
    last_episode_length: jax.Array  # [] float32 mean length of the latest finished episodes (NaN before any)


def episode_metrics(info: dict[str, Any], previous_return: jax.Array, previous_length: jax.Array):
    """Mean return/length of the episodes that finished in a rollout.

    ``info`` holds EpisodeStatistics' ``[T, N]`` arrays. When no episode
    finished, the previous values are carried forward. Returns
    ``(mean_return, mean_length, num_finished)``.
    """
    done = info[EPISODE_DONE]
    count = done.sum()
    denom = jnp.maximum(count, 1)
    ret = jnp.where(count > 0, (info[EPISODE_RETURN] * done).sum() / denom, previous_return)
    length = jnp.where(count > 0, (info[EPISODE_LENGTH] * done).sum() / denom, previous_length)
    return ret.astype(jnp.float32), length.astype(jnp.float32), count


def on_policy(agent: Agent, env: Environment, num_steps: int, env_params: PyTree = None) -> Algorithm:
    """Collect ``num_steps`` steps from each of the env's N envs, then learn once.

    ``env`` must be batched (a :class:`~jrl.wrappers.VmapEnv` inside, as
    :func:`jrl.wrappers.wrap_for_training` builds) with AutoReset and
    EpisodeStatistics. The batch handed to ``agent.learn`` is a time-major
    ``Transition`` ``[T, N]`` whose ``next_observation`` is the true successor
    (the final observation where an episode ended), ``extras`` the agent's
    ``act_info``.
    """
    num_envs = env.num_envs
    if num_envs is None:
        raise ValueError("on_policy needs a batched env: wrap it with jrl.wrappers.wrap_for_training(env, num_envs)")
    if int(num_steps) <= 0:
        raise ValueError(f"num_steps must be positive, got {num_steps}")
    params = env.default_params if env_params is None else env_params
    spec = EnvSpec.from_env(env, params)

    def init(key: PRNGKey) -> OnPolicyState:
        k_agent, k_env, k_loop = jax.random.split(key, 3)
        env_state, ts = env.reset(k_env, params)
        nan = jnp.full((), jnp.nan, jnp.float32)  # no episode finished yet
        return OnPolicyState(agent.init(k_agent, spec), env_state, ts.observation, k_loop,
                             jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), nan, nan)

    def env_step(agent_state, carry, key):
        env_state, obs = carry
        k_act, k_env = jax.random.split(key)
        action, act_info = agent.act(agent_state, obs, k_act)
        env_state, ts = env.step(k_env, env_state, action, params)
        transition = Transition(obs, action, ts.reward, ts.terminated, ts.truncated,
                                ts.info[FINAL_OBSERVATION], act_info)
        episodes = {k: ts.info[k] for k in (EPISODE_RETURN, EPISODE_LENGTH, EPISODE_DONE)}
        return (env_state, ts.observation), (transition, episodes)

    def step(state: OnPolicyState) -> tuple[OnPolicyState, dict[str, jax.Array]]:
        key, k_rollout, k_learn = jax.random.split(state.key, 3)
        (env_state, obs), (batch, episodes) = jax.lax.scan(
            lambda c, k: env_step(state.agent_state, c, k),
            (state.env_state, state.observation), jax.random.split(k_rollout, num_steps))
        agent_state, metrics = agent.learn(state.agent_state, batch, k_learn)
        ret, length, count = episode_metrics(episodes, state.last_episode_return, state.last_episode_length)
        new_state = OnPolicyState(agent_state, env_state, obs, key, state.iteration + 1,
                                  state.env_steps + num_steps * num_envs, ret, length)
        metrics = {**metrics, "train/episode_return": ret, "train/episode_length": length,
                   "train/episodes": count, "train/env_steps": new_state.env_steps}
        return new_state, metrics

    return Algorithm(init, step, int(num_steps) * num_envs)

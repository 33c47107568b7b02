"""What every loop is made of: the :class:`Algorithm` a runner executes (``init`` and
``step``, pure and jittable), one step of the N envs with the behaviour policy
(:func:`collect_step`, :func:`collect_recurrent_step`) and the episode metrics of a rollout
(:func:`episode_metrics`). :mod:`jrl.run.loops` builds the on- and off-policy loops from them;
agents with loops of their own (search, evolution) use them too."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jrl.core import parallel
from jrl.core.env import Environment
from jrl.core.multi_agent_env import AGENT_EPISODE_RETURN
from jrl.core.types import (
    EPISODE_DONE,
    EPISODE_LENGTH,
    EPISODE_RETURN,
    FINAL_OBSERVATION,
    PRNGKey,
    PyTree,
    Transition,
)
from jrl.parts import networks
from jrl.parts.agent import Agent

__all__ = [
    "Algorithm",
    "NO_EPISODE",
    "PER_AGENT_RETURN",
    "agent_episode_metrics",
    "agent_hparams",
    "collect_recurrent_step",
    "collect_step",
    "episode_metrics",
]


class Algorithm(NamedTuple):
    """A pure training algorithm. ``step`` is one iteration; ``env_steps_per_iteration`` is
    the number of env transitions it collects (for one seed, all devices);
    ``with_hparams(train_state, values)`` sets the named hyperparameters of one run's state
    (the runner vmaps it over runs for a sweep; the loops delegate to the agent's
    :attr:`~jrl.parts.agent.Agent.with_hparams`). ``independent_runs``: whether each run's
    ``step`` needs only its own state (the runner may then spread the runs over the CPU's
    cores); False for a population that exchanges state over the runs axis (PBT)."""

    init: Callable[[PRNGKey], PyTree]
    step: Callable[[PyTree], tuple[PyTree, dict[str, jax.Array]]]
    env_steps_per_iteration: int
    with_hparams: Callable[[PyTree, dict[str, Any]], PyTree]
    independent_runs: bool = True


def agent_hparams(agent: Agent) -> Callable[[PyTree, dict[str, Any]], PyTree]:
    """``with_hparams`` of a loop state with an ``agent_state`` field."""

    def with_hparams(state, values):
        return state.replace(agent_state=agent.with_hparams(state.agent_state, values))

    return with_hparams


PER_AGENT_RETURN = "train/episode_return/"
"""Prefix of the per-agent return metrics of a multi-agent run (NaN before the first episode,
like the team's)."""


def agent_episode_metrics(info: dict[str, Any], previous: jax.Array, names: tuple[str, ...]):
    """Each agent's mean return ``[A]`` of the episodes that finished in a rollout, from
    ``info[AGENT_EPISODE_RETURN]`` ``[T, N, A]`` and ``info["episode_done"]`` ``[T, N]``
    (all-reduced over devices; ``previous`` carried forward when none finished). Returns
    ``(returns, metrics)`` with one ``train/episode_return/<agent name>`` metric per agent."""
    done = info[EPISODE_DONE]
    count, sums = parallel.psum(
        (done.sum(), (info[AGENT_EPISODE_RETURN] * done[..., None]).sum(axis=(0, 1)))
    )
    mean = jnp.where(count > 0, sums / jnp.maximum(count, 1), previous).astype(jnp.float32)
    return mean, {f"{PER_AGENT_RETURN}{name}": mean[i] for i, name in enumerate(names)}


def episode_metrics(info: dict[str, Any], previous_return: jax.Array, previous_length: jax.Array):
    """Mean return/length of the episodes that finished in a rollout.

    ``info`` holds EpisodeStatistics' ``[T, N]`` arrays (this device's envs;
    the counts and sums are all-reduced over devices). When no episode
    finished, the previous values are carried forward (NaN before the first
    episode: see :data:`NO_EPISODE`). Returns ``(mean_return, mean_length,
    metrics)`` with the ``train/episode_*`` metrics.
    """
    done = info[EPISODE_DONE]
    count, ret_sum, len_sum = parallel.psum(
        (
            done.sum(),
            (info[EPISODE_RETURN] * done).sum(),
            (info[EPISODE_LENGTH] * done).sum().astype(jnp.float32),
        )
    )
    denom = jnp.maximum(count, 1)
    ret = jnp.where(count > 0, ret_sum / denom, previous_return).astype(jnp.float32)
    length = jnp.where(count > 0, len_sum / denom, previous_length).astype(jnp.float32)
    return (
        ret,
        length,
        {"train/episode_return": ret, "train/episode_length": length, "train/episodes": count},
    )


NO_EPISODE = float("nan")
"""The return/length reported before any episode has finished."""


def collect_step(
    agent: Agent,
    env: Environment,
    params: PyTree,
    agent_state: PyTree,
    env_state: PyTree,
    observation: PyTree,
    key: PRNGKey,
):
    """Acts with the behaviour policy and steps the N envs once.

    Returns ``(env_state, next_observation, transition, episodes)``: the
    ``Transition`` ``[N]`` has the true successor as ``next_observation``
    (``info["final_observation"]``) and ``act_info`` as ``extras``;
    ``episodes`` holds EpisodeStatistics' per-env arrays for
    :func:`episode_metrics`.
    """
    k_act, k_env = jax.random.split(key)
    action, act_info = agent.act(agent_state, observation, k_act)
    env_state, ts = env.step(k_env, env_state, action, params)
    return (env_state, ts.observation, *_recorded(observation, action, act_info, ts))


def _recorded(observation, action, act_info, ts):
    """``(transition, episodes)`` of one step of the N envs (see :func:`collect_step`)."""
    transition = Transition(
        observation,
        action,
        ts.reward,
        ts.terminated,
        ts.truncated,
        ts.info[FINAL_OBSERVATION],
        act_info,
    )
    keys = (EPISODE_RETURN, EPISODE_LENGTH, EPISODE_DONE, AGENT_EPISODE_RETURN)
    episodes = {k: ts.info[k] for k in keys if k in ts.info}
    return transition, episodes


def collect_recurrent_step(
    agent: Agent,
    env: Environment,
    params: PyTree,
    agent_state: PyTree,
    carry: tuple[PyTree, PyTree, PyTree],
    key: PRNGKey,
):
    """:func:`collect_step` for an agent with memory: ``carry`` is ``(env_state,
    observation, acting_state)``; acts with ``agent.recurrent.act`` and returns ``(carry,
    transition, episodes)`` with the new acting state put back to
    ``agent.recurrent.initial_state`` for every env whose episode ended on this step."""
    env_state, observation, acting_state = carry
    k_act, k_env = jax.random.split(key)
    action, act_info, acting_state = agent.recurrent.act(
        agent_state, acting_state, observation, k_act
    )
    env_state, ts = env.step(k_env, env_state, action, params)
    initial = agent.recurrent.initial_state(ts.done.shape[0])
    acting_state = networks.reset_core_state(acting_state, initial, ts.done)
    transition, episodes = _recorded(observation, action, act_info, ts)
    return (env_state, ts.observation, acting_state), transition, episodes

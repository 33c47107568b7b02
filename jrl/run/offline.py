"""The offline loop: an agent learns from a fixed dataset (:mod:`jrl.run.datasets`) and only
plays greedy episodes in the env, to report how well it does.

Each iteration runs ``updates_per_iteration`` updates, each on ``batch_size`` transitions
drawn uniformly (with replacement) from the dataset on the device, then steps the N training
envs ``eval_steps_per_iteration`` times with the agent's greedy ``policy``. Those steps are
never learned from: they give the run's ``train/episode_return`` (the mean return of the
greedy episodes that ended in the iteration), so the usual results, progress line, periodic
evaluation, checkpoints and resume work as for any other loop. ``env_steps`` counts them, so
a config's ``total_steps`` sets the run's length in greedy env steps.

The dataset (:class:`DatasetSource`) is needed only when ``step`` is traced, so a trained run
is evaluated, rendered and exported without it; it becomes a constant of the compiled program
(it is the same for every run and never changes), checked against the env's spaces and,
where the run recorded one, the file's SHA-256. A fresh run checks it earlier, before its
folder is made (``OfflineConfig.check_env`` in ``agents/offline/common.py``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core.env import Environment
from jrl.core.types import PRNGKey, PyTree
from jrl.parts.agent import Agent, EnvSpec
from jrl.parts.buffers import Sample
from jrl.parts.nstep import NStepTransition
from jrl.run.algorithm import NO_EPISODE, Algorithm, agent_hparams, collect_step, episode_metrics
from jrl.run.datasets import check_dataset, load_dataset

__all__ = ["DatasetSource", "OfflineSchedule", "OfflineState", "offline"]


class OfflineSchedule(NamedTuple):
    """How an offline loop interleaves updates and greedy env steps."""

    updates_per_iteration: int  # gradient updates per iteration
    batch_size: int  # transitions per update
    eval_steps_per_iteration: int  # greedy steps of each env per iteration (not learned from)


class DatasetSource:
    """A dataset file read once, on first use: ``path`` and the SHA-256 it must have
    (``digest``; None: not checked). :meth:`arrays` gives the checked numpy arrays."""

    def __init__(self, path: str, digest: str | None = None):
        self.path, self.digest = str(path), digest or None
        self._arrays: dict[str, np.ndarray] | None = None

    def arrays(self, spec: EnvSpec) -> dict[str, np.ndarray]:
        """The dataset's :data:`jrl.run.datasets.FIELDS` arrays ``[N, ...]``; ``ValueError`` in
        one line for a missing, changed or unreadable file, or one of another env's shapes."""
        if self._arrays is None:
            data = load_dataset(self.path, self.digest)
            check_dataset(data, spec.observation_space, spec.action_space, self.path)
            self._arrays = data.arrays
        return self._arrays


@struct.dataclass
class OfflineState:
    """Everything an offline run carries from one iteration to the next (the dataset is not
    part of it: it is a constant of the program)."""

    agent_state: PyTree  # the agent's params, target params, optimiser state, hparams
    env_state: PyTree  # batched env state [N, ...] of the greedy episodes
    observation: PyTree  # [N, *obs_shape] current observations
    key: PRNGKey  # the loop's key; split every iteration
    iteration: jax.Array  # [] int32 iterations done
    env_steps: jax.Array  # [] int32 greedy env steps taken (all envs)
    num_updates: jax.Array  # [] int32 gradient updates done
    last_episode_return: jax.Array  # [] float32 mean greedy return of the latest episodes (or NaN)
    last_episode_length: jax.Array  # [] float32 mean length of the latest episodes (or NaN)


def offline(
    agent: Agent,
    env: Environment,
    source: DatasetSource,
    schedule: OfflineSchedule,
    *,
    discount: Callable[[PyTree], jax.Array] | None = None,
    env_params: PyTree = None,
) -> Algorithm:
    """The offline loop (see the module docstring). ``agent.learn(agent_state, Sample, key)``
    receives :class:`~jrl.parts.nstep.NStepTransition` items ``[batch_size]`` whose
    ``discount`` is ``gamma * (1 - terminated)`` with ``gamma = discount(agent_state)``
    (default ``agent_state.hparams.gamma``), so a truncated episode bootstraps from its final
    observation; ``weights`` are ones and ``indices`` the dataset rows. ``env`` must be
    batched (:func:`jrl.core.wrappers.wrap_for_training`) and ``agent.policy`` set."""
    loop = _OfflineLoop(agent, env, source, schedule, discount, env_params)
    return Algorithm(loop.init, loop.step, loop.per_iteration, agent_hparams(agent))


class _OfflineLoop:
    """The pieces of :func:`offline`'s ``init`` and ``step``."""

    def __init__(self, agent, env, source, schedule, discount, env_params):
        if env.num_envs is None:
            raise ValueError(
                "offline needs a batched env: wrap it with "
                "jrl.core.wrappers.wrap_for_training(env, num_envs)"
            )
        for name, value in schedule._asdict().items():
            if int(value) <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if agent.policy is None:
            raise ValueError("the offline loop plays the agent's greedy policy: set agent.policy")
        self.agent, self.env, self.source, self.schedule = agent, env, source, schedule
        self.params = env.default_params if env_params is None else env_params
        self.spec = EnvSpec.from_env(env, self.params)
        self.gamma_of = discount or (lambda agent_state: agent_state.hparams.gamma)
        self.per_iteration = int(schedule.eval_steps_per_iteration) * env.num_envs

        def greedy(agent_state, obs, key):
            return agent.policy(agent_state.params, obs, key), {}

        self.greedy = Agent(init=None, act=greedy, learn=None)

    def init(self, key: PRNGKey) -> OfflineState:
        k_agent, k_env, k_loop = jax.random.split(key, 3)
        env_state, ts = self.env.reset(k_env, self.params)
        nan = jnp.full((), NO_EPISODE, jnp.float32)
        zero = jnp.zeros((), jnp.int32)
        agent_state = self.agent.init(k_agent, self.spec)
        return OfflineState(
            agent_state, env_state, ts.observation, k_loop, zero, zero, zero, nan, nan
        )

    def sample(self, agent_state, key) -> Sample:
        """``batch_size`` dataset rows drawn uniformly, as a :class:`Sample` of
        NStepTransitions."""
        data = {k: jnp.asarray(v) for k, v in self.source.arrays(self.spec).items()}
        size = data["reward"].shape[0]
        rows = jax.random.randint(key, (int(self.schedule.batch_size),), 0, size)
        pick = {k: v[rows] for k, v in data.items()}
        terminated = pick["terminated"].astype(bool)
        gamma = jnp.asarray(self.gamma_of(agent_state), jnp.float32)
        items = NStepTransition(
            pick["observation"],
            pick["action"],
            pick["reward"].astype(jnp.float32),
            gamma * (1.0 - terminated.astype(jnp.float32)),
            pick["next_observation"],
            terminated,
            pick["truncated"].astype(bool),
            jnp.ones_like(rows),
        )
        return Sample(items, rows.astype(jnp.int32), jnp.ones(rows.shape, jnp.float32))

    def update(self, agent_state, key):
        """One gradient update on a batch drawn from the dataset."""
        k_sample, k_learn = jax.random.split(key)
        learned = self.agent.learn(agent_state, self.sample(agent_state, k_sample), k_learn)
        return learned.agent_state, learned.metrics

    def step(self, state: OfflineState) -> tuple[OfflineState, dict[str, jax.Array]]:
        key, k_learn, k_play = jax.random.split(state.key, 3)
        agent_state, metrics = jax.lax.scan(
            self.update,
            state.agent_state,
            jax.random.split(k_learn, int(self.schedule.updates_per_iteration)),
        )
        metrics = jax.tree.map(jnp.mean, metrics)

        def play(carry, k):
            env_state, obs = carry
            env_state, obs, _, episodes = collect_step(
                self.greedy, self.env, self.params, agent_state, env_state, obs, k
            )
            return (env_state, obs), episodes

        (env_state, obs), episodes = jax.lax.scan(
            play,
            (state.env_state, state.observation),
            jax.random.split(k_play, int(self.schedule.eval_steps_per_iteration)),
        )
        ret, length, ep_metrics = episode_metrics(
            episodes, state.last_episode_return, state.last_episode_length
        )
        env_steps = state.env_steps + self.per_iteration
        num_updates = state.num_updates + int(self.schedule.updates_per_iteration)
        new_state = OfflineState(
            agent_state,
            env_state,
            obs,
            key,
            state.iteration + 1,
            env_steps,
            num_updates,
            ret,
            length,
        )
        metrics = {
            **metrics,
            **ep_metrics,
            "train/env_steps": env_steps,
            "train/updates": num_updates,
        }
        return new_state, metrics

"""Ape-X DQN (Horgan et al., 2018): many actors exploring with different epsilons feed one
prioritized replay held by the learner.

The learner is :mod:`agents.dqn`'s agent (double Q, dueling, n-step, prioritized replay, and
the C51/QR/noisy heads as flags), unchanged. What Ape-X adds is on the actors' side, run by
the Sebulba runner (``--runner sebulba``, actor threads or ``--actors ray:N`` processes)
through this module's :class:`jrl.run.builders.ActorReplay`:

- **Per-env epsilons.** Env ``i`` of the run's ``N = num_envs`` (over all actors: actor ``a``
  with ``n`` envs owns ``a * n .. a * n + n - 1``) acts epsilon-greedily with the fixed
  ``eps_i = epsilon_base ** (1 + epsilon_alpha * i / (N - 1))`` (:func:`apex_epsilons`;
  0.4 and 7 in the paper). Ape-X gives one epsilon to each single-env actor; with several
  envs per actor each env slot is such an actor, so the spread of epsilons does not depend
  on how the envs are split among actors. DQN's decaying epsilon is not used.
- **Actor-side n-step transitions and priorities.** Each actor turns its block of
  ``steps_per_iteration`` steps into one n-step transition per step
  (:func:`jrl.parts.nstep.trajectory_nsteps`; the last ``n - 1`` of a block sum fewer rewards and
  bootstrap from the block's last successor) and computes their initial priorities with
  DQN's own TD loss (:func:`agents.dqn.td_loss`) under the parameters it acted with, as
  Ape-X's actors do; transitions and priorities travel to the learner (observations in
  bfloat16 with ``--transfer bfloat16``).
- **Learner.** Each iteration inserts every actor's block with its priorities into the
  prioritized buffer on the learner device (a FIFO ring of ``buffer_size``: the oldest
  items go first), then runs ``updates_per_iteration`` updates of ``batch_size`` (sample,
  learn, write back priorities) once ``learning_starts`` items are in, and publishes the new
  parameters (and target parameters, which the actors' priorities need) to the actors.

The replay ratio is bounded (``updates_per_iteration`` per block of
``num_envs * steps_per_iteration`` steps) where Ape-X's learner runs freely: a bounded ratio
keeps a run reproducible (with ``--max-staleness 0`` a run is a deterministic function of its
seed, so it resumes exactly and the same run on threads and on Ray actors is equal), and
learning per env step does not depend on how fast the machine's actors are.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from jrl.agents.value.dqn import (
    CLASSIC_CONTROL,
    DQNConfig,
    make_dqn,
    q_apply,
    q_network,
    replay_buffer,
    td_loss,
)

from jrl.core import parallel
from jrl.core.types import split_action_mask
from jrl.ops.action_distributions import epsilon_greedy
from jrl.parts import nstep
from jrl.parts.agent import EnvSpec
from jrl.parts.agent_config import Check
from jrl.run.builders import ActorReplay, Built, training_env
from jrl.run.loops import ReplaySchedule, ReplayUpdates, off_policy

__all__ = ["ApexConfig", "apex_epsilons", "build", "initial_priorities"]


def apex_epsilons(index, count: int, base=0.4, alpha=7.0) -> jax.Array:
    """Ape-X's exploration rates ``base ** (1 + alpha * i / (count - 1))`` of envs ``index``
    (``[n]`` int, each in ``0 .. count - 1``) among ``count``; ``base`` for a single env."""
    frac = jnp.asarray(index, jnp.float32) / max(count - 1, 1)
    return jnp.asarray(base, jnp.float32) ** (1.0 + alpha * frac)


def initial_priorities(loss_fn, state, batch: nstep.NStepTransition, key) -> jax.Array:
    """The priorities ``[T, n]`` of n-step transitions ``[T, n, ...]`` under ``state``'s
    parameters and target parameters: the head's priority of DQN's TD loss ``loss_fn``
    (:func:`agents.dqn.td_loss`; ``|TD error|`` for the scalar head)."""
    T, n = batch.reward.shape
    flat = jax.tree.map(lambda x: x.reshape((T * n,) + x.shape[2:]), batch)
    weights = jnp.ones((T * n,), jnp.float32)
    _, (priority, _) = loss_fn(state.params, state.target_params, flat, weights, key)
    return priority.reshape(T, n)


CARTPOLE = {
    **CLASSIC_CONTROL,
    "num_envs": 8,
    "steps_per_iteration": 8,
    "updates_per_iteration": 6,
    "learning_starts": 2_000,
    "learning_rate": 5e-4,
}
"""Ape-X on CartPole-v1 and Acrobot-v1: the DQN family's classic-control preset (1e5 steps,
120-84 ReLU, dueling, double, 3-step, lr annealed, batches of 128, a buffer of 1e4, the target
copied every 50 updates) with 8 envs pushing blocks of 8 steps and 6 updates per block (a
replay ratio of 12, as that preset's 12.8), prioritized replay, and half its learning rate
(5e-4: at 1e-3 the greedy return of some seeds fell back late in training)."""


@dataclasses.dataclass(frozen=True)
class ApexConfig(DQNConfig):
    """Ape-X DQN settings: DQN's learner with prioritized replay and 3-step double-Q returns;
    actors with fixed per-env epsilons push blocks of ``steps_per_iteration`` steps per env.
    DQN's epsilon schedule (``epsilon_start``, ``epsilon_end``, ``exploration_fraction``) is
    not used: see ``epsilon_base`` and ``epsilon_alpha``."""

    RUNNERS: ClassVar[tuple[str, ...]] = ("sebulba",)
    MAX_DEVICES: ClassVar[int | None] = 1  # the replay lives on the learner's one device
    PRESETS: ClassVar[dict[str, dict]] = {"CartPole-v1": CARTPOLE, "Acrobot-v1": CARTPOLE}

    prioritized: bool = True
    n_step: int = 3
    dueling: bool = True
    epsilon_base: float = 0.4
    """Ape-X's exploration: env i of N acts with epsilon_base ** (1 + epsilon_alpha * i / (N-1))."""
    epsilon_alpha: float = 7.0
    """Ape-X's exploration exponent (see epsilon_base)."""

    @property
    def num_steps(self) -> int:
        """Steps of every env in one pushed block (the Sebulba runner's trajectory length)."""
        return self.steps_per_iteration

    @property
    def num_updates(self) -> int:
        """Gradient updates in a run: ``updates_per_iteration`` in every iteration after whose
        insertion ``learning_starts`` items (one per env step) are in the buffer."""
        first = max(-(-self.learning_starts // self.env_steps_per_iteration), 1)  # 1-based
        return max(self.num_iterations - first + 1, 0) * self.updates_per_iteration

    def checks(self) -> list[Check]:
        block = self.num_envs * self.steps_per_iteration
        return super().checks() + [
            (
                self.recurrent == "none",
                f"apex has a feed-forward Q-network: recurrent must be 'none', got "
                f"{self.recurrent!r}",
            ),
            (
                0.0 <= self.epsilon_base <= 1.0,
                f"epsilon_base must lie in [0, 1], got {self.epsilon_base}",
            ),
            (self.epsilon_alpha >= 0, f"epsilon_alpha must be >= 0, got {self.epsilon_alpha}"),
            (
                self.buffer_size >= block,
                f"buffer_size = {self.buffer_size} cannot hold one pushed block (num_envs * "
                f"steps_per_iteration = {block})",
            ),
        ]


def build(config: ApexConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles Ape-X DQN on ``env`` (Discrete actions): DQN's agent, acting with Ape-X's
    per-env epsilons, and the :class:`~jrl.run.builders.ActorReplay` the Sebulba runner drives."""
    config.validate()
    if num_devices != 1:
        raise ValueError(
            f"apex's learner holds its replay on one device: drop --devices ({num_devices})"
        )
    obs_space, num_actions = EnvSpec.from_env(env, env_params).value_based("apex")
    env, spec = training_env(config, env, env_params, 1)
    head = config.head()
    network = q_network(config, num_actions, obs_space, head)
    dqn = make_dqn(network, config, head)
    apply, loss_fn = q_apply(network), td_loss(q_apply(network), head, config.double_q)
    noisy, count = config.noisy, config.num_envs
    base, alpha = config.epsilon_base, config.epsilon_alpha

    def act(state, obs, key, env_index):
        """Epsilon-greedy on ``[n]`` observations, env ``env_index[i]`` with its own epsilon."""
        obs, mask = split_action_mask(obs)
        k_noise, k_explore = jax.random.split(key) if noisy else (None, key)
        q = head.q_values(apply(state.params, obs, k_noise))
        eps = apex_epsilons(env_index, count, base, alpha)
        keys = parallel.local_keys(k_explore, q.shape[0])
        return epsilon_greedy(keys, q, eps, mask), {}

    def prepare(state, batch, key):
        items = nstep.trajectory_nsteps(batch, state.hparams.gamma, config.n_step)
        return items, initial_priorities(loss_fn, state, items, key)

    def own_act(state, obs, key):  # a batch of envs on its own: envs 0 .. n-1
        n = jax.tree.leaves(obs)[0].shape[0]
        return act(state, obs, key, jnp.arange(n, dtype=jnp.int32))

    def learn(state, sample, key):  # DQN's, without its (unused) epsilon schedule's metric
        out = dqn.learn(state, sample, key)
        metrics = {k: v for k, v in out.metrics.items() if k != "train/epsilon"}
        return out._replace(metrics=metrics)

    agent = dqn._replace(act=own_act, learn=learn)
    buffer, beta = replay_buffer(config, 1)
    updates = ReplayUpdates(agent, buffer, config.updates_per_iteration, config.batch_size, beta)
    replay = ActorReplay(act, prepare, buffer, updates, config.learning_starts)
    # Built's algorithm: the same agent in the one-process off-policy loop, which the Sebulba
    # runner (the only one apex runs on, see ApexConfig.RUNNERS) does not call
    schedule = ReplaySchedule(
        config.steps_per_iteration,
        config.updates_per_iteration,
        config.learning_starts,
        config.batch_size,
        config.n_step,
    )
    algorithm = off_policy(agent, env, buffer, schedule, beta=beta, env_params=env_params)
    return Built(algorithm, agent, env, env_params, spec, network, replay=replay)

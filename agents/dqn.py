"""Deep Q-Networks (Mnih et al., 2015) with the usual improvements as flags.

Double Q-learning (van Hasselt et al., 2016; on by default), a dueling head
(Wang et al., 2016), n-step returns, proportional prioritised replay (Schaul
et al., 2016; beta annealed linearly to 1 over training), hard or Polyak
target updates, epsilon-greedy exploration with a linear schedule, Huber or
MSE loss, Adam with global-norm gradient clipping.

Loop (:func:`jrl.loops.off_policy`): each iteration collects
``steps_per_iteration`` steps from each of ``num_envs`` envs into replay, then
does ``updates_per_iteration`` updates on batches of ``batch_size``.

n-step returns are built while collecting, by the loop's
:func:`jrl.buffers.nstep_accumulator` (so the buffer stores
``NStepTransition``s): the target is ``reward + discount * Q_target(next_obs,
a*)``, where ``discount`` is ``gamma^m`` (``m <= n`` steps summed, fewer where
the episode ended) and 0 after a termination; a truncation stops the sum and
bootstraps from the episode's final observation.

Epsilon decays linearly from ``epsilon_start`` to ``epsilon_end`` over the
first ``exploration_fraction`` of the *updates* (the agent counts its
updates; the contract gives ``act`` no env-step count). Updates start at
``learning_starts`` env steps and then happen at a fixed rate, so this is the
same as a linear decay over env steps from ``learning_starts`` on.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import jax
import jax.numpy as jnp
import optax
import tyro
from flax import struct

from jrl import buffers, networks, parallel, spaces
from jrl import config as cfg
from jrl.actor_critic import Built, make_optimizer
from jrl.agent import Agent, EnvSpec
from jrl.loops import PRIORITIES, off_policy
from jrl.types import PyTree
from jrl.wrappers import wrap_for_training

__all__ = ["DQNConfig", "DQNHParams", "DQNState", "PRESETS", "SWEEPABLE", "build", "epsilon_schedule",
           "make_dqn", "q_targets", "update_target"]


@struct.dataclass
class DQNHParams:
    """Hyperparameters that may be vmapped (swept) without recompiling; all [] float32."""

    learning_rate: jax.Array
    gamma: jax.Array
    epsilon_start: jax.Array
    epsilon_end: jax.Array
    exploration_fraction: jax.Array
    tau: jax.Array


SWEEPABLE = tuple(f.name for f in dataclasses.fields(DQNHParams))
"""Config fields that can take several values in one compiled program."""


@struct.dataclass
class DQNState:
    params: PyTree  # online Q-network parameters
    target_params: PyTree  # target network parameters
    opt_state: PyTree  # optax state (clipping + Adam, without the learning rate)
    hparams: DQNHParams
    num_updates: jax.Array  # [] int32 gradient updates so far (drives epsilon, beta, target updates)


def epsilon_schedule(num_updates, start, end, decay_updates):
    """Linear decay ``start -> end`` over ``decay_updates`` updates, then ``end``."""
    frac = jnp.clip(num_updates / jnp.maximum(decay_updates, 1e-8), 0.0, 1.0)
    return start + frac * (end - start)


def q_targets(q_next_online, q_next_target, reward, discount, double_q: bool = True):
    """``reward + discount * Q_target(s', a*)``, ``[B]``.

    ``a* = argmax_a Q_online(s', a)`` (double Q) or ``argmax_a Q_target(s', a)``;
    ``q_next_*`` are ``[B, A]``, ``discount`` is 0 after a termination.
    """
    greedy = jnp.argmax(q_next_online if double_q else q_next_target, axis=-1)
    bootstrap = jnp.take_along_axis(q_next_target, greedy[:, None], axis=-1)[:, 0]
    return reward + discount * bootstrap


def update_target(target_params, params, num_updates, interval: int, tau):
    """After update number ``num_updates`` (counted from 1): every ``interval`` updates
    ``target <- tau * online + (1 - tau) * target`` (``tau = 1``: a hard copy)."""
    due = (num_updates % interval) == 0
    return jax.tree.map(lambda t, p: jnp.where(due, tau * p + (1.0 - tau) * t, t), target_params, params)


def make_dqn(network: networks.QNetwork, hparams: DQNHParams, *, total_updates: int, double_q: bool = True,
             loss: str = "huber", max_grad_norm: float = 10.0, target_update_interval: int = 1,
             anneal_lr: bool = False) -> Agent:
    """The DQN agent: ``learn`` takes a :class:`jrl.buffers.Sample` of ``NStepTransition``s
    and returns the new priorities ``|TD error|`` under :data:`jrl.loops.PRIORITIES`."""
    tx = make_optimizer("adam", max_grad_norm)

    def init(key, spec: EnvSpec) -> DQNState:
        params = network.init(key, networks.example_observation(spec.observation_space))
        return DQNState(params, params, tx.init(params), hparams, jnp.zeros((), jnp.int32))

    def epsilon(state: DQNState):
        hp = state.hparams
        return epsilon_schedule(state.num_updates, hp.epsilon_start, hp.epsilon_end,
                                hp.exploration_fraction * total_updates)

    def act(state: DQNState, obs, key):
        """Epsilon-greedy on ``[N]`` observations, an independent draw per env."""
        q = network.apply(state.params, obs)
        num, num_actions = q.shape
        keys = parallel.local_keys(key, num)
        explore = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, 0)))(keys) < epsilon(state)
        random = jax.vmap(lambda k: jax.random.randint(jax.random.fold_in(k, 1), (), 0, num_actions))(keys)
        return jnp.where(explore, random, jnp.argmax(q, axis=-1)).astype(jnp.int32), {}

    def policy(params, obs, key):
        del key
        return jnp.argmax(network.apply(params, obs), axis=-1).astype(jnp.int32)

    def loss_fn(params, target_params, batch, weights):
        size = batch.reward.shape[0]
        both = jax.tree.map(lambda o, n: jnp.concatenate([o, n]), batch.observation, batch.next_observation)
        q_online = network.apply(params, both)  # one online pass over o_t and o_{t+n}
        q_next_target = network.apply(target_params, batch.next_observation)
        target = jax.lax.stop_gradient(q_targets(q_online[size:], q_next_target, batch.reward, batch.discount,
                                                 double_q))
        q = jnp.take_along_axis(q_online[:size], batch.action[:, None].astype(jnp.int32), axis=-1)[:, 0]
        td = q - target
        per_item = optax.huber_loss(td) if loss == "huber" else 0.5 * jnp.square(td)
        return jnp.mean(weights * per_item), (td, q)

    def learn(state: DQNState, sample: buffers.Sample, key):
        del key
        hp = state.hparams
        (value, (td, q)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.target_params, sample.items, sample.weights)
        grads = parallel.pmean(grads)  # equal batch per device: the global mean gradient
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        lr = hp.learning_rate * (jnp.maximum(1.0 - state.num_updates / total_updates, 0.0) if anneal_lr else 1.0)
        params = optax.apply_updates(state.params, jax.tree.map(lambda u: -lr * u, updates))
        num_updates = state.num_updates + 1
        target_params = update_target(state.target_params, params, num_updates, target_update_interval, hp.tau)
        metrics = parallel.pmean({"train/loss": value, "train/q": q.mean(), "train/td_abs": jnp.abs(td).mean()})
        metrics = {**metrics, "train/grad_norm": optax.tree.norm(grads), "train/epsilon": epsilon(state),
                   PRIORITIES: jnp.abs(td)}
        return DQNState(params, target_params, opt_state, hp, num_updates), metrics

    return Agent(init=init, act=act, learn=learn, policy=policy)


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN settings: 8 envs x 4 steps, then 2 updates of 128 (replay ratio 8), Double DQN."""

    total_steps: int = 200_000
    """Environment steps to train for, summed over envs (per seed)."""
    num_envs: int = 8
    """Parallel environments per seed."""
    steps_per_iteration: int = 4
    """Steps collected from each env per iteration, before the updates."""
    updates_per_iteration: int = 2
    """Gradient updates per iteration (replay ratio = updates * batch_size / (steps_per_iteration * num_envs))."""
    batch_size: int = 128
    """Transitions per update (summed over devices; divisible by the number of devices)."""
    buffer_size: int = 50_000
    """Replay capacity per seed (per device when sharded)."""
    learning_starts: int = 10_000
    """Env steps collected (all envs) before updates begin."""
    learning_rate: Annotated[float, tyro.conf.arg(aliases=("--lr",))] = 2.5e-4
    """Adam step size (sweepable)."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over the updates."""
    gamma: float = 0.99
    """Discount factor in [0, 1] (sweepable)."""
    n_step: int = 1
    """Steps summed in the return before bootstrapping (n-step DQN)."""
    double_q: bool = True
    """Select the bootstrap action with the online network (Double DQN)."""
    dueling: bool = False
    """Dueling value/advantage head."""
    prioritized: bool = False
    """Proportional prioritised replay (sum tree)."""
    per_alpha: float = 0.6
    """Prioritisation exponent."""
    per_beta: float = 0.4
    """Initial importance-sampling exponent, annealed linearly to 1 over the updates."""
    target_update_interval: int = 250
    """Updates between target-network updates."""
    tau: float = 1.0
    """Target update rate: target <- tau * online + (1 - tau) * target (1 = hard copy) (sweepable)."""
    epsilon_start: float = 1.0
    """Initial exploration rate (sweepable)."""
    epsilon_end: float = 0.01
    """Final exploration rate (sweepable)."""
    exploration_fraction: float = 0.2
    """Fraction of the updates over which epsilon decays linearly (sweepable)."""
    loss: str = "huber"
    """TD loss: 'huber' or 'mse'."""
    max_grad_norm: float = 10.0
    """Global-norm gradient clipping threshold."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Hidden layer widths of the Q-network MLP."""
    activation: str = "relu"
    """Hidden activation: tanh, relu, gelu, silu or elu."""

    @property
    def steps_per_step(self) -> int:
        """Env steps per iteration (per seed): num_envs * steps_per_iteration."""
        return self.num_envs * self.steps_per_iteration

    @property
    def num_iterations(self) -> int:
        """Iterations (collect + update) in a run: total_steps // (num_envs * steps_per_iteration)."""
        return self.total_steps // self.steps_per_step

    @property
    def num_updates(self) -> int:
        """Gradient updates in a run: ``updates_per_iteration`` in every iteration whose env-step
        count (the ``n_step - 1`` warm-up steps per env included) has reached ``learning_starts``."""
        warm_up = (self.n_step - 1) * self.num_envs
        first = max(-(-(self.learning_starts - warm_up) // self.steps_per_step), 1)  # 1-based
        return max(self.num_iterations - first + 1, 0) * self.updates_per_iteration

    def validate(self) -> None:
        """Raises ValueError naming the first inconsistent or out-of-range field."""
        cfg.check(cfg.common_checks(self) + [
            (self.steps_per_iteration > 0, f"steps_per_iteration must be positive, got {self.steps_per_iteration}"),
            (self.updates_per_iteration > 0,
             f"updates_per_iteration must be positive, got {self.updates_per_iteration}"),
            (self.batch_size > 0, f"batch_size must be positive, got {self.batch_size}"),
            (self.n_step > 0, f"n_step must be positive, got {self.n_step}"),
            (self.total_steps >= self.steps_per_step,
             f"total_steps = {self.total_steps} is less than one iteration "
             f"(num_envs * steps_per_iteration = {self.steps_per_step})"),
            (self.learning_starts >= 0, f"learning_starts must be >= 0, got {self.learning_starts}"),
            (self.learning_starts < self.total_steps,
             f"learning_starts = {self.learning_starts} leaves no updates within total_steps = {self.total_steps}"),
            (self.buffer_size >= max(self.batch_size, self.num_envs),
             f"buffer_size = {self.buffer_size} must be at least batch_size and num_envs"),
            (0.0 <= self.epsilon_end <= 1.0 and 0.0 <= self.epsilon_start <= 1.0,
             f"epsilon_start/epsilon_end must lie in [0, 1], got {self.epsilon_start}/{self.epsilon_end}"),
            (0.0 <= self.exploration_fraction <= 1.0,
             f"exploration_fraction must lie in [0, 1], got {self.exploration_fraction}"),
            (0.0 < self.tau <= 1.0, f"tau must lie in (0, 1], got {self.tau}"),
            (self.target_update_interval > 0,
             f"target_update_interval must be positive, got {self.target_update_interval}"),
            (self.per_alpha >= 0 and 0.0 <= self.per_beta <= 1.0,
             f"per_alpha must be >= 0 and per_beta in [0, 1], got {self.per_alpha}/{self.per_beta}"),
            (self.loss in ("huber", "mse"), f"loss must be 'huber' or 'mse', got {self.loss!r}"),
        ])

    def hparams(self) -> DQNHParams:
        """The sweepable fields as traced-ready float32 scalars."""
        return cfg.hparams_from(self, DQNHParams)


PRESETS: dict[str, dict] = {
    "CartPole-v1": {"n_step": 3, "dueling": True, "anneal_lr": True},
    "Acrobot-v1": {"n_step": 3, "learning_starts": 5_000, "target_update_interval": 500},
}
"""Per-environment overrides of the defaults."""


def build(config: DQNConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles DQN on ``env`` (a jrl env with a Discrete action space)."""
    config.validate()
    local_envs = cfg.envs_per_device(config.num_envs, num_devices)
    action_space = env.action_space(env_params)
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"DQN needs a Discrete action space, got {action_space!r}")
    env = wrap_for_training(env, local_envs)
    spec = EnvSpec.from_env(env, env_params)
    network = networks.QNetwork(int(action_space.n), tuple(config.hidden_sizes), config.activation,
                                max(len(spec.observation_space.shape), 1), config.dueling)
    total_updates = max(config.num_updates, 1)
    agent = make_dqn(network, config.hparams(), total_updates=total_updates, double_q=config.double_q,
                     loss=config.loss, max_grad_norm=config.max_grad_norm,
                     target_update_interval=config.target_update_interval, anneal_lr=config.anneal_lr)
    if config.prioritized:
        buffer = buffers.prioritized_buffer(config.buffer_size, config.per_alpha, config.per_beta)
        beta0 = config.per_beta
        beta = lambda s: beta0 + (1.0 - beta0) * jnp.minimum(s.num_updates / total_updates, 1.0)  # noqa: E731
    else:
        buffer, beta = buffers.uniform_buffer(config.buffer_size), None
    algorithm = off_policy(agent, env, buffer, steps_per_iteration=config.steps_per_iteration,
                           updates_per_iteration=config.updates_per_iteration, learning_starts=config.learning_starts,
                           batch_size=config.batch_size, n_step=config.n_step, beta=beta, env_params=env_params,
                           num_devices=num_devices)
    return Built(algorithm, agent, env, env_params, spec, network)

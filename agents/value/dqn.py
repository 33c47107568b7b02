"""Deep Q-Networks (Mnih et al., 2015) with the usual improvements as flags.

Double Q-learning (van Hasselt et al., 2016; on by default), a dueling head
(Wang et al., 2016), n-step returns, proportional prioritised replay (Schaul
et al., 2016; beta annealed linearly to 1 over training), hard or Polyak
target updates, epsilon-greedy exploration with a linear schedule, Huber or
MSE loss, Adam with global-norm gradient clipping.

Loop (:func:`jrl.run.loops.off_policy`): each iteration collects
``steps_per_iteration`` steps from each of ``num_envs`` envs into replay, then
does ``updates_per_iteration`` updates on batches of ``batch_size``.

n-step returns are built while collecting, by the loop's
:func:`jrl.parts.nstep.nstep_accumulator` (so the buffer stores
``NStepTransition``s): the target is ``reward + discount * Q_target(next_obs,
a*)``, where ``discount`` is ``gamma^m`` (``m <= n`` steps summed, fewer where
the episode ended) and 0 after a termination; a truncation stops the sum and
bootstraps from the episode's final observation.

Epsilon decays linearly from ``epsilon_start`` to ``epsilon_end`` over the
first ``exploration_fraction`` of the *updates* (the agent counts its
updates; the contract gives ``act`` no env-step count). Updates start at
``learning_starts`` env steps and then happen at a fixed rate, so this is the
same as a linear decay over env steps from ``learning_starts`` on.

Recurrent (R2D2, Kapturowski et al., 2019): with ``recurrent`` 'lstm' or 'gru' the agent is
:func:`jrl.agents.value.r2d2.make_r2d2`, which replays sequences of stored core states with
burn-in (see :mod:`jrl.agents.value.r2d2`); its train state, head contract, bootstrap action and
target updates are this agent's (:mod:`jrl.agents.value.common`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

import jax
import jax.numpy as jnp
import optax

from jrl.agents.value.common import (
    DQNHParams,
    DQNState,
    Head,
    acting_epsilon,
    greedy_next_actions,
    update_target,
)
from jrl.agents.value.r2d2 import (
    make_r2d2,
    recurrent_checks,
    recurrent_q_network,
    sequence_buffer,
)
from jrl.core import parallel, spaces
from jrl.core.types import split_action_mask
from jrl.ops import return_distributions as distributional
from jrl.ops.action_distributions import epsilon_greedy, masked_argmax
from jrl.parts import buffers, networks
from jrl.parts.agent import Agent, EnvSpec, Learned
from jrl.parts.agent_config import (
    MINATAR_ENVS,
    MINATAR_NETWORK,
    Check,
    EpsilonGreedyConfig,
    Range,
    ReplayConfig,
    presets_for,
)
from jrl.parts.learner import apply_gradients, scheduled_lr
from jrl.parts.optim import grad_norm_metric, linear_schedule, make_optimizer
from jrl.run.builders import Built, training_env
from jrl.run.loops import Algorithm, ReplaySchedule, off_policy

__all__ = [
    "C51Config",
    "DQNConfig",
    "DQNHParams",
    "DQNState",
    "Head",
    "QRDQNConfig",
    "RainbowConfig",
    "acting_epsilon",
    "build",
    "categorical_head",
    "greedy_next_actions",
    "make_dqn",
    "q_targets",
    "q_apply",
    "q_network",
    "quantile_head",
    "replay_buffer",
    "scalar_head",
    "td_loss",
    "update_target",
    "with_acting_epsilon",
]


def q_targets(
    q_next_online, q_next_target, reward, discount, double_q: bool = True, next_mask=None
):
    """``reward + discount * Q_target(s', a*)``, ``[B]``, with ``a*`` from
    :func:`greedy_next_actions`;
    ``q_next_*`` are ``[B, A]``, ``discount`` is 0 after a termination."""
    greedy = greedy_next_actions(q_next_online, q_next_target, double_q, next_mask)
    return reward + discount * _at_action(q_next_target, greedy)


def _at_action(out, action):
    """``out[b, action[b]]`` for outputs ``[B, A]`` or ``[B, A, K]``."""
    return out[jnp.arange(out.shape[0]), action.astype(jnp.int32)]


def scalar_head(loss: str = "huber") -> Head:
    """DQN: one Q-value per action; Huber or squared TD error, priority ``|TD|``."""

    def loss_fn(taken, next_target, reward, discount):
        td = taken - jax.lax.stop_gradient(reward + discount * next_target)
        per_item = optax.huber_loss(td) if loss == "huber" else 0.5 * jnp.square(td)
        return per_item, jnp.abs(td)

    return Head(1, lambda out: out, loss_fn)


def categorical_head(num_atoms: int, v_min: float, v_max: float) -> Head:
    """C51 (Bellemare et al., 2017): logits over ``num_atoms`` fixed returns in [v_min, v_max];
    the target distribution is projected onto them; cross-entropy loss, which is also the
    priority (as in Rainbow)."""
    atoms = distributional.support(num_atoms, v_min, v_max)

    def loss_fn(taken, next_target, reward, discount):
        target = distributional.categorical_projection(
            jax.nn.softmax(next_target, axis=-1), reward, discount, atoms
        )
        per_item = distributional.categorical_loss(taken, jax.lax.stop_gradient(target))
        return per_item, per_item

    return Head(
        num_atoms,
        lambda out: distributional.expected_value(jax.nn.softmax(out, axis=-1), atoms),
        loss_fn,
    )


def quantile_head(num_quantiles: int, kappa: float = 1.0) -> Head:
    """QR-DQN (Dabney et al., 2018): ``num_quantiles`` quantiles at the midpoints ``(2i+1)/(2N)``;
    quantile Huber loss, which is also the priority."""
    taus = distributional.quantile_midpoints(num_quantiles)

    def loss_fn(taken, next_target, reward, discount):
        target = jax.lax.stop_gradient(reward[:, None] + discount[:, None] * next_target)
        per_item = distributional.quantile_huber_loss(taken, target, taus, kappa)
        return per_item, per_item

    return Head(num_quantiles, lambda out: out.mean(axis=-1), loss_fn)


def q_apply(network: networks.QNetwork) -> Callable:
    """``apply(params, obs, key=None) -> out [B, A(, K)]``: the Q-network, with fresh noise from
    ``key`` when it is noisy and a key is given (the mean weights otherwise)."""
    noisy = bool(getattr(network, "noisy", False))

    def apply(params, obs, key=None):
        if noisy and key is not None:
            return network.apply(params, obs, noise=True, rngs={"noise": key})
        return network.apply(params, obs)

    return apply


def td_loss(apply: Callable, head: Head, double_q: bool = True) -> Callable:
    """``loss_fn(params, target_params, batch, weights, key) -> (loss, (priority, q))``: the
    DQN family's TD loss on a batch of ``NStepTransition``s ``[B]`` (``weights [B]``: importance
    weights), the head's new ``priority [B]`` of every item and ``q [B]``, the value of the
    action taken. ``apply(params, obs, key=None)`` is the Q-network (noise drawn from ``key``
    for a noisy one). :func:`make_dqn` learns with it; Ape-X's actors compute the initial
    priorities of their transitions with it (``agents/value/apex.py``)."""

    def loss_fn(params, target_params, batch, weights, key):
        k_online, k_target = jax.random.split(key)
        obs, _ = split_action_mask(batch.observation)
        next_obs, next_mask = split_action_mask(batch.next_observation)
        out_online = apply(params, obs, k_online)
        out_next_target = apply(target_params, next_obs, k_target)
        # the online net's values at o_{t+n} (double Q only) take no gradient: a separate pass,
        # so the
        # backward pass runs over the batch only (the same noise as above: the same key)
        q_next_online = (
            head.q_values(apply(jax.lax.stop_gradient(params), next_obs, k_online))
            if double_q
            else None
        )
        greedy = greedy_next_actions(
            q_next_online, head.q_values(out_next_target), double_q, next_mask
        )
        taken = _at_action(out_online, batch.action)
        per_item, priority = head.loss(
            taken,
            jax.lax.stop_gradient(_at_action(out_next_target, greedy)),
            batch.reward,
            batch.discount,
        )
        q = head.q_values(taken[:, None]).reshape(batch.reward.shape)
        return jnp.mean(weights * per_item), (priority, q)

    return loss_fn


def with_acting_epsilon(algorithm: Algorithm, config: DQNConfig) -> Algorithm:
    """``algorithm`` whose ``train/epsilon`` metric is the exploration rate every iteration
    acted with (:func:`acting_epsilon` before the iteration's updates), warm-up included,
    where no update runs and the updates' metrics are zero. Only the metric changes."""
    epsilon = acting_epsilon(config)

    def step(state):
        acted_with = epsilon(state.agent_state)
        state, metrics = algorithm.step(state)
        return state, {**metrics, "train/epsilon": acted_with}

    return algorithm._replace(step=step)


def _epsilon_greedy_act(apply: Callable, head: Head, epsilon: Callable, noisy: bool) -> Callable:
    """DQN's ``act(state, obs, key) -> (action, {})``: epsilon-greedy on ``[N]`` observations, an
    independent draw per env (fresh noise from ``key`` for a noisy network)."""

    def act(state: DQNState, obs, key):
        obs, mask = split_action_mask(obs)
        k_noise, k_explore = jax.random.split(key) if noisy else (None, key)
        q = head.q_values(apply(state.params, obs, k_noise))
        return epsilon_greedy(
            parallel.local_keys(k_explore, q.shape[0]), q, epsilon(state), mask
        ), {}

    return act


def _greedy_policy(apply: Callable, head: Head) -> Callable:
    """DQN's ``policy(params, obs, key)``: the greedy valid action, with the mean weights."""

    def policy(params, obs, key):
        del key
        obs, mask = split_action_mask(obs)
        return masked_argmax(head.q_values(apply(params, obs)), mask)

    return policy


def make_dqn(network: networks.QNetwork, config: DQNConfig, head: Head | None = None) -> Agent:
    """The DQN-family agent: ``learn`` takes a :class:`jrl.parts.buffers.Sample` of
    ``NStepTransition``s and returns the new priorities in
    :attr:`jrl.parts.agent.Learned.priorities`.

    ``head`` picks DQN (:func:`scalar_head`, the default), C51 or QR-DQN. With
    a noisy network (``network.noisy``) ``act`` and ``learn`` draw fresh
    noise from their keys (online and target nets independently); the greedy
    ``policy`` uses the mean weights. Observations with an action mask
    (:func:`jrl.core.types.split_action_mask`) restrict exploration, the greedy
    action and the bootstrap action to valid actions.
    """
    if config.recurrent != "none":
        return make_r2d2(network, config, head or config.head())
    hparams, total_updates, double_q = config.hparams(), max(config.num_updates, 1), config.double_q
    head = head or scalar_head()
    tx = make_optimizer("adam", config.max_grad_norm, eps=config.adam_eps)
    noisy = bool(getattr(network, "noisy", False))
    apply = q_apply(network)

    def init(key, spec: EnvSpec) -> DQNState:
        obs_space, _ = split_action_mask(spec.observation_space)
        params = network.init(key, networks.example_observation(obs_space))
        return DQNState(params, params, tx.init(params), hparams, jnp.zeros((), jnp.int32))

    epsilon = acting_epsilon(config)
    act, policy = _epsilon_greedy_act(apply, head, epsilon, noisy), _greedy_policy(apply, head)
    loss_fn = td_loss(apply, head, double_q)

    def learn(state: DQNState, sample: buffers.Sample, key) -> Learned:
        hp = state.hparams
        (value, (priority, q)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.target_params, sample.items, sample.weights, key
        )
        grads = parallel.pmean(grads)  # equal batch per device: the global mean gradient
        lr = scheduled_lr(hp.learning_rate, state.num_updates, total_updates, config.anneal_lr)
        params, opt_state = apply_gradients(tx, state.params, state.opt_state, grads, lr)
        num_updates = state.num_updates + 1
        target_params = update_target(
            state.target_params, params, num_updates, config.target_update_interval, hp.tau
        )
        metrics = parallel.pmean(
            {"train/loss": value, "train/q": q.mean(), "train/priority": priority.mean()}
        )
        metrics = {
            **metrics,
            **grad_norm_metric(grads, config.max_grad_norm),
            "train/epsilon": epsilon(state),
        }
        return Learned(
            DQNState(params, target_params, opt_state, hp, num_updates), metrics, priority
        )

    return Agent(init=init, act=act, learn=learn, policy=policy)


CLASSIC_CONTROL = {
    "total_steps": 100_000,
    "num_envs": 10,
    "steps_per_iteration": 1,
    "updates_per_iteration": 1,
    "batch_size": 128,
    "buffer_size": 10_000,
    "learning_starts": 5_000,
    "learning_rate": 1e-3,
    "anneal_lr": True,
    "target_update_interval": 50,
    "n_step": 3,
    "dueling": True,
    "epsilon_end": 0.05,
    "exploration_fraction": 0.3,
    "hidden_sizes": (120, 84),
}
"""The value-based family's preset for CartPole-v1 and Acrobot-v1: PureJaxRL's DQN setup (10 envs,
one update of 128 per 10 env steps, a buffer of 1e4, the target copied every 500 env steps, 120-84
ReLU) with double Q, a dueling head, 3-step returns, lr 1e-3 annealed and 1e5 steps; measured in
tests/test_learning.py."""

MINATAR = {
    **MINATAR_NETWORK,
    "total_steps": 5_000_000,
    "buffer_size": 100_000,
    "learning_starts": 5_000,
    "learning_rate": 2.5e-4,
    "target_update_interval": 64,
    "epsilon_end": 0.1,
    "exploration_fraction": 0.02,
}
"""The DQN family's MinAtar preset, after the MinAtar paper's DQN (Young & Tian, 2019: 5e6
frames, a replay of 1e5 started at 5e3, lr 2.5e-4, the target copied every 1000 steps, epsilon
1 -> 0.1 over the first 1e5 frames) with this agent's 8 envs x 4 steps and 2 updates of 128 per
iteration (the target copied every 64 updates, 1024 env steps)."""


DISTRIBUTIONS = ("none", "categorical", "quantile")


@dataclasses.dataclass(frozen=True)
class DQNConfig(EpsilonGreedyConfig, ReplayConfig):
    """DQN settings: 8 envs x 4 steps, then 2 updates of 128 (replay ratio 8), Double DQN."""

    HPARAMS: ClassVar[type] = DQNHParams
    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Discrete,)
    RANGES: ClassVar[dict[str, Range]] = {"tau": Range(0.0, 1.0, low_open=True)}
    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": CLASSIC_CONTROL,
        "Acrobot-v1": CLASSIC_CONTROL,
        **presets_for(MINATAR_ENVS, MINATAR),
    }

    total_steps: int = 200_000
    num_envs: int = 8
    anneal_lr: bool = False
    max_grad_norm: float = 10.0
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"
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
    """Target update rate: target <- tau * online + (1 - tau) * target (1 = hard copy)
    (sweepable)."""
    loss: str = "mse"
    """TD loss of the scalar head: 'mse' (0.5 * TD^2) or 'huber' (diverged on CartPole in our
    runs, see the notes)."""
    distribution: str = "none"
    """Return distribution: 'none' (a Q-value per action), 'categorical' (C51) or 'quantile'
    (QR-DQN)."""
    num_atoms: int = 51
    """Atoms of the categorical distribution, or quantiles of the quantile one."""
    v_min: float = -10.0
    """Smallest return on the categorical support."""
    v_max: float = 10.0
    """Largest return on the categorical support."""
    kappa: float = 1.0
    """Huber threshold of the quantile loss (0: the plain quantile loss)."""
    noisy: bool = False
    """Factorised Gaussian noisy output layers (exploration by parameter noise; set epsilon
    to 0)."""
    adam_eps: float = 1e-5
    """Adam's epsilon, the floor of its update's denominator (PureJaxRL's DQN uses optax's 1e-8)."""
    recurrent: str = "none"
    """A recurrent core between the torso and the Q head: 'lstm', 'gru' or 'none'
    (feed-forward). With a core the agent is R2D2: replay of whole sequences, stored core
    states, burn-in; batch_size counts sequences."""
    core_size: int = 128
    """Units of the recurrent core (with recurrent 'lstm' or 'gru')."""
    sequence_length: int = 20
    """Steps of one env per replayed sequence (with recurrent), burn-in included."""
    burn_in: int = 5
    """First steps of each replayed sequence that only warm up the core state (no loss)."""

    @property
    def num_updates(self) -> int:
        """Gradient updates in a run: ``updates_per_iteration`` in every iteration whose env-step
        count (the ``n_step - 1`` warm-up steps per env included) has reached
        ``learning_starts``."""
        # a recurrent learner sums its n steps inside the replayed sequences: no warm-up
        warm_up = (self.n_step - 1) * self.num_envs * (self.recurrent == "none")
        per_iteration = self.env_steps_per_iteration
        first = max(-(-(self.learning_starts - warm_up) // per_iteration), 1)  # 1-based
        return max(self.num_iterations - first + 1, 0) * self.updates_per_iteration

    def checks(self) -> list[Check]:
        return [
            *super().checks(),
            *recurrent_checks(self),
            (self.n_step > 0, f"n_step must be positive, got {self.n_step}"),
            (
                self.target_update_interval > 0,
                f"target_update_interval must be positive, got {self.target_update_interval}",
            ),
            (
                self.per_alpha >= 0 and 0.0 <= self.per_beta <= 1.0,
                "per_alpha must be >= 0 and per_beta in [0, 1], got "
                f"{self.per_alpha}/{self.per_beta}",
            ),
            (self.loss in ("huber", "mse"), f"loss must be 'huber' or 'mse', got {self.loss!r}"),
            (
                self.distribution in DISTRIBUTIONS,
                f"distribution must be one of {', '.join(map(repr, DISTRIBUTIONS))}, "
                f"got {self.distribution!r}",
            ),
            (
                self.num_atoms >= 2 or self.distribution == "none",
                f"num_atoms must be at least 2, got {self.num_atoms}",
            ),
            (
                self.v_min < self.v_max,
                f"v_min must be below v_max, got {self.v_min} >= {self.v_max}",
            ),
            (self.kappa >= 0, f"kappa must be >= 0, got {self.kappa}"),
            (self.adam_eps > 0, f"adam_eps must be positive, got {self.adam_eps}"),
        ]

    def head(self) -> Head:
        """The value head this config asks for."""
        if self.distribution == "categorical":
            return categorical_head(self.num_atoms, self.v_min, self.v_max)
        if self.distribution == "quantile":
            return quantile_head(self.num_atoms, self.kappa)
        return scalar_head(self.loss)


@dataclasses.dataclass(frozen=True)
class C51Config(DQNConfig):
    """C51: DQN with a categorical return distribution on 51 atoms (Bellemare et al., 2017)."""

    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": {**CLASSIC_CONTROL, "v_min": 0.0, "v_max": 100.0},
        "Acrobot-v1": {**CLASSIC_CONTROL, "v_min": -100.0, "v_max": 0.0},
        **presets_for(MINATAR_ENVS, {**MINATAR, "v_min": 0.0, "v_max": 100.0}),
    }

    distribution: str = "categorical"


@dataclasses.dataclass(frozen=True)
class QRDQNConfig(DQNConfig):
    """QR-DQN: DQN with 32 return quantiles and the quantile Huber loss (Dabney et al., 2018)."""

    distribution: str = "quantile"
    num_atoms: int = 32


@dataclasses.dataclass(frozen=True)
class RainbowConfig(DQNConfig):
    """Rainbow (Hessel et al., 2018): double Q, dueling, 3-step, prioritised replay, noisy nets
    and C51.

    All six are defaults of the one DQN agent, not a separate implementation."""

    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": {**CLASSIC_CONTROL, "epsilon_end": 0.0, "v_min": 0.0, "v_max": 100.0},
        "Acrobot-v1": {**CLASSIC_CONTROL, "epsilon_end": 0.0, "v_min": -100.0, "v_max": 0.0},
        **presets_for(MINATAR_ENVS, {**MINATAR, "epsilon_end": 0.0, "v_min": 0.0, "v_max": 100.0}),
    }

    n_step: int = 3
    dueling: bool = True
    prioritized: bool = True
    distribution: str = "categorical"
    noisy: bool = True
    epsilon_start: float = 0.0
    epsilon_end: float = 0.0


def stratified(config: DQNConfig) -> bool:
    """Whether the uniform buffer samples ``batch_size / num_envs`` items from every env
    (:func:`jrl.parts.buffers.uniform_buffer` ``stratify``): when both the batch and the buffer
    divide evenly among the envs. That makes a run on D devices equal the run on one."""
    return config.batch_size % config.num_envs == 0 and config.buffer_size % config.num_envs == 0


def build(config: DQNConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles DQN on ``env`` (a jrl env with a Discrete action space)."""
    config.validate()
    if num_devices > 1 and not config.prioritized and not stratified(config):
        raise ValueError(
            f"sharded DQN samples the same number of items from every env: batch_size "
            f"({config.batch_size}) and buffer_size ({config.buffer_size}) must be multiples of "
            f"num_envs ({config.num_envs})"
        )
    if config.buffer_size % num_devices:
        raise ValueError(
            f"buffer_size = {config.buffer_size} is not divisible by {num_devices} devices"
        )
    obs_space, num_actions = EnvSpec.from_env(env, env_params).value_based("DQN")
    env, spec = training_env(config, env, env_params, num_devices)
    head = config.head()
    if config.recurrent != "none":
        network = recurrent_q_network(config, num_actions, obs_space)
    else:
        network = q_network(config, num_actions, obs_space, head)
    agent = make_dqn(network, config, head)
    buffer, beta = replay_buffer(config, num_devices)
    schedule = ReplaySchedule(
        config.steps_per_iteration,
        config.updates_per_iteration,
        config.learning_starts,
        config.batch_size,
        config.n_step if config.recurrent == "none" else 1,  # R2D2 sums inside its sequences
    )
    algorithm = off_policy(
        agent, env, buffer, schedule, beta=beta, env_params=env_params, num_devices=num_devices
    )
    algorithm = with_acting_epsilon(algorithm, config)
    return Built(algorithm, agent, env, env_params, spec, network)


def q_network(config: DQNConfig, num_actions: int, obs_space, head: Head) -> networks.QNetwork:
    """The feed-forward Q-network the config asks for (``head.num_atoms`` outputs per
    action)."""
    return networks.QNetwork(
        num_actions,
        tuple(config.hidden_sizes),
        config.activation,
        max(len(obs_space.shape), 1),
        config.dueling,
        num_atoms=head.num_atoms,
        noisy=config.noisy,
        torso=config.torso,
    )


def replay_buffer(config: DQNConfig, num_devices: int = 1):
    """``(buffer, beta)``: this device's share of the replay buffer the config asks for and,
    for prioritised replay, the importance-sampling exponent as a function of the agent state
    (annealed linearly from ``per_beta`` to 1 over the updates; None for uniform replay)."""
    capacity = config.buffer_size // num_devices
    if config.recurrent != "none":  # time-major steps of this device's envs, sequences out
        return sequence_buffer(config, num_devices), None
    if not config.prioritized:
        local_envs = config.num_envs // num_devices
        return buffers.uniform_buffer(
            capacity, stratify=local_envs if stratified(config) else None
        ), None
    beta0, total_updates = config.per_beta, max(config.num_updates, 1)
    buffer = buffers.prioritized_buffer(capacity, config.per_alpha, config.per_beta)
    return buffer, lambda s: linear_schedule(s.num_updates, beta0, 1.0, total_updates)

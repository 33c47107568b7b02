"""The on-policy actor-critic agent that PPO, A2C and REINFORCE-style agents share.

Common to all of them: acting (sample an action, keep its log-prob), the
critic's values on the rollout, the update (``num_epochs`` passes over the rollout in
``num_minibatches`` env-stratified minibatches, optional advantage
normalisation, gradient clipping, an optionally annealed learning rate) and
the config fields they share (:class:`ActorCriticConfig`). What an agent
brings:

- a :data:`LossFn` (PPO's clipped surrogate, A2C's plain policy gradient...);
- its hyperparameter type (``config.HPARAMS``, a subclass of
  :class:`ActorCriticHParams` with the fields its loss and advantage
  estimator read, e.g. PPO's ``clip_eps``);
- an :data:`AdvantageFn`: :func:`gae` for the agents on :class:`GAEConfig`
  (PPO, A2C); REINFORCE's Monte Carlo returns or IMPALA's V-trace plug in the same way.
  An estimator that corrects for the gap between the policy that acted and the one that
  learns (V-trace) asks for ``learner_outputs``: ``learn`` then also gives it the current
  parameters' log-probs of the actions taken and values on the rollout (see
  :data:`AdvantageFn`).

The critic's values are not computed while acting: ``learn`` evaluates the critic on the
whole rollout, ``[T, N]`` observations in one batched pass, with the parameters it starts
from, and puts them in the rollout's ``extras["value"]`` (as it does for the bootstrap values
on ``next_observation``). On-policy, those are the parameters that acted, so the values are
the ones acting would have kept (up to rounding: a batched pass may round differently).
Acting then runs the actor alone, and the critic's ``T`` small passes on ``[N]`` become one
large one, which is faster wherever the rollout's steps are latency-bound (one seed on a
CPU). With actors that lag the learner (the Sebulba runner's ``max_staleness > 0``) the
advantages and PPO's value clip use the learner's critic, the freshest estimate, while the
behaviour's log-probs still come from ``act``. A recurrent agent (below) keeps the values it
computed while acting: its critic shares the torso and the core that acting runs anyway.

With ``config.recurrent`` ('lstm' or 'gru') the network is a
:class:`jrl.parts.networks.RecurrentActorCritic` and the agent has memory
(:class:`jrl.parts.agent.Recurrent`): it acts from a per-env hidden state, keeps the state each
step acted from in ``act_info["hidden"]``, and learns on minibatches of whole env sequences
(:func:`jrl.parts.minibatches.sequence_minibatches`), each replayed from the state its rollout
started from, with the state reset to the initial one after every episode end.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from jrl.core import parallel, spaces
from jrl.core.types import PRNGKey, PyTree, Transition, split_action_mask
from jrl.core.wrappers import ClipAction
from jrl.ops import returns
from jrl.ops.losses import normalize
from jrl.parts import minibatches, networks
from jrl.parts.agent import Agent, EnvSpec, Learned, Recurrent
from jrl.parts.agent_config import UNIT_INTERVAL, Check, Range, RolloutConfig
from jrl.parts.learner import apply_gradients, minibatch_epochs, scheduled_lr
from jrl.parts.optim import grad_norm_metric, make_optimizer
from jrl.run.builders import Built, training_env
from jrl.run.loops import on_policy

__all__ = [
    "build_on_policy",
    "ActorCriticConfig",
    "ActorCriticHParams",
    "ActorCriticState",
    "AdvantageFn",
    "GAEConfig",
    "GAEHParams",
    "LEARNER_LOG_PROB",
    "LEARNER_VALUE",
    "LossFn",
    "Minibatch",
    "SequenceMinibatch",
    "gae",
    "make_actor_critic",
    "recurrent_unroll",
]


@struct.dataclass
class ActorCriticHParams:
    """Hyperparameters every actor-critic agent has; all [] float32, vmapped (swept) without
    recompiling. An agent whose loss or advantages read more subclasses it."""

    learning_rate: jax.Array
    gamma: jax.Array
    vf_coef: jax.Array


@struct.dataclass
class GAEHParams(ActorCriticHParams):
    """The actor-critic hyperparameters, GAE's lambda and the entropy bonus (PPO, A2C)."""

    gae_lambda: jax.Array
    ent_coef: jax.Array


@struct.dataclass
class ActorCriticState:
    params: PyTree  # network parameters
    opt_state: PyTree  # optax state of the gradient transformation (without the learning rate)
    hparams: ActorCriticHParams
    num_updates: jax.Array  # [] int32 calls to learn so far (drives annealing)


@struct.dataclass
class Minibatch:
    """A flat batch ``[M, ...]`` of rollout samples with their targets."""

    observation: PyTree  # [M, *obs_shape]
    action: jax.Array  # [M, *act_shape]
    old_log_prob: jax.Array  # [M] log-prob under the behaviour policy
    old_value: jax.Array  # [M] critic value with the parameters the update started from
    advantage: jax.Array  # [M] (normalised if requested) advantage
    target: jax.Array  # [M] value target


@struct.dataclass
class SequenceMinibatch:
    """Whole env sequences ``[T, n]`` of a rollout, for a recurrent network to replay."""

    data: Minibatch  # [T, n, ...] per leaf
    hidden: PyTree  # [1, n, ...] per leaf: the hidden state each sequence starts from
    episode_start: jax.Array  # [T, n] bool: the step's observation opens an episode


LossFn = Callable[[Any, Any, jax.Array, Minibatch, Any], tuple[jax.Array, dict[str, jax.Array]]]
"""``loss_fn(dist, values, entropy, minibatch, hparams) -> (loss, metrics)``: the
network's distribution and values ``[M]`` on the minibatch are given."""

AdvantageFn = Callable[[Transition, jax.Array, Any], tuple[jax.Array, jax.Array]]
"""``advantages(rollout, bootstrap_values, hparams) -> (advantages, value_targets)``, all
``[T, N]``: ``rollout`` is the time-major ``Transition`` (``extras["log_prob"]``: the
behaviour policy's, recorded when it acted; ``extras["value"]``: the critic on its
observations, evaluated by ``learn`` with its current parameters, or kept by ``act`` for a
recurrent network) and ``bootstrap_values`` the critic on its ``next_observation`` with the
learner's current parameters. With ``make_actor_critic(..., learner_outputs=True)`` the
rollout's extras also hold ``LEARNER_LOG_PROB`` and ``LEARNER_VALUE`` (``[T, N]``): the
log-prob of each action taken and the critic's value of each observation, with the current
parameters."""

LEARNER_LOG_PROB = "learner_log_prob"
"""The rollout extra (with ``learner_outputs``) holding the current policy's log-probs of the
actions taken, ``[T, N]``."""
LEARNER_VALUE = "learner_value"
"""The rollout extra (with ``learner_outputs``) holding the current critic's values, ``[T, N]``."""


def gae(rollout: Transition, bootstrap_values: jax.Array, hp: Any) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation with ``hp.gamma`` and ``hp.gae_lambda``
    (:func:`jrl.ops.returns.gae_advantages`)."""
    return returns.gae_advantages(
        rollout.reward,
        rollout.extras["value"],
        bootstrap_values,
        rollout.terminated,
        rollout.truncated,
        hp.gamma,
        hp.gae_lambda,
    )


@dataclasses.dataclass(frozen=True)
class ActorCriticConfig(RolloutConfig):
    """Settings shared by on-policy actor-critic agents (PPO, A2C, REINFORCE)."""

    HPARAMS: ClassVar[type] = ActorCriticHParams
    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Discrete, spaces.MultiDiscrete, spaces.Box)
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"advantage_std_floor": 0.0}  # 2026-12-05

    vf_coef: float = 0.5
    """Value loss coefficient (sweepable)."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch."""
    advantage_std_floor: float = 0.0
    """With ``normalize_advantages``: the advantages are divided by
    ``max(std, advantage_std_floor * mean(|value target|))`` instead of their std alone, so
    that where the critic predicts the returns almost exactly (every CartPole episode
    truncated at 500) their float noise is not blown up to unit scale; 0 (the default): the
    std alone. Relative to the value targets' scale, so no reward scale is assumed."""
    continuous: str = "normal"
    """Distribution for Box actions: 'normal' (env clips actions) or 'tanh_normal'."""
    init_log_std: float = 0.0
    """Initial log standard deviation of Gaussian policies."""
    normalize_observations: bool = False
    """Normalise observations by running statistics (NormalizeObservation)."""
    normalize_rewards: bool = False
    """Scale rewards by the running std of the discounted return (NormalizeReward)."""
    shared_torso: bool = False
    """One torso feeds both the policy and the value head (separate torsos by default)."""
    recurrent: str = "none"
    """A recurrent core between the torso and the heads: 'lstm', 'gru' or 'none'
    (feed-forward). With a core, policy and value share the torso and the core, and each
    minibatch holds whole env sequences: num_envs per device must be divisible by
    num_minibatches (num_steps need not be)."""
    core_size: int = 128
    """Units of the recurrent core (with recurrent 'lstm' or 'gru')."""

    def checks(self) -> list[Check]:
        return super().checks() + [
            (self.vf_coef >= 0, f"vf_coef must be >= 0, got {self.vf_coef}"),
            (
                self.continuous in ("normal", "tanh_normal"),
                f"continuous must be 'normal' or 'tanh_normal', got {self.continuous!r}",
            ),
            (
                self.recurrent in ("none", *networks.CORES),
                f"recurrent must be 'none', 'lstm' or 'gru', got {self.recurrent!r}",
            ),
            (self.core_size > 0, f"core_size must be positive, got {self.core_size}"),
            (
                self.advantage_std_floor >= 0,
                f"advantage_std_floor must be >= 0, got {self.advantage_std_floor}",
            ),
        ]

    def _minibatch_check(self) -> Check:
        if self.recurrent == "none":
            return super()._minibatch_check()
        return (
            self.num_envs % max(self.num_minibatches, 1) == 0,
            f"num_envs = {self.num_envs} is not divisible by num_minibatches = "
            f"{self.num_minibatches} (with recurrent, each minibatch holds whole env sequences)",
        )


@dataclasses.dataclass(frozen=True)
class GAEConfig(ActorCriticConfig):
    """Actor-critic settings with GAE advantages and an entropy bonus (PPO, A2C)."""

    HPARAMS: ClassVar[type] = GAEHParams
    RANGES: ClassVar[dict[str, Range]] = {"gae_lambda": UNIT_INTERVAL}

    gae_lambda: float = 0.95
    """GAE lambda in [0, 1]; 1.0 gives n-step returns over the rollout (sweepable)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient (sweepable)."""

    def checks(self) -> list[Check]:
        return super().checks() + [
            (self.ent_coef >= 0, f"ent_coef must be >= 0, got {self.ent_coef}"),
        ]


def make_actor_critic(
    network: nn.Module,
    loss_fn: LossFn,
    config: ActorCriticConfig,
    advantages: AdvantageFn,
    learner_outputs: bool = False,
) -> Agent:
    """Builds the agent. ``network`` maps observations to ``(distribution, value)``
    and has ``policy`` and ``value`` methods (see :class:`jrl.parts.networks.ActorCritic`);
    ``config`` gives the update's settings and, through ``config.hparams()``, the
    initial hyperparameters ``loss_fn`` and ``advantages`` read. With ``config.recurrent``,
    ``network`` is a :class:`jrl.parts.networks.RecurrentActorCritic` (see the module docstring).
    With ``learner_outputs``, ``learn`` evaluates the network on the rollout's observations
    with the parameters it starts from and hands ``advantages`` the log-probs of the actions
    taken and the values (``LEARNER_LOG_PROB``, ``LEARNER_VALUE`` in the rollout's extras),
    once per rollout, before any gradient step."""
    if config.recurrent != "none":
        return _recurrent_actor_critic(network, loss_fn, config, advantages, learner_outputs)
    tx = make_optimizer(config.optimizer, config.max_grad_norm)
    hparams, total_updates = config.hparams(), config.num_iterations

    def init(key: PRNGKey, spec: EnvSpec) -> ActorCriticState:
        params = network.init(key, networks.example_observation(spec.observation_space))
        return ActorCriticState(params, tx.init(params), hparams, jnp.zeros((), jnp.int32))

    act, policy = _acting(network)

    def loss(params, mb: Minibatch, hp):
        dist, values = network.apply(params, mb.observation)
        return loss_fn(dist, values, dist.entropy(), mb, hp)

    sgd_step = _sgd_step(loss, tx, config)

    def learn(state: ActorCriticState, batch: Transition, key: PRNGKey) -> Learned:
        hp = state.hparams
        # the critic on the whole rollout, one batched pass each (see the module docstring)
        bootstrap = network.apply(state.params, batch.next_observation, method=network.value)
        if learner_outputs:
            dist, values = network.apply(state.params, batch.observation)
            batch = _with_learner_outputs(batch, dist, values)
        else:
            values = network.apply(state.params, batch.observation, method=network.value)
        batch = batch.replace(extras={**batch.extras, "value": values})
        adv, target = advantages(batch, bootstrap, hp)
        ex = batch.extras
        data = Minibatch(batch.observation, batch.action, ex["log_prob"], ex["value"], adv, target)
        lr = scheduled_lr(hp.learning_rate, state.num_updates, total_updates, config.anneal_lr)
        state, metrics = minibatch_epochs(
            lambda s, mb: sgd_step(s, _normalized(mb, config), lr), state, data, key, config
        )
        return _learned(state, metrics, lr, target)

    return Agent(init=init, act=act, learn=learn, policy=policy)


def _acting(network: nn.Module) -> tuple[Callable, Callable]:
    """The feed-forward agent's ``act`` and greedy ``policy``."""

    def act(state: ActorCriticState, obs, key: PRNGKey):
        """``obs [N, ...] -> action [N, ...]`` and ``{"log_prob": [N]}``; one key per env (see
        jrl.core.parallel.local_keys). The policy only: ``learn`` evaluates the critic."""
        dist = network.apply(state.params, obs, method=network.policy)
        action, log_prob = _sample(dist, key, obs)
        return action, {"log_prob": log_prob}

    def policy(params, obs, key: PRNGKey):
        del key
        return network.apply(params, obs, method=network.policy).mode()

    return act, policy


def _recurrent_acting(network: nn.Module) -> tuple[Callable, Callable]:
    """The recurrent agent's ``act`` and greedy ``policy``, each from a hidden state."""

    def act(state: ActorCriticState, hidden, obs, key: PRNGKey):
        """From ``hidden`` (``[N, core_size]`` per leaf): ``(action, act_info, hidden)``."""
        new_hidden, dist, value = network.apply(state.params, hidden, obs)
        action, log_prob = _sample(dist, key, obs)
        return action, {"log_prob": log_prob, "value": value, "hidden": hidden}, new_hidden

    def policy(params, hidden, obs, key: PRNGKey):
        del key
        hidden, dist, _ = network.apply(params, hidden, obs)
        return dist.mode(), hidden

    return act, policy


def _memoryless_act(state, obs, key):
    raise TypeError("a recurrent agent acts from a hidden state: use agent.recurrent.act")


def _sample(dist, key: PRNGKey, obs):
    """One action per env (one key each, see jrl.core.parallel.local_keys) and its log-prob."""
    num = jax.tree.leaves(obs)[0].shape[0]
    action = jax.vmap(lambda d, k: d.sample(k))(dist, parallel.local_keys(key, num))
    # log-prob of the stored action by the same function learn uses, so the first ratio is
    # exactly 1 (a tanh-normal's exact sample-time log-prob differs from log_prob(action)
    # where tanh saturates)
    return action, dist.log_prob(action)


def _with_learner_outputs(batch: Transition, dist, values: jax.Array) -> Transition:
    """``batch`` (``[T, N]``) with ``dist``'s log-probs of its actions and ``values`` (the
    network's outputs on its observations) added to its extras."""
    extras = {LEARNER_LOG_PROB: dist.log_prob(batch.action), LEARNER_VALUE: values}
    return batch.replace(extras={**batch.extras, **extras})


def _normalized(mb: Minibatch, config: ActorCriticConfig) -> Minibatch:
    """``mb`` with its advantages normalised over the whole minibatch, on every device, when
    ``config.normalize_advantages`` (their std floored at ``advantage_std_floor`` times the
    mean absolute value target: with the floor 0, ``max(std, 0)`` is the std, to the bit)."""
    if not config.normalize_advantages:
        return mb
    floor = config.advantage_std_floor * parallel.global_mean(jnp.abs(mb.target))  # 0: std alone
    return mb.replace(advantage=normalize(mb.advantage, std_floor=floor))


def _sgd_step(loss, tx, config: ActorCriticConfig):
    """``sgd_step(state, minibatch, lr) -> (state, metrics)``: one gradient step on
    ``loss(params, minibatch, hparams) -> (total, metrics)``."""

    def sgd_step(state: ActorCriticState, mb, lr):
        (total, metrics), grads = jax.value_and_grad(loss, has_aux=True)(
            state.params, mb, state.hparams
        )
        grads = parallel.pmean(grads)  # equal sample counts per device: the global mean gradient
        params, opt_state = apply_gradients(tx, state.params, state.opt_state, grads, lr)
        metrics = {**metrics, "train/loss": total, **grad_norm_metric(grads, config.max_grad_norm)}
        return state.replace(params=params, opt_state=opt_state), metrics

    return sgd_step


def _learned(state: ActorCriticState, metrics, lr, target) -> Learned:
    metrics["train/learning_rate"] = lr
    metrics["train/value_target"] = parallel.pmean(target.mean())
    return Learned(state.replace(num_updates=state.num_updates + 1), metrics)


def _recurrent_actor_critic(
    network: nn.Module,
    loss_fn: LossFn,
    config: ActorCriticConfig,
    advantages: AdvantageFn,
    learner_outputs: bool,
) -> Agent:
    """:func:`make_actor_critic` with memory: ``network`` is a
    :class:`jrl.parts.networks.RecurrentActorCritic` whose core is ``config.recurrent``."""
    tx = make_optimizer(config.optimizer, config.max_grad_norm)
    hparams, total_updates = config.hparams(), config.num_iterations
    core, size = config.recurrent, config.core_size
    initial = lambda num: networks.initial_core_state(core, size, num)
    unroll = recurrent_unroll(network, initial)

    def init(key: PRNGKey, spec: EnvSpec) -> ActorCriticState:
        obs = networks.example_observation(spec.observation_space)
        params = network.init(key, initial(1), obs)
        return ActorCriticState(params, tx.init(params), hparams, jnp.zeros((), jnp.int32))

    act, policy = _recurrent_acting(network)

    def loss(params, smb: SequenceMinibatch, hp):
        hidden = jax.tree.map(lambda x: x[0], smb.hidden)
        (dist, values), _ = unroll(params, hidden, smb.data.observation, smb.episode_start)
        return loss_fn(dist, values, dist.entropy(), smb.data, hp)

    sgd_step = _sgd_step(loss, tx, config)

    def learn(state: ActorCriticState, batch: Transition, key: PRNGKey) -> Learned:
        hp, ex = state.hparams, batch.extras
        hidden = jax.tree.map(lambda x: x[:1], ex["hidden"])  # [1, N, ...]: the rollout's start
        done = batch.terminated | batch.truncated  # the loop reset the state after these steps
        start = jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])
        first = jax.tree.map(lambda x: x[0], hidden)
        _, bootstrap = unroll(state.params, first, batch.observation, start, batch.next_observation)
        rollout = batch
        if learner_outputs:
            outputs, _ = unroll(state.params, first, batch.observation, start)
            rollout = _with_learner_outputs(batch, *outputs)
        adv, target = advantages(rollout, bootstrap, hp)
        data = Minibatch(batch.observation, batch.action, ex["log_prob"], ex["value"], adv, target)
        lr = scheduled_lr(hp.learning_rate, state.num_updates, total_updates, config.anneal_lr)
        state, metrics = minibatch_epochs(
            lambda s, m: sgd_step(s, m.replace(data=_normalized(m.data, config)), lr),
            state,
            SequenceMinibatch(data, hidden, start),
            key,
            config,
            split=minibatches.sequence_minibatches,
        )
        return _learned(state, metrics, lr, target)

    recurrent = Recurrent(initial, act, policy)
    return Agent(init=init, act=_memoryless_act, learn=learn, policy=None, recurrent=recurrent)


def recurrent_unroll(network: nn.Module, initial: Callable[[int], PyTree]):
    """``unroll(params, hidden, obs, episode_start, next_obs=None)``: the recurrent network
    replayed over ``obs`` ``[T, n, ...]`` from ``hidden`` (``[n, ...]`` per leaf), the state
    put back to ``initial(n)`` before every step
    whose ``episode_start`` ``[T, n]`` is set. Returns ``((distribution, values), None)``, or
    with ``next_obs`` ``(None, bootstrap)``: the values ``[T, n]`` of ``next_obs[t]`` seen
    from the state after step ``t`` (the same episode's next observation)."""

    def unroll(params, hidden, obs, episode_start, next_obs=None):
        apply = lambda method, *a: network.apply(params, *a, method=method)
        feats = apply(network.embed, obs)
        xs = (feats, episode_start, None if next_obs is None else apply(network.embed, next_obs))
        init = initial(episode_start.shape[1])

        def step(h, x):
            feat, start, next_feat = x
            h, out = apply(network.core_step, networks.reset_core_state(h, init, start), feat)
            if next_feat is not None:
                out = apply(network.core_step, h, next_feat)[1]
            return h, out

        outs = jax.lax.scan(step, hidden, xs)[1]
        if next_obs is None:  # the policy under the observations' action masks, if any
            return apply(network.heads, outs, split_action_mask(obs)[1]), None
        return None, apply(network.heads, outs)[1]

    return unroll


def build_on_policy(
    config: ActorCriticConfig,
    env,
    env_params,
    loss_fn: LossFn,
    advantages: AdvantageFn,
    num_devices: int = 1,
    learner_outputs: bool = False,
) -> Built:
    """Wraps ``env`` for training, builds the network and agent (``loss_fn``, ``advantages``
    and ``learner_outputs``: see :func:`jrl.agents.actor_critic.common.make_actor_critic`),
    returns the loop.

    With ``num_devices > 1`` each device steps ``num_envs / num_devices`` envs
    (the loop must then run sharded, see :func:`jrl.run.anakin.run`).
    """
    if isinstance(env.action_space(env_params), spaces.Box) and config.continuous == "normal":
        env = ClipAction(env)
    env, spec = training_env(
        config,
        env,
        env_params,
        num_devices,
        normalize_observation=config.normalize_observations,
        normalize_reward=config.normalize_rewards,
        gamma=config.gamma,
    )
    network = _actor_critic_network(config, spec, num_devices)
    agent = make_actor_critic(network, loss_fn, config, advantages, learner_outputs)
    algorithm = on_policy(agent, env, config.num_steps, env_params, num_devices)
    return Built(algorithm, agent, env, env_params, spec, network)


def _actor_critic_network(config: ActorCriticConfig, spec: EnvSpec, num_devices: int):
    """The actor-critic network ``config`` asks for: feed-forward, or with a recurrent core
    (whose minibatches of whole sequences need ``num_envs / num_devices`` divisible by
    ``num_minibatches``)."""
    obs_ndim = max(len(spec.observation_space.shape), 1)
    head = (config.continuous, config.init_log_std, config.torso)
    if config.recurrent == "none":
        return networks.ActorCritic(
            spec.action_space,
            tuple(config.hidden_sizes),
            config.activation,
            obs_ndim,
            *head,
            config.shared_torso,
        )
    local_envs = config.num_envs // num_devices
    if local_envs % config.num_minibatches:
        raise ValueError(
            f"{local_envs} envs per device are not divisible by num_minibatches = "
            f"{config.num_minibatches} (with recurrent, each minibatch holds whole env sequences)"
        )
    return networks.RecurrentActorCritic(
        spec.action_space,
        config.recurrent,
        config.core_size,
        tuple(config.hidden_sizes),
        config.activation,
        obs_ndim,
        *head,
    )

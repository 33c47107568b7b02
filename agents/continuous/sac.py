"""Soft Actor-Critic (Haarnoja et al., 2018) with a critic ensemble and a tuned temperature.

A tanh-squashed Gaussian actor, an ensemble of Q critics with Polyak-averaged targets and an
entropy temperature tuned to a target entropy.

- Critics: ``num_critics`` Q-networks as one vmapped module (2: clipped double Q; more: a
  REDQ-style ensemble, a config value), each regressing on ``r + discount * (min_n
  Q'_n(s', a') - alpha log pi(a' | s'))`` with ``a' ~ pi(. | s')``
  (:func:`jrl.agents.continuous.common.critic_target`), the minimum over all critics or, with
  ``target_critics=M``, over M of them drawn for every update (REDQ);
- actor: minimises ``alpha log pi(a | s) - min_n Q_n(s, a)`` (or the critics' mean with
  ``actor_q="mean"``, as REDQ does), ``a ~ pi(. | s)`` reparameterised (:func:`actor_loss`),
  with the critics just updated;
- temperature: ``alpha = alpha_0 exp(d)`` with ``d`` learned (``autotune``) by
  :func:`alpha_loss`, pushing the policy's entropy towards ``target_entropy_scale * |A|``
  (-|A| by default); ``autotune=False`` keeps ``alpha = alpha_0``.

Loop: :func:`jrl.run.loops.off_policy` (its update-to-data ratio: ``updates_per_iteration /
(num_envs * steps_per_iteration)``); actions are rescaled from the actor's [-1, 1] to the
env's bounds by :class:`jrl.agents.continuous.common.ActionScale`; before the first update the
actions are
uniform over the action space.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

import jax
import jax.numpy as jnp
from flax import struct
from jrl.agents.continuous.common import (
    ActionScale,
    ContinuousConfig,
    build_continuous,
    critic_loss,
    critic_subset,
    critic_target,
    init_networks,
    item_normals,
    polyak,
    subset_key,
    uniform_warmup,
)

from jrl.core import parallel
from jrl.core.types import PyTree
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec, Learned
from jrl.parts.agent_config import Check, LearningRate
from jrl.parts.learner import apply_gradients, scheduled_lr
from jrl.parts.optim import make_optimizer
from jrl.run.builders import Built

__all__ = [
    "SACConfig",
    "SACHParams",
    "SACState",
    "actor_loss",
    "alpha_loss",
    "build",
    "make_sac",
    "make_sac_losses",
    "make_soft_init",
    "make_soft_learn",
]


@struct.dataclass
class SACHParams:
    """SAC's sweepable hyperparameters; all [] float32."""

    learning_rate: jax.Array
    gamma: jax.Array
    tau: jax.Array
    alpha: jax.Array
    target_entropy_scale: jax.Array


@struct.dataclass
class SACState:
    params: PyTree  # {"actor": ..., "critic": ...} (the critic ensemble's leaves have [N, ...])
    target_critic: PyTree  # Polyak-averaged critic parameters
    log_alpha: jax.Array  # [] d: alpha = hparams.alpha * exp(d) (0 without autotune)
    opt_state: PyTree  # {"actor": ..., "critic": ..., "alpha": ...}
    hparams: SACHParams
    num_updates: jax.Array  # [] int32 updates so far


def actor_loss(log_prob, q, alpha, ensemble: str = "min") -> jax.Array:
    """``mean_b(alpha log pi(a_b | s_b) - Q(s_b, a_b))`` for actions ``a ~ pi`` (``log_prob
    [B]``, ``q [N, B]``; ``alpha`` takes no gradient), with ``Q`` the critics' minimum
    (``ensemble="min"``) or their mean (``"mean"``, as REDQ's actor takes it)."""
    q_pi = jnp.mean(q, axis=0) if ensemble == "mean" else jnp.min(q, axis=0)
    return jnp.mean(jax.lax.stop_gradient(alpha) * log_prob - q_pi)


def alpha_loss(log_alpha, log_prob, target_entropy) -> jax.Array:
    """``-mean_b(log_alpha (log pi(a_b | s_b) + target_entropy))`` (no gradient to the
    policy): it raises alpha while the entropy ``-log pi`` is below the target, lowers it
    above."""
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + target_entropy))


def make_sac_losses(actor, critic, scale: ActionScale, subset: int = 0, ensemble: str = "min"):
    """``(critic_loss_fn, actor_loss_fn)`` of SAC, both drawing actions ``a ~ pi`` with
    one normal per item (:func:`jrl.agents.continuous.common.item_normals`).

    ``critic_loss_fn(critic_params, state, batch, alpha, key) -> (loss, q [N, B])``: the
    critics' squared error to ``r + discount * (min_n Q'_n(s', a') - alpha log pi(a' | s'))``,
    the minimum over ``subset`` target critics drawn at random (0: all);
    ``actor_loss_fn(actor_params, critic_params, obs, alpha, key) -> (loss, log_prob [B])``:
    :func:`actor_loss` with the critics' minimum or mean (``ensemble``)."""

    def sample(actor_params, obs, key):
        dist = actor.apply(actor_params, obs)
        return dist.from_noise(item_normals(key, dist.mean.shape[0], scale.dim))

    def critic_loss_fn(critic_params, state, batch, alpha, key):
        key, k_subset = subset_key(key, subset)
        next_action, next_log_prob = sample(state.params["actor"], batch.next_observation, key)
        next_q = critic.apply(state.target_critic, batch.next_observation, next_action)
        next_q = critic_subset(next_q, k_subset, subset)
        target = critic_target(batch.reward, batch.discount, next_q, alpha * next_log_prob)
        q = critic.apply(critic_params, batch.observation, scale.to_unit(batch.action))
        return critic_loss(q, target), q

    def actor_loss_fn(actor_params, critic_params, obs, alpha, key):
        action, log_prob = sample(actor_params, obs, key)
        q = critic.apply(critic_params, obs, action)
        return actor_loss(log_prob, q, alpha, ensemble), log_prob

    return critic_loss_fn, actor_loss_fn


def make_soft_init(init_params, tx, hparams: SACHParams):
    """``init(key, spec) -> SACState`` of SAC and discrete SAC: the networks from
    ``init_params(key, spec) -> {"actor": ..., "critic": ...}``, their critics' copy as the
    target critics, ``d = 0`` and the optimiser states (``tx``)."""

    def init(key, spec: EnvSpec) -> SACState:
        params = init_params(key, spec)
        log_alpha = jnp.zeros((), jnp.float32)
        opt = {k: tx.init(v) for k, v in params.items()}
        opt["alpha"] = tx.init(log_alpha)
        zero = jnp.zeros((), jnp.int32)
        return SACState(params, params["critic"], log_alpha, opt, hparams, zero)

    return init


def _sac_acting(actor, scale: ActionScale):
    """``(act, policy)``: SAC's acting (uniform actions before the first update) and its greedy
    policy."""

    def act(state: SACState, obs, key):
        k_noise, k_warm = jax.random.split(key)
        dist = actor.apply(state.params["actor"], obs)
        unit, _ = dist.from_noise(item_normals(k_noise, dist.mean.shape[0], scale.dim))
        return scale.to_env(uniform_warmup(state, unit, k_warm)), {}

    def policy(params, obs, key):
        del key
        return scale.to_env(actor.apply(params["actor"], obs).mode())

    return act, policy


def _optimizer_step(tx):
    """``step(tree, opt_state, name, grads, lr) -> (tree, opt_state)``: one step of ``tx`` on
    ``tree`` with the devices' mean gradient, the optimiser state kept at ``opt_state[name]``."""

    def step(tree, opt_state, name, grads, lr):
        new, opt = apply_gradients(tx, tree, opt_state[name], parallel.pmean(grads), lr)
        return new, {**opt_state, name: opt}

    return step


def make_soft_learn(critic_loss_fn, actor_loss_fn, config, entropy_unit) -> Callable:
    """SAC's ``learn(state, sample, key) -> Learned`` over its two losses (SAC's own, or
    discrete SAC's of :mod:`jrl.agents.continuous.sac_discrete`): an Adam step of the critics
    on ``critic_loss_fn(critic_params, state, batch, alpha, key) -> (loss, q)``, then of the
    actor on ``actor_loss_fn(actor_params, new_critic_params, obs, alpha, key) -> (loss,
    log_prob [B])`` (``log_prob``: the log-probability of the actor's action, or its
    expectation), then of ``d`` on :func:`alpha_loss` with the target entropy
    ``target_entropy_scale * entropy_unit(obs)`` (``[]`` or ``[B]``); the target critics move
    by ``tau``. ``config``: the agent's :class:`~jrl.agents.continuous.common.ContinuousConfig`
    with ``autotune``."""
    total = max(config.num_updates, 1)
    step = _optimizer_step(make_optimizer("adam", config.max_grad_norm))
    autotune = bool(config.autotune)

    def learn(state: SACState, sample_, key) -> Learned:
        hp, batch = state.hparams, sample_.items
        k_critic, k_actor = jax.random.split(key)
        lr = scheduled_lr(hp.learning_rate, state.num_updates, total, config.anneal_lr)
        alpha = hp.alpha * jnp.exp(state.log_alpha)
        (c_loss, q), grads = jax.value_and_grad(critic_loss_fn, has_aux=True)(
            state.params["critic"], state, batch, alpha, k_critic
        )
        new_critic, opt_state = step(state.params["critic"], state.opt_state, "critic", grads, lr)
        (a_loss, log_prob), grads = jax.value_and_grad(actor_loss_fn, has_aux=True)(
            state.params["actor"], new_critic, batch.observation, alpha, k_actor
        )
        new_actor, opt_state = step(state.params["actor"], opt_state, "actor", grads, lr)
        target_entropy = hp.target_entropy_scale * entropy_unit(batch.observation)
        log_alpha = state.log_alpha
        # the loss at log alpha = log alpha_0 + d; its gradient in log alpha is the one in d
        t_loss, grads = jax.value_and_grad(alpha_loss)(jnp.log(alpha), log_prob, target_entropy)
        if autotune:
            log_alpha, opt_state = step(log_alpha, opt_state, "alpha", grads, lr)
        new = SACState(
            {"actor": new_actor, "critic": new_critic},
            polyak(state.target_critic, new_critic, hp.tau),
            log_alpha,
            opt_state,
            hp,
            state.num_updates + 1,
        )
        metrics = parallel.pmean(
            {
                "train/critic_loss": c_loss,
                "train/actor_loss": a_loss,
                "train/q": q.mean(),
                "train/entropy": -log_prob.mean(),
                "train/alpha_loss": t_loss,
            }
        )
        return Learned(new, {**metrics, "train/alpha": alpha})

    return learn


def make_sac(actor, critic, scale: ActionScale, config: "SACConfig") -> Agent:
    """The SAC agent (see the module docstring) for ``actor`` (a
    :class:`~jrl.parts.networks.SquashedGaussianActor`) and ``critic`` (a
    :class:`~jrl.parts.networks.QEnsemble`)."""
    tx = make_optimizer("adam", config.max_grad_norm)
    init = make_soft_init(
        lambda key, spec: init_networks(actor, critic, scale, spec, key), tx, config.hparams()
    )
    act, policy = _sac_acting(actor, scale)
    losses = make_sac_losses(actor, critic, scale, config.target_subset, config.actor_q)
    learn = make_soft_learn(*losses, config, lambda obs: scale.dim)
    return Agent(init=init, act=act, learn=learn, policy=policy)


PENDULUM = {
    "total_steps": 20_000,
    "learning_rate": 1e-3,
    "learning_starts": 1_000,
    "buffer_size": 20_000,
    "hidden_sizes": (64, 64),
}
"""SAC on Pendulum-v1: RL Zoo's budget and learning rate (2e4 steps, 1e-3) with a replay
that holds the whole run, 1e3 random steps first and 64-64 networks (a 3-dimensional
observation needs no more)."""

MOUNTAIN_CAR = {**PENDULUM, "total_steps": 50_000, "buffer_size": 50_000, "learning_rate": 3e-4}
"""SAC on MountainCarContinuous-v0: 5e4 steps at the default learning rate."""

BRAX_INVERTED_PENDULUM = PENDULUM
"""SAC on brax:inverted_pendulum (the brax extra): as on Pendulum-v1, 2e4 steps."""


@dataclasses.dataclass(frozen=True)
class SACConfig(ContinuousConfig):
    """SAC settings: 2 critics, entropy temperature tuned from 1.0 to a target entropy of
    -|A|, Polyak rate 0.005, Adam 3e-4 for actor, critics and temperature."""

    HPARAMS: ClassVar[type] = SACHParams
    PRESETS: ClassVar[dict[str, dict]] = {
        "Pendulum-v1": PENDULUM,
        "MountainCarContinuous-v0": MOUNTAIN_CAR,
        "brax:inverted_pendulum": BRAX_INVERTED_PENDULUM,
    }

    learning_rate: LearningRate = 3e-4
    alpha: float = 1.0
    """Entropy temperature: its initial value with autotune, else its fixed value
    (sweepable)."""
    autotune: bool = True
    """Learn the temperature so the policy's entropy tracks the target entropy."""
    target_entropy_scale: float = -1.0
    """Target entropy per action dimension: target = target_entropy_scale * |A| (sweepable)."""
    actor_q: str = "min"
    """How the actor's loss reduces the critic ensemble: "min" (SAC) or "mean" (REDQ, with
    num_critics=10 and target_critics=2)."""

    def checks(self) -> list[Check]:
        return super().checks() + [
            (self.alpha > 0, f"alpha must be positive, got {self.alpha}"),
            (
                self.actor_q in ("min", "mean"),
                f"actor_q must be 'min' or 'mean', got {self.actor_q!r}",
            ),
        ]

    def make_agent(self, scale: ActionScale, obs_ndim: int) -> tuple[Agent, tuple]:
        """``(agent, (actor, critic ensemble))`` for
        :func:`jrl.agents.continuous.common.build_continuous`."""
        actor = networks.SquashedGaussianActor(
            scale.dim,
            tuple(self.hidden_sizes),
            self.activation,
            obs_ndim,
            self.torso,
        )
        critic = self.critic(obs_ndim)
        return make_sac(actor, critic, scale, self), (actor, critic)


def build(config: SACConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles SAC on ``env`` (a bounded 1-D Box action space)."""
    return build_continuous(config, env, env_params, num_devices, "sac")

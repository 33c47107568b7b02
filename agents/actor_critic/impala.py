"""IMPALA (Espeholt et al., 2018): the actor-critic with V-trace, on jrl's actor-critic agent.

IMPALA's actors act with whatever parameters they last received, so a rollout's actions come
from a *behaviour* policy ``mu`` that may lag behind the learner's current policy ``pi``.
V-trace corrects for that lag with truncated importance ratios
``rho_t = pi(a_t|o_t) / mu(a_t|o_t)``: ``log_rho = log pi - log mu``, where ``log mu`` is the
rollout's ``extras["log_prob"]`` (recorded when the actor acted) and ``log pi`` and the
values ``V`` come from the learner's current parameters, evaluated once per rollout before the
update (``learner_outputs`` of :func:`jrl.agents.actor_critic.common.make_actor_critic`). With
:func:`jrl.ops.returns.vtrace`'s targets ``vs`` and policy-gradient advantages ``A``
(``min(pg_rho_bar, rho_t) * (r_t + gamma * vs_{t+1} - V_t)``) the loss is

    L = -mean(log pi(a_t|o_t) * A_t) + vf_coef * 0.5 * mean((V(o_t) - vs_t)^2) - ent_coef * H

The clip levels ``rho_bar`` (the ratios of the TD errors in ``vs``: which value function
``vs`` estimates), ``c_bar`` (the traces: how fast the correction contracts) and
``pg_rho_bar`` are sweepable, as is ``gae_lambda``, which here is V-trace's lambda (its
traces are ``lambda * min(c_bar, rho)``; on-policy, ``vs`` is GAE's return with that
lambda). Acting, minibatching, gradient clipping and annealing are the family's
(:mod:`jrl.agents.actor_critic.common`); under the Anakin runner the lag is zero and the ratios
are 1 on the
first gradient step of each rollout.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct
from jrl.agents.actor_critic.common import (
    LEARNER_LOG_PROB,
    LEARNER_VALUE,
    GAEConfig,
    GAEHParams,
    Minibatch,
    build_on_policy,
)

from jrl.core.types import Transition
from jrl.ops import returns
from jrl.ops.losses import policy_gradient_loss, value_loss
from jrl.parts.agent_config import Check, LearningRate
from jrl.run.builders import Built

__all__ = ["IMPALAConfig", "IMPALAHParams", "build", "impala_loss", "vtrace_advantages"]


@struct.dataclass
class IMPALAHParams(GAEHParams):
    """The actor-critic hyperparameters, V-trace's lambda (``gae_lambda``), the entropy bonus
    and V-trace's three clip levels; all [] float32."""

    rho_bar: jax.Array
    c_bar: jax.Array
    pg_rho_bar: jax.Array


@dataclasses.dataclass(frozen=True)
class IMPALAConfig(GAEConfig):
    """IMPALA settings: 16 envs x 32 steps per rollout, learned in 4 epochs of 4 minibatches
    (the paper's learner takes one step per batch, ``num_epochs=1 num_minibatches=1``: on
    CartPole-v1 that, or 2 epochs of 2, collapsed after reaching 500 in some seeds unless
    rewards were normalised, which host envs under the Sebulba runner cannot be), V-trace with
    lambda 0.95 and every clip level at 1, advantages normalised per minibatch with a floor
    of 0.01 x the mean |value target| on their std, 64x64 tanh networks, Adam 5e-4
    annealed."""

    HPARAMS: ClassVar[type] = IMPALAHParams
    # Measured 2026-12-05 (final training return, 5e5 steps unless said; BENCHMARKS.md
    # "IMPALA's advantage floor"): CartPole-v1 at 6e5 steps, 96 seeds, 93 at 462.5 .. 500, the
    # lowest 365.0 (without the advantage floor 7 of 64 below 450, down to a collapsed 9.3);
    # Acrobot-v1 -82.3 (8 seeds, -83.6 .. -81.9; -82.4 without the floor); MountainCar-v0
    # -119.2 (8 seeds, -132.9 .. -116.1) without the floor, which its preset turns off: with
    # it 3 of 8 seeds never reached the flag (-200). Until the first success every return
    # there is -200 and the critic fits it exactly; the floor then stills the updates, while
    # the std alone turns the fit's float noise into a drift of the policy that found the
    # flag in every seed. No continuous preset: on Pendulum-v1 the settings tried (A2C's and
    # PPO's Pendulum presets without clipping, 1 to 10 epochs) stayed below -700 in 5e5 steps.
    # CartPole-v1 doubles the entropy bonus (2026-12-05, BENCHMARKS.md "IMPALA's advantage
    # floor"): at 0.01, seed 6 of the Sebulba test's pair 5 reached 500, then collapsed to one
    # action (9.3) for good; at 0.02 it ends at 486.3, 16 Sebulba pairs end at pair means 447.6
    # .. 498.6 and 32 Anakin seeds at 431.7 .. 499.9 (groups of 16: 478.7, 475.4), a few
    # points below 0.01's finals where neither collapses.
    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": {"ent_coef": 0.02},
        "Acrobot-v1": {},
        "MountainCar-v0": {"normalize_observations": True, "advantage_std_floor": 0.0},
    }

    num_envs: int = 16
    num_steps: int = 32
    num_epochs: int = 4
    num_minibatches: int = 4
    learning_rate: LearningRate = 5e-4
    rho_bar: float = 1.0
    """V-trace's rho-bar: the importance ratios of the value targets' TD errors are clipped
    at it (sweepable)."""
    c_bar: float = 1.0
    """V-trace's c-bar: the trace coefficients are clipped at it (sweepable)."""
    pg_rho_bar: float = 1.0
    """The clip of the importance ratios that weigh the policy-gradient advantages
    (sweepable)."""
    advantage_std_floor: float = 0.01
    """The advantages are divided by max(std, this x mean |value target|) (0: by their std
    alone). On for IMPALA, whose loss has no trust region: once the critic predicts
    CartPole's truncated returns almost exactly, advantages divided by their std alone are
    float noise at unit scale, and their updates walked policies into collapse
    (BENCHMARKS.md "IMPALA's advantage floor")."""

    def checks(self) -> list[Check]:
        return super().checks() + [
            (self.rho_bar > 0, f"rho_bar must be positive, got {self.rho_bar}"),
            (self.c_bar > 0, f"c_bar must be positive, got {self.c_bar}"),
            (self.pg_rho_bar > 0, f"pg_rho_bar must be positive, got {self.pg_rho_bar}"),
        ]


def vtrace_advantages(
    rollout: Transition, bootstrap_values: jax.Array, hp: IMPALAHParams
) -> tuple[jax.Array, jax.Array]:
    """``(pg_advantages, vs)``, ``[T, N]``: V-trace (:func:`jrl.ops.returns.vtrace`) of the
    learner's values ``extras[LEARNER_VALUE]`` with ``log_rhos`` = the learner's log-probs
    ``extras[LEARNER_LOG_PROB]`` minus the behaviour's ``extras["log_prob"]``."""
    ex = rollout.extras
    log_rhos = ex[LEARNER_LOG_PROB] - ex["log_prob"]
    clip = returns.VTraceClip(hp.rho_bar, hp.c_bar, hp.pg_rho_bar)
    vs, pg_advantages = returns.vtrace(
        rollout.reward,
        ex[LEARNER_VALUE],
        bootstrap_values,
        rollout.terminated,
        rollout.truncated,
        log_rhos,
        hp.gamma,
        hp.gae_lambda,
        clip,
    )
    return pg_advantages, vs


def impala_loss(dist, values, entropy, mb: Minibatch, hp: IMPALAHParams):
    """IMPALA's total loss on a minibatch ``[M]`` (``mb.advantage``: V-trace's policy-gradient
    advantages, ``mb.target``: ``vs``) and its parts, with the mean importance ratio
    ``pi / mu`` of the current parameters and the fraction of ratios above ``rho_bar``."""
    log_prob = dist.log_prob(mb.action)
    pg_loss = policy_gradient_loss(log_prob, mb.advantage)
    v_loss = value_loss(values, mb.target)
    ent = entropy.mean()
    total = pg_loss + hp.vf_coef * v_loss - hp.ent_coef * ent
    ratio = jnp.exp(log_prob - mb.old_log_prob)
    return total, {
        "train/policy_loss": pg_loss,
        "train/value_loss": v_loss,
        "train/entropy": ent,
        "train/importance_ratio": ratio.mean(),
        "train/rho_clip_fraction": (ratio > hp.rho_bar).mean(),
    }


def build(config: IMPALAConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles IMPALA on ``env`` (a jrl env as :func:`jrl.envs.make` returns it)."""
    return build_on_policy(
        config,
        env,
        env_params,
        impala_loss,
        vtrace_advantages,
        num_devices,
        learner_outputs=True,
    )

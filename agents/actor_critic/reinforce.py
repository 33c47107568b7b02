"""REINFORCE (Williams, 1992): the vanilla policy gradient, with a learned baseline.

The policy follows the gradient ``E[grad log pi(a_t|s_t) * (G_t - b(s_t))]``,
where ``G_t`` is the discounted return that followed the action and the
baseline ``b`` is a learned value function (Sutton & Barto, 2018, section
13.4). The loss of one update is

    L = -mean(log pi(a_t|s_t) * A_t) + vf_coef * 0.5 * mean((V(s_t) - G_t)^2),
    A_t = G_t - V(s_t)   (normalised over the batch when normalize_advantages)

with Monte Carlo returns over each rollout of ``num_steps`` steps from every
env. An episode that the rollout's end (or a time limit) cuts short is
bootstrapped from the critic at the cut, as every vectorised implementation
does; with ``num_steps`` longer than the episodes almost every return is a
true Monte Carlo return. One gradient step per rollout.

This file is the tutorial of ``docs/extending/writing-an-agent.md``: a config with its
presets and hyperparameters, an advantage estimator, a loss and ``build``,
on the actor-critic agent of :mod:`jrl.agents.actor_critic.common`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
from jrl.agents.actor_critic.common import (
    ActorCriticConfig,
    ActorCriticHParams,
    Minibatch,
    build_on_policy,
)

from jrl.core.types import Transition
from jrl.ops import returns
from jrl.ops.losses import policy_gradient_loss, value_loss
from jrl.parts.agent_config import LearningRate
from jrl.run.builders import Built

__all__ = ["REINFORCEConfig", "build", "monte_carlo_advantages", "reinforce_loss"]


@dataclasses.dataclass(frozen=True)
class REINFORCEConfig(ActorCriticConfig):
    """REINFORCE settings: 8 envs x 256 steps per update, one gradient step each, Adam 5e-3
    annealed, 64x64 tanh policy and baseline."""

    PRESETS: ClassVar[dict[str, dict]] = {"CartPole-v1": {}, "Acrobot-v1": {}}
    # HPARAMS is ActorCriticHParams (learning_rate, gamma, vf_coef): all this agent reads

    num_envs: int = 8
    num_steps: int = 256
    num_epochs: int = 1
    num_minibatches: int = 1
    learning_rate: LearningRate = 5e-3


def monte_carlo_advantages(
    rollout: Transition, bootstrap_values: jax.Array, hp: ActorCriticHParams
) -> tuple[jax.Array, jax.Array]:
    """``(G - V, G)``, ``[T, N]``: discounted returns over the rollout
    (:func:`jrl.ops.returns.discounted_returns`) minus the baseline ``V = extras["value"]``,
    the critic before this update: ``learn`` evaluates it on the whole rollout with the
    parameters it starts from (a recurrent agent keeps the values it computed while acting; see
    :mod:`jrl.agents.actor_critic.common`)."""
    g = returns.discounted_returns(
        rollout.reward, bootstrap_values, rollout.terminated, rollout.truncated, hp.gamma
    )
    return g - rollout.extras["value"], g


def reinforce_loss(dist, values, entropy, mb: Minibatch, hp: ActorCriticHParams):
    """The policy-gradient loss plus the baseline's regression loss, on a minibatch ``[M]``."""
    pg_loss = policy_gradient_loss(dist.log_prob(mb.action), mb.advantage)
    baseline_loss = value_loss(values, mb.target)
    metrics = {
        "train/policy_loss": pg_loss,
        "train/value_loss": baseline_loss,
        "train/entropy": entropy.mean(),
    }
    return pg_loss + hp.vf_coef * baseline_loss, metrics


def build(config: REINFORCEConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles REINFORCE on ``env`` (a jrl env as :func:`jrl.envs.make` returns it)."""
    return build_on_policy(
        config, env, env_params, reinforce_loss, monte_carlo_advantages, num_devices
    )

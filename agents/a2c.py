"""Advantage Actor-Critic (Mnih et al., 2016), synchronous, on jrl's actor-critic agent.

One gradient step per rollout on the whole batch with the plain policy
gradient ``L = -log pi(a|s) * A + vf_coef * L_V - ent_coef * H``; advantages
from GAE (``gae_lambda = 1`` gives n-step returns over the rollout).
Everything else is shared with PPO in :mod:`jrl.actor_critic`.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import tyro

from jrl.actor_critic import SWEEPABLE, ActorCriticConfig, ActorCriticHParams, Minibatch
from jrl.builders import Built, build_on_policy
from jrl.losses import policy_gradient_loss, value_loss

__all__ = ["A2CConfig", "PRESETS", "SWEEPABLE", "a2c_loss", "build"]


@dataclasses.dataclass(frozen=True)
class A2CConfig(ActorCriticConfig):
    """A2C settings: one epoch, one minibatch, short rollouts from many envs."""

    num_envs: int = 16
    """Parallel environments per seed."""
    num_steps: int = 8
    """Steps collected from each env per iteration (rollout length T)."""
    num_epochs: int = 1
    """Passes over each rollout (1 for A2C)."""
    num_minibatches: int = 1
    """Minibatches per pass (1 for A2C)."""
    learning_rate: Annotated[float, tyro.conf.arg(aliases=("--lr",))] = 2e-3
    """Optimizer step size (sweepable)."""
    optimizer: str = "adam"
    """'adam' or 'rmsprop'."""
    gae_lambda: float = 0.95
    """GAE lambda; 1.0 gives n-step returns (sweepable)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient (sweepable)."""
    normalize_advantages: bool = True
    """Normalise advantages over the batch."""
    clip_value: bool = False
    """Unused by A2C (no value clipping)."""


PRESETS: dict[str, dict] = {
    "CartPole-v1": {},
    "Acrobot-v1": {},
    "Pendulum-v1": {
        "normalize_observations": True,
        "normalize_rewards": True,
        "gamma": 0.95,
        "gae_lambda": 0.9,
    },
}
"""Per-environment overrides of the defaults."""


def a2c_loss(dist, values, entropy, mb: Minibatch, hp: ActorCriticHParams):
    """A2C's total loss on a minibatch ``[M]`` and its parts."""
    pg_loss = policy_gradient_loss(dist.log_prob(mb.action), mb.advantage)
    v_loss = value_loss(values, mb.target)
    ent = entropy.mean()
    total = pg_loss + hp.vf_coef * v_loss - hp.ent_coef * ent
    return total, {"train/policy_loss": pg_loss, "train/value_loss": v_loss, "train/entropy": ent}


def build(config: A2CConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles A2C on ``env`` (a jrl env as :func:`jrl.envs.make` returns it)."""
    return build_on_policy(config, env, env_params, a2c_loss, num_devices)

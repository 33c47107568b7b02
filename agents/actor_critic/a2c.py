"""Advantage Actor-Critic (Mnih et al., 2016), synchronous, on jrl's actor-critic agent.

One gradient step per rollout on the whole batch with the plain policy
gradient ``L = -log pi(a|s) * A + vf_coef * L_V - ent_coef * H``; advantages
from GAE (``gae_lambda = 1`` gives n-step returns over the rollout).
Everything else is shared with PPO in :mod:`jrl.agents.actor_critic.common`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jrl.agents.actor_critic.common import GAEConfig, GAEHParams, Minibatch, build_on_policy, gae

from jrl.ops.losses import policy_gradient_loss, value_loss
from jrl.parts.agent_config import LearningRate
from jrl.run.builders import Built

__all__ = ["A2CConfig", "a2c_loss", "build"]


@dataclasses.dataclass(frozen=True)
class A2CConfig(GAEConfig):
    """A2C settings: one epoch, one minibatch, short rollouts from many envs."""

    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": {},
        "Acrobot-v1": {},
        "Pendulum-v1": {
            "normalize_observations": True,
            "normalize_rewards": True,
            "gamma": 0.95,
            "gae_lambda": 0.9,
        },
    }
    RETIRED_FIELDS: ClassVar[tuple[str, ...]] = (
        "clip_eps",
        "clip_value",
    )  # older records: PPO's, unused

    num_envs: int = 16
    num_steps: int = 8
    num_epochs: int = 1
    num_minibatches: int = 1
    learning_rate: LearningRate = 2e-3
    ent_coef: float = 0.0


def a2c_loss(dist, values, entropy, mb: Minibatch, hp: GAEHParams):
    """A2C's total loss on a minibatch ``[M]`` and its parts."""
    pg_loss = policy_gradient_loss(dist.log_prob(mb.action), mb.advantage)
    v_loss = value_loss(values, mb.target)
    ent = entropy.mean()
    total = pg_loss + hp.vf_coef * v_loss - hp.ent_coef * ent
    return total, {"train/policy_loss": pg_loss, "train/value_loss": v_loss, "train/entropy": ent}


def build(config: A2CConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles A2C on ``env`` (a jrl env as :func:`jrl.envs.make` returns it)."""
    return build_on_policy(config, env, env_params, a2c_loss, gae, num_devices)

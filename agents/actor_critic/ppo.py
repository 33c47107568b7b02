"""Proximal Policy Optimisation (Schulman et al., 2017) on jrl's actor-critic agent.

Only the loss is PPO's own: the clipped surrogate objective, an (optionally
clipped) value loss and an entropy bonus,
``L = L_clip + vf_coef * L_V - ent_coef * H``, with its clip range
``clip_eps`` as a sweepable hyperparameter. Acting, GAE, minibatching,
gradient clipping and annealing are shared with A2C in
:mod:`jrl.agents.actor_critic.common`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
from flax import struct
from jrl.agents.actor_critic.common import GAEConfig, GAEHParams, Minibatch, build_on_policy, gae

from jrl.ops.losses import clipped_surrogate_loss, value_loss
from jrl.parts.agent_config import MINATAR_ENVS, MINATAR_NETWORK, Check, presets_for
from jrl.run.builders import Built

__all__ = ["PPOConfig", "PPOHParams", "build", "ppo_loss"]


@struct.dataclass
class PPOHParams(GAEHParams):
    """GAE actor-critic hyperparameters and PPO's clip range; all [] float32."""

    clip_eps: jax.Array


MINATAR = {
    **MINATAR_NETWORK,
    "shared_torso": True,
    "total_steps": 10_000_000,
    "num_envs": 64,
    "num_steps": 128,
    "num_epochs": 4,
    "num_minibatches": 8,
    "learning_rate": 5e-4,
    "ent_coef": 0.01,
}
"""PPO's MinAtar preset: the budget and batch of the PPO MinAtar baseline in purejaxql
(``ppo_minatar.yaml``: 1e7 steps, 64 envs x 128 steps, 4 epochs of 8 minibatches, lr annealed)
with PureJaxRL's lr 5e-4 and entropy 0.01, on the MinAtar network with one torso for actor and
critic."""


MEMORY_CHAIN = {
    "recurrent": "lstm",
    "core_size": 32,
    "hidden_sizes": (32,),
    "total_steps": 50_000,
    "num_envs": 32,
    "num_steps": 32,
    "num_minibatches": 4,
    "learning_rate": 3e-3,
}
"""PPO with an LSTM on MemoryChain-v0 (length 10): solved (greedy return 1) within 50k steps."""

CARTPOLE_NO_VEL = {
    "recurrent": "lstm",
    "core_size": 64,
    "hidden_sizes": (64,),
    "total_steps": 250_000,
    "num_envs": 16,
    "num_steps": 128,
    "num_minibatches": 4,
    "learning_rate": 1e-3,
    "normalize_rewards": True,
}
"""PPO with an LSTM on CartPoleNoVel-v1: greedy return 500 within 250k steps. Torso and core
feed both heads, so the value loss is kept small by normalising rewards."""


@dataclasses.dataclass(frozen=True)
class PPOConfig(GAEConfig):
    """PPO settings; defaults are the well-known CartPole configuration
    (4 envs x 128 steps, 4 epochs x 4 minibatches, 64x64 tanh, lr 2.5e-4 annealed)."""

    HPARAMS: ClassVar[type] = PPOHParams
    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": {},
        "Acrobot-v1": {"num_envs": 16, "ent_coef": 0.0},
        "MountainCar-v0": {"num_envs": 16, "normalize_observations": True},
        "Pendulum-v1": {
            "total_steps": 400_000,
            "num_envs": 16,
            "num_steps": 128,
            "num_epochs": 10,
            "num_minibatches": 32,
            "learning_rate": 1e-3,
            "gamma": 0.95,
            "gae_lambda": 0.95,
            "ent_coef": 0.0,
            "clip_value": False,
            "normalize_observations": True,
            "normalize_rewards": True,
        },
        "MountainCarContinuous-v0": {
            "num_envs": 16,
            "normalize_observations": True,
            "ent_coef": 0.0,
        },
        **presets_for(MINATAR_ENVS, MINATAR),
        "MemoryChain-v0": MEMORY_CHAIN,
        "CartPoleNoVel-v1": CARTPOLE_NO_VEL,
    }

    clip_eps: float = 0.2
    """PPO ratio clip (and value clip when clip_value) (sweepable)."""
    clip_value: bool = True
    """Clip the value update around the old value."""

    def checks(self) -> list[Check]:
        return super().checks() + [
            (self.clip_eps > 0, f"clip_eps must be positive, got {self.clip_eps}")
        ]


def ppo_loss(dist, values, entropy, mb: Minibatch, hp: PPOHParams, clip_value: bool = True):
    """PPO's total loss on a minibatch ``[M]`` and its parts."""
    log_prob = dist.log_prob(mb.action)
    pg_loss, clip_frac = clipped_surrogate_loss(
        log_prob, mb.old_log_prob, mb.advantage, hp.clip_eps
    )
    v_loss = value_loss(
        values,
        mb.target,
        mb.old_value if clip_value else None,
        hp.clip_eps if clip_value else None,
    )
    ent = entropy.mean()
    total = pg_loss + hp.vf_coef * v_loss - hp.ent_coef * ent
    approx_kl = (mb.old_log_prob - log_prob).mean()
    return total, {
        "train/policy_loss": pg_loss,
        "train/value_loss": v_loss,
        "train/entropy": ent,
        "train/clip_fraction": clip_frac,
        "train/approx_kl": approx_kl,
    }


def build(config: PPOConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles PPO on ``env`` (a jrl env as :func:`jrl.envs.make` returns it)."""
    clip = config.clip_value

    def loss(dist, values, entropy, mb, hp):
        return ppo_loss(dist, values, entropy, mb, hp, clip_value=clip)

    return build_on_policy(config, env, env_params, loss, gae, num_devices)

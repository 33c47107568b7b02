"""DDPG (Lillicrap et al., 2016): a deterministic actor and one critic, Gaussian exploration.

A deterministic actor trained through one critic, Gaussian exploration noise and
Polyak-averaged targets.

The agent is :func:`jrl.agents.continuous.common.make_deterministic`, TD3's, with one critic, no
target
policy smoothing and the actor updated at every critic update; this module holds DDPG's
defaults and presets.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jrl.agents.continuous.common import DeterministicConfig, build_continuous

from jrl.run.builders import Built

__all__ = ["DDPGConfig", "PENDULUM", "build"]

PENDULUM = {
    "total_steps": 30_000,
    "learning_starts": 1_000,
    "buffer_size": 30_000,
    "hidden_sizes": (64, 64),
}
"""DDPG on Pendulum-v1: the defaults with a replay that holds the whole run, 1e3 random steps
first and 64-64 networks."""

MOUNTAIN_CAR = {**PENDULUM, "total_steps": 100_000, "buffer_size": 100_000}
"""DDPG on MountainCarContinuous-v0: as on Pendulum-v1, for 1e5 steps."""


@dataclasses.dataclass(frozen=True)
class DDPGConfig(DeterministicConfig):
    """DDPG settings: one critic, exploration noise 0.1, the actor and targets updated at
    every critic update, Adam 1e-3."""

    PRESETS: ClassVar[dict[str, dict]] = {
        "Pendulum-v1": PENDULUM,
        "MountainCarContinuous-v0": MOUNTAIN_CAR,
    }

    num_critics: int = 1
    policy_noise: float = 0.0
    policy_delay: int = 1


def build(config: DDPGConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles DDPG on ``env`` (a bounded 1-D Box action space)."""
    return build_continuous(config, env, env_params, num_devices, "ddpg")

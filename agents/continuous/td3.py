"""TD3 (Fujimoto et al., 2018): clipped double Q, target smoothing, delayed actor updates.

Clipped double Q-learning, target policy smoothing, and actor and target updates delayed to
every ``policy_delay``-th critic update.

The agent is :func:`jrl.agents.continuous.common.make_deterministic` (DDPG is the same agent with
one
critic, no smoothing and no delay: ``agents/continuous/ddpg.py``); this module holds TD3's
defaults and
presets. Loop: :func:`jrl.run.loops.off_policy`, one env step and one critic update per
iteration by default; actions are rescaled from the actor's [-1, 1] to the env's bounds by
:class:`jrl.agents.continuous.common.ActionScale`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jrl.agents.continuous.common import DeterministicConfig, build_continuous

from jrl.run.builders import Built

__all__ = ["PENDULUM", "TD3Config", "build"]

PENDULUM = {
    "total_steps": 30_000,
    "learning_starts": 1_000,
    "buffer_size": 30_000,
    "hidden_sizes": (64, 64),
}
"""TD3 on Pendulum-v1: the defaults with a replay that holds the whole run, 1e3 random steps
first and 64-64 networks (a 3-dimensional observation needs no more)."""

MOUNTAIN_CAR = {**PENDULUM, "total_steps": 100_000, "buffer_size": 100_000}
"""TD3 on MountainCarContinuous-v0: as on Pendulum-v1, for 1e5 steps."""


@dataclasses.dataclass(frozen=True)
class TD3Config(DeterministicConfig):
    """TD3 settings: 2 critics, smoothing noise 0.2 clipped at 0.5, the actor and targets
    updated every 2nd critic update, exploration noise 0.1, Adam 1e-3 (the paper's)."""

    PRESETS: ClassVar[dict[str, dict]] = {
        "Pendulum-v1": PENDULUM,
        "MountainCarContinuous-v0": MOUNTAIN_CAR,
    }


def build(config: TD3Config, env, env_params, num_devices: int = 1) -> Built:
    """Assembles TD3 on ``env`` (a bounded 1-D Box action space)."""
    return build_continuous(config, env, env_params, num_devices, "td3")

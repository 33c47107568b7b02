"""Evolution strategies: OpenAI-ES, separable CMA-ES and SNES on a policy network's weights.

No gradients and no value function: each generation samples ``population_size`` networks
around the search distribution's mean, plays their episodes on batched envs, and moves the
distribution towards the samples with the higher returns (:mod:`jrl.agents.evolution.strategies`,
with the
strategies of evosax; the loop is :func:`jrl.agents.evolution.population.population`). The mean's
network is
the trained policy (``params``), deterministic: argmax for Discrete actions, a tanh layer
rescaled to the bounds for a Box.

- ``openai_es`` (Salimans et al., 2017): fixed isotropic noise, antithetic samples,
  centred-rank fitness shaping, Adam on the mean;
- ``snes`` (Schaul et al., 2011): separable natural ES, per-weight std adapted;
- ``cma_es``: separable CMA-ES (Ros & Hansen, 2008), a diagonal covariance, which suits
  networks of thousands of weights where a full covariance does not.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jrl.agents.evolution.population import build_population
from jrl.agents.evolution.strategies import ESConfig

from jrl.parts.agent_config import Check, LearningRate
from jrl.run.builders import Built

__all__ = ["CMAESConfig", "OpenAIESConfig", "SNESConfig", "build"]

LONG_EPISODES = {"episode_steps": 500, "population_size": 32, "total_steps": 32 * 500 * 100}
"""CartPole-v1 and Acrobot-v1: 500-step episodes (their time limit), 32 members (enough for
these low-dimensional tasks), 100 generations."""
PENDULUM = {"episode_steps": 200, "episodes_per_member": 4, "total_steps": 64 * 4 * 200 * 200}
"""Pendulum-v1: its 200-step episodes, each member's fitness the mean of 4 episodes (the start
angle is random, one episode is a noisy fitness), 200 generations."""
ADAPTIVE_PENDULUM = {**PENDULUM, "sigma_init": 1.0}
"""Pendulum-v1 for SNES, which adapts its std: start it at 1 (a swing-up needs weights far
from the initial network's; the std shrinks as the mean settles)."""
CMA_PENDULUM = {**PENDULUM, "sigma_init": 2.0}
"""Pendulum-v1 for separable CMA-ES: a start std of 2. Its step size adapts slowly over a
network's thousands of weights (from 1.0 it only falls to about 0.78 in 200 generations), so
the start std decides how widely it searches. Runs stuck near -900 (no member ever swings
up): 31 of 96 seeds from 0.5, 2 of 96 from 1.0 (the preset before), 1 of 256 from 2.0, none
of 128 from 4.0, whose other runs spread wider (BENCHMARKS.md, "CMA-ES on Pendulum-v1: the
start std")."""


@dataclasses.dataclass(frozen=True)
class OpenAIESConfig(ESConfig):
    """OpenAI-ES settings: 64 members, mirrored noise of std 0.1, centred ranks, Adam 0.03 on
    the mean, 32x32 tanh policy, normalised observations."""

    STRATEGY: ClassVar[str] = "openai_es"
    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": LONG_EPISODES,
        "Acrobot-v1": LONG_EPISODES,
        "Pendulum-v1": PENDULUM,
    }

    antithetic: bool = True
    """Mirrored sampling: members come in pairs mean +- sigma * eps."""

    def checks(self) -> list[Check]:
        """The base checks, and an even population_size: evosax's OpenAI-ES asserts one
        (mirrored pairs of members), with or without antithetic sampling."""
        return super().checks() + [
            (
                self.population_size % 2 == 0,
                f"openai_es needs an even population_size (evosax's OpenAI-ES samples members "
                f"in mirrored pairs), got {self.population_size}",
            )
        ]


@dataclasses.dataclass(frozen=True)
class SNESConfig(ESConfig):
    """SNES settings: 64 members, initial std 0.1 adapted per weight, rank utilities, mean
    step 1 (the natural gradient's)."""

    STRATEGY: ClassVar[str] = "snes"
    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": LONG_EPISODES,
        "Pendulum-v1": ADAPTIVE_PENDULUM,
    }

    learning_rate: LearningRate = 1.0


@dataclasses.dataclass(frozen=True)
class CMAESConfig(ESConfig):
    """Separable CMA-ES settings: 64 members, initial step size 0.1, the standard
    recombination weights and learning rates for the diagonal covariance, mean step 1."""

    STRATEGY: ClassVar[str] = "cma_es"
    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": LONG_EPISODES,
        "Pendulum-v1": CMA_PENDULUM,
    }

    learning_rate: LearningRate = 1.0


def build(config: ESConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles the evolution strategy ``config`` names on ``env``."""
    return build_population(config, env, env_params, num_devices)

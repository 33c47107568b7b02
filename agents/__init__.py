"""Agents built from jrl's parts, and their registry.

Each agent module defines a frozen ``Config`` dataclass (``PPOConfig``...),
per-environment ``PRESETS``, ``SWEEPABLE`` (the config fields that may take
several values in one compiled program) and ``build(config, env,
env_params, num_devices=1) -> Built``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from jrl import names as _names

AGENTS: dict[str, tuple[str, str]] = {
    "ppo": ("jrl.agents.ppo", "PPOConfig"),
    "a2c": ("jrl.agents.a2c", "A2CConfig"),
    "dqn": ("jrl.agents.dqn", "DQNConfig"),
}
"""Agent name -> (module, config class name)."""


class UnknownAgentError(KeyError, ValueError):
    """An agent name that is not registered; the message lists close matches."""

    def __init__(self, name: str):
        hint = _names.did_you_mean(name, list(AGENTS), cutoff=0.4)
        self.message = f"unknown agent {name!r}.{hint} Available: {', '.join(sorted(AGENTS))}."
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


def get(name: str) -> tuple[ModuleType, type]:
    """The agent's module and its config class."""
    if name not in AGENTS:
        raise UnknownAgentError(name)
    module_name, config_name = AGENTS[name]
    module = importlib.import_module(module_name)
    return module, getattr(module, config_name)


def names() -> list[str]:
    """Registered agent names."""
    return sorted(AGENTS)


__all__ = ["AGENTS", "UnknownAgentError", "get", "names"]

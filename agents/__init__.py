"""Agents built from jrl's parts, and their registry.

Each agent module defines a frozen ``Config`` dataclass (``PPOConfig``...),
per-environment ``PRESETS``, ``SWEEPABLE`` (the config fields that may take
several values in one compiled program) and ``build(config, env,
env_params, num_devices=1) -> Built``. One module may serve several agent
names with config subclasses that change defaults (``c51``, ``qrdqn`` and
``rainbow`` are DQN configs); such a class carries its own ``PRESETS``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from jrl import names as _names

AGENTS: dict[str, tuple[str, str]] = {
    "ppo": ("jrl.agents.ppo", "PPOConfig"),
    "a2c": ("jrl.agents.a2c", "A2CConfig"),
    "dqn": ("jrl.agents.dqn", "DQNConfig"),
    "c51": ("jrl.agents.dqn", "C51Config"),
    "qrdqn": ("jrl.agents.dqn", "QRDQNConfig"),
    "rainbow": ("jrl.agents.dqn", "RainbowConfig"),
    "pqn": ("jrl.agents.pqn", "PQNConfig"),
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


def summary(name: str) -> str:
    """One line describing the agent: its module's docstring for the first name registered
    for that module, else its config class's docstring."""
    module, config_cls = get(name)
    first = next(n for n, (m, _) in AGENTS.items() if m == AGENTS[name][0])
    doc = module.__doc__ if name == first else config_cls.__doc__
    return (doc or name).strip().splitlines()[0]


def names() -> list[str]:
    """Registered agent names."""
    return sorted(AGENTS)


__all__ = ["AGENTS", "UnknownAgentError", "get", "names", "summary"]

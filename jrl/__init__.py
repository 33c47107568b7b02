"""jrl: JAX-native reinforcement learning.

Public API: the environment layer (``Environment``, ``Wrapper``,
``TimeStep``, ``Transition``, ``spaces``), the agent contract (``Agent``,
``EnvSpec``) and ``train`` (see :mod:`jrl.app.api`); environments live
in ``jrl.envs``, agents in ``jrl.agents``, runners in ``jrl.run``.
"""

from jrl.core import spaces
from jrl.core.env import Environment, Wrapper
from jrl.core.types import TimeStep, Transition
from jrl.parts.agent import Agent, EnvSpec

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "EnvSpec",
    "Environment",
    "TimeStep",
    "Transition",
    "Wrapper",
    "spaces",
    "train",
    "load_policy",
    "__version__",
]


SUBMODULES = ("agents", "envs", "experiment", "evaluation", "export", "render", "run", "wrappers")
"""Submodules named in the docs; every submodule of ``jrl`` is reachable as an attribute
without importing it first (``import jrl; jrl.app.api.evaluate_run(...)``,
``jrl.parts.networks``, ``jrl.app.distributed``)."""


def __getattr__(name: str):
    if name == "train":  # imported lazily: it pulls in the agents and the runner
        from jrl.app.api import train

        return train
    if name == "load_policy":
        from jrl.app.export import load_policy

        return load_policy
    import importlib
    import importlib.util

    # every submodule (jrl.parts.networks, jrl.app.distributed, ...) is reachable as an attribute
    if name in SUBMODULES or (
        not name.startswith("_") and importlib.util.find_spec(f"jrl.{name}") is not None
    ):
        return importlib.import_module(f"jrl.{name}")
    raise AttributeError(f"module 'jrl' has no attribute {name!r}")

"""jrl: JAX-native reinforcement learning.

Public API: the environment layer (``Environment``, ``Wrapper``,
``TimeStep``, ``Transition``, ``spaces``), the agent contract (``Agent``,
``EnvSpec``) and ``train`` (see :mod:`jrl.experiment`); environments live
in ``jrl.envs``, agents in ``jrl.agents``, runners in ``jrl.run``.
"""

from jrl import spaces
from jrl.agent import Agent, EnvSpec
from jrl.env import Environment, Wrapper
from jrl.types import TimeStep, Transition

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
without importing it first (``import jrl; jrl.experiment.evaluate_run(...)``,
``jrl.networks``, ``jrl.distributed``)."""


def __getattr__(name: str):
    if name == "train":  # imported lazily: it pulls in the agents and the runner
        from jrl.experiment import train

        return train
    if name == "load_policy":
        from jrl.export import load_policy

        return load_policy
    import importlib
    import importlib.util

    # every submodule (jrl.networks, jrl.distributed, ...) is reachable as an attribute
    if name in SUBMODULES or (
        not name.startswith("_") and importlib.util.find_spec(f"jrl.{name}") is not None
    ):
        return importlib.import_module(f"jrl.{name}")
    raise AttributeError(f"module 'jrl' has no attribute {name!r}")

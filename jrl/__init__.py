"""jrl: JAX-native reinforcement learning.

Public API: the environment layer (``Environment``, ``Wrapper``,
``TimeStep``, ``Transition``, ``spaces``), the agent contract (``Agent``,
``EnvSpec``), ``train`` (see :mod:`jrl.app.api`; a hyperparameter search:
:mod:`jrl.app.search`), ``make_train`` (the whole run as one pure function,
:mod:`jrl.app.functional`) and ``load_policy`` (see
:mod:`jrl.app.export`). The library is layered in packages, from the base up:
``jrl.util``, ``jrl.core``, ``jrl.ops``, ``jrl.parts``, ``jrl.run`` (the runners),
``jrl.agents`` (one package per agent family), ``jrl.app`` (training runs, run folders,
the ``jrl`` command line); environments live in ``jrl.envs``.
"""

import importlib
import importlib.util

from jrl.core import parallel as _parallel
from jrl.core import spaces
from jrl.core.env import Environment, Wrapper
from jrl.core.types import TimeStep, Transition
from jrl.parts.agent import Agent, EnvSpec

__version__ = "0.1.0"

# before jax's CPU backend starts: enough threads that fake CPU devices cannot deadlock their
# own collectives (see jrl.core.parallel.size_cpu_thread_pool)
_parallel.size_cpu_thread_pool()

__all__ = [
    "Agent",
    "EnvSpec",
    "Environment",
    "TimeStep",
    "Transition",
    "Wrapper",
    "spaces",
    "train",
    "make_train",
    "load_policy",
    "__version__",
]


SUBMODULES = ("agents", "app", "core", "envs", "ops", "parts", "run", "util")
"""The packages named in the docs; each is reachable as an attribute without importing it
first (``import jrl; jrl.app.api.evaluate_run(...)``, ``jrl.envs.make(...)``), and so is
every other submodule of ``jrl``."""


def __getattr__(name: str):
    if name == "train":  # imported lazily: it pulls in the agents and the runner
        # (start-up time of `import jrl` and `jrl --help`); jrl.app.api.train, or a search
        from jrl.app.search import train

        return train
    if name == "make_train":  # lazily, as train
        from jrl.app.functional import make_train  # (start-up time, as train)

        return make_train
    if name == "load_policy":  # lazily, as train: it pulls in the training stack too
        from jrl.app.export import load_policy  # (start-up time, as train)

        return load_policy
    # every submodule (jrl.app, jrl.parts, ...) is reachable as an attribute
    if name in SUBMODULES or (
        not name.startswith("_") and importlib.util.find_spec(f"jrl.{name}") is not None
    ):
        return importlib.import_module(f"jrl.{name}")
    raise AttributeError(f"module 'jrl' has no attribute {name!r}")

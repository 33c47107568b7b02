"""The run layer: loops, builders, evaluation, PBT and plugins, and the runners (Anakin,
Sebulba, Ray actors).

Each module is reachable as an attribute without importing it first."""

from jrl.util.submodules import lazy_submodules

__getattr__ = lazy_submodules(__name__)

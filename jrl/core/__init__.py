"""The core layer: types, spaces, the parallel axes, the environment API and its wrappers,
and the two-player and multi-agent env APIs.

Each module is reachable as an attribute without importing it first."""

from jrl.util.submodules import lazy_submodules

__getattr__ = lazy_submodules(__name__)

"""The math layer: time-major returns, losses, action distributions and return distributions.

Each module is reachable as an attribute without importing it first."""

from jrl.util.submodules import lazy_submodules

__getattr__ = lazy_submodules(__name__)

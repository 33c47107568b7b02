"""Helpers any layer may import: close-match names, atomic files, bounded waits, lazy
submodules.

Each module is reachable as an attribute without importing it first."""

from jrl.util.submodules import lazy_submodules

__getattr__ = lazy_submodules(__name__)

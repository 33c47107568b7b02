"""Submodules as attributes of their package, imported at first use.

A layer package's ``__init__`` sets ``__getattr__ = lazy_submodules(__name__)``; then
``import jrl; jrl.parts.networks`` works without importing ``jrl.parts.networks`` first, and
``import jrl`` (or ``jrl --help``) still imports none of them.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Callable


def lazy_submodules(package: str) -> Callable[[str], ModuleType]:
    """A module ``__getattr__`` for ``package`` that imports ``package.<name>`` when it exists
    (names starting with ``_`` excluded) and raises ``AttributeError`` otherwise."""

    def __getattr__(name: str) -> ModuleType:
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__

"""Plugins: user modules that register environments or agents.

A plugin is any importable module that calls ``jrl.envs.register`` or
``jrl.agents.register`` when imported. ``jrl train/eval/render/export
--import mypkg.module`` (repeatable), the ``JRL_PLUGINS`` variable
(comma-separated module names) and ``jrl.train(..., plugins=[...])`` import
them before anything is looked up. A run records its plugins in
``config.json``, and resume, ``jrl eval``, ``jrl render`` and ``jrl export``
import them again, so a run of a custom env or agent works like any other.
A plugin must be importable as it is: installed, on ``PYTHONPATH``, or in the
current folder when Python searches it (``python -m jrl.app.cli``).
"""

from __future__ import annotations

import importlib
import os
from typing import Iterable

__all__ = ["ENV_VAR", "PluginError", "from_environment", "load"]

ENV_VAR = "JRL_PLUGINS"


class PluginError(ImportError):
    """A plugin module that cannot be imported (the message names it and why)."""


def from_environment() -> tuple[str, ...]:
    """The module names in ``$JRL_PLUGINS`` (comma-separated; empty entries ignored)."""
    return tuple(m.strip() for m in os.environ.get(ENV_VAR, "").split(",") if m.strip())


def load(modules: Iterable[str]) -> tuple[str, ...]:
    """Imports each module (once; importing twice is harmless) and returns their names."""
    names = tuple(dict.fromkeys(str(m) for m in modules))
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # an ImportError, or the plugin's own error while registering
            raise PluginError(
                f"plugin {name!r} could not be imported ({type(e).__name__}: {e}); it must be an "
                "importable module (installed, or on PYTHONPATH)"
            ) from e
    return names

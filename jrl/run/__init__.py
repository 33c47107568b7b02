"""Runners: execution strategies for a loop (anakin: fully on device)."""

import importlib
import importlib.util


def __getattr__(name: str):
    """The runner modules as attributes without importing them first (``jrl.run.anakin``,
    ``jrl.run.sebulba``, ``jrl.run.ray_actors``)."""
    if not name.startswith("_") and importlib.util.find_spec(f"jrl.run.{name}") is not None:
        return importlib.import_module(f"jrl.run.{name}")
    raise AttributeError(f"module 'jrl.run' has no attribute {name!r}")

"""Helpers shared by environments whose spaces depend on their params."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import jax
import numpy as np

P = TypeVar("P")


def concrete_params(params: P | None, default: P) -> P:
    """``params`` with every field as a Python float, for building static spaces.

    jrl spaces hold numpy bounds (static under ``jit``), so they cannot follow
    traced values: a field that is a tracer (params passed into a jitted
    function) falls back to ``default``'s value. A batch of params is accepted
    when all its members agree on the field; otherwise there is no single
    space and a ``ValueError`` is raised.
    """
    if params is None:
        return default

    def value(name: str) -> float:
        try:
            a = np.asarray(getattr(params, name), dtype=np.float64)
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            return float(getattr(default, name))
        if a.size == 0 or not (a == a.flat[0]).all():
            raise ValueError(f"params.{name} differs across the batch ({a}); spaces need one value")
        return float(a.flat[0])

    fields = dataclasses.fields(default)
    return dataclasses.replace(default, **{f.name: value(f.name) for f in fields})

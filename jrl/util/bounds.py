"""Bounds on waits, in seconds, read from environment variables (any layer).

Every wait of a run has a bound (a checkpoint save, the actors' queues, the end of a chunk
after a signal, a stalled program); each bound has a default and an environment variable
that overrides it, read here the same way for all of them.
"""

from __future__ import annotations

import math
import os

__all__ = ["seconds_from_env"]


def seconds_from_env(name: str, default: float, *, zero_turns_off: bool = False) -> float:
    """Seconds from the environment variable ``name`` (``default`` when unset or empty).

    ``ValueError`` (naming the variable) for text that is not a finite number, and for a
    number <= 0, or < 0 with ``zero_turns_off`` (where 0 means "no bound")."""
    text = os.environ.get(name, "").strip()
    if not text:
        return float(default)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    least = ">= 0 (0: no bound)" if zero_turns_off else "> 0"
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_turns_off):
        raise ValueError(f"${name} must be a number of seconds {least}, got {text!r}")
    return value

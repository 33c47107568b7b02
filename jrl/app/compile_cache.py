"""JAX's persistent compilation cache, on by default for jrl's training entry points.

A compiled training program is written to disk keyed by its HLO and the
backend, so the second run of the same program (same agent, env, config
shapes, seeds, jax version) loads it instead of compiling: on this project's
2-core CPU that turns ~10 s of PPO compile into well under a second
(BENCHMARKS.md).

Where: ``$JRL_COMPILE_CACHE`` if set (``0``, ``off``, ``false``, ``no`` or an
empty value disable it), else ``$XDG_CACHE_HOME/jrl/jax-cache`` (default
``~/.cache/jrl/jax-cache``). A cache directory already chosen for JAX (by the
user, or the test suite) is left as it is.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

__all__ = ["DISABLED", "MIN_COMPILE_SECONDS", "default_dir", "enable"]

DISABLED = ("", "0", "off", "false", "no")
"""Values of ``JRL_COMPILE_CACHE`` that turn the cache off."""

MIN_COMPILE_SECONDS = 0.05
"""jrl's write threshold: programs that compile faster are not written. JAX's own default
(1 s) would leave out the per-run programs just under it (a PPO run's ``init``, about 1 s
here, and its finiteness check), which every later start then compiles again; eager
ops (milliseconds) stay out."""


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/jrl/jax-cache``, or ``~/.cache/jrl/jax-cache``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jrl" / "jax-cache"


def enable(
    path: str | os.PathLike | None = None, min_compile_seconds: float = MIN_COMPILE_SECONDS
) -> Path | None:
    """Turns the persistent compilation cache on; returns its directory, or None when disabled.

    ``path`` overrides the environment and the default. Programs that compile
    in under ``min_compile_seconds`` are not written (JAX's
    ``jax_persistent_cache_min_compile_time_secs``). If JAX already has a
    cache directory, it is kept (and returned) with JAX's threshold as it is.
    """
    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    if path is None:
        env = os.environ.get("JRL_COMPILE_CACHE")
        if env is not None and env.strip().lower() in DISABLED:
            return None
        path = env or default_dir()
    directory = Path(path).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # an unwritable cache must not stop training
        warnings.warn(
            f"jrl: compilation cache disabled, cannot create {directory}: {err}", stacklevel=2
        )
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    # JAX reads the directory when it first compiles anything; start over so the setting takes
    # effect even if something was compiled (an eager op) before.
    compilation_cache.reset_cache()
    return directory

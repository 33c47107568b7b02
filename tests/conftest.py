"""Test-suite settings.

The persistent compilation cache is shared by all test processes of a run
(xdist workers and subprocesses), so identical programs built by different
tests compile once.
"""

import os
import tempfile

import jax

_CACHE = os.environ.setdefault(
    "JRL_TEST_COMPILE_CACHE", os.path.join(tempfile.gettempdir(), "jrl-test-jax-cache")
)
os.environ.setdefault(
    "JRL_COMPILE_CACHE", _CACHE
)  # `jrl train` in subprocesses: the same cache, not ~/.cache
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

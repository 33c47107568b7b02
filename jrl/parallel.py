"""The device axis: one place that names it and reduces across it.

The Anakin runner traces a sharded program (``jax.shard_map`` over a 1-D
mesh, pmap semantics) inside :func:`device_axis`; while that context is
active, the helpers here all-reduce over the device axis. Outside it (one
device, plain ``jit``) they are identities, so agents, loops and wrappers
call them unconditionally and never need to know whether they are sharded.

Randomness that is per *item* (per env, per sample) is drawn with
:func:`local_keys`: the key is split for the global number of items and each
device takes its slice, so N envs on D devices see exactly the keys they
would see on one device. Together with all-reduced means this makes a
sharded run equal (to float rounding) to the single-device run with the same
global batch.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

import jax
import jax.numpy as jnp

__all__ = ["AXIS", "axis_index", "axis_size", "current_axis", "device_axis", "local_keys", "pmean", "psum",
           "global_mean"]

AXIS = "devices"
"""Name of the device axis of jrl's meshes."""

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("jrl_device_axis", default=None)
_sizes: contextvars.ContextVar[int] = contextvars.ContextVar("jrl_device_axis_size", default=1)


@contextlib.contextmanager
def device_axis(name: str = AXIS, size: int = 1) -> Iterator[None]:
    """Marks code traced inside as running over the mapped axis ``name`` of ``size`` devices."""
    token, token_size = _current.set(name), _sizes.set(int(size))
    try:
        yield
    finally:
        _current.reset(token)
        _sizes.reset(token_size)


def current_axis() -> str | None:
    """The active device axis name, or None outside a sharded trace."""
    return _current.get()


def axis_size() -> int:
    """Number of devices on the active axis (1 outside a sharded trace); a Python int."""
    return _sizes.get() if _current.get() is not None else 1


def axis_index() -> jax.Array:
    """This device's index on the active axis (0 outside a sharded trace)."""
    name = _current.get()
    return jnp.zeros((), jnp.int32) if name is None else jax.lax.axis_index(name)


def pmean(tree: Any) -> Any:
    """Mean over devices of every leaf (identity on one device)."""
    name = _current.get()
    return tree if name is None else jax.lax.pmean(tree, name)


def psum(tree: Any) -> Any:
    """Sum over devices of every leaf (identity on one device)."""
    name = _current.get()
    return tree if name is None else jax.lax.psum(tree, name)


def global_mean(x: jax.Array, weights: jax.Array | None = None) -> jax.Array:
    """Mean of ``x`` over all its elements on all devices (weighted if ``weights``)."""
    if weights is None:
        return psum(jnp.sum(x)) / psum(jnp.asarray(x.size, jnp.float32))
    return psum(jnp.sum(x * weights)) / jnp.maximum(psum(jnp.sum(weights)), 1e-12)


def local_keys(key: jax.Array, num_local: int) -> jax.Array:
    """``[num_local]`` keys: this device's slice of ``split(key, num_local * axis_size())``;
    a single item overall gets ``key`` itself (``[1]``; no split to pay for, e.g. one env)."""
    size = axis_size()
    if size == 1 and num_local == 1:
        return key[None]
    if size == 1:
        return jax.random.split(key, num_local)
    keys = jax.random.split(key, num_local * size)
    return jax.lax.dynamic_slice_in_dim(keys, axis_index() * num_local, num_local)

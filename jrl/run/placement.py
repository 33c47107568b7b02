"""Where a run's stacked train states live: the 1-D device mesh of a data-parallel run
(:func:`make_mesh`), the CPU cores the independent runs of a run without one are spread over
(:func:`spread_mesh`), placing host arrays there (:func:`place`) and reading a sharded
state back (:func:`first_device`). Used by the runners (:mod:`jrl.run.anakin`,
:mod:`jrl.run.sebulba`) and the application's execution."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jrl.core import parallel
from jrl.core.types import PyTree, is_key
from jrl.run.algorithm import Algorithm

__all__ = [
    "first_device",
    "make_mesh",
    "num_runs",
    "place",
    "spread_mesh",
    "spread_sharding",
]


def make_mesh(num_devices: int | None = None) -> Mesh:
    """A 1-D mesh over the first ``num_devices`` devices (all when None), axis
    :data:`jrl.core.parallel.AXIS`; raises a clear error when too many are asked for."""
    devices = jax.devices()
    n = len(devices) if num_devices is None else int(num_devices)
    if n < 1:
        raise ValueError(f"devices must be >= 1, got {n}")
    if n > len(devices):
        raise ValueError(
            f"{n} devices requested but only {len(devices)} available "
            f"({devices[0].platform}); on CPU, "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={n} "
            "set before jax starts gives fake devices"
        )
    return Mesh(np.asarray(devices[:n]), (parallel.AXIS,))


def spread_mesh(num_runs: int, algorithm: Algorithm | None = None) -> Mesh | None:
    """The mesh of local CPU devices (axis :data:`jrl.core.parallel.SPREAD`) that a run of
    ``num_runs`` runs without a device mesh is spread over, or None: k devices, k the
    largest divisor of R up to the number of local devices, when k >= 2, jax's default
    backend is the CPU, this is the only process and the ``algorithm``'s runs are
    independent (:attr:`~jrl.run.loops.Algorithm.independent_runs`; not PBT). Each device then
    holds and steps R / k runs. One CPU device (jax's default; ``jrl train`` makes one per
    core): None."""
    if algorithm is not None and not algorithm.independent_runs:
        return None
    if jax.default_backend() != "cpu" or jax.process_count() > 1:
        return None
    devices = jax.local_devices()
    k = max(d for d in range(1, min(len(devices), int(num_runs)) + 1) if num_runs % d == 0)
    return Mesh(np.asarray(devices[:k]), (parallel.SPREAD,)) if k > 1 else None


def spread_sharding(spread: Mesh) -> NamedSharding:
    """Stacked states ``[R, ...]`` split along R over ``spread``'s devices."""
    return NamedSharding(spread, P(parallel.SPREAD))


def place(states: PyTree, mesh: Mesh | None = None, spread: Mesh | None = None) -> PyTree:
    """Host arrays of stacked train states onto the device (``[D, R, ...]`` sharded
    over ``mesh``'s device axis when given; ``[R, ...]`` split over ``spread``'s devices
    when that is given, see :func:`spread_mesh`)."""
    if mesh is None and spread is None:
        return jax.tree.map(jnp.asarray, states)
    sharding = (
        NamedSharding(mesh, P(parallel.AXIS)) if mesh is not None else spread_sharding(spread)
    )
    return jax.tree.map(lambda x: _put(x, sharding), states)


def _put(x, sharding: NamedSharding):
    """``x`` (a host array, or a jax array) placed with ``sharding``; on a mesh over several
    processes each process places its own blocks of ``x``, which every process holds whole."""
    if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding, x.ndim):
        return x
    if isinstance(x, jax.Array) and not x.is_fully_addressable:  # laid out otherwise
        return jax.jit(lambda y: y, out_shardings=sharding)(x)
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    if is_key(x):
        data = _put(jax.random.key_data(x), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def first_device(tree: PyTree) -> PyTree:
    """Device 0's slice of a ``[D, ...]`` sharded tree (works across processes)."""

    def take(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x.addressable_shards[0].data[0]
        return x[0]

    return jax.tree.map(take, tree)


def num_runs(states: PyTree) -> int:
    """R, the leading axis of stacked train states ``[R, ...]``."""
    return int(jax.tree.leaves(states)[0].shape[0])

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

The runs axis is the other mapped axis: the runner ``vmap``s ``step`` over R
runs (seeds, swept values) under the name :data:`RUNS` inside
:func:`runs_axis`. A branch that depends on a per-run counter (e.g. "has
learning started") is batched under ``vmap``, so ``lax.cond`` turns into a
select that computes both sides; :func:`all_runs` reduces such a predicate
over the runs, which gives an unbatched value and keeps the ``cond`` a real
branch. It is exact where the counter is equal in every run (runs executed
together step in lockstep).

A batch of envs inside the runs axis is a vmap inside a vmap. :func:`folding_vmap` is the
``vmap`` :class:`jrl.core.wrappers.VmapEnv` uses: under an outer ``vmap`` it folds the two into
one batch of ``R * N`` envs, which XLA compiles as it does a single batch (some env code,
MJX's physics among it, compiles much worse as a nested batch; BENCHMARKS.md, "brax trainers
side by side").
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from typing import Any, Iterator

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

__all__ = [
    "AXIS",
    "RUNS",
    "SPREAD",
    "all_runs",
    "any_run",
    "axis_index",
    "axis_size",
    "current_axis",
    "device_axis",
    "folding_vmap",
    "local_keys",
    "pmean",
    "psum",
    "global_mean",
    "runs_axis",
    "runs_axis_name",
    "cpu_device_count",
    "size_cpu_thread_pool",
    "usable_cores",
    "use_cpu_cores",
]

AXIS = "devices"
"""Name of the device axis of jrl's meshes."""

RUNS = "runs"
"""Name of the vmapped axis over the runs of one program (see :func:`runs_axis`)."""

SPREAD = "spread"
"""Name of the mesh axis over the host's CPU cores that a program's independent runs are
spread over, one block of runs per core (:func:`jrl.run.anakin.spread_mesh`)."""

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "jrl_device_axis", default=None
)
_sizes: contextvars.ContextVar[int] = contextvars.ContextVar("jrl_device_axis_size", default=1)
_runs: contextvars.ContextVar[str | None] = contextvars.ContextVar("jrl_runs_axis", default=None)


@contextlib.contextmanager
def runs_axis(name: str = RUNS) -> Iterator[None]:
    """Marks code traced inside as vmapped over the runs with ``jax.vmap(..., axis_name=name)``."""
    token = _runs.set(name)
    try:
        yield
    finally:
        _runs.reset(token)


def runs_axis_name() -> str | None:
    """The name of the vmapped runs axis while tracing inside :func:`runs_axis`, else None."""
    return _runs.get()


def all_runs(predicate: jax.Array) -> jax.Array:
    """``[]`` bool: ``predicate`` holds in every run of the vmapped group.

    Inside :func:`runs_axis` the result is unbatched (one value for all runs),
    so a ``lax.cond`` on it stays a branch instead of a select; outside, the
    predicate is returned as it is. Use it only for predicates that are equal
    in every run (counters that advance in lockstep), where it is exact.
    """
    name = _runs.get()
    if name is None:
        return predicate
    return jax.lax.pmin(jnp.asarray(predicate).astype(jnp.int32), name) > 0


def any_run(predicate: jax.Array) -> jax.Array:
    """``[]`` bool: ``predicate`` holds in at least one run of the vmapped group.

    Inside :func:`runs_axis` the result is unbatched, so a ``lax.cond`` on it stays a
    branch (taken when any run needs it) instead of a select that computes both sides for
    every run; outside, the predicate is returned as it is. Use it only where taking the
    branch in a run whose own predicate is False changes nothing in that run (e.g. a branch
    that selects per element by the same predicate)."""
    name = _runs.get()
    if name is None:
        return predicate
    return jax.lax.pmax(jnp.asarray(predicate).astype(jnp.int32), name) > 0


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


def folding_vmap(fn, in_axes: tuple[int | None, ...]):
    """``jax.vmap(fn, in_axes)`` for positional args, whose outer ``vmap``\\ s fold into it.

    ``in_axes`` has one entry per argument: ``0`` (every leaf mapped over its leading axis,
    size N) or ``None`` (shared by the batch). Unbatched, the result is exactly
    ``jax.vmap(fn, in_axes)(*args)``. Under an outer ``vmap`` of size R, the mapped
    arguments ``[R, N, ...]`` are reshaped to one batch ``[R * N, ...]`` (a mapped argument
    that the outer vmap does not batch is broadcast over R first), ``fn`` is vmapped once
    over it and the outputs are reshaped back to ``[R, N, ...]``: the same values as the
    nested ``vmap``, computed as one flat batch. A shared (``None``) argument that the outer
    vmap does batch cannot be folded without copying it N times; then the two vmaps nest as
    plain ``jax.vmap`` would. Deeper nests fold level by level. ``fn`` must not use
    collectives over the outer vmap's axis name (it is traced without it), and the folded
    function supports ``vmap`` and ``jit`` but not autodiff (``jax.custom_batching``).
    """
    in_axes = tuple(in_axes)
    if any(axis not in (0, None) for axis in in_axes):
        raise ValueError(f"folding_vmap: each in_axes entry must be 0 or None, got {in_axes}")
    plain = jax.vmap(fn, in_axes=in_axes)

    @custom_vmap
    def batched(*args):
        return plain(*args)

    @batched.def_vmap
    def rule(outer: int, in_batched, *args):
        if any(axis is None and any(jax.tree.leaves(b)) for axis, b in zip(in_axes, in_batched)):
            outer_axes = tuple(jax.tree.map(lambda b: 0 if b else None, b) for b in in_batched)
            out = jax.vmap(plain, in_axes=outer_axes)(*args)
            return out, jax.tree.map(lambda _: True, out)

        def fold(is_batched, x):  # [R, N, ...] (or [N, ...] shared over R) -> [R * N, ...]
            if not is_batched:
                x = jnp.broadcast_to(x, (outer, *jnp.shape(x)))
            return x.reshape((x.shape[0] * x.shape[1], *x.shape[2:]))

        folded = [
            arg if axis is None else jax.tree.map(fold, b, arg)
            for axis, b, arg in zip(in_axes, in_batched, args)
        ]
        out = batched(*folded)  # a further outer vmap folds in here in turn
        out = jax.tree.map(lambda y: y.reshape((outer, y.shape[0] // outer, *y.shape[1:])), out)
        return out, jax.tree.map(lambda _: True, out)

    return batched


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def use_cpu_cores(count: int | None = None) -> int | None:
    """Makes jax's CPU backend one device per core (``count``, default
    :func:`usable_cores`), so that the Anakin runner can spread a program's independent runs
    over the cores (:func:`jrl.run.anakin.spread_mesh`): XLA runs each CPU device's program
    on a thread of its own, while the small kernels of an RL step keep one core busy.

    Must run before jax starts its backends; returns the count set, or None where it leaves
    the choice alone: the backends have started, or the user chose already
    (``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``, ``JAX_NUM_CPU_DEVICES``
    or ``jax_num_cpu_devices``). ``jrl train`` calls it; a script calls it right after
    ``import jax`` to get the same. Only the CPU device count changes: a run on an
    accelerator is unaffected.
    """
    from jax._src import xla_bridge  # jax has no public test for "backends started"

    n = usable_cores() if count is None else int(count)
    if n < 1:
        raise ValueError(f"count must be >= 1, got {n}")
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return None
    if jax.config.jax_num_cpu_devices >= 0 or xla_bridge.backends_are_initialized():
        return None
    jax.config.update("jax_num_cpu_devices", n)
    return n


CPU_THREADS_ENV = "PJRT_NPROC"
"""The environment variable XLA's CPU client reads, when it starts, as the core count it sizes
its thread pools by (:func:`size_cpu_thread_pool`)."""


def cpu_device_count() -> int:
    """The number of CPU devices jax's CPU backend will make, as far as the settings say before
    it starts: ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``, else
    ``jax_num_cpu_devices`` (``JAX_NUM_CPU_DEVICES``), else 1."""
    flags = re.findall(
        r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", "")
    )
    if flags:
        return int(flags[-1])
    configured = jax.config.jax_num_cpu_devices
    return configured if configured >= 1 else 1


def size_cpu_thread_pool(devices: int | None = None) -> int | None:
    """Gives XLA's CPU client ``4 * devices`` threads (``PJRT_NPROC``), so that a program on
    several CPU devices cannot starve its own collectives; returns the count set, or None where
    it leaves the choice alone (one device, at least ``4 * devices`` usable cores already,
    ``PJRT_NPROC`` set already, or the backends have started and read it). ``devices``: how
    many devices one program's collectives span (``jrl train --devices D``), default
    :func:`cpu_device_count` (all the CPU devices the settings ask for).

    Why: the client runs every device's share of a multi-device program on one thread pool of
    ``max(cores, devices)`` threads. Two kinds of task can hold a pool thread while waiting for
    other pool work: the per-device launch tasks of a multi-device program (up to ``devices``
    per Python thread launching one), which wait while their device has its maximum of
    computations in flight, and the participants of the one collective program XLA runs at a
    time (up to ``devices``), which wait in the all-reduce's rendezvous for the others. With
    as many threads as devices (fake CPU devices on a machine with fewer cores), a launch task
    that waits on a full device can take the thread the last participant needs, while the
    computations that would free that device wait for a thread: a deadlock, seen on 2 cores
    with 4 fake devices under load (three threads in the rendezvous, the fourth in the
    device's in-flight semaphore, every other thread idle). ``2 * devices + 1`` threads
    always leave one free for one launching thread; ``4 * devices`` leaves room for two
    Python threads launching at once (a Sebulba learner beside an evaluation). The extra
    threads cost time where every core is busy (XLA's intra-op pool gets as many threads).

    Called by ``import jrl``, so it sizes
    the pool for devices the settings ask for before jrl is imported (fake CPU devices in
    ``XLA_FLAGS`` or ``JAX_NUM_CPU_DEVICES``); a script that starts jax's backends before
    importing jrl sets ``PJRT_NPROC`` itself. :func:`use_cpu_cores` does not call it: the
    threads beyond the cores are not free where the devices are busy (``jrl train`` with 4
    seeds on 2 cores, one device per core, ran at 0.6x the speed with 8 threads, measured
    2026-12-04), and its devices run independent runs, with no collective between them.
    ``jrl train --devices D`` (a data-parallel learner, whose gradients are averaged across
    ``D`` of those devices) calls it with ``D`` after :func:`use_cpu_cores`.
    """
    from jax._src import xla_bridge  # as in use_cpu_cores

    n = cpu_device_count() if devices is None else int(devices)
    threads = 4 * n
    if (
        n <= 1
        or threads <= usable_cores()  # the client's own count is enough: keep it
        or CPU_THREADS_ENV in os.environ
        or xla_bridge.backends_are_initialized()
    ):
        return None
    os.environ[CPU_THREADS_ENV] = str(threads)
    return threads

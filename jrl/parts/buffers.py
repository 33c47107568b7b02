"""Replay buffers as pure, jittable, vmappable functions.

A buffer is a :class:`ReplayBuffer`, a ``NamedTuple`` of pure functions in
the style of an optax ``GradientTransformation``; a factory closes over the
static sizes and the state is a ``flax.struct.dataclass``:

- ``init(item) -> state``: ``item`` is one example (e.g. a single unbatched
  ``Transition``), used only for its shapes and dtypes; storage is allocated
  zero-filled with a leading ``[capacity]`` axis per leaf (the memory check
  runs first, see :func:`check_buffer_memory`).
- ``add(state, items) -> state``: ``items`` has a leading batch axis ``[B]``
  (e.g. the N envs of one step), written circularly at ``position``.
- ``sample(state, key, batch_size, beta=None) -> Sample``: only filled slots
  are drawn; ``batch_size`` is static; ``beta`` is used by the prioritised
  buffer only (the others accept and ignore it, so buffers are swappable).
- ``update_priorities(state, indices, priorities) -> state``: prioritised
  buffer only (``None`` elsewhere).
- ``can_sample(state, batch_size) -> bool[]``.

Everything works under ``jit`` and ``vmap``: vmapping ``init`` (over anything
with a leading seed axis), ``add`` and ``sample`` gives one independent buffer
per seed. Under ``vmap`` the memory check sees one buffer; call
:func:`check_buffer_memory` with ``copies=R`` yourself before vmapping R.

Three buffers: :func:`uniform_buffer`, :func:`prioritized_buffer` (over the sum tree of
:mod:`jrl.parts.sum_tree`) and :func:`trajectory_buffer` (contiguous sequences).
:func:`jrl.parts.nstep.nstep_accumulator` turns a stream of one-step transitions of N envs
into n-step transitions inside the compiled loop, to be added to any buffer.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import parallel
from jrl.core.types import Array, PRNGKey, PyTree
from jrl.parts.sum_tree import sum_tree_size, tree_find, tree_set

__all__ = [
    "BufferState",
    "PrioritizedBufferState",
    "ReplayBuffer",
    "Sample",
    "available_memory_bytes",
    "buffer_bytes",
    "check_buffer_memory",
    "prioritized_buffer",
    "trajectory_buffer",
    "uniform_buffer",
]

_GiB = float(2**30)


# ----------------------------------------------------------------------------- types


@struct.dataclass
class BufferState:
    """State of a uniform or trajectory buffer."""

    storage: PyTree  # [capacity, ...] per leaf (trajectory buffer: [T_capacity, N, ...])
    position: Array  # [] int32 next slot (trajectory: time row) to write
    size: Array  # [] int32 filled slots (trajectory: time rows), <= capacity


@struct.dataclass
class PrioritizedBufferState:
    """State of a prioritised buffer: storage plus a flat sum tree."""

    storage: PyTree  # [capacity, ...] per leaf
    position: Array  # [] int32 next slot to write
    size: Array  # [] int32 filled slots, <= capacity
    tree: Array  # [sum_tree_size] float32 8-ary sum tree of p^alpha; slot i's leaf at i, root last
    max_priority: Array  # [] float32 largest priority seen (p + eps, before ^alpha)


@struct.dataclass
class Sample:
    """What ``sample`` returns."""

    items: PyTree  # [batch_size, ...] (trajectory: [batch_size, sequence_length, ...])
    indices: Array  # [batch_size] int32 slots (trajectory: start_row * num_envs + env)
    weights: Array  # [batch_size] float32 importance weights (ones unless prioritised)


class ReplayBuffer(NamedTuple):
    """A replay buffer as a bundle of pure functions; see the module docstring."""

    init: Callable[[PyTree], Any]
    add: Callable[[Any, PyTree], Any]
    sample: Callable[..., Sample]
    update_priorities: Callable[[Any, Array, Array], Any] | None
    can_sample: Callable[[Any, int], Array]


# ----------------------------------------------------------------------------- memory


def leaf_spec(leaf) -> jax.ShapeDtypeStruct:
    """Shape and (canonical) dtype of an array, tracer, ShapeDtypeStruct or scalar."""
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        leaf = np.asarray(leaf)
    return jax.ShapeDtypeStruct(tuple(leaf.shape), jax.dtypes.canonicalize_dtype(leaf.dtype))


def _item_bytes(item: PyTree) -> int:
    specs = [leaf_spec(x) for x in jax.tree.leaves(item)]
    return sum(math.prod(s.shape) * np.dtype(s.dtype).itemsize for s in specs)


def buffer_bytes(item: PyTree, capacity: int, *, prioritized: bool = False) -> int:
    """Bytes of storage for ``capacity`` copies of the example ``item`` (its
    shapes and dtypes), plus the float32 sum tree if ``prioritized``.
    Counters (a few scalars) are not counted."""
    total = int(capacity) * _item_bytes(item)
    if prioritized:
        total += 4 * sum_tree_size(capacity)
    return total


def available_memory_bytes(device: jax.Device | None = None) -> int | None:
    """Free memory where buffers are allocated (default: ``jax.devices()[0]``).

    GPU/TPU: ``bytes_limit - bytes_in_use`` from ``device.memory_stats()``;
    CPU: ``MemAvailable`` from ``/proc/meminfo``, else ``os.sysconf``'s free
    physical pages. ``None`` when unknown (the check is then skipped). Tests
    monkeypatch this function.
    """
    device = jax.devices()[0] if device is None else device
    if device.platform != "cpu":
        try:
            stats = device.memory_stats()
        except Exception:  # noqa: BLE001 - not every backend implements it
            stats = None
        if stats and "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_buffer_memory(
    item: PyTree,
    capacity: int,
    *,
    prioritized: bool = False,
    copies: int = 1,
    available_bytes: int | None = None,
) -> int:
    """Raise ``MemoryError`` if ``copies`` buffers of ``capacity`` x ``item``
    do not fit in the free memory; return the bytes needed.

    ``available_bytes`` defaults to :func:`available_memory_bytes` (no check
    when that is unknown). Buffers' ``init`` calls this with ``copies=1``
    before allocating; call it with ``copies=R`` before vmapping R buffers.
    """
    need = int(copies) * buffer_bytes(item, capacity, prioritized=prioritized)
    avail = available_memory_bytes() if available_bytes is None else int(available_bytes)
    if avail is not None and need > avail:
        tree = f" + sum tree {4 * sum_tree_size(capacity)} bytes" if prioritized else ""
        times = f", x {copies} copies" if copies != 1 else ""
        raise MemoryError(
            f"replay buffer needs {need / _GiB:.2f} GiB (capacity {int(capacity)} x item "
            f"{_item_bytes(item)} bytes{tree}{times}), only {avail / _GiB:.2f} GiB available; "
            "lower the capacity, or pass check_memory=False to skip this check"
        )
    return need


# ----------------------------------------------------------------------------- helpers


def positive_int(value, name: str) -> int:
    """``value`` as an int; ``ValueError`` naming ``name`` unless it is a positive int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def zeros_with_leading(item: PyTree, leading: tuple[int, ...]) -> PyTree:
    """Zeros shaped ``[*leading, *leaf.shape]`` for every leaf of the example ``item``."""

    def zeros(leaf):
        s = leaf_spec(leaf)
        return jnp.zeros(leading + s.shape, s.dtype)

    return jax.tree.map(zeros, item)


def _leading_size(storage: PyTree, items: PyTree, extra_dims: int, what: str) -> int:
    """Size of ``items``' leading axis; each leaf must be ``[B, *s.shape[extra_dims:]]``
    for its storage leaf ``s``."""
    sizes = set()

    def check(s, x):
        shape = jnp.shape(x)
        if len(shape) != s.ndim - extra_dims + 1 or tuple(shape[1:]) != tuple(s.shape[extra_dims:]):
            raise ValueError(
                f"{what}: expected a leaf of shape [B, *{tuple(s.shape[extra_dims:])}]"
                f", got {tuple(shape)}"
            )
        sizes.add(shape[0])

    jax.tree.map(check, storage, items)
    if len(sizes) != 1:
        raise ValueError(f"{what}: leaves disagree on the batch size: {sorted(sizes)}")
    return sizes.pop()


_ROW_LIMIT = 2**30
"""Capacities (rows) must lie below this: ``position + arange(B)`` and ``size + B``, each term
below the capacity, are int32 (so the rows written are ``B <= capacity`` distinct ones)."""


def _write(storage: PyTree, items: PyTree, rows: Array) -> PyTree:
    return jax.tree.map(
        lambda s, x: s.at[rows].set(jnp.asarray(x).astype(s.dtype), unique_indices=True),
        storage,
        items,
    )


def _add_rows(state, items: PyTree, capacity: int, what: str):
    """Write ``items`` (``[B, ...]``, ``B <= capacity``) at rows ``(position +
    arange(B)) % capacity``; returns ``(state, rows)``."""
    b = _leading_size(state.storage, items, 1, what)
    if capacity >= _ROW_LIMIT:
        raise ValueError(
            f"{what}: a capacity of {capacity} rows is not below 2**30; rows are int32 and "
            "position + B (both below the capacity) must not overflow"
        )
    if b > capacity:
        raise ValueError(
            f"{what}: cannot add {b} items at once to a buffer of capacity "
            f"{capacity}; raise the capacity or add fewer items per call"
        )
    rows = (state.position + jnp.arange(b, dtype=jnp.int32)) % capacity
    state = state.replace(
        storage=_write(state.storage, items, rows),
        position=(state.position + b) % capacity,
        size=jnp.minimum(state.size + b, capacity),
    )
    return state, rows


def _zero_counters() -> tuple[Array, Array]:
    return jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)


# ----------------------------------------------------------------------------- uniform


def uniform_buffer(
    capacity: int, *, stratify: int | None = None, check_memory: bool = True
) -> ReplayBuffer:
    """A circular buffer of ``capacity`` items, sampled uniformly with replacement.

    ``add`` accepts any batch ``B <= capacity`` (``B`` need not divide the
    capacity: slots are ``(position + arange(B)) % capacity``); ``B >
    capacity`` raises ``ValueError`` at trace time. ``sample`` draws from the
    ``size`` filled slots only; on an empty buffer it returns slot 0 (zeros) --
    check ``can_sample`` (``size >= batch_size``) first.

    ``stratify=N``: every ``add`` holds one item from each of ``N`` envs (env
    ``e`` always lands in a slot ``= e mod N``; ``capacity`` must be a
    multiple of ``N``), and ``sample`` draws ``batch_size / N`` items from
    each env's slots with that env's key from :func:`jrl.core.parallel.local_keys`
    (item ``j`` of the batch comes from env ``j // (batch_size / N)``). So N
    envs split over D devices, each device sampling ``batch_size / D`` from
    its own buffer of ``capacity / D``, draw exactly the items one device
    would draw from one buffer: the sharded learner equals the unsharded one.
    """
    capacity = positive_int(capacity, "capacity")
    if stratify is not None:
        stratify = positive_int(stratify, "stratify")
        if capacity % stratify:
            raise ValueError(
                f"a buffer stratified over {stratify} envs needs a capacity divisible by it, "
                f"got {capacity}"
            )

    def init(item: PyTree) -> BufferState:
        if check_memory:
            check_buffer_memory(item, capacity)
        return BufferState(zeros_with_leading(item, (capacity,)), *_zero_counters())

    def add(state: BufferState, items: PyTree) -> BufferState:
        if (
            stratify is not None
            and _leading_size(state.storage, items, 1, "uniform_buffer.add") != stratify
        ):
            raise ValueError(
                f"uniform_buffer.add: a buffer stratified over {stratify} envs takes one item "
                "per env per add"
            )
        return _add_rows(state, items, capacity, "uniform_buffer.add")[0]

    def sample(state: BufferState, key: PRNGKey, batch_size: int, beta=None) -> Sample:
        del beta  # uniform: all weights are one
        batch_size = positive_int(batch_size, "batch_size")
        idx = _uniform_slots(key, state.size, batch_size, stratify)
        items = jax.tree.map(lambda s: s[idx], state.storage)
        return Sample(items, idx, jnp.ones((batch_size,), jnp.float32))

    def can_sample(state: BufferState, batch_size: int) -> Array:
        return state.size >= batch_size

    return ReplayBuffer(init, add, sample, None, can_sample)


def _uniform_slots(key: PRNGKey, size: Array, batch_size: int, stratify: int | None) -> Array:
    """``[batch_size]`` slots drawn uniformly from the ``size`` filled ones (slot 0 when
    none is); with ``stratify=N``, ``batch_size / N`` from each env's slots (env ``e``'s are
    those ``= e mod N``) with that env's key from :func:`jrl.core.parallel.local_keys`."""
    if stratify is None:
        return jax.random.randint(key, (batch_size,), 0, jnp.maximum(size, 1), jnp.int32)
    if batch_size % stratify:
        raise ValueError(
            f"a batch of {batch_size} cannot take the same number of items from each of "
            f"{stratify} envs"
        )
    per_env = batch_size // stratify
    rows = jnp.maximum(size // stratify, 1)
    draw = jax.vmap(lambda k: jax.random.randint(k, (per_env,), 0, rows, jnp.int32))
    return (
        draw(parallel.local_keys(key, stratify)) * stratify
        + jnp.arange(stratify, dtype=jnp.int32)[:, None]
    ).reshape(-1)


# ----------------------------------------------------------------------------- prioritised


def prioritized_buffer(
    capacity: int,
    alpha: float = 0.6,
    beta: float = 0.4,
    eps: float = 1e-6,
    *,
    check_memory: bool = True,
) -> ReplayBuffer:
    """Proportional prioritised replay (Schaul et al., 2016) over a sum tree.

        stored_i = (|p_i| + eps) ** alpha,    P(i) = stored_i / sum_j stored_j
        w_i = (N * P(i)) ** -beta / max_{j in batch} (N * P(j)) ** -beta

    with ``N`` the number of filled slots. Weights are normalised by the
    largest weight **in the sampled batch** (O(batch), no min-tree), so they
    lie in ``(0, 1]``. ``alpha`` is fixed here; ``beta`` is the default for
    ``sample(state, key, batch_size, beta=None)``, which takes a traced
    ``beta`` to anneal it.

    The sum tree (:mod:`jrl.parts.sum_tree`: a flat float32 array of 8-ary nodes, about
    ``8/7`` of the capacity) holds ``stored_i`` at leaf ``i``. New items enter at the
    largest priority seen so far (``max_priority``, 1 initially, never decreasing).
    Sampling is stratified: the total mass is cut into ``batch_size`` equal segments, one
    uniform draw in each, each located by an O(log P) descent (a ``fori_loop`` over the
    ``log_K P`` levels, each one gather of a node's ``K`` children, vectorised over the
    batch); so samples come out in slot order -- permute them if you split the batch.
    ``update_priorities(state, indices, priorities)`` takes
    raw priorities (e.g. |TD error|, abs taken); if an index repeats, one of
    its priorities is kept.
    """
    capacity = positive_int(capacity, "capacity")
    for name, value in (("alpha", alpha), ("beta", beta), ("eps", eps)):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    default_beta = float(beta)

    def init(item: PyTree) -> PrioritizedBufferState:
        return _prioritized_init(item, capacity, check_memory)

    def add(state: PrioritizedBufferState, items: PyTree) -> PrioritizedBufferState:
        state, rows = _add_rows(state, items, capacity, "prioritized_buffer.add")
        values = jnp.full(rows.shape, state.max_priority**alpha, jnp.float32)
        return state.replace(tree=tree_set(state.tree, rows, values, capacity))

    def sample(state: PrioritizedBufferState, key: PRNGKey, batch_size: int, beta=None) -> Sample:
        batch_size = positive_int(batch_size, "batch_size")
        beta = default_beta if beta is None else beta
        return _prioritized_sample(state, key, batch_size, beta, capacity)

    def update_priorities(
        state: PrioritizedBufferState, indices: Array, priorities: Array
    ) -> PrioritizedBufferState:
        p = jnp.abs(jnp.asarray(priorities, jnp.float32)) + eps
        tree = tree_set(state.tree, jnp.asarray(indices, jnp.int32), p**alpha, capacity)
        return state.replace(tree=tree, max_priority=jnp.maximum(state.max_priority, p.max()))

    def can_sample(state: PrioritizedBufferState, batch_size: int) -> Array:
        return state.size >= batch_size

    return ReplayBuffer(init, add, sample, update_priorities, can_sample)


def _prioritized_init(item: PyTree, capacity: int, check_memory: bool) -> PrioritizedBufferState:
    """An empty prioritised buffer of ``capacity`` slots for the example ``item``: zero storage
    and an all-zero sum tree, ``max_priority`` 1."""
    if check_memory:
        check_buffer_memory(item, capacity, prioritized=True)
    tree = jnp.zeros((sum_tree_size(capacity),), jnp.float32)
    return PrioritizedBufferState(
        zeros_with_leading(item, (capacity,)),
        *_zero_counters(),
        tree,
        max_priority=jnp.ones((), jnp.float32),
    )


def _prioritized_sample(
    state: PrioritizedBufferState, key: PRNGKey, batch_size: int, beta, capacity: int
) -> Sample:
    """``batch_size`` items, one uniform draw in each of as many equal segments of the total
    mass (in slot order), with their importance weights for ``beta`` (see
    :func:`prioritized_buffer`)."""
    u = jax.random.uniform(key, (batch_size,), jnp.float32)
    slot, leaf, total = tree_find(
        state.tree, jnp.arange(batch_size, dtype=jnp.float32) + u, capacity
    )
    idx = jnp.clip(slot, 0, capacity - 1)
    leaf = jnp.maximum(leaf, jnp.finfo(jnp.float32).tiny)
    # n is 0 only when empty, where total is 0 (weights 1) unless priorities were set on slots
    # never filled, which update_priorities takes only for sampled (filled) slots
    n = state.size.astype(jnp.float32)
    log_w = -jnp.asarray(beta, jnp.float32) * (jnp.log(n) + jnp.log(leaf) - jnp.log(total))
    weights = jnp.where(total > 0, jnp.exp(log_w - log_w.max()), 1.0)
    items = jax.tree.map(lambda s: s[idx], state.storage)
    return Sample(items, idx, weights.astype(jnp.float32))


# ----------------------------------------------------------------------------- trajectory


def trajectory_buffer(
    capacity_steps: int,
    num_envs: int,
    sequence_length: int,
    *,
    stratify: bool = False,
    check_memory: bool = True,
) -> ReplayBuffer:
    """A time-major buffer ``[T_capacity, N, ...]`` sampled as contiguous sequences.

    ``capacity_steps`` is ``T_capacity``, the time steps kept **per env**
    (``capacity_steps * num_envs`` transitions in all). ``init(item)`` takes one
    env's unbatched example. ``add(state, items)`` takes one step of the N envs
    (leaves ``[N, ...]``) or a time-major rollout (``[T, N, ...]``, ``T <=
    capacity_steps``), written at time rows ``(position + arange(T)) %
    T_capacity``. ``sample(state, key, batch_size)`` returns items
    ``[batch_size, sequence_length, ...]`` (batch-major; transpose for
    time-major losses), each sequence from one env and in time order;
    ``indices`` is ``start_row * num_envs + env``, weights are ones. Sequences never cross
    the write pointer, and may span episode ends; ``stratify=True`` draws the same number
    from every env (:func:`_sample_sequences` says which). ``can_sample`` is ``size >=
    sequence_length`` and at least ``batch_size`` distinct (start, env) pairs.

    A recurrent learner stores the state it acted from in each step's extras, so a
    sequence's first item carries the state to replay it from.
    """
    capacity_steps = positive_int(capacity_steps, "capacity_steps")
    num_envs = positive_int(num_envs, "num_envs")
    sequence_length = positive_int(sequence_length, "sequence_length")
    if sequence_length > capacity_steps:
        raise ValueError(
            f"sequence_length {sequence_length} exceeds capacity_steps {capacity_steps}"
        )

    def init(item: PyTree) -> BufferState:
        if check_memory:
            check_buffer_memory(item, capacity_steps * num_envs)
        return BufferState(zeros_with_leading(item, (capacity_steps, num_envs)), *_zero_counters())

    def add(state: BufferState, items: PyTree) -> BufferState:
        leaf_s, leaf_x = jax.tree.leaves(state.storage)[0], jax.tree.leaves(items)[0]
        if jnp.ndim(leaf_x) == leaf_s.ndim - 1:  # one step [N, ...]
            items = jax.tree.map(lambda x: jnp.asarray(x)[None], items)
        what = "trajectory_buffer.add ([N, ...] or [T, N, ...])"
        return _add_rows(state, items, capacity_steps, what)[0]

    def sample(state: BufferState, key: PRNGKey, batch_size: int, beta=None) -> Sample:
        del beta
        batch_size = positive_int(batch_size, "batch_size")
        sizes = (capacity_steps, num_envs, sequence_length)
        return _sample_sequences(state, key, batch_size, sizes, stratify)

    def can_sample(state: BufferState, batch_size: int) -> Array:
        starts = state.size - sequence_length + 1
        return (starts >= 1) & (starts * num_envs >= batch_size)

    return ReplayBuffer(init, add, sample, None, can_sample)


def _sample_sequences(
    state: BufferState,
    key: PRNGKey,
    batch_size: int,
    sizes: tuple[int, int, int],
    stratify: bool,
) -> Sample:
    """``batch_size`` sequences of a trajectory buffer of ``sizes = (T_capacity, num_envs,
    sequence_length)``: items ``[batch_size, sequence_length, ...]``.

    Sequences never cross the write pointer: with ``size`` rows filled, the oldest is row
    ``(position - size) % T_capacity`` and a sequence starts at one of the ``size -
    sequence_length + 1`` oldest rows in time order, so its rows are all written and its last
    row is at most the newest one (the row before ``position``); it may wrap around the end of
    the array, never past the newest step into the oldest. Sequences may span episode ends;
    the ``terminated``/``truncated`` flags inside them mark where.

    ``stratify=True`` draws ``batch_size / num_envs`` sequences from every env (sequence ``j``
    of the batch from env ``j // (batch_size / num_envs)``), each env's starts with that env's
    key from :func:`jrl.core.parallel.local_keys`; every device holds the same time rows, so N
    envs split over D devices, each device sampling ``batch_size / D`` sequences from its
    envs, draw exactly the sequences one device would (as :func:`uniform_buffer`'s
    ``stratify``). Otherwise start and env are drawn uniformly, with the two halves of
    ``split(key)``.
    """
    capacity_steps, num_envs, sequence_length = sizes
    num_starts = jnp.maximum(state.size - sequence_length + 1, 1)
    oldest = (state.position - state.size) % capacity_steps
    if stratify:
        if batch_size % num_envs:
            raise ValueError(
                f"a batch of {batch_size} sequences cannot take the same number from each "
                f"of {num_envs} envs"
            )
        per_env = batch_size // num_envs
        draw = jax.vmap(lambda k: jax.random.randint(k, (per_env,), 0, num_starts, jnp.int32))
        offset = draw(parallel.local_keys(key, num_envs)).reshape(-1)
        env = jnp.repeat(jnp.arange(num_envs, dtype=jnp.int32), per_env)
    else:
        k_start, k_env = jax.random.split(key)
        offset = jax.random.randint(k_start, (batch_size,), 0, num_starts, jnp.int32)
        env = jax.random.randint(k_env, (batch_size,), 0, num_envs, jnp.int32)
    start = (oldest + offset) % capacity_steps
    rows = (start[:, None] + jnp.arange(sequence_length, dtype=jnp.int32)) % capacity_steps
    items = jax.tree.map(lambda s: s[rows, env[:, None]], state.storage)  # [B, L, ...]
    return Sample(items, start * num_envs + env, jnp.ones((batch_size,), jnp.float32))

"""Replay buffers and n-step transitions as pure, jittable, vmappable functions.

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

:func:`nstep_accumulator` turns a stream of one-step transitions of N envs
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
from jrl.core.types import Array, PRNGKey, PyTree, Transition

__all__ = [
    "BufferState",
    "NStepAccumulator",
    "NStepState",
    "NStepTransition",
    "PrioritizedBufferState",
    "ReplayBuffer",
    "Sample",
    "available_memory_bytes",
    "buffer_bytes",
    "check_buffer_memory",
    "nstep_accumulator",
    "prioritized_buffer",
    "sum_tree_from_leaves",
    "rollout_minibatches",
    "sequence_minibatches",
    "sum_tree_size",
    "trajectory_buffer",
    "trajectory_nsteps",
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


def _spec(leaf) -> jax.ShapeDtypeStruct:
    """Shape and (canonical) dtype of an array, tracer, ShapeDtypeStruct or scalar."""
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        leaf = np.asarray(leaf)
    return jax.ShapeDtypeStruct(tuple(leaf.shape), jax.dtypes.canonicalize_dtype(leaf.dtype))


def _item_bytes(item: PyTree) -> int:
    specs = [_spec(x) for x in jax.tree.leaves(item)]
    return sum(math.prod(s.shape) * np.dtype(s.dtype).itemsize for s in specs)


def sum_tree_size(capacity: int) -> int:
    """Length of the flat sum-tree array for ``capacity`` leaves: the leaves, each level
    above them padded to a multiple of ``K = 8`` entries, and the root's row of ``K``
    (about ``capacity * 8 / 7``); 1 for a single slot."""
    _, offsets, widths = _tree_layout(capacity)
    return offsets[0] + widths[0]


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


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _zeros(item: PyTree, leading: tuple[int, ...]) -> PyTree:
    def zeros(leaf):
        s = _spec(leaf)
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
    capacity = _positive_int(capacity, "capacity")
    if stratify is not None:
        stratify = _positive_int(stratify, "stratify")
        if capacity % stratify:
            raise ValueError(
                f"a buffer stratified over {stratify} envs needs a capacity divisible by it, "
                f"got {capacity}"
            )

    def init(item: PyTree) -> BufferState:
        if check_memory:
            check_buffer_memory(item, capacity)
        return BufferState(_zeros(item, (capacity,)), *_zero_counters())

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
        batch_size = _positive_int(batch_size, "batch_size")
        if stratify is None:
            idx = jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1), jnp.int32)
        else:
            if batch_size % stratify:
                raise ValueError(
                    f"a batch of {batch_size} cannot take the same number of items from each of "
                    f"{stratify} envs"
                )
            per_env = batch_size // stratify
            rows = jnp.maximum(state.size // stratify, 1)
            draw = jax.vmap(lambda k: jax.random.randint(k, (per_env,), 0, rows, jnp.int32))
            idx = (
                draw(parallel.local_keys(key, stratify)) * stratify
                + jnp.arange(stratify, dtype=jnp.int32)[:, None]
            ).reshape(-1)
        items = jax.tree.map(lambda s: s[idx], state.storage)
        return Sample(items, idx, jnp.ones((batch_size,), jnp.float32))

    def can_sample(state: BufferState, batch_size: int) -> Array:
        return state.size >= batch_size

    return ReplayBuffer(init, add, sample, None, can_sample)


# ----------------------------------------------------------------------------- sum tree


_ARITY = 8  # children per sum-tree node (a power of two): 10^6 slots are 7 levels deep
_DENSE_NODES = 4096  # the top levels, above a level of at most this many nodes, are rebuilt densely


def _tree_layout(capacity: int) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``(depth, offsets, widths)`` of the flat sum tree for ``capacity`` leaves.

    Level ``depth`` holds the leaves (slot ``i`` at index ``i``), level 0 the root. Level ``l``
    has ``n_l = ceil(n_{l+1} / K)`` nodes (``n_depth = capacity``) and is stored from
    ``offsets[l]`` as ``widths[l] = K * n_{l-1}`` entries, the trailing ones zero: node ``j``
    of level ``l - 1`` has its ``K`` children in one row, entries ``offsets[l] + K j .. + K -
    1``. Levels are stored leaves first, so every level starts on a multiple of ``K`` and the
    tree viewed as ``[size / K, K]`` rows of siblings is a reshape. The root's row comes last,
    the root at its end (index ``size - 1``). One slot: the tree is the single leaf."""
    k = _ARITY
    depth, nodes = 0, int(capacity)
    counts = [nodes]  # n_depth, n_{depth-1}, ..., n_0 = 1
    while nodes > 1:
        nodes = -(-nodes // k)
        counts.append(nodes)
        depth += 1
    counts = counts[::-1]  # counts[l] = n_l
    if depth == 0:
        return 0, (0,), (1,)
    widths = (k,) + tuple(k * counts[l - 1] for l in range(1, depth + 1))  # root: one row
    offsets = [0] * (depth + 1)
    for l in range(depth - 1, -1, -1):
        offsets[l] = offsets[l + 1] + widths[l + 1]
    return depth, tuple(offsets), widths


def _sum_children(rows: Array) -> Array:
    """``[..., K] -> [...]``: the sum of ``K`` siblings, pairwise (``(c0 + c1) + (c2 + c3)``,
    ...). Every parent, climbed or densely rebuilt, is this same sum of the same floats."""
    while rows.shape[-1] > 1:
        rows = rows[..., 0::2] + rows[..., 1::2]
    return rows[..., 0]


def _pairwise_sum(values: list[Array]) -> Array:
    """The pairwise sum of a power-of-two number of arrays, in :func:`_sum_children`'s order."""
    while len(values) > 1:
        values = [values[i] + values[i + 1] for i in range(0, len(values), 2)]
    return values[0]


def sum_tree_from_leaves(values, capacity: int):
    """The flat sum tree (``[..., sum_tree_size(capacity)]``) over leaf values ``[..., n]``
    (the stored ``p ** alpha`` of slots ``0 .. n - 1``, ``n <= capacity``; the other slots
    hold 0), built level by level with the same pairwise sums :func:`_tree_set` computes,
    so it equals the tree the buffer keeps for those leaves bit for bit. numpy arrays in,
    numpy out (the checkpoint loader rebuilds older binary trees with it); jax arrays
    otherwise."""
    xp = np if isinstance(values, np.ndarray) else jnp
    depth, offsets, widths = _tree_layout(capacity)
    lead, n = values.shape[:-1], values.shape[-1]
    if n > capacity:
        raise ValueError(f"{n} leaf values for a tree of {capacity} slots")
    if depth == 0:
        return values[..., :1] if n else xp.zeros(lead + (1,), values.dtype)
    leaves = xp.concatenate([values, xp.zeros(lead + (widths[depth] - n,), values.dtype)], -1)
    return xp.concatenate([leaves, _levels_above(leaves, depth, widths, xp)], axis=-1)


def _levels_above(level, top: int, widths: tuple[int, ...], xp=jnp):
    """Levels ``top - 1 .. 0`` of the tree, stored as in :func:`_tree_layout` and
    concatenated (``[..., offsets[top]]`` entries), each node the pairwise sum of its
    children, from level ``top`` as stored (``level``: ``[..., widths[top]]``)."""
    lead, upper = level.shape[:-1], []
    for l in range(top - 1, -1, -1):
        nodes = _sum_children(level.reshape(lead + (-1, _ARITY)))
        pad = xp.zeros(lead + (widths[l] - nodes.shape[-1],), level.dtype)
        level = xp.concatenate([pad, nodes] if l == 0 else [nodes, pad], axis=-1)  # root last
        upper.append(level)
    return xp.concatenate(upper, axis=-1)


def _tree_set(tree: Array, slots: Array, values: Array, capacity: int) -> Array:
    """Set leaves ``slots`` to ``values`` and recompute their ancestors. Parents
    are recomputed from their children, never incremented, so float error does
    not accumulate and duplicate slots leave a consistent tree.

    The ancestors on the levels of more than ``_DENSE_NODES`` entries are climbed one level
    per loop step (``B`` parents per step, each the sum of its ``K`` children gathered as one
    ``[B, K]`` row: O(B K log_K P)); the levels above (a few thousand nodes) are then rebuilt
    in one pass from the highest climbed level, level by level, each node as the same
    pairwise sum of its children the climb computes (the same floats), written back with one
    ``dynamic_update_slice``. Fewer loop steps: each costs a few kernel launches, more than
    the dense pass's few thousand additions."""
    depth, offsets, widths = _tree_layout(capacity)
    tree = tree.at[slots.astype(jnp.int32)].set(values.astype(tree.dtype))
    if depth == 0:  # a single leaf, which is the root
        return tree
    top = max(l for l in range(1, depth + 1) if widths[l] <= _DENSE_NODES)  # level 1: K
    climbed = range(depth - 1, top - 1, -1)  # levels climbed, one per loop step (maybe none)
    parent_offsets = jnp.asarray([offsets[l] for l in climbed] or [0], jnp.int32)
    child_rows = jnp.asarray([offsets[l + 1] // _ARITY for l in climbed] or [0], jnp.int32)

    def climb(s, carry):
        tree, node = carry
        node = node // _ARITY
        rows = tree.reshape(-1, _ARITY)[child_rows[s] + node]  # [B, K]: one gather of siblings
        return tree.at[parent_offsets[s] + node].set(_sum_children(rows)), node

    tree, _ = jax.lax.fori_loop(0, depth - top, climb, (tree, slots.astype(jnp.int32)))
    level = tree[offsets[top] : offsets[top] + widths[top]]  # highest climbed level (or leaves)
    return jax.lax.dynamic_update_slice(
        tree, _levels_above(level, top, widths), (offsets[top - 1],)
    )


def _tree_find(tree: Array, fractions: Array, capacity: int) -> tuple[Array, Array, Array]:
    """Stratified descent: ``fractions`` (``[B]``, in ``[0, B)``) are cut points
    in units of ``total / B``. Returns ``(slot, leaf, total)``: the leaf slot
    holding cumulative mass ``fractions * (total / B)`` (``[B]`` int32), that
    leaf's stored value (``[B]``) and the root's total (``[]``). One level per
    loop step, never into a zero-mass subtree; O(B K log_K P).

    At each level the ``K`` children of a node are one gathered row, and the child is chosen
    by ``log2 K`` halvings of that row, exactly as a binary sum tree's descent: the left
    half's mass (the pairwise sum of its children, the same float a binary tree would store)
    is compared with the mass left; the descent goes right where the right half has mass and
    the mass left reaches the left half's (or the left half has none), subtracting the left
    half's mass. So it never enters a zero-mass subtree, takes the last one with mass when
    rounding puts the mass above a node's total, and the slots come out in the order of the
    cut points (the chosen child and the mass left both grow with the mass).

    Every read of ``tree`` happens inside the loop, whose outputs are new
    arrays: a caller that later writes the tree in place (``add``,
    ``update_priorities``) then never races a read of it, so XLA updates the
    tree in place instead of copying it (a read fused into some later
    consumer, e.g. the importance weights, would force a copy of the whole
    tree before every write).
    """
    depth, offsets, _ = _tree_layout(capacity)
    batch = fractions.shape[0]
    if depth == 0:  # a single leaf, which is the root
        total = tree[-1]
        return jnp.zeros((batch,), jnp.int32), jnp.broadcast_to(total, (batch,)), total
    rows = tree.reshape(-1, _ARITY)  # row r: K siblings
    child_rows = jnp.asarray([o // _ARITY for o in offsets[1:]], jnp.int32)  # per level

    def descend(i, carry):
        node, mass, leaf, total = carry
        first = i == 0
        total = jnp.where(first, tree[-1], total)
        mass = jnp.where(first, mass * (total / batch), mass)
        children = rows[child_rows[i] + node]  # [B, K]: one gather of the siblings
        part = [children[:, c] for c in range(_ARITY)]  # the candidate children, halved below
        choice = jnp.zeros_like(node)
        while len(part) > 1:
            half = len(part) // 2
            left, right = _pairwise_sum(part[:half]), _pairwise_sum(part[half:])
            go_right = (right > 0) & ((mass >= left) | (left <= 0))
            mass = jnp.where(go_right, mass - left, mass)
            choice = 2 * choice + go_right
            part = [jnp.where(go_right, r, l) for l, r in zip(part[:half], part[half:])]
        return _ARITY * node + choice, mass, part[0], total

    node0 = jnp.zeros((batch,), jnp.int32)
    zero = jnp.zeros((), tree.dtype)
    carry = (node0, fractions, jnp.zeros((batch,), tree.dtype), zero)
    node, _, leaf, total = jax.lax.fori_loop(0, depth, descend, carry)
    return node, leaf, total


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

    The sum tree is a flat float32 array (:func:`sum_tree_size`, about ``8/7`` of the
    capacity) of ``K = 8``-ary nodes, stored level by level from the leaves up: slot ``i``
    is leaf ``i``, a node's ``K`` children are one row of ``K`` consecutive entries, the root
    is the last entry; unused leaves (and the padding of each level to whole rows) hold 0.
    Every node is the pairwise sum of its children (``(c0 + c1) + (c2 + c3)``, ...): the
    float a binary sum tree holds for the same block of slots. New items enter at the
    largest priority seen so far (``max_priority``, 1 initially, never decreasing).
    Sampling is stratified: the total mass is cut into ``batch_size`` equal segments, one
    uniform draw in each, each located by an O(log P) descent (a ``fori_loop`` over the
    ``log_K P`` levels, each one gather of a node's ``K`` children, vectorised over the
    batch); so samples come out in slot order -- permute them if you split the batch.
    ``update_priorities(state, indices, priorities)`` takes
    raw priorities (e.g. |TD error|, abs taken); if an index repeats, one of
    its priorities is kept.
    """
    capacity = _positive_int(capacity, "capacity")
    for name, value in (("alpha", alpha), ("beta", beta), ("eps", eps)):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    default_beta = float(beta)

    def init(item: PyTree) -> PrioritizedBufferState:
        if check_memory:
            check_buffer_memory(item, capacity, prioritized=True)
        tree = jnp.zeros((sum_tree_size(capacity),), jnp.float32)
        return PrioritizedBufferState(
            _zeros(item, (capacity,)),
            *_zero_counters(),
            tree,
            max_priority=jnp.ones((), jnp.float32),
        )

    def add(state: PrioritizedBufferState, items: PyTree) -> PrioritizedBufferState:
        state, rows = _add_rows(state, items, capacity, "prioritized_buffer.add")
        values = jnp.full(rows.shape, state.max_priority**alpha, jnp.float32)
        return state.replace(tree=_tree_set(state.tree, rows, values, capacity))

    def sample(state: PrioritizedBufferState, key: PRNGKey, batch_size: int, beta=None) -> Sample:
        batch_size = _positive_int(batch_size, "batch_size")
        beta = default_beta if beta is None else beta
        u = jax.random.uniform(key, (batch_size,), jnp.float32)
        slot, leaf, total = _tree_find(
            state.tree, jnp.arange(batch_size, dtype=jnp.float32) + u, capacity
        )
        idx = jnp.clip(slot, 0, capacity - 1)
        leaf = jnp.maximum(leaf, jnp.finfo(jnp.float32).tiny)
        n = jnp.maximum(state.size, 1).astype(jnp.float32)
        log_w = -jnp.asarray(beta, jnp.float32) * (jnp.log(n) + jnp.log(leaf) - jnp.log(total))
        weights = jnp.where(total > 0, jnp.exp(log_w - log_w.max()), 1.0)
        items = jax.tree.map(lambda s: s[idx], state.storage)
        return Sample(items, idx, weights.astype(jnp.float32))

    def update_priorities(
        state: PrioritizedBufferState, indices: Array, priorities: Array
    ) -> PrioritizedBufferState:
        p = jnp.abs(jnp.asarray(priorities, jnp.float32)) + eps
        tree = _tree_set(state.tree, jnp.asarray(indices, jnp.int32), p**alpha, capacity)
        return state.replace(tree=tree, max_priority=jnp.maximum(state.max_priority, p.max()))

    def can_sample(state: PrioritizedBufferState, batch_size: int) -> Array:
        return state.size >= batch_size

    return ReplayBuffer(init, add, sample, update_priorities, can_sample)


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
    ``indices`` is ``start_row * num_envs + env``, weights are ones.

    Sequences never cross the write pointer: with ``size`` rows filled, the
    oldest is row ``(position - size) % T_capacity`` and a sequence starts at
    one of the ``size - sequence_length + 1`` oldest rows in time order, so its
    rows are all written and its last row is at most the newest one (the row
    before ``position``); it may wrap around the end of the array, never past
    the newest step into the oldest. Sequences may span episode ends; the
    ``terminated``/``truncated`` flags inside them mark where.
    ``can_sample`` is ``size >= sequence_length`` and at least ``batch_size``
    distinct (start, env) pairs.

    ``stratify=True``: ``sample`` draws ``batch_size / num_envs`` sequences from every env
    (sequence ``j`` of the batch from env ``j // (batch_size / num_envs)``), each env's starts
    with that env's key from :func:`jrl.core.parallel.local_keys`; every device holds the same time
    rows, so N envs split over D devices, each device sampling ``batch_size / D`` sequences
    from its envs, draw exactly the sequences one device would (as :func:`uniform_buffer`'s
    ``stratify``). A recurrent learner stores the state it acted from in each step's extras,
    so a sequence's first item carries the state to replay it from.
    """
    capacity_steps = _positive_int(capacity_steps, "capacity_steps")
    num_envs = _positive_int(num_envs, "num_envs")
    sequence_length = _positive_int(sequence_length, "sequence_length")
    if sequence_length > capacity_steps:
        raise ValueError(
            f"sequence_length {sequence_length} exceeds capacity_steps {capacity_steps}"
        )

    def init(item: PyTree) -> BufferState:
        if check_memory:
            check_buffer_memory(item, capacity_steps * num_envs)
        return BufferState(_zeros(item, (capacity_steps, num_envs)), *_zero_counters())

    def add(state: BufferState, items: PyTree) -> BufferState:
        leaf_s, leaf_x = jax.tree.leaves(state.storage)[0], jax.tree.leaves(items)[0]
        if jnp.ndim(leaf_x) == leaf_s.ndim - 1:  # one step [N, ...]
            items = jax.tree.map(lambda x: jnp.asarray(x)[None], items)
        what = "trajectory_buffer.add ([N, ...] or [T, N, ...])"
        return _add_rows(state, items, capacity_steps, what)[0]

    def sample(state: BufferState, key: PRNGKey, batch_size: int, beta=None) -> Sample:
        del beta
        batch_size = _positive_int(batch_size, "batch_size")
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

    def can_sample(state: BufferState, batch_size: int) -> Array:
        starts = state.size - sequence_length + 1
        return (starts >= 1) & (starts * num_envs >= batch_size)

    return ReplayBuffer(init, add, sample, None, can_sample)


# ----------------------------------------------------------------------------- n-step


@struct.dataclass
class NStepState:
    """The accumulator's window of the last n pushed steps."""

    window: Transition  # [n, N, ...] ring of pushed steps; push c (0-based) is at row c % n
    count: Array  # [] int32 pushes so far (kept in [n, 2n) once the window is full)


@struct.dataclass
class NStepTransition:
    """An n-step transition from start step ``s`` over ``m <= n`` steps (``m < n``
    where the episode ended within the window); store it in a buffer as is.

    Target for a learner: ``reward + discount * V(next_observation)``.
    """

    observation: PyTree  # [N, *obs_shape] o_s
    action: Array  # [N, *act_shape] a_s
    reward: Array  # [N] float32 sum_{k<m} gamma^k r_{s+k}
    discount: Array  # [N] float32 gamma^m, 0 if step s+m-1 terminated
    next_observation: PyTree  # [N, *obs_shape] successor of step s+m-1 (final obs at an end)
    terminated: Array  # [N] bool step s+m-1 terminated
    truncated: Array  # [N] bool step s+m-1 was truncated
    steps: Array  # [N] int32 m, the number of rewards summed
    extras: dict[str, Any] = struct.field(default_factory=dict)  # step s's extras (act_info)


class NStepAccumulator(NamedTuple):
    """``init(transition) -> NStepState`` (an ``[N, ...]`` example, shapes only) and
    ``push(state, transition, gamma=None) -> (state, NStepTransition, valid)``."""

    init: Callable[[Transition], NStepState]
    push: Callable[..., tuple[NStepState, NStepTransition, Array]]


def nstep_accumulator(n: int, gamma: float | Array) -> NStepAccumulator:
    """Build n-step transitions inside the compiled loop, one step of N envs at a time.

    ``push(state, transition, gamma=None)`` takes the ``Transition`` of step
    ``t`` (leaves ``[N, ...]``, ``reward``/``terminated``/``truncated`` ``[N]``)
    and returns, for each env, the :class:`NStepTransition` that starts at
    ``s = t - n + 1``:

        m        = min(n, j - s + 1),   j >= s the first step with an episode end
        reward   = sum_{k<m} gamma^k r_{s+k}
        discount = gamma^m * (1 - terminated_{s+m-1})
        next_observation = next_observation_{s+m-1}

    So a termination stops the sum and the bootstrap, a truncation stops the
    sum and bootstraps from that episode's final observation (the
    ``next_observation`` AutoReset's ``final_observation`` gives), and the
    next episode's steps never enter the sum. Every start step is emitted
    exactly once, n-1 pushes after it (the n-1 starts before an episode end
    get shorter sums; the last n-1 starts of the stream wait for more pushes), so
    ``reward + discount * V(next_observation)`` equals
    :func:`jrl.ops.returns.n_step_returns`' target for that start.

    ``valid`` (``[N]`` bool) is False for the first ``n - 1`` pushes (the window
    is not full yet); warm up with n-1 pushes before adding to a buffer, or
    gate the add on ``valid``. ``gamma`` may be traced: the factory's value is
    the default, ``push(..., gamma=g)`` overrides it (e.g. from
    ``agent_state.hparams``). O(n) work per push.
    """
    n = _positive_int(n, "n")
    if isinstance(gamma, (int, float)) and not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    default_gamma = gamma

    def init(transition: Transition) -> NStepState:
        reward_shape = _spec(transition.reward).shape
        if len(reward_shape) != 1:
            raise ValueError(
                "nstep_accumulator.init expects one step of N envs (reward of shape "
                f"[N]), got a reward of shape {reward_shape}"
            )
        return NStepState(_zeros(transition, (n,)), jnp.zeros((), jnp.int32))

    def push(
        state: NStepState, transition: Transition, gamma: float | Array | None = None
    ) -> tuple[NStepState, NStepTransition, Array]:
        g = jnp.asarray(default_gamma if gamma is None else gamma, jnp.float32)
        row = state.count % n
        window = jax.tree.map(
            lambda w, x: w.at[row].set(jnp.asarray(x).astype(w.dtype)), state.window, transition
        )
        count = state.count + 1
        count = jnp.where(count >= 2 * n, count - n, count)  # same row and validity, no overflow
        order = (count + jnp.arange(n, dtype=jnp.int32)) % n  # window rows, oldest (step s) first
        term = window.terminated[order].astype(bool)  # [n, N]
        done = (term | window.truncated[order].astype(bool)).astype(jnp.int32)
        included = (jnp.cumsum(done, axis=0) - done) == 0  # no episode end before step s+k
        m = included.sum(axis=0).astype(jnp.int32)  # [N] in 1..n
        powers = g ** jnp.arange(n + 1, dtype=jnp.float32)  # gamma^0 .. gamma^n
        reward = (powers[:n, None] * window.reward[order] * included).sum(axis=0)
        last, envs = order[m - 1], jnp.arange(m.shape[0])  # row of step s+m-1 per env
        term_last = window.terminated[last, envs].astype(bool)
        out = NStepTransition(
            observation=jax.tree.map(lambda x: x[order[0]], window.observation),
            action=jax.tree.map(lambda x: x[order[0]], window.action),
            reward=reward.astype(jnp.float32),
            discount=(powers[m] * (1.0 - term_last.astype(jnp.float32))),
            next_observation=jax.tree.map(lambda x: x[last, envs], window.next_observation),
            terminated=term_last,
            truncated=window.truncated[last, envs].astype(bool),
            steps=m,
            extras=jax.tree.map(lambda x: x[order[0]], window.extras),
        )
        valid = jnp.broadcast_to(count >= n, m.shape)
        return NStepState(window, count), out, valid

    return NStepAccumulator(init, push)


def trajectory_nsteps(batch: Transition, gamma: float | Array, n: int) -> NStepTransition:
    """The n-step transitions that start at every step of a time-major trajectory.

    ``batch`` is a ``Transition`` ``[T, N, ...]`` (``next_observation`` the true successor,
    the final observation where an episode ended); the result is an
    :class:`NStepTransition` ``[T, N, ...]``, the one starting at step ``s`` of each env:

        m        = min(n, T - s, j - s + 1),   j >= s the first step with an episode end
        reward   = sum_{k<m} gamma^k r_{s+k}
        discount = gamma^m * (1 - terminated_{s+m-1})
        next_observation = next_observation_{s+m-1}

    as :func:`nstep_accumulator` emits it, except that the sum also stops at the trajectory's
    end (the last ``n - 1`` starts get shorter sums and bootstrap from the trajectory's last
    successor), so a trajectory alone gives one transition per step and nothing is carried to
    the next (Ape-X's actors, which push whole blocks). ``extras`` are step ``s``'s."""
    n = _positive_int(n, "n")
    T = int(batch.reward.shape[0])
    g = jnp.asarray(gamma, jnp.float32)
    steps = jnp.arange(T)[:, None] + jnp.arange(n)[None, :]  # [T, n] step s + k
    inside = steps < T
    at = jnp.minimum(steps, T - 1)
    ended = batch.terminated[at].astype(bool) | batch.truncated[at].astype(bool)  # [T, n, N]
    ended = (ended & inside[..., None]).astype(jnp.int32)
    included = inside[..., None] & ((jnp.cumsum(ended, axis=1) - ended) == 0)
    m = included.sum(axis=1).astype(jnp.int32)  # [T, N] in 1..n
    powers = g ** jnp.arange(n + 1, dtype=jnp.float32)
    reward = (powers[None, :n, None] * batch.reward[at] * included).sum(axis=1)
    last = jnp.arange(T)[:, None] + m - 1  # [T, N] step s + m - 1
    envs = jnp.arange(m.shape[1])[None, :]
    term_last = batch.terminated[last, envs].astype(bool)
    return NStepTransition(
        observation=batch.observation,
        action=batch.action,
        reward=reward.astype(jnp.float32),
        discount=powers[m] * (1.0 - term_last.astype(jnp.float32)),
        next_observation=jax.tree.map(lambda x: x[last, envs], batch.next_observation),
        terminated=term_last,
        truncated=batch.truncated[last, envs].astype(bool),
        steps=m,
        extras=batch.extras,
    )


# --------------------------------------------------------------------------
# Minibatches of an on-policy rollout
# --------------------------------------------------------------------------


def rollout_minibatches(data: PyTree, key: jax.Array, num_minibatches: int) -> PyTree:
    """``[T, N, ...] -> [M, T/M * N, ...]`` for every leaf of ``data``: each env's T steps in
    its own random order, cut into M blocks, so every minibatch holds T/M steps of every env.

    Stratifying by env (rather than shuffling all T*N items together) keeps
    the minibatches identical however the envs are split across devices:
    the per-env permutation keys come from :func:`jrl.core.parallel.local_keys`.
    ``T`` must be divisible by ``M``.
    """
    num_steps, num_envs = jax.tree.leaves(data)[0].shape[:2]
    if num_steps % num_minibatches:
        raise ValueError(
            f"rollout length {num_steps} is not divisible into {num_minibatches} minibatches"
        )
    perms = jax.vmap(lambda k: jax.random.permutation(k, num_steps))(
        parallel.local_keys(key, num_envs)
    ).T  # [T, N]

    def shuffle(x):
        x = jnp.take_along_axis(x, perms.reshape(perms.shape + (1,) * (x.ndim - 2)), axis=0)
        return x.reshape((num_minibatches, (num_steps // num_minibatches) * num_envs) + x.shape[2:])

    return jax.tree.map(shuffle, data)


def sequence_minibatches(data: PyTree, key: jax.Array, num_minibatches: int) -> PyTree:
    """``[L, N, ...] -> [M, L, N/M, ...]`` for every leaf of ``data`` (``L`` may differ between
    leaves): minibatches of whole env sequences, for learners that unroll a recurrent network
    over time. The envs are taken in blocks of ``M`` consecutive ones; each block is shuffled
    with its own key and gives one env to every minibatch.

    Block ``b``'s key is ``split(key, N/M)[b]`` over all devices
    (:func:`jrl.core.parallel.local_keys`), so the minibatches are the same however the envs are
    split across devices when every device holds whole blocks. ``N`` must be divisible by
    ``M``.
    """
    num_envs = jax.tree.leaves(data)[0].shape[1]
    if num_envs % num_minibatches:
        raise ValueError(
            f"{num_envs} envs are not divisible into {num_minibatches} minibatches of sequences"
        )
    num_blocks = num_envs // num_minibatches
    perms = jax.vmap(lambda k: jax.random.permutation(k, num_minibatches))(
        parallel.local_keys(key, num_blocks)
    )  # [N/M, M]: block b gives env b*M + perms[b, m] to minibatch m
    envs = (jnp.arange(num_blocks)[:, None] * num_minibatches + perms).T  # [M, N/M]

    def gather(x):
        return jnp.moveaxis(jnp.take(x, envs, axis=1), 1, 0)  # [L, M, N/M, ...] -> [M, L, ...]

    return jax.tree.map(gather, data)

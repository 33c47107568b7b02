"""The sum tree of the prioritised replay buffer (:func:`jrl.parts.buffers.prioritized_buffer`).

The tree is a flat float32 array (:func:`sum_tree_size`, about ``8/7`` of the capacity) of
``K = 8``-ary nodes, stored level by level from the leaves up: slot ``i`` is leaf ``i``, a
node's ``K`` children are one row of ``K`` consecutive entries, the root is the last entry;
unused leaves (and the padding of each level to whole rows) hold 0. Every node is the
pairwise sum of its children (``(c0 + c1) + (c2 + c3)``, ...): the float a binary sum tree
holds for the same block of slots. :func:`tree_set` writes leaves and recomputes their
ancestors, :func:`tree_find` descends to the leaves holding given cumulative masses, and
:func:`sum_tree_from_leaves` builds a whole tree (the checkpoint loader rebuilds older trees
with it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core.types import Array

__all__ = ["sum_tree_from_leaves", "sum_tree_size", "tree_find", "tree_set"]

_ARITY = 8  # children per sum-tree node (a power of two): 10^6 slots are 7 levels deep
_DENSE_NODES = 4096  # the top levels, above a level of at most this many nodes, are rebuilt densely


def sum_tree_size(capacity: int) -> int:
    """Length of the flat sum-tree array for ``capacity`` leaves: the leaves, each level
    above them padded to a multiple of ``K = 8`` entries, and the root's row of ``K``
    (about ``capacity * 8 / 7``); 1 for a single slot."""
    _, offsets, widths = _tree_layout(capacity)
    return offsets[0] + widths[0]


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
    for _ in range(nodes.bit_length()):  # ceil(n / K) <= n / 2 for n >= 2: < log2(n) + 1 levels
        if nodes <= 1:
            break
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
    for _ in range(rows.shape[-1].bit_length() - 1):  # K = 2^levels siblings
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
    hold 0), built level by level with the same pairwise sums :func:`tree_set` computes,
    so it equals the tree the buffer keeps for those leaves bit for bit. numpy arrays in,
    numpy out (the checkpoint loader rebuilds older binary trees with it); jax arrays
    otherwise."""
    xp = np if isinstance(values, np.ndarray) else jnp
    depth, offsets, widths = _tree_layout(capacity)
    lead, n = values.shape[:-1], values.shape[-1]
    if n > capacity:
        raise ValueError(f"{n} leaf values for a tree of {capacity} slots")
    leaves = xp.concatenate([values, xp.zeros(lead + (widths[depth] - n,), values.dtype)], -1)
    if depth == 0:  # a single slot: its leaf is the root
        return leaves
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


def tree_set(tree: Array, slots: Array, values: Array, capacity: int) -> Array:
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


def tree_find(tree: Array, fractions: Array, capacity: int) -> tuple[Array, Array, Array]:
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
        total = tree.reshape(())  # the tree is the one leaf
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

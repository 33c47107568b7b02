"""Reading checkpoints of older formats (:data:`jrl.app.checkpoint.FORMAT_VERSION`).

A format-1 checkpoint names the update counters as format 2 renamed them
(:data:`RENAMED_IN_2`) and may hold hyperparameters an agent no longer has
(:func:`format1_order` maps its leaves to today's). Formats 1 and 2 store the
prioritised buffers' sum tree as a binary tree (:func:`binary_sum_trees` finds
them, :func:`rebuild_sum_tree` rebuilds each as today's 8-ary tree, bit for bit).
"""

from __future__ import annotations

import numpy as np

from jrl.parts import sum_tree

__all__ = ["RENAMED_IN_2", "binary_sum_trees", "format1_order", "rebuild_sum_tree"]

RENAMED_IN_2 = {"num_learn_steps": "num_updates"}
"""Path components renamed by format 2 (the actor-critic and PQN update counters)."""

# Format 3: the prioritised buffers' sum tree (a ``.../tree`` leaf) is 8-ary
# (``jrl.parts.sum_tree``); the binary trees of formats 1 and 2 (``[..., 2 P]``, slot i's leaf at
# ``P + i``) are rebuilt from their leaves on load, bit for bit what the buffer computes.


def format1_order(saved: list[list], expected: list[list]) -> list[int] | None:
    """For a format-1 checkpoint: the index of the saved leaf that holds each expected leaf,
    with the format-2 renames applied (:data:`RENAMED_IN_2`) and the hyperparameters an agent
    no longer has (A2C's unused ``clip_eps``) left out; None when the trees differ otherwise."""

    def renamed(path: str) -> str:
        return "/".join(RENAMED_IN_2.get(part, part) for part in path.split("/"))

    by_path = {renamed(p): (i, shape, dtype) for i, (p, shape, dtype) in enumerate(saved)}
    order = []
    for p, shape, dtype in expected:
        if p not in by_path or by_path[p][1:] != (shape, dtype):
            return None
        order.append(by_path[p][0])
    dropped = [saved[i][0] for i in sorted(set(range(len(saved))) - set(order))]
    if any("/hparams/" not in p for p in dropped):
        return None
    return order


def binary_sum_trees(saved: list[list], expected: list[list]) -> tuple[list[list], dict]:
    """For a format 1-2 checkpoint: ``saved`` with each binary sum tree's spec replaced by the
    8-ary tree expected at the same path, and ``{saved index: expected tree length}`` of
    those trees. A binary tree: a float32 ``.../tree`` leaf whose last axis is a power of two
    (``2 P``) where the expected leaf has the same leading axes and another length."""
    by_path = {p: (shape, dtype) for p, shape, dtype in expected}
    as_now, trees = [], {}
    for i, (p, shape, dtype) in enumerate(saved):
        want = by_path.get(p)
        n = shape[-1] if shape else 0
        if (
            p.rsplit("/", 1)[-1] == "tree"
            and want is not None
            and dtype == want[1] == "float32"
            and len(shape) == len(want[0]) >= 1
            and shape[:-1] == want[0][:-1]
            and n >= 2
            and n & (n - 1) == 0
            and n != want[0][-1]
        ):
            trees[i] = want[0][-1]
            as_now.append([p, list(want[0]), dtype])
        else:
            as_now.append([p, shape, dtype])
    return as_now, trees


def rebuild_sum_tree(binary: np.ndarray, size: int) -> np.ndarray:
    """The 8-ary sum tree of length ``size`` over the leaves of a binary one (``[..., 2 P]``,
    slot i's leaf at ``P + i``). Every capacity whose 8-ary tree has ``size`` entries stores
    the same layout, and a binary tree's leaves past its capacity are 0, so the tree is built
    for the largest such capacity (at most the binary tree's ``P`` leaves, zeros beyond).
    ``ValueError`` when no capacity's tree has ``size`` entries."""
    leaves = binary[..., binary.shape[-1] // 2 :]
    if size == 1:  # a single slot, which is the root
        return leaves[..., :1].copy()
    lo, hi = 2, max(2, 8 * size)  # the largest capacity whose tree has ``size`` entries
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum_tree.sum_tree_size(mid) <= size:
            lo = mid
        else:
            hi = mid - 1
    if sum_tree.sum_tree_size(lo) != size:
        raise ValueError(f"no prioritised buffer has a sum tree of {size} entries")
    n = min(lo, leaves.shape[-1])
    return np.asarray(sum_tree.sum_tree_from_leaves(np.ascontiguousarray(leaves[..., :n]), lo))

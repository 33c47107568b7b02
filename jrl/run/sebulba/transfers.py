"""What travels between Sebulba's actors and learner: bfloat16 compression of trajectories,
replay items and agent states (``transfer="bfloat16"``), and byte counts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core.types import PyTree, Transition

__all__ = ["compress", "compress_items", "compress_trajectory", "expand", "nbytes"]


def compress(tree: PyTree, transfer: str) -> PyTree:
    """float32 leaves as bfloat16 for ``transfer="bfloat16"`` (host or device arrays)."""
    if transfer == "float32":
        return tree
    return jax.tree.map(lambda x: x.astype(jnp.bfloat16) if x.dtype == np.float32 else x, tree)


def compress_trajectory(batch: Transition, transfer: str) -> Transition:
    """:func:`compress` of a trajectory but its ``extras``: the agent's act_info (behaviour
    log-probs, values) is what the update is most sensitive to and a small share of the
    bytes, so it stays float32."""
    return compress(batch, transfer).replace(extras=batch.extras)


def compress_items(items, transfer: str):
    """Replay items (``NStepTransition``) for the wire: their observations compressed as a
    trajectory's, rewards and discounts (gamma^m, which bfloat16 would round) kept float32."""
    if transfer == "float32":
        return items
    return items.replace(
        observation=compress(items.observation, transfer),
        next_observation=compress(items.next_observation, transfer),
    )


def expand(tree: PyTree, like: PyTree) -> PyTree:
    """Back to the dtypes of ``like`` (a no-op for uncompressed leaves)."""
    return jax.tree.map(lambda x, l: x.astype(l.dtype) if x.dtype != l.dtype else x, tree, like)


def nbytes(tree: PyTree) -> int:
    """Bytes of every leaf of ``tree``."""
    return int(sum(x.nbytes for x in jax.tree.leaves(tree)))

"""A checkpointed train state moved onto another number of devices.

An Anakin run on D devices keeps every leaf of its state as ``[D, ...]``: block ``d`` is
device ``d``'s. A leaf is one of two kinds, and its shapes say which:

- **the same on every device** (parameters, optimiser state, PRNG keys, counters, normaliser
  statistics: all-reduced or replicated): its per-device shape does not depend on D. On D'
  devices each gets that one value (and the blocks must indeed be equal: a leaf that differs
  from device to device has no one value to give);
- **split over the devices along an env axis** (env states, observations, n-step windows,
  recurrent carries): device ``d`` holds envs ``d * n .. (d + 1) * n - 1`` of that axis, so
  its per-device shape has ``n = N / D`` there. Joining the blocks along that axis gives all
  N envs in order, and D' blocks of ``N / D'`` split them again.

A run on D devices computes what a run on one device computes, up to float rounding (its
minibatches are stratified by env, its keys replicated and sliced per device), so a run
resumed on D' devices goes on as the uninterrupted run would, up to rounding.

Replay buffers are refused: their rows interleave the envs of one device
(``row * envs_per_device + env``), their insert counters are per device, and a prioritised
buffer's sum tree is per device, so their blocks do not join along one axis. Such a run
resumes on its own device count; the refusal names the leaf.

A run without a device axis (one device, ``devices`` None) counts as one device: its leaves
get the axis added (D = 1) or removed (D' = 1).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jrl.app.checkpoint_io import CheckpointError
from jrl.core.types import PyTree
from jrl.parts.buffers import BufferState, PrioritizedBufferState

__all__ = ["buffer_leaves", "reshard"]


def buffer_leaves(like: PyTree) -> set[int]:
    """The indices (in ``jax.tree.leaves(like)`` order) of the leaves that belong to a replay
    buffer, which :func:`reshard` refuses to move."""
    buffers = (BufferState, PrioritizedBufferState)
    parts = jax.tree.leaves(like, is_leaf=lambda x: isinstance(x, buffers))
    out, i = set(), 0
    for part in parts:
        n = len(jax.tree.leaves(part)) if isinstance(part, buffers) else 1
        if isinstance(part, buffers):
            out.update(range(i, i + n))
        i += n
    return out


def _devices(d: int | None) -> str:
    return "one device (no device axis)" if d is None else f"{d} devices"


def reshard(
    saved: list[list],
    expected: list[list],
    arrays: list[np.ndarray],
    devices: tuple[int | None, int | None],
    buffers: set[int] = frozenset(),
    where: Any = "the checkpoint",
) -> list[np.ndarray]:
    """The leaves ``arrays`` of a state saved on ``devices[0]`` devices, moved onto
    ``devices[1]`` (see the module docstring).

    Args:
      saved, expected: ``[[path, shape, dtype], ...]`` of the saved leaves and of the leaves
        the resumed run expects (:func:`jrl.app.checkpoint.leaf_specs`), in the same order.
      arrays: the saved leaves, whole (``[D, ...]``, or without the device axis for None).
      devices: ``(D, D')``; None for a run without a device axis.
      buffers: indices of replay-buffer leaves (:func:`buffer_leaves`), refused when they
        would have to move.
      where: the checkpoint, named in errors.

    Returns: the leaves in the expected shapes (``[D', ...]``).
    Raises :class:`CheckpointError` naming the first leaf that cannot move, or a leaf that
    differs in path, dtype or rank (another train state).
    """
    before, after = devices
    head = f"cannot reshard {where} from {_devices(before)} onto {_devices(after)}"
    if len(saved) != len(expected):
        raise CheckpointError(
            f"{where} holds a different train state (another agent, env or config?): "
            f"{len(saved)} leaves in the checkpoint, {len(expected)} here"
        )
    out = []
    for i, ((path, shape, dtype), (path2, shape2, dtype2), a) in enumerate(
        zip(saved, expected, arrays)
    ):
        rank, rank2 = len(shape) - (before is not None), len(shape2) - (after is not None)
        if (path, dtype, rank) != (path2, dtype2, rank2):
            raise CheckpointError(
                f"{where} holds a different train state (another agent, env or config?): "
                f"{path} is {dtype}{shape} in the checkpoint, {path2} {dtype2}{shape2} here"
            )
        blocks = np.asarray(a) if before is not None else np.asarray(a)[None]
        want = tuple(shape2) if after is not None else (1, *shape2)
        try:
            moved = _move(blocks, want, i in buffers, _devices(after))
        except ValueError as e:
            raise CheckpointError(f"{head}: {path} {e}; resume on {_devices(before)}") from None
        out.append(moved if after is not None else moved[0])
    return out


def _move(blocks: np.ndarray, want: tuple[int, ...], buffer: bool, onto: str) -> np.ndarray:
    """One leaf's ``[D, ...]`` blocks as ``want`` = ``[D', ...]`` (see the module docstring);
    ``ValueError`` with the reason (a phrase after the leaf's name; ``onto`` names the new
    devices) when it cannot move."""
    count, per, per2 = want[0], blocks.shape[1:], want[1:]
    if per == per2:  # the same on every device
        first = np.ascontiguousarray(blocks[0]).tobytes()  # bytes: NaN (a diverged run) is NaN
        if any(np.ascontiguousarray(b).tobytes() != first for b in blocks[1:]):
            raise ValueError(
                f"differs from device to device, so it has no one value to give {onto}"
            )
        return np.broadcast_to(blocks[:1], want).copy()
    if buffer:
        raise ValueError("belongs to a replay buffer, whose rows interleave each device's envs")
    axes = [k for k in range(len(per)) if per[k] != per2[k]]
    if len(axes) != 1 or per[axes[0]] * blocks.shape[0] != per2[axes[0]] * count:
        raise ValueError(
            f"is {list(per)} per device there and {list(per2)} here, not one env axis split "
            "another way"
        )
    whole = np.concatenate(list(blocks), axis=axes[0])  # every env, in order
    return np.stack(np.split(whole, count, axis=axes[0]))

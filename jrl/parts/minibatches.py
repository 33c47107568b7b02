"""Minibatches of an on-policy rollout, the same however the envs are split across devices.

:func:`rollout_minibatches` shuffles each env's steps with its own key (the default split of
:func:`jrl.parts.learner.make_learner`); :func:`sequence_minibatches` keeps each env's
sequence whole, for learners that unroll a recurrent network over time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jrl.core import parallel
from jrl.core.types import PyTree

__all__ = ["rollout_minibatches", "sequence_minibatches"]


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

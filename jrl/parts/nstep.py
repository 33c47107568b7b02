"""n-step transitions, built inside the compiled loop.

:func:`nstep_accumulator` turns a stream of one-step transitions of N envs into n-step
transitions, one step at a time, to be added to any replay buffer
(:mod:`jrl.parts.buffers`); :func:`trajectory_nsteps` gives the n-step transitions that start
at every step of a whole time-major trajectory (Ape-X's actors).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jrl.core.types import Array, PyTree, Transition
from jrl.parts.buffers import leaf_spec, positive_int, zeros_with_leading

__all__ = [
    "NStepAccumulator",
    "NStepState",
    "NStepTransition",
    "nstep_accumulator",
    "trajectory_nsteps",
]


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
    n = positive_int(n, "n")
    if isinstance(gamma, (int, float)) and not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    default_gamma = gamma

    def init(transition: Transition) -> NStepState:
        reward_shape = leaf_spec(transition.reward).shape
        if len(reward_shape) != 1:
            raise ValueError(
                "nstep_accumulator.init expects one step of N envs (reward of shape "
                f"[N]), got a reward of shape {reward_shape}"
            )
        return NStepState(zeros_with_leading(transition, (n,)), jnp.zeros((), jnp.int32))

    def push(
        state: NStepState, transition: Transition, gamma: float | Array | None = None
    ) -> tuple[NStepState, NStepTransition, Array]:
        g = jnp.asarray(default_gamma if gamma is None else gamma, jnp.float32)
        return _push(state, transition, g, n)

    return NStepAccumulator(init, push)


def _push(
    state: NStepState, transition: Transition, g: Array, n: int
) -> tuple[NStepState, NStepTransition, Array]:
    """:func:`nstep_accumulator`'s ``push`` with the discount ``g`` (float32) resolved: writes
    ``transition`` into the window and reads the n-step transition of the oldest step off it."""
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
    n = positive_int(n, "n")
    T = int(batch.reward.shape[0])
    g = jnp.asarray(gamma, jnp.float32)
    steps = jnp.arange(T)[:, None] + jnp.arange(n)[None, :]  # [T, n] step s + k
    inside = steps < T

    def rows(x):  # x[s + k] [T, n, ...]; past the end the last row, masked out by `inside`
        return jnp.take(x, steps, axis=0, mode="clip")

    ended = rows(batch.terminated).astype(bool) | rows(batch.truncated).astype(bool)  # [T, n, N]
    ended = (ended & inside[..., None]).astype(jnp.int32)
    included = inside[..., None] & ((jnp.cumsum(ended, axis=1) - ended) == 0)
    m = included.sum(axis=1).astype(jnp.int32)  # [T, N] in 1..n
    powers = g ** jnp.arange(n + 1, dtype=jnp.float32)
    reward = (powers[None, :n, None] * rows(batch.reward) * included).sum(axis=1)
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

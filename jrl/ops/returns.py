"""Returns, advantages and TD errors over time-major trajectories.

Every function takes arrays of shape ``[T, B]`` (or ``[T]``), time first.
The convention, for each index ``t``:

- the agent was in ``o_t``, acted, received ``rewards[t]`` (``r_t``), and the
  step ended with the flags ``terminated[t]`` and ``truncated[t]`` (bool);
- ``values[t]`` is ``V(o_t)``;
- ``bootstrap_values[t]`` is ``V`` of the true successor of ``o_t``: the next
  observation, or on a step where an episode ended the final observation of
  that episode (``Transition.next_observation``; AutoReset carries it in
  ``info["final_observation"]``), never the first observation of the next
  episode. Compute it once by evaluating the critic on
  ``Transition.next_observation``.

A terminated step does not bootstrap (the successor is absorbing). A
truncated step bootstraps from ``bootstrap_values[t]`` but does not look
further ahead (the next index belongs to another episode). ``done = terminated
| truncated``; where both flags are set, ``terminated`` wins. The last index
``T - 1`` always bootstraps from ``bootstrap_values[T - 1]`` (unless
terminated).

``gamma`` and ``lambda_`` may be traced scalars (vmapped for hyperparameter
sweeps). No function stops gradients; wrap targets in ``jax.lax.stop_gradient``
where they are regression targets.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
Scalar = float | Array

__all__ = [
    "discounted_returns",
    "gae_advantages",
    "lambda_returns",
    "n_step_returns",
    "td_errors",
    "VTraceClip",
    "vtrace",
]


def _check(*arrays: Array) -> None:
    chex.assert_rank(arrays[0], {1, 2})
    chex.assert_equal_shape(arrays)


def _flags(rewards: Array, terminated: Array, truncated: Array) -> tuple[Array, Array]:
    """Returns ``(1 - terminated, 1 - done)`` as floats of ``rewards``' dtype."""
    terminated = jnp.asarray(terminated, bool)
    done = terminated | jnp.asarray(truncated, bool)
    dtype = jnp.result_type(rewards, jnp.float32)
    return 1.0 - terminated.astype(dtype), 1.0 - done.astype(dtype)


def td_errors(
    rewards: Array,  # [T, B]
    values: Array,  # [T, B] V(o_t)
    bootstrap_values: Array,  # [T, B] V(true successor of o_t)
    terminated: Array,  # [T, B] bool
    gamma: Scalar,
) -> Array:
    """One-step TD errors ``delta_t = r_t + gamma * (1 - terminated_t) * bootstrap_t - V_t``.

    A single step needs no ``truncated``: a truncated step bootstraps from
    the final observation like any other non-terminal step.

    Returns: ``[T, B]`` (or ``[T]``).
    """
    _check(rewards, values, bootstrap_values, terminated)
    not_term = 1.0 - jnp.asarray(terminated, bool).astype(jnp.result_type(rewards, jnp.float32))
    return rewards + gamma * not_term * bootstrap_values - values


def gae_advantages(
    rewards: Array,  # [T, B]
    values: Array,  # [T, B] V(o_t)
    bootstrap_values: Array,  # [T, B] V(true successor of o_t)
    terminated: Array,  # [T, B] bool
    truncated: Array,  # [T, B] bool
    gamma: Scalar,
    lambda_: Scalar,
) -> tuple[Array, Array]:
    """Generalised advantage estimation (Schulman et al., 2016).

        delta_t = r_t + gamma * (1 - terminated_t) * bootstrap_t - V_t
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   A_T = 0
        G_t     = A_t + V_t

    The recursion is cut at every episode end; a truncated step still
    bootstraps inside ``delta_t``. With ``bootstrap_t = V_{t+1}`` inside an
    episode, ``G_t`` equals ``lambda_returns`` and, for ``lambda = 1``,
    ``discounted_returns``.

    Returns: ``(advantages, returns)``, both ``[T, B]`` (or ``[T]``).
    """
    _check(rewards, values, bootstrap_values, terminated, truncated)
    _, not_done = _flags(rewards, terminated, truncated)
    deltas = td_errors(rewards, values, bootstrap_values, terminated, gamma)

    def body(adv_tp1, x):
        delta_t, not_done_t = x
        adv_t = delta_t + gamma * lambda_ * not_done_t * adv_tp1
        return adv_t, adv_t

    _, advantages = jax.lax.scan(
        body, jnp.zeros(deltas.shape[1:], deltas.dtype), (deltas, not_done), reverse=True
    )
    return advantages, advantages + values


def lambda_returns(
    rewards: Array,  # [T, B]
    bootstrap_values: Array,  # [T, B] V(true successor of o_t)
    terminated: Array,  # [T, B] bool
    truncated: Array,  # [T, B] bool
    gamma: Scalar,
    lambda_: Scalar,
) -> Array:
    """TD(lambda) returns, computed backwards:

        G_t = r_t + gamma * (1 - terminated_t)
                  * [(1 - lambda) * bootstrap_t + lambda * next_t]
        next_t = bootstrap_t  if done_t or t = T - 1,  else G_{t+1}

    So a truncated step gives ``r_t + gamma * bootstrap_t``, a terminated one
    ``r_t``, and the last step ``r + gamma * (1 - terminated) * bootstrap``.
    ``lambda = 0`` is the one-step target, ``lambda = 1`` the discounted
    return bootstrapped at episode ends and at ``T - 1``.

    Returns: ``[T, B]`` (or ``[T]``).
    """
    _check(rewards, bootstrap_values, terminated, truncated)
    not_term, not_done = _flags(rewards, terminated, truncated)

    def body(g_tp1, x):
        r_t, boot_t, not_term_t, not_done_t = x
        next_t = jnp.where(not_done_t > 0, g_tp1, boot_t)
        g_t = r_t + gamma * not_term_t * ((1.0 - lambda_) * boot_t + lambda_ * next_t)
        return g_t, g_t

    xs = (rewards, bootstrap_values, not_term, not_done)
    _, returns = jax.lax.scan(body, bootstrap_values[-1], xs, reverse=True)
    return returns


def discounted_returns(
    rewards: Array,  # [T, B]
    bootstrap_values: Array,  # [T, B] V(true successor of o_t)
    terminated: Array,  # [T, B] bool
    truncated: Array,  # [T, B] bool
    gamma: Scalar,
) -> Array:
    """Monte-Carlo returns, bootstrapped where the data stop:

        G_t = r_t + gamma * (1 - terminated_t) * next_t
        next_t = bootstrap_t  if done_t or t = T - 1,  else G_{t+1}

    (``lambda_returns`` with ``lambda = 1``.) Returns: ``[T, B]`` (or ``[T]``).
    """
    return lambda_returns(rewards, bootstrap_values, terminated, truncated, gamma, 1.0)


def n_step_returns(
    rewards: Array,  # [T, B]
    bootstrap_values: Array,  # [T, B] V(true successor of o_t)
    terminated: Array,  # [T, B] bool
    truncated: Array,  # [T, B] bool
    gamma: Scalar,
    n: int,
) -> Array:
    """n-step returns, cut at episode ends and at the end of the data:

        G_t = sum_{k=0}^{m-1} gamma^k r_{t+k}
              + gamma^m * (1 - terminated_{t+m-1}) * bootstrap_{t+m-1}

    where ``m = min(n, T - t, j - t + 1)`` and ``j >= t`` is the first index
    with ``done_j``. (``bootstrap_{t+m-1}`` is the value of ``o_{t+m}``, or of
    the final observation where the episode was truncated.) ``n`` is static;
    the recursion ``G^k_t = r_t + gamma * (1 - terminated_t) * (bootstrap_t
    if done_t or k = 1 or t = T - 1 else G^{k-1}_{t+1})`` is unrolled n times.

    Returns: ``[T, B]`` (or ``[T]``).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n_step_returns needs a static int n >= 1, got {n!r}")
    _check(rewards, bootstrap_values, terminated, truncated)
    not_term, not_done = _flags(rewards, terminated, truncated)
    returns = rewards + gamma * not_term * bootstrap_values
    for _ in range(int(n) - 1):
        g_tp1 = jnp.concatenate([returns[1:], bootstrap_values[-1:]])
        next_t = jnp.where(not_done > 0, g_tp1, bootstrap_values)
        returns = rewards + gamma * not_term * next_t
    return returns


class VTraceClip(NamedTuple):
    """V-trace's truncation levels of the importance ratios (``jnp.inf``: no clipping)."""

    rho: Scalar = 1.0  # rho-bar: the ratios in the value targets' TD errors
    c: Scalar = 1.0  # c-bar: the trace coefficients
    pg_rho: Scalar = 1.0  # the ratios of the policy-gradient advantages


def vtrace(
    rewards: Array,  # [T, B]
    values: Array,  # [T, B] V(o_t)
    bootstrap_values: Array,  # [T, B] V(true successor of o_t)
    terminated: Array,  # [T, B] bool
    truncated: Array,  # [T, B] bool
    log_rhos: Array,  # [T, B] log pi(a_t|o_t) - log mu(a_t|o_t)
    gamma: Scalar,
    lambda_: Scalar = 1.0,
    clip: VTraceClip = VTraceClip(),
) -> tuple[Array, Array]:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018).

        rho_t   = min(clip.rho, exp(log_rho_t)),  c_t = lambda * min(clip.c, exp(log_rho_t))
        delta_t = rho_t * (r_t + gamma * (1 - terminated_t) * bootstrap_t - V_t)
        vs_t    = V_t + delta_t + gamma * c_t * (1 - done_t) * (vs_{t+1} - V_{t+1})
        pg_adv_t = min(clip.pg_rho, exp(log_rho_t))
                   * (r_t + gamma * (1 - terminated_t) * next_t - V_t)
        next_t  = bootstrap_t  if done_t or t = T - 1,  else vs_{t+1}

    On-policy (``log_rhos = 0``, clips >= 1) ``vs`` is GAE's ``returns``.
    Pass ``jnp.inf`` as a clip to disable it.

    Returns: ``(vs, pg_advantages)``, both ``[T, B]`` (or ``[T]``).
    """
    _check(rewards, values, bootstrap_values, terminated, truncated, log_rhos)
    not_term, not_done = _flags(rewards, terminated, truncated)
    ratios = jnp.exp(log_rhos)
    rhos = jnp.minimum(clip.rho, ratios)
    cs = lambda_ * jnp.minimum(clip.c, ratios)
    deltas = rhos * (rewards + gamma * not_term * bootstrap_values - values)

    def body(acc_tp1, x):
        delta_t, c_t, not_done_t = x
        acc_t = delta_t + gamma * c_t * not_done_t * acc_tp1
        return acc_t, acc_t

    _, acc = jax.lax.scan(
        body, jnp.zeros(deltas.shape[1:], deltas.dtype), (deltas, cs, not_done), reverse=True
    )
    vs = values + acc
    vs_tp1 = jnp.concatenate([vs[1:], bootstrap_values[-1:]])
    next_values = jnp.where(not_done > 0, vs_tp1, bootstrap_values)
    pg_rhos = jnp.minimum(clip.pg_rho, ratios)
    pg_advantages = pg_rhos * (rewards + gamma * not_term * next_values - values)
    return vs, pg_advantages

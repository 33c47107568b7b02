"""Loss functions, batch-shaped ``[...]`` (any leading dims), mean-reduced.

Each returns a scalar; callers combine them with their coefficients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jrl.core import parallel

__all__ = ["clipped_surrogate_loss", "policy_gradient_loss", "value_loss", "normalize"]


def normalize(
    x: jax.Array, eps: float = 1e-8, std_floor: jax.Array | float | None = None
) -> jax.Array:
    """``(x - mean(x)) / (std(x) + eps)`` over all elements, on every device
    of the active device axis (:mod:`jrl.core.parallel`; one device otherwise); with
    ``std_floor`` (``[]``), ``std(x)`` is replaced by ``max(std(x), std_floor)``."""
    mean = parallel.global_mean(x)
    std = jnp.sqrt(parallel.global_mean(jnp.square(x - mean)))
    if std_floor is not None:
        std = jnp.maximum(std, std_floor)
    return (x - mean) / (std + eps)


def clipped_surrogate_loss(
    log_prob: jax.Array, old_log_prob: jax.Array, advantages: jax.Array, clip_eps: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """PPO's clipped surrogate (to minimise) and the fraction of clipped samples.

    ``rho = exp(log_prob - old_log_prob)``;
    ``L = -mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A))``.
    Shapes: all ``[...]``; ``clip_eps`` a scalar (may be traced).
    """
    ratio = jnp.exp(log_prob - old_log_prob)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -jnp.minimum(unclipped, clipped).mean()
    clip_frac = (jnp.abs(ratio - 1.0) > clip_eps).mean()
    return loss, clip_frac


def policy_gradient_loss(log_prob: jax.Array, advantages: jax.Array) -> jax.Array:
    """REINFORCE / A2C policy loss ``-mean(log_prob * stop_gradient(A))``; shapes ``[...]``."""
    return -(log_prob * jax.lax.stop_gradient(advantages)).mean()


def value_loss(
    values: jax.Array,
    targets: jax.Array,
    old_values: jax.Array | None = None,
    clip_eps: jax.Array | None = None,
) -> jax.Array:
    """``0.5 * mean((V - G)^2)``; with ``old_values`` and ``clip_eps`` the PPO clipped
    form ``0.5 * mean(max((V - G)^2, (V_old + clip(V - V_old, -eps, eps) - G)^2))``."""
    err = jnp.square(values - targets)
    if old_values is not None and clip_eps is not None:
        v_clipped = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
        err = jnp.maximum(err, jnp.square(v_clipped - targets))
    return 0.5 * err.mean()

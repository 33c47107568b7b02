"""Distributional value learning: C51's categorical projection and QR-DQN's quantile loss.

Two ways to represent the return distribution ``Z`` of a state-action pair:

- categorical (C51; Bellemare, Dabney & Munos, 2017): probabilities over a
  fixed, evenly spaced support of ``K`` atoms ``z_0 < ... < z_{K-1}``;
  targets are projected back onto the support
  (:func:`categorical_projection`) and fitted by cross-entropy
  (:func:`categorical_loss`);
- quantile (QR-DQN; Dabney, Rowland, Bellemare & Munos, 2018): ``N`` learned
  values at the fixed quantile levels ``tau_i = (2i + 1) / (2N)``
  (:func:`quantile_midpoints`), fitted by the quantile Huber loss
  (:func:`quantile_huber_loss`).

Every function is pure and jittable; shapes are in each docstring (``B`` any
batch size; leading dims ``[...]`` broadcast where stated). ``discount`` is
``gamma^n * (1 - terminated)``, so ``0`` means no bootstrap.

A third representation, MuZero's (Schrittwieser et al., 2020; Pohlen et al., 2018 for the
transform): a scalar ``x`` is squashed by :func:`value_transform` ``h(x)`` and written as a
"two-hot" distribution over the integer atoms ``-S..S`` (:func:`scalar_to_two_hot`); a
network predicts logits over those atoms and the scalar is ``h^{-1}`` of their mean
(:func:`two_hot_to_scalar`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "categorical_loss",
    "categorical_projection",
    "expected_value",
    "quantile_huber_loss",
    "quantile_midpoints",
    "scalar_to_two_hot",
    "support",
    "two_hot_to_scalar",
    "value_transform",
    "value_transform_inverse",
]


def support(num_atoms: int, v_min: float, v_max: float) -> jax.Array:
    """The ``[K]`` float32 atoms ``z_k = v_min + k (v_max - v_min) / (K - 1)``, ``K = num_atoms``.

    Raises ``ValueError`` unless ``num_atoms >= 2`` and ``v_min < v_max``
    (the arguments are static: Python numbers).
    """
    if int(num_atoms) != num_atoms or num_atoms < 2:
        raise ValueError(f"num_atoms must be an integer >= 2, got {num_atoms!r}")
    if not float(v_min) < float(v_max):
        raise ValueError(f"need v_min < v_max, got v_min={v_min!r}, v_max={v_max!r}")
    return jnp.linspace(float(v_min), float(v_max), int(num_atoms), dtype=jnp.float32)


def categorical_projection(
    next_probs: jax.Array, reward: jax.Array, discount: jax.Array, atoms: jax.Array
) -> jax.Array:
    """Projects ``reward + discount * Z`` onto ``atoms`` (C51's operator ``Phi``).

    ``Z`` takes the value ``atoms[j]`` with probability ``next_probs[..., j]``.
    Each shifted atom ``Tz_j = clip(r + discount * z_j, v_min, v_max)`` gives
    its mass to the two atoms around it in proportion to closeness:

        m_k = sum_j p_j * max(0, 1 - |Tz_j - z_k| / dz),   dz = z_1 - z_0,

    i.e. with ``b = (Tz_j - v_min) / dz`` the atom ``floor(b)`` gets
    ``1 - frac(b)`` of ``p_j`` and the next gets ``frac(b)``; a shifted atom
    landing exactly on ``z_k`` gives it all its mass. ``discount = 0``
    (terminal) puts all mass around ``clip(r)``. Mass is conserved (rows of
    the output sum to the rows of ``next_probs``).

    Shapes: ``next_probs [B, K]``, ``reward [B]``, ``discount [B]``,
    ``atoms [K]`` (evenly spaced, increasing: see :func:`support`)
    -> ``[B, K]``. Any leading dims ``[...]`` in place of ``[B]`` work alike.
    The result is not differentiated through by callers (wrap it in
    ``stop_gradient`` or compute it from target-network outputs).
    """
    atoms = jnp.asarray(atoms)
    num_atoms = atoms.shape[-1]
    if atoms.ndim != 1 or next_probs.shape[-1] != num_atoms:
        raise ValueError(
            f"need atoms [K] and next_probs [..., K]; got {atoms.shape} and {next_probs.shape}"
        )
    v_min, v_max = atoms[0], atoms[-1]
    dz = (v_max - v_min) / (num_atoms - 1)
    reward = jnp.asarray(reward, next_probs.dtype)[..., None]
    discount = jnp.asarray(discount, next_probs.dtype)[..., None]
    shifted = jnp.clip(reward + discount * atoms, v_min, v_max)  # [..., K] (source atom j)
    b = (shifted - v_min) / dz  # fractional index of each shifted atom, in [0, K - 1]
    index = jnp.arange(num_atoms, dtype=b.dtype)
    weight = jnp.clip(1.0 - jnp.abs(b[..., :, None] - index), 0.0, 1.0)  # [..., K_source, K_target]
    return jnp.einsum("...j,...jk->...k", next_probs, weight)


def categorical_loss(logits: jax.Array, target_probs: jax.Array) -> jax.Array:
    """Cross-entropy ``-sum_k target_k * log_softmax(logits)_k`` per item.

    The target is a constant (``stop_gradient``). Shapes: ``logits [B, K]``,
    ``target_probs [B, K]`` -> ``[B]`` (any leading dims ``[...]``).
    """
    target = jax.lax.stop_gradient(target_probs)
    return -jnp.sum(target * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def quantile_midpoints(num_quantiles: int) -> jax.Array:
    """The ``[N]`` float32 quantile levels ``tau_i = (2i + 1) / (2N)``, ``i = 0..N-1``."""
    if int(num_quantiles) != num_quantiles or num_quantiles < 1:
        raise ValueError(f"num_quantiles must be an integer >= 1, got {num_quantiles!r}")
    n = int(num_quantiles)
    return jnp.asarray((2.0 * np.arange(n) + 1.0) / (2.0 * n), jnp.float32)


def quantile_huber_loss(
    quantiles: jax.Array, targets: jax.Array, taus: jax.Array, kappa: float | jax.Array = 1.0
) -> jax.Array:
    """QR-DQN's quantile Huber loss per item (Dabney et al., 2018, eq. 10).

    With ``u_ij = target_j - quantile_i`` (targets held constant):

        rho_ij = |tau_i - 1{u_ij < 0}| * H_kappa(u_ij) / kappa,
        H_kappa(u) = u^2 / 2 if |u| <= kappa else kappa (|u| - kappa / 2),
        loss = sum_i mean_j rho_ij.

    ``kappa = 0`` gives the plain quantile (pinball) loss
    ``|tau_i - 1{u_ij < 0}| * |u_ij|`` (the limit as ``kappa -> 0``).
    Minimising it moves ``quantile_i`` towards the ``tau_i``-quantile of the
    targets' distribution.

    Shapes: ``quantiles [B, N]``, ``targets [B, M]``, ``taus [N]`` (e.g.
    :func:`quantile_midpoints`), ``kappa`` a scalar ``>= 0`` (may be traced)
    -> ``[B]``. Any leading dims ``[...]`` in place of ``[B]`` work alike.
    """
    if quantiles.shape[-1] != jnp.shape(taus)[-1]:
        raise ValueError(
            f"quantiles [..., N] and taus [N] disagree: {quantiles.shape} vs {jnp.shape(taus)}"
        )
    targets = jax.lax.stop_gradient(targets)
    u = targets[..., None, :] - quantiles[..., :, None]  # [..., N, M]
    abs_u = jnp.abs(u)
    kappa = jnp.asarray(kappa, u.dtype)
    quad = jnp.minimum(abs_u, kappa)  # H_kappa(u) / kappa = quad^2 / (2 kappa) + (|u| - quad)
    safe_kappa = jnp.where(kappa > 0, kappa, 1.0)  # no 0/0 (nor NaN gradients) when kappa = 0
    huber_over_kappa = jnp.where(kappa > 0, 0.5 * jnp.square(quad) / safe_kappa, 0.0) + (
        abs_u - quad
    )
    weight = jnp.abs(jnp.asarray(taus, u.dtype)[:, None] - (u < 0).astype(u.dtype))  # [..., N, M]
    return jnp.sum(jnp.mean(weight * huber_over_kappa, axis=-1), axis=-1)


def expected_value(probs: jax.Array, atoms: jax.Array) -> jax.Array:
    """The mean ``sum_k probs_k * z_k``: ``probs [..., K]``, ``atoms [K]`` -> ``[...]``."""
    return jnp.sum(probs * atoms, axis=-1)


VALUE_TRANSFORM_EPS = 1e-3
"""The ``eps`` of :func:`value_transform` (MuZero's and R2D2's value)."""


def value_transform(x: jax.Array, eps: float = VALUE_TRANSFORM_EPS) -> jax.Array:
    """``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``, elementwise (any shape): squashes large
    returns so one support covers rewards of very different scales."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def value_transform_inverse(y: jax.Array, eps: float = VALUE_TRANSFORM_EPS) -> jax.Array:
    """The exact inverse of :func:`value_transform`, elementwise:
    ``h^{-1}(y) = sign(y) (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1)``."""
    root = (jnp.sqrt(1.0 + 4.0 * eps * (jnp.abs(y) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return jnp.sign(y) * (jnp.square(root) - 1.0)


def scalar_to_two_hot(x: jax.Array, support_size: int) -> jax.Array:
    """``x [...]`` -> ``[..., 2S + 1]`` probabilities over the atoms ``-S..S`` (``S =
    support_size``) whose mean is ``h(x)`` (:func:`value_transform`), clipped to ``[-S, S]``:
    the two atoms around ``h(x)`` share the mass in proportion to closeness."""
    y = jnp.clip(value_transform(x), -support_size, support_size)
    low = jnp.floor(y)
    frac = y - low
    index = (low + support_size).astype(jnp.int32)
    atoms = 2 * support_size + 1
    lower = jax.nn.one_hot(index, atoms) * (1.0 - frac)[..., None]
    upper = jax.nn.one_hot(jnp.minimum(index + 1, atoms - 1), atoms) * frac[..., None]
    return lower + upper


def two_hot_to_scalar(logits: jax.Array, support_size: int) -> jax.Array:
    """``logits [..., 2S + 1]`` over the atoms ``-S..S`` -> ``[...]``: ``h^{-1}`` of the
    mean atom under ``softmax(logits)``."""
    atoms = jnp.arange(-support_size, support_size + 1, dtype=jnp.float32)
    return value_transform_inverse(expected_value(jax.nn.softmax(logits, axis=-1), atoms))

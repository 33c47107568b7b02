"""Action distributions for policies: small pytrees, no TFP or distrax.

Each class is a ``flax.struct.dataclass`` (so a jitted or vmapped function
can take and return it) with ``sample(key)``, ``log_prob(x)``,
``entropy()``, ``mode()`` and ``sample_and_log_prob(key)``. Parameters carry
any leading batch dimensions ``[...]``; the event is a scalar for
``Categorical``, the last axis for the others.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Array = jax.Array

__all__ = [
    "Categorical",
    "MultiCategorical",
    "Normal",
    "TanhNormal",
    "epsilon_greedy",
    "masked_argmax",
    "masked_max",
]

_LOG_2PI = math.log(2.0 * math.pi)


def _masked_logit(dtype) -> float:
    """A large negative *finite* logit for invalid actions (no NaN in gradients)."""
    return max(-1e9, float(jnp.finfo(dtype).min) / 2)


@struct.dataclass
class Categorical:
    """Categorical over the last axis of ``logits``, with an optional action mask.

    ``mask`` (bool, same shape as ``logits``, True = valid) gives invalid
    actions probability 0: their logit is replaced by a large negative finite
    number, so ``log_prob`` of an invalid action is very negative but finite
    and gradients stay finite. ``sample`` and ``mode`` never return an
    invalid action; ``entropy`` sums over valid actions only. At least one
    action per row must be valid.
    """

    logits: Array  # [..., N]
    mask: Array | None = None  # [..., N] bool, True = valid

    @property
    def log_probs(self) -> Array:
        """[..., N] normalised log-probabilities (masked entries very negative)."""
        logits = self.logits
        if self.mask is not None:
            logits = jnp.where(self.mask, logits, _masked_logit(logits.dtype))
        return jax.nn.log_softmax(logits, axis=-1)

    @property
    def probs(self) -> Array:
        """[..., N] probabilities (exactly 0 for masked actions)."""
        return jnp.exp(self.log_probs)

    def sample(self, key: Array) -> Array:
        """[...] int32 actions."""
        return jax.random.categorical(key, self.log_probs, axis=-1).astype(jnp.int32)

    def log_prob(self, x: Array) -> Array:
        """[...] log pi(x) for integer actions ``x`` (broadcast against the batch ``[...]``)."""
        x, log_p = jnp.asarray(x, jnp.int32), self.log_probs
        shape = jnp.broadcast_shapes(x.shape, log_p.shape[:-1])
        log_p = jnp.broadcast_to(log_p, shape + log_p.shape[-1:])
        picked = jnp.take_along_axis(log_p, jnp.broadcast_to(x, shape)[..., None], axis=-1)
        return picked.reshape(shape)

    def sample_and_log_prob(self, key: Array) -> tuple[Array, Array]:
        x = self.sample(key)
        return x, self.log_prob(x)

    def entropy(self) -> Array:
        """[...] ``-sum_a p(a) log p(a)`` over valid actions."""
        log_p = self.log_probs
        terms = jnp.exp(log_p) * log_p
        if self.mask is not None:
            terms = jnp.where(self.mask, terms, 0.0)
        return -jnp.sum(terms, axis=-1)

    def mode(self) -> Array:
        """[...] int32 most likely valid action."""
        return jnp.argmax(self.log_probs, axis=-1).astype(jnp.int32)


@struct.dataclass
class MultiCategorical:
    """Independent categoricals, one per dimension of a MultiDiscrete space.

    Actions are ``[..., D]`` integers; ``log_prob`` and ``entropy`` are sums
    over the D dimensions. Build it from per-dimension logits (a tuple of
    ``[..., n_i]`` arrays) or from flat logits with ``from_flat``.
    """

    logits: tuple[Array, ...]  # D arrays [..., n_i]
    mask: tuple[Array, ...] | None = None  # D bool arrays [..., n_i], True = valid

    @classmethod
    def from_flat(cls, logits: Array, nvec, mask: Array | None = None) -> MultiCategorical:
        """Splits ``[..., sum(nvec)]`` logits (and mask) into the D dimensions."""
        splits = np.cumsum(np.asarray(nvec))[:-1].tolist()
        if logits.shape[-1] != int(np.sum(nvec)):
            raise ValueError(f"logits last axis {logits.shape[-1]} != sum(nvec) = {np.sum(nvec)}")
        split_mask = None if mask is None else tuple(jnp.split(mask, splits, axis=-1))
        return cls(tuple(jnp.split(logits, splits, axis=-1)), split_mask)

    @property
    def dims(self) -> tuple[Categorical, ...]:
        masks = self.mask if self.mask is not None else (None,) * len(self.logits)
        return tuple(Categorical(lg, m) for lg, m in zip(self.logits, masks, strict=True))

    def sample(self, key: Array) -> Array:
        """[..., D] int32 actions."""
        keys = jax.random.split(key, len(self.logits))
        return jnp.stack([d.sample(k) for d, k in zip(self.dims, keys)], axis=-1)

    def log_prob(self, x: Array) -> Array:
        """[...] sum over dimensions of each categorical's log-probability."""
        return sum(d.log_prob(x[..., i]) for i, d in enumerate(self.dims))

    def sample_and_log_prob(self, key: Array) -> tuple[Array, Array]:
        x = self.sample(key)
        return x, self.log_prob(x)

    def entropy(self) -> Array:
        """[...] sum of the per-dimension entropies."""
        return sum(d.entropy() for d in self.dims)

    def mode(self) -> Array:
        """[..., D] int32."""
        return jnp.stack([d.mode() for d in self.dims], axis=-1)


@struct.dataclass
class Normal:
    """Diagonal Gaussian over the last axis; ``log_std`` broadcasts against ``mean``.

    log p(x) = sum_i [-0.5 ((x_i - mu_i) / sigma_i)^2 - log sigma_i - 0.5 log(2 pi)]
    H        = sum_i [0.5 + 0.5 log(2 pi) + log sigma_i]
    """

    mean: Array  # [..., A]
    log_std: Array  # [..., A] or broadcastable, e.g. a state-independent [A]

    @property
    def _shape(self) -> tuple[int, ...]:
        return jnp.broadcast_shapes(jnp.shape(self.mean), jnp.shape(self.log_std))

    def sample(self, key: Array) -> Array:
        """[..., A]"""
        eps = jax.random.normal(key, self._shape, jnp.result_type(self.mean))
        return self.mean + jnp.exp(self.log_std) * eps

    def log_prob(self, x: Array) -> Array:
        """[...]"""
        z = (x - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z**2 - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def sample_and_log_prob(self, key: Array) -> tuple[Array, Array]:
        x = self.sample(key)
        return x, self.log_prob(x)

    def entropy(self) -> Array:
        """[...]"""
        log_std = jnp.broadcast_to(self.log_std, self._shape)
        return jnp.sum(0.5 + 0.5 * _LOG_2PI + log_std, axis=-1)

    def mode(self) -> Array:
        """[..., A]"""
        return jnp.broadcast_to(self.mean, self._shape)


def _log1m_tanh_sq(x: Array) -> Array:
    """``log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2x))``, stable for large |x|."""
    return 2.0 * (math.log(2.0) - x - jax.nn.softplus(-2.0 * x))


@struct.dataclass
class TanhNormal:
    """A diagonal Gaussian squashed by tanh and rescaled to ``[low, high]``.

        u ~ Normal(mean, exp(log_std)),   a = low + (tanh(u) + 1) / 2 * (high - low)
        log p(a) = log N(u) - sum_i [log(1 - tanh(u_i)^2) + log((high_i - low_i) / 2)]

    ``sample_and_log_prob`` uses the pre-squash sample ``u`` and is exact;
    ``log_prob(a)`` inverts the squash with ``arctanh`` (``a`` clipped just
    inside the bounds), which loses precision where ``tanh`` saturates.
    ``entropy`` has no closed form, see its docstring.
    """

    mean: Array  # [..., A] pre-squash mean
    log_std: Array  # [..., A] or broadcastable
    low: Array | float = -1.0  # scalar or [A]
    high: Array | float = 1.0  # scalar or [A]

    @property
    def base(self) -> Normal:
        """The pre-squash Gaussian."""
        return Normal(self.mean, self.log_std)

    def _squash(self, u: Array) -> Array:
        return self.low + (jnp.tanh(u) + 1.0) * 0.5 * (self.high - self.low)

    def _log_det_jacobian(self, u: Array) -> Array:
        """[...] ``sum_i log |d a_i / d u_i|``."""
        half_range = jnp.broadcast_to(0.5 * (self.high - self.low), u.shape)
        return jnp.sum(_log1m_tanh_sq(u) + jnp.log(half_range), axis=-1)

    def sample_and_log_prob(self, key: Array) -> tuple[Array, Array]:
        """``([..., A] action in [low, high], [...] log-probability)``."""
        return self._at(self.base.sample(key))

    def from_noise(self, eps: Array) -> tuple[Array, Array]:
        """``(action, log-probability)`` of the pre-squash sample ``u = mean + std * eps``,
        for standard normals ``eps [..., A]`` the caller drew (e.g. one key per item);
        differentiable in ``mean`` and ``log_std`` (reparameterisation)."""
        return self._at(self.mean + jnp.exp(self.log_std) * eps)

    def _at(self, u: Array) -> tuple[Array, Array]:
        """The squashed action and its exact log-density at the pre-squash sample ``u``."""
        return self._squash(u), self.base.log_prob(u) - self._log_det_jacobian(u)

    def sample(self, key: Array) -> Array:
        """[..., A] in ``[low, high]``."""
        return self._squash(self.base.sample(key))

    def log_prob(self, x: Array) -> Array:
        """[...] log-density of actions ``x`` in ``(low, high)``."""
        y = 2.0 * (x - self.low) / (self.high - self.low) - 1.0
        eps = jnp.finfo(jnp.result_type(y)).eps
        u = jnp.arctanh(jnp.clip(y, -1.0 + eps, 1.0 - eps))
        return self.base.log_prob(u) - self._log_det_jacobian(u)

    def entropy(self, key: Array | None = None) -> Array:
        """[...] With ``key``: a one-sample Monte-Carlo estimate ``-log p(a)``,
        ``a ~ p`` (unbiased, differentiable by reparameterisation). Without:
        the entropy of the pre-squash Gaussian (``self.base.entropy()``), not
        the entropy of the squashed distribution (an upper bound on it when
        ``high - low <= 2``)."""
        if key is None:
            return self.base.entropy()
        return -self.sample_and_log_prob(key)[1]

    def mode(self) -> Array:
        """[..., A] the squashed Gaussian mean (the mode of the pre-squash
        Gaussian mapped through the squash, not the squashed density's mode)."""
        return self._squash(self.base.mode())


# --------------------------------------------------------------------------
# Value-based action selection
# --------------------------------------------------------------------------


def masked_argmax(values: Array, mask: Array | None = None) -> Array:
    """``[...]`` int32 index of the largest of ``values [..., A]`` among the valid
    actions (``mask [..., A]`` bool, True = valid; at least one valid per row)."""
    if mask is not None:
        values = jnp.where(mask, values, -jnp.inf)
    return jnp.argmax(values, axis=-1).astype(jnp.int32)


def masked_max(values: Array, mask: Array | None = None) -> Array:
    """``[...]`` largest of ``values [..., A]`` among the valid actions."""
    best = masked_argmax(values, mask)
    return jnp.take_along_axis(values, best[..., None], axis=-1).reshape(best.shape)


def epsilon_greedy(keys: Array, values: Array, epsilon: Array, mask: Array | None = None) -> Array:
    """Epsilon-greedy actions ``[N]`` int32 from ``values [N, A]``, one key per row (``keys [N]``).

    With probability ``epsilon`` a row takes a uniformly random *valid* action,
    otherwise its (masked) argmax. Each row draws ``A + 1`` uniforms from its key
    in one call: the first decides whether to explore, and the random action is
    the argmax of the other ``A`` over the valid actions (the largest of i.i.d.
    uniforms is equally likely to be any of them). One draw instead of a split,
    a coin and a categorical sample: on CPU every threefry call is a small loop
    of its own.
    """
    u = jax.vmap(lambda k: jax.random.uniform(k, (values.shape[-1] + 1,)))(keys)  # [N, A + 1]
    explore = u[:, 0] < epsilon
    random = masked_argmax(u[:, 1:], mask)
    return jnp.where(explore, random, masked_argmax(values, mask))

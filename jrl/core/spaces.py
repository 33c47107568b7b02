"""Observation and action spaces with jittable ``sample`` and ``contains``.

A space describes the shape, dtype and bounds of an observation or action.
It is a plain Python object (static under ``jit``); ``sample(key)`` and
``contains(x)`` are pure JAX functions that can be jitted and vmapped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class Space:
    """Base class. ``shape`` and ``dtype`` describe one (unbatched) element."""

    shape: tuple[int, ...]
    dtype: Any

    def sample(self, key: jax.Array) -> Any:
        """Draws one element uniformly (Box: uniform on bounded dims, normal otherwise)."""
        raise NotImplementedError

    def contains(self, x: Any) -> jax.Array:
        """Returns a scalar bool array: True where ``x`` lies in the space.

        The shape must match exactly (checked statically); values are checked
        in JAX, so the result can be used inside ``jit``.
        """
        raise NotImplementedError


class Discrete(Space):
    """Integers ``0 .. n-1`` (int32 scalars)."""

    def __init__(self, n: int, dtype: Any = jnp.int32):
        if int(n) <= 0:
            raise ValueError(f"Discrete(n) needs n >= 1, got {n}")
        self.n = int(n)
        self.shape = ()
        self.dtype = jnp.dtype(dtype)

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.randint(key, (), 0, self.n, dtype=self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != ():
            return jnp.asarray(False)
        if not jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.asarray(False)
        return (x >= 0) & (x < self.n)

    def __repr__(self) -> str:
        return f"Discrete({self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Discrete) and other.n == self.n and other.dtype == self.dtype

    def __hash__(self) -> int:
        return hash(("Discrete", self.n, str(self.dtype)))


class MultiDiscrete(Space):
    """A vector of independent discrete choices, ``x[i] in 0 .. nvec[i]-1``."""

    def __init__(self, nvec: Sequence[int], dtype: Any = jnp.int32):
        self.nvec = np.asarray(nvec, dtype=np.int32)
        if self.nvec.ndim != 1 or self.nvec.size == 0 or (self.nvec <= 0).any():
            raise ValueError(
                f"MultiDiscrete needs a non-empty 1-D nvec of positive ints, got {nvec}"
            )
        self.shape = (int(self.nvec.size),)
        self.dtype = jnp.dtype(dtype)

    def sample(self, key: jax.Array) -> jax.Array:
        u = jax.random.uniform(key, self.shape)
        return jnp.floor(u * self.nvec).astype(self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != self.shape or not jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.asarray(False)
        return jnp.all((x >= 0) & (x < jnp.asarray(self.nvec)))

    def __repr__(self) -> str:
        return f"MultiDiscrete({self.nvec.tolist()})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MultiDiscrete)
            and np.array_equal(other.nvec, self.nvec)
            and other.dtype == self.dtype
        )

    def __hash__(self) -> int:
        return hash(("MultiDiscrete", tuple(self.nvec.tolist()), str(self.dtype)))


class Box(Space):
    """An array of shape ``shape`` with element-wise bounds ``low <= x <= high``.

    Bounds may be scalars (broadcast) or arrays of ``shape``; ``-inf``/``inf``
    mark unbounded dimensions. Integer dtypes are supported (e.g. uint8 images).
    """

    def __init__(
        self, low: Any, high: Any, shape: Sequence[int] | None = None, dtype: Any = jnp.float32
    ):
        self.dtype = jnp.dtype(dtype)
        low_np = np.asarray(low, dtype=np.float64)
        high_np = np.asarray(high, dtype=np.float64)
        if shape is None:
            shape = np.broadcast_shapes(low_np.shape, high_np.shape)
        self.shape = tuple(int(s) for s in shape)
        try:
            self.low = np.broadcast_to(low_np, self.shape).astype(np.float64)
            self.high = np.broadcast_to(high_np, self.shape).astype(np.float64)
        except ValueError as e:
            raise ValueError(
                f"Box bounds {low_np.shape}/{high_np.shape} do not fit shape {self.shape}"
            ) from e
        if (self.low > self.high).any():
            raise ValueError("Box needs low <= high everywhere")

    @property
    def bounded(self) -> bool:
        """True when every dimension has finite low and high."""
        return bool(np.isfinite(self.low).all() and np.isfinite(self.high).all())

    def sample(self, key: jax.Array) -> jax.Array:
        """Uniform on finite intervals; exponential/normal on half/un-bounded ones.

        Integer dtypes draw uniformly from the integers in ``[low, high]`` (both
        ends included). Bounds as wide as the float32 range (Gymnasium-style
        ``finfo.max``) are sampled without overflowing to ``inf``.
        """
        k_u, k_n, k_e = jax.random.split(key, 3)
        lo_f, hi_f = np.isfinite(self.low), np.isfinite(self.high)
        integer = jnp.issubdtype(self.dtype, jnp.integer)
        big = float(np.finfo(np.float32).max)
        low = np.clip(np.where(lo_f, self.low, 0.0), -big, big)
        high = np.clip(np.where(hi_f, self.high, 0.0), -big, big)
        if integer:  # the integers inside the bounds; uniform on [low, high + 1) then floored
            low, high = np.ceil(low), np.floor(high)
        top = high + 1.0 if integer else high
        low32, high32, top32 = (jnp.asarray(a, jnp.float32) for a in (low, high, top))
        both, neither = lo_f & hi_f, ~lo_f & ~hi_f
        x = jnp.zeros(self.shape, jnp.float32)
        # Bounds are static: draw only the distributions some dimension needs.
        if both.any():
            u = jax.random.uniform(k_u, self.shape)
            x = jnp.where(
                both, low32 * (1.0 - u) + top32 * u, x
            )  # a convex combination never overflows
        if (lo_f ^ hi_f).any():
            expo = jax.random.exponential(k_e, self.shape)
            x = jnp.where(lo_f & ~hi_f, low32 + expo, jnp.where(hi_f & ~lo_f, high32 - expo, x))
        if neither.any():
            x = jnp.where(neither, jax.random.normal(k_n, self.shape), x)
        if integer:
            x = jnp.floor(x)
        x = jnp.clip(x, jnp.where(lo_f, low32, -jnp.inf), jnp.where(hi_f, high32, jnp.inf))
        return x.astype(self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.asarray(False)
        lo = jnp.asarray(self.low, jnp.float32)
        hi = jnp.asarray(self.high, jnp.float32)
        xf = x.astype(jnp.float32)
        return jnp.all((xf >= lo) & (xf <= hi))

    def __repr__(self) -> str:
        def fmt(a: np.ndarray) -> str:
            return (
                str(a.flat[0])
                if a.size and (a == a.flat[0]).all()
                else np.array2string(a, precision=3)
            )

        return f"Box({fmt(self.low)}, {fmt(self.high)}, {self.shape}, {self.dtype.name})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Box)
            and other.shape == self.shape
            and other.dtype == self.dtype
            and np.array_equal(other.low, self.low)
            and np.array_equal(other.high, self.high)
        )

    def __hash__(self) -> int:
        return hash(("Box", self.shape, str(self.dtype)))


class Tuple(Space):
    """A tuple of spaces; elements are Python tuples of the sub-elements."""

    def __init__(self, spaces: Sequence[Space]):
        self.spaces = tuple(spaces)
        self.shape = ()
        self.dtype = None

    def sample(self, key: jax.Array) -> tuple:
        keys = jax.random.split(key, len(self.spaces))
        return tuple(s.sample(k) for s, k in zip(self.spaces, keys))

    def contains(self, x: Any) -> jax.Array:
        if not isinstance(x, (tuple, list)) or len(x) != len(self.spaces):
            return jnp.asarray(False)
        return jnp.all(
            jnp.stack([jnp.asarray(True)] + [s.contains(v) for s, v in zip(self.spaces, x)])
        )

    def __getitem__(self, i: int) -> Space:
        return self.spaces[i]

    def __len__(self) -> int:
        return len(self.spaces)

    def __repr__(self) -> str:
        return f"Tuple({', '.join(map(repr, self.spaces))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tuple) and other.spaces == self.spaces

    def __hash__(self) -> int:
        return hash(("Tuple", self.spaces))


class Dict(Space):
    """A mapping of names to spaces; elements are dicts with the same keys.

    Keys are kept sorted (as JAX flattens dicts and Gymnasium orders its Dict),
    so equal spaces sample equal elements from the same key.
    """

    def __init__(self, spaces: Mapping[str, Space]):
        try:
            self.spaces = dict(sorted(spaces.items()))
        except TypeError:  # keys that do not sort keep their order
            self.spaces = dict(spaces)
        self.shape = ()
        self.dtype = None

    def sample(self, key: jax.Array) -> dict:
        keys = jax.random.split(key, len(self.spaces))
        return {name: s.sample(k) for (name, s), k in zip(self.spaces.items(), keys)}

    def contains(self, x: Any) -> jax.Array:
        if not isinstance(x, Mapping) or set(x.keys()) != set(self.spaces.keys()):
            return jnp.asarray(False)
        return jnp.all(
            jnp.stack(
                [jnp.asarray(True)] + [s.contains(x[name]) for name, s in self.spaces.items()]
            )
        )

    def __getitem__(self, name: str) -> Space:
        return self.spaces[name]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self.spaces.items())
        return f"Dict({{{inner}}})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dict) and other.spaces == self.spaces

    def __hash__(self) -> int:
        return hash(
            ("Dict", frozenset(self.spaces.items()))
        )  # equality ignores key order, so must the hash


def flat_dim(space: Space) -> int:
    """Number of scalars in a flattened element (Discrete counts as 1)."""
    if isinstance(space, (Discrete,)):
        return 1
    if isinstance(space, (Box, MultiDiscrete)):
        return int(np.prod(space.shape, dtype=np.int64))
    if isinstance(space, Tuple):
        return sum(flat_dim(s) for s in space.spaces)
    if isinstance(space, Dict):
        return sum(flat_dim(s) for s in space.spaces.values())
    raise TypeError(f"flat_dim: unsupported space {space!r}")


def zeros_like_space(space: Space) -> Any:
    """An all-zero element of ``space`` (used to build pytree templates)."""
    if isinstance(space, Tuple):
        return tuple(zeros_like_space(s) for s in space.spaces)
    if isinstance(space, Dict):
        return {k: zeros_like_space(s) for k, s in space.spaces.items()}
    return jnp.zeros(space.shape, space.dtype)

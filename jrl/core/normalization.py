"""Normalising wrappers and their statistics: :class:`RunningMeanStd`,
:class:`NormalizeObservation` and :class:`NormalizeReward`, and :func:`freeze` and
:func:`copy_statistics` over the normaliser states of a wrapper chain.

The normalisers sit outside AutoReset, EpisodeStatistics and VmapEnv (the composition order of
:mod:`jrl.core.wrappers`, whose :func:`~jrl.core.wrappers.wrap_for_training` applies them), so
their statistics are over the whole batch, and across devices over the active
:mod:`jrl.core.parallel` axis.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import parallel, spaces
from jrl.core.env import Environment, Wrapper
from jrl.core.types import FINAL_OBSERVATION, PyTree, TimeStep

__all__ = [
    "NormalizeObservation",
    "NormalizeObservationState",
    "NormalizeReward",
    "NormalizeRewardState",
    "RunningMeanStd",
    "copy_statistics",
    "freeze",
]


@struct.dataclass
class RunningMeanStd:
    """Running mean and variance (Chan et al.'s parallel update).

    ``count`` starts at a small epsilon with mean 0 and variance 1, so the
    first normalised values are finite.
    """

    mean: jax.Array  # [*shape] float32
    var: jax.Array  # [*shape] float32
    count: jax.Array  # [] float32 number of samples seen (plus the epsilon prior)

    @classmethod
    def create(cls, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> "RunningMeanStd":
        return cls(
            jnp.zeros(shape, jnp.float32),
            jnp.ones(shape, jnp.float32),
            jnp.asarray(epsilon, jnp.float32),
        )

    def update(
        self, x: jax.Array, axis_name: str | tuple[str, ...] | None = None
    ) -> "RunningMeanStd":
        """Folds a batch ``x: [..., *shape]`` in; with ``axis_name`` the batch is
        the union of the batches on every device of that mapped axis."""
        x = jnp.asarray(x, jnp.float32)
        batch_axes = tuple(range(x.ndim - self.mean.ndim))
        n = jnp.asarray(np.prod([x.shape[a] for a in batch_axes], dtype=np.int64), jnp.float32)
        total = jnp.sum(x, axis=batch_axes)
        if axis_name is not None:
            n = jax.lax.psum(n, axis_name)
            total = jax.lax.psum(total, axis_name)
        b_mean = total / n
        sq = jnp.sum(jnp.square(x - b_mean), axis=batch_axes)
        if axis_name is not None:
            sq = jax.lax.psum(sq, axis_name)
        return self.merge(b_mean, sq / n, n)

    def merge(self, b_mean: jax.Array, b_var: jax.Array, b_count: jax.Array) -> "RunningMeanStd":
        """Combines these statistics with those of another sample."""
        delta = b_mean - self.mean
        tot = self.count + b_count
        mean = self.mean + delta * b_count / tot
        m2 = (
            self.var * self.count + b_var * b_count + jnp.square(delta) * self.count * b_count / tot
        )
        return RunningMeanStd(mean, m2 / tot, tot)


def _update_unless_frozen(
    stats: RunningMeanStd, frozen: jax.Array, x: jax.Array, axis_name
) -> RunningMeanStd:
    """``stats`` with the batch ``x`` folded in (over ``axis_name``, else the active
    device axis), or unchanged where ``frozen``."""
    new = stats.update(x, axis_name or parallel.current_axis())
    return jax.tree.map(lambda old, upd: jnp.where(frozen, old, upd), stats, new)


@struct.dataclass
class NormalizeObservationState:
    env_state: PyTree
    stats: RunningMeanStd
    frozen: jax.Array  # [] bool, True: statistics are used but not updated


class NormalizeObservation(Wrapper):
    """Normalises observations by running statistics kept in the state.

    ``obs -> clip((obs - mean) / sqrt(var + epsilon), -clip, clip)`` with the
    statistics updated (unless frozen) by every observation returned,
    before normalising. Statistics are over all leading batch axes, so after
    VmapEnv they are shared by the batch; across devices too, over
    ``axis_name`` or else the active :mod:`jrl.core.parallel` device axis. Freeze them for
    evaluation with :func:`freeze`.
    """

    def __init__(
        self,
        env: Environment,
        clip: float = 10.0,
        epsilon: float = 1e-8,
        axis_name: str | tuple[str, ...] | None = None,
    ):
        super().__init__(env)
        space = env.observation_space(env.default_params)
        if not isinstance(space, spaces.Box):
            raise TypeError(f"NormalizeObservation needs a Box observation space, got {space!r}")
        self._shape = space.shape
        self.clip, self.epsilon, self.axis_name = float(clip), float(epsilon), axis_name

    def observation_space(self, params=None):
        return spaces.Box(-self.clip, self.clip, self._shape, jnp.float32)

    def inner_state(self, state: NormalizeObservationState) -> PyTree:
        return state.env_state

    def _normalize(self, stats: RunningMeanStd, obs):
        z = (obs - stats.mean) / jnp.sqrt(stats.var + self.epsilon)
        return jnp.clip(z, -self.clip, self.clip).astype(jnp.float32)

    def _apply(self, stats, ts: TimeStep) -> TimeStep:
        info = dict(ts.info)
        if FINAL_OBSERVATION in info:
            info[FINAL_OBSERVATION] = self._normalize(stats, info[FINAL_OBSERVATION])
        return ts.replace(observation=self._normalize(stats, ts.observation), info=info)

    def reset(self, key, params=None):
        env_state, ts = self.env.reset(key, params)
        frozen = jnp.zeros((), bool)
        stats = _update_unless_frozen(
            RunningMeanStd.create(self._shape), frozen, ts.observation, self.axis_name
        )
        return NormalizeObservationState(env_state, stats, frozen), self._apply(stats, ts)

    def step(self, key, state: NormalizeObservationState, action, params=None):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        stats = _update_unless_frozen(state.stats, state.frozen, ts.observation, self.axis_name)
        return state.replace(env_state=env_state, stats=stats), self._apply(stats, ts)


@struct.dataclass
class NormalizeRewardState:
    env_state: PyTree
    stats: RunningMeanStd  # statistics of the discounted return
    discounted_return: jax.Array  # [...] float32 running discounted return per env
    frozen: jax.Array  # [] bool


class NormalizeReward(Wrapper):
    """Scales rewards by the running standard deviation of the discounted return.

    Keeps ``G <- gamma * G * (1 - done) + r`` per env, folds ``G`` into
    running statistics (unless frozen) and returns ``clip(r / sqrt(var(G) +
    epsilon), -clip, clip)``; rewards are not shifted. ``axis_name`` shares
    statistics across devices as in :class:`NormalizeObservation`.
    """

    def __init__(
        self,
        env: Environment,
        gamma: float = 0.99,
        clip: float = 10.0,
        epsilon: float = 1e-8,
        axis_name: str | tuple[str, ...] | None = None,
    ):
        super().__init__(env)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
        self.gamma, self.clip, self.epsilon, self.axis_name = (
            float(gamma),
            float(clip),
            float(epsilon),
            axis_name,
        )

    def inner_state(self, state: NormalizeRewardState) -> PyTree:
        return state.env_state

    def reset(self, key, params=None):
        env_state, ts = self.env.reset(key, params)
        state = NormalizeRewardState(
            env_state, RunningMeanStd.create(()), jnp.zeros_like(ts.reward), jnp.zeros((), bool)
        )
        return state, ts

    def step(self, key, state: NormalizeRewardState, action, params=None):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        ret = state.discounted_return * self.gamma + ts.reward
        stats = _update_unless_frozen(state.stats, state.frozen, ret, self.axis_name)
        reward = jnp.clip(ts.reward / jnp.sqrt(stats.var + self.epsilon), -self.clip, self.clip)
        ret = jnp.where(ts.done, 0.0, ret)
        return state.replace(env_state=env_state, stats=stats, discounted_return=ret), ts.replace(
            reward=reward
        )


_NORMALIZER_STATES = (NormalizeObservationState, NormalizeRewardState)


def _map_normalizer_states(state: PyTree, fn: Callable[[Any], Any]) -> PyTree:
    """Rebuilds ``state`` with ``fn`` applied to every normaliser state in its wrapper chain."""
    if isinstance(state, _NORMALIZER_STATES):
        state = fn(state)
    if hasattr(state, "env_state") and hasattr(state, "replace"):
        return state.replace(env_state=_map_normalizer_states(state.env_state, fn))
    return state


def freeze(state: PyTree, frozen: bool = True) -> PyTree:
    """Returns ``state`` with every normaliser's statistics frozen (or unfrozen)."""
    return _map_normalizer_states(
        state, lambda s: s.replace(frozen=jnp.full(jnp.shape(s.frozen), frozen))
    )


def copy_statistics(src: PyTree, dst: PyTree) -> PyTree:
    """Copies normaliser statistics from ``src`` into ``dst`` (same wrapper chain),
    e.g. from a training state into a fresh evaluation state of another batch size."""
    found: list[tuple[type, RunningMeanStd]] = []

    def collect(s):
        found.append((type(s), s.stats))
        return s

    _map_normalizer_states(src, collect)
    it = iter(found)

    def put(s):
        kind, stats = next(it, (None, None))
        if kind is not type(s) or jax.tree.map(jnp.shape, stats) != jax.tree.map(
            jnp.shape, s.stats
        ):
            raise ValueError("copy_statistics: the two states have different wrapper chains")
        return s.replace(stats=stats)

    out = _map_normalizer_states(dst, put)
    if next(it, None) is not None:
        raise ValueError("copy_statistics: the two states have different wrapper chains")
    return out

"""Environment wrappers: functions of an environment returning an environment.

Every wrapper is a :class:`jrl.core.env.Wrapper`. A stateful wrapper keeps its own
state *in the environment state* (a dataclass with ``env_state`` for the
inner environment), so wrapped environments stay pure and can be
``jit``-ted, ``vmap``ped and checkpointed like bare ones.

Composition order
-----------------
Order matters, so it is fixed and checked. From the inside out::

    base env
      -> TimeLimit                      (truncation is an episode property)
      -> ClipAction / RescaleAction / FlattenObservation / FrameStack
      -> VmapEnv(num_envs)              (a batch of independent envs)
      -> AutoReset                      (resets finished episodes in-step)
      -> EpisodeStatistics              (sees every finished episode)
      -> NormalizeObservation / NormalizeReward  (statistics over the batch)
      -> CheckActions                   (optional, debugging)

:func:`wrap_for_training` applies exactly this order. AutoReset and
EpisodeStatistics may also sit inside VmapEnv (``VmapEnv(EpisodeStatistics(
AutoReset(env)), B)``, same results); outside it, AutoReset resets only the
envs that finished, which is faster on large batches (see its docstring).
Orders that lose information raise ``ValueError`` at construction: TimeLimit
or FrameStack over an auto-resetting env (the reset would hide the
truncation or mix episodes in one stack), AutoReset over EpisodeStatistics
(the reset would wipe the running totals) and AutoReset twice. Wrappers after ``VmapEnv``
see batched arrays; EpisodeStatistics, AutoReset, TimeLimit and the
normalisers are written for any leading batch shape, the others expect an
unbatched env.

This module holds the episode structure (TimeLimit, AutoReset, EpisodeStatistics), the batch
(VmapEnv), the action wrappers and :func:`wrap_for_training`; FlattenObservation and
FrameStack are in :mod:`jrl.core.observation_wrappers`, the normalisers in
:mod:`jrl.core.normalization`.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import parallel, spaces
from jrl.core.env import Environment, Wrapper
from jrl.core.normalization import NormalizeObservation, NormalizeReward
from jrl.core.types import (
    EPISODE_DONE,
    EPISODE_LENGTH,
    EPISODE_RETURN,
    FINAL_OBSERVATION,
    PyTree,
)

__all__ = [
    "AutoReset",
    "CheckActions",
    "ClipAction",
    "EpisodeStatistics",
    "RescaleAction",
    "TimeLimit",
    "VmapEnv",
    "has_wrapper",
    "wrap_for_training",
]


def _select(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    """Leaf-wise ``where(pred, a, b)``, broadcasting a ``[...]`` pred over trailing dims."""

    def sel(a, b):
        p = jnp.reshape(pred, pred.shape + (1,) * (jnp.ndim(a) - pred.ndim))
        return jnp.where(p, a, b)

    return jax.tree.map(sel, on_true, on_false)


def has_wrapper(env: Environment, cls: type) -> bool:
    """Whether a wrapper of class ``cls`` (or a subclass) is in ``env``'s chain."""
    return any(issubclass(w, cls) for w in env.wrappers)


# --------------------------------------------------------------------------
# Episode structure: TimeLimit, AutoReset, EpisodeStatistics
# --------------------------------------------------------------------------


@struct.dataclass
class TimeLimitState:
    env_state: PyTree
    time: jax.Array  # [...] int32 steps taken in the current episode


class TimeLimit(Wrapper):
    """Truncates an episode after ``max_episode_steps`` steps.

    Sets ``truncated`` (never ``terminated``) on the step at which the count
    reaches the limit, as Gymnasium's TimeLimit does: if the episode also
    terminates on that step, both flags are set, and learners give
    ``terminated`` precedence (no bootstrap).
    """

    def __init__(self, env: Environment, max_episode_steps: int):
        super().__init__(env)
        if has_wrapper(env, AutoReset):
            raise ValueError(
                "TimeLimit must be applied inside AutoReset (wrap the env with TimeLimit first)"
            )
        if int(max_episode_steps) <= 0:
            raise ValueError(f"max_episode_steps must be positive, got {max_episode_steps}")
        self.max_episode_steps = int(max_episode_steps)

    def inner_state(self, state: TimeLimitState) -> PyTree:
        return state.env_state

    def reset(self, key, params=None):
        env_state, ts = self.env.reset(key, params)
        return TimeLimitState(env_state, jnp.zeros(jnp.shape(ts.reward), jnp.int32)), ts

    def step(self, key, state: TimeLimitState, action, params=None):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        time = state.time + 1
        ts = ts.replace(truncated=ts.truncated | (time >= self.max_episode_steps))
        return TimeLimitState(env_state, time), ts


class AutoReset(Wrapper):
    """Resets finished episodes inside the compiled step.

    On a step where ``terminated | truncated``, the returned state and
    observation are those of a fresh episode; the flags and reward are those
    of the finished one, and ``info["final_observation"]`` holds its last
    observation (on every other step it equals ``observation``), so learners
    can bootstrap a truncated episode from its true final state.

    Two placements, with the same results (bit for bit, same keys):

    - ``VmapEnv(AutoReset(env), B)``: every env draws a reset on every step
      and keeps it only if it finished (branch-free, the way gymnax does it);
    - ``AutoReset(VmapEnv(env, B))`` (what :func:`wrap_for_training` builds):
      batch-aware. For batches of at least ``sparse_from`` envs only the envs
      that finished are reset: their indices are gathered ``chunk`` at a time
      (default ``B // 8``), reset, and scattered back, in a ``while_loop``
      that runs ``ceil(finished / chunk)`` times (0 on most steps). A reset,
      with the key split and random draws it needs, is a large share of a
      cheap env's step: on CartPole this runs 1.5x faster from 4 envs up
      (BENCHMARKS.md). A ``while_loop`` stays a loop under ``vmap`` over
      seeds (it runs until every seed is done), where a ``cond`` would turn
      into computing both branches. When one chunk holds the whole batch
      (``B = 1``, or ``chunk >= B``) the branch-free reset runs under a
      ``cond``, only on steps where an env finished in some run of the
      vmapped group (:func:`jrl.core.parallel.any_run`; the reset keeps every env
      that did not finish): one env per run (SAC's default) skips a reset
      on every step but an episode's last.

    In both, env ``i`` steps with ``split(k_i)[0]`` and resets with
    ``split(k_i)[1]``, where ``k_i`` is the key :class:`VmapEnv` gives env ``i``.
    """

    def __init__(self, env: Environment, sparse_from: int = 1, chunk: int | None = None):
        super().__init__(env)
        if has_wrapper(env, AutoReset):
            raise ValueError("AutoReset applied twice")
        if has_wrapper(env, EpisodeStatistics):
            raise ValueError(
                "EpisodeStatistics must wrap AutoReset, not the reverse: the reset would wipe "
                "its totals"
            )
        if chunk is not None and int(chunk) <= 0:
            raise ValueError(f"chunk must be positive, got {chunk}")
        self._batch = env if isinstance(env, VmapEnv) else None
        self.sparse = self._batch is not None and self._batch.num_envs >= int(sparse_from)
        self.chunk = None
        if self._batch is not None:
            self.chunk = min(
                self._batch.num_envs,
                int(chunk) if chunk is not None else max(1, self._batch.num_envs // 8),
            )

    def reset(self, key, params=None):
        state, ts = self.env.reset(key, params)
        return state, ts.replace(info={**ts.info, FINAL_OBSERVATION: ts.observation})

    def step(self, key, state, action, params=None):
        if self._batch is not None:
            new_state, ts, obs = self._step_batch(key, state, action, params)
        else:
            key_step, key_reset = jax.random.split(key)
            state_step, ts = self.env.step(key_step, state, action, params)
            state_reset, ts_reset = self.env.reset(key_reset, params)
            new_state = _select(ts.done, state_reset, state_step)
            obs = _select(ts.done, ts_reset.observation, ts.observation)
        return new_state, ts.replace(
            observation=obs, info={**ts.info, FINAL_OBSERVATION: ts.observation}
        )

    def _step_batch(self, key, state, action, params):
        """``(new_state, step's TimeStep, observation after the resets)`` for a batch."""
        venv = self._batch
        params = venv.default_params if params is None else params
        env_keys = venv.env_keys(key)  # [B]
        # Split per env and keep one half: an env whose step ignores its key (CartPole) then skips
        # the step half entirely, and the sparse path splits only the finished envs' keys.
        step_keys = jax.vmap(lambda k: jax.random.split(k)[0])
        reset_keys = jax.vmap(lambda k: jax.random.split(k)[1])
        state_step, ts = venv.step_each(step_keys(env_keys), state, action, params)
        done = ts.done

        def reset_all(st, obs):
            state_reset, ts_reset = venv.reset_each(reset_keys(env_keys), params)
            return _select(done, state_reset, st), _select(done, ts_reset.observation, obs)

        n, k = venv.num_envs, self.chunk
        if not self.sparse:
            new_state, obs = reset_all(state_step, ts.observation)
            return new_state, ts, obs
        if k >= n:  # one chunk holds the batch: reset all of it, only on steps where one finished
            # (in any run of the vmapped group: reset_all keeps the envs that did not finish)
            new_state, obs = jax.lax.cond(
                parallel.any_run(jnp.any(done)),
                reset_all,
                lambda st, obs: (st, obs),
                state_step,
                ts.observation,
            )
            return new_state, ts, obs

        rank = jnp.cumsum(done) - 1  # [B] position of each finished env among the finished ones
        num_done = jnp.sum(done)

        def reset_chunk(carry):
            j, st, obs = carry
            mine = done & (rank >= j * k) & (rank < (j + 1) * k)
            (idx,) = jnp.nonzero(mine, size=k, fill_value=n)  # [k]; n marks an empty slot
            safe = jnp.minimum(idx, n - 1)
            st_r, ts_r = venv.reset_each(reset_keys(env_keys[safe]), params, safe)
            put = lambda full, part: full.at[idx].set(part, mode="drop")
            return j + 1, jax.tree.map(put, st, st_r), jax.tree.map(put, obs, ts_r.observation)

        _, new_state, obs = jax.lax.while_loop(
            lambda c: c[0] * k < num_done,
            reset_chunk,
            (jnp.zeros((), jnp.int32), state_step, ts.observation),
        )
        return new_state, ts, obs


@struct.dataclass
class EpisodeStatisticsState:
    env_state: PyTree
    episode_return: jax.Array  # [...] float32 return so far in the running episode
    episode_length: jax.Array  # [...] int32 length so far in the running episode
    last_return: jax.Array  # [...] float32 return of the most recently finished episode
    last_length: jax.Array  # [...] int32 length of the most recently finished episode
    num_episodes: jax.Array  # [...] int32 episodes finished since reset
    total_steps: jax.Array  # [...] int32 steps taken since reset


class EpisodeStatistics(Wrapper):
    """Records the return and length of every episode.

    ``info["episode_return"]`` / ``info["episode_length"]`` hold the totals
    of the episodes that finished on this step (0 elsewhere) and
    ``info["episode_done"]`` marks them; running totals live in the state.
    Must sit outside AutoReset (enforced by AutoReset).
    """

    def inner_state(self, state: EpisodeStatisticsState) -> PyTree:
        return state.env_state

    def reset(self, key, params=None):
        env_state, ts = self.env.reset(key, params)
        zf = jnp.zeros(jnp.shape(ts.reward), jnp.float32)
        zi = jnp.zeros(jnp.shape(ts.reward), jnp.int32)
        state = EpisodeStatisticsState(env_state, zf, zi, zf, zi, zi, zi)
        info = {
            **ts.info,
            EPISODE_RETURN: zf,
            EPISODE_LENGTH: zi,
            EPISODE_DONE: jnp.zeros(zf.shape, bool),
        }
        return state, ts.replace(info=info)

    def step(self, key, state: EpisodeStatisticsState, action, params=None):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        done = ts.done
        ret = state.episode_return + ts.reward
        length = state.episode_length + 1
        new_state = EpisodeStatisticsState(
            env_state=env_state,
            episode_return=jnp.where(done, 0.0, ret),
            episode_length=jnp.where(done, 0, length),
            last_return=jnp.where(done, ret, state.last_return),
            last_length=jnp.where(done, length, state.last_length),
            num_episodes=state.num_episodes + done.astype(jnp.int32),
            total_steps=state.total_steps + 1,
        )
        info = {
            **ts.info,
            EPISODE_RETURN: jnp.where(done, ret, 0.0),
            EPISODE_LENGTH: jnp.where(done, length, 0),
            EPISODE_DONE: done,
        }
        return new_state, ts.replace(info=info)


# --------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------


class VmapEnv(Wrapper):
    """A batch of ``num_envs`` independent copies of ``env``.

    Keys are split per env. ``params`` are shared by all envs unless
    ``batched_params=True``, in which case every leaf has a leading
    ``[num_envs]`` axis (domain randomisation, meta-RL). Observations,
    rewards and flags gain a leading ``[num_envs]`` axis; actions must have
    it too (checked when the step is traced). Spaces stay those of a single
    env; :attr:`num_envs` gives the batch size.

    Inside a sharded trace (:mod:`jrl.core.parallel`) ``num_envs`` is this
    device's share, and each env gets the key it would get in the unsharded
    batch of ``num_envs * devices`` envs.
    """

    def __init__(self, env: Environment, num_envs: int, batched_params: bool = False):
        super().__init__(env)
        if env.num_envs is not None:
            raise ValueError("VmapEnv applied twice; use one VmapEnv with the total number of envs")
        if int(num_envs) <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        self._num_envs = int(num_envs)
        self._params_axis = 0 if batched_params else None
        # folding_vmap: under the runner's vmap over runs, one batch of runs x envs
        self._step_each = parallel.folding_vmap(env.step, (0, 0, 0, self._params_axis))
        self._reset_each = parallel.folding_vmap(env.reset, (0, self._params_axis))

    @property
    def num_envs(self) -> int:
        return self._num_envs

    def reset(self, key, params=None):
        params = self.default_params if params is None else params
        return self.reset_each(self.env_keys(key), params)

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        space = self.env.action_space(params if self._params_axis is None else None)
        simple = isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete))
        for leaf in jax.tree.leaves(action) if simple else []:
            expected = (self._num_envs,) + tuple(space.shape)
            if tuple(jnp.shape(leaf)) != expected:
                raise ValueError(
                    f"{self.id}: a batch of actions for {self._num_envs} envs must have shape "
                    f"{expected}, "
                    f"got {tuple(jnp.shape(leaf))}"
                )
        return self.step_each(self.env_keys(key), state, action, params)

    def env_keys(self, key) -> jax.Array:
        """``[num_envs]`` keys, one per env (this device's share of the global batch's keys)."""
        return parallel.local_keys(key, self._num_envs)

    def step_each(self, keys, state, action, params=None):
        """:meth:`step` with the per-env ``keys [num_envs]`` given (no shape checks)."""
        params = self.default_params if params is None else params
        return self._step_each(keys, state, action, params)

    def reset_each(self, keys, params=None, index=None):
        """Resets ``len(keys)`` envs, env ``index[j]`` (default ``j``) with ``keys[j]``.

        ``index`` only selects the params of those envs when they are batched.
        Returns the batched ``(state, TimeStep)`` of those envs.
        """
        params = self.default_params if params is None else params
        if self._params_axis is not None and index is not None:
            params = jax.tree.map(lambda p: p[index], params)
        return self._reset_each(keys, params)

    def render(self, state, params=None):
        """Renders the first env of the batch."""
        return self.env.render(jax.tree.map(lambda x: x[0], state), params)


# --------------------------------------------------------------------------
# Actions
# --------------------------------------------------------------------------


def _box_action_space(env: Environment, wrapper: str) -> spaces.Box:
    space = env.action_space(env.default_params)
    if not isinstance(space, spaces.Box):
        raise TypeError(f"{wrapper} needs a Box action space, {env.id} has {space!r}")
    return space


class ClipAction(Wrapper):
    """Clips continuous actions to the action space's bounds before stepping."""

    def __init__(self, env: Environment):
        super().__init__(env)
        space = _box_action_space(env, "ClipAction")
        self._low, self._high = space.low.astype(np.float32), space.high.astype(np.float32)

    def step(self, key, state, action, params=None):
        return self.env.step(key, state, jnp.clip(action, self._low, self._high), params)


class RescaleAction(Wrapper):
    """Lets the agent act in ``[min_action, max_action]`` (default [-1, 1]).

    Maps ``a`` linearly onto the inner env's bounds:
    ``low + (a - min) * (high - low) / (max - min)``. The inner space must be
    bounded.
    """

    def __init__(self, env: Environment, min_action: float = -1.0, max_action: float = 1.0):
        super().__init__(env)
        space = _box_action_space(env, "RescaleAction")
        if not space.bounded:
            raise ValueError(f"RescaleAction needs a bounded action space, got {space!r}")
        if not min_action < max_action:
            raise ValueError("RescaleAction needs min_action < max_action")
        self._inner = space
        self._min, self._max = float(min_action), float(max_action)

    def action_space(self, params=None):
        return spaces.Box(self._min, self._max, self._inner.shape, self._inner.dtype)

    def step(self, key, state, action, params=None):
        low, high = self._inner.low.astype(np.float32), self._inner.high.astype(np.float32)
        scaled = low + (action - self._min) * (high - low) / (self._max - self._min)
        return self.env.step(key, state, scaled, params)


class CheckActions(Wrapper):
    """Debug wrapper: raises a clear error for an action outside the action space.

    Shapes are checked when the step is traced (``ValueError`` at once); values
    are checked at run time through a host callback, which raises
    ``ValueError`` (surfacing from ``jit`` as a runtime error whose message
    names the env and the action). Costs a host round trip per step: use for
    debugging, not for training speed.
    """

    def step(self, key, state, action, params=None):
        space = self.env.action_space(params)
        n = self.env.num_envs
        expected = tuple(space.shape) if n is None else (n,) + tuple(space.shape)
        if tuple(jnp.shape(action)) != expected:
            raise ValueError(
                f"{self.id}: action shape {tuple(jnp.shape(action))}, expected {expected}"
            )
        ok = jax.vmap(space.contains)(action) if n is not None else space.contains(action)
        env_id = self.id

        def check(ok, action):
            if not np.all(ok):
                raise ValueError(
                    f"{env_id}: action {np.asarray(action).tolist()} is outside {space!r}"
                )

        jax.debug.callback(check, ok, action)
        return self.env.step(key, state, action, params)


def wrap_for_training(
    env: Environment,
    num_envs: int | None,
    *,
    normalize_observation: bool = False,
    normalize_reward: bool = False,
    gamma: float = 0.99,
    axis_name: str | tuple[str, ...] | None = None,
    batched_params: bool = False,
) -> Environment:
    """Applies AutoReset, EpisodeStatistics, VmapEnv and normalisers in the documented order.

    ``env`` should already carry its TimeLimit (as :func:`jrl.envs.make` returns it).
    ``num_envs=None`` leaves the env unbatched.
    """
    if num_envs is None:
        env = EpisodeStatistics(AutoReset(env))
    else:
        env = EpisodeStatistics(AutoReset(VmapEnv(env, num_envs, batched_params=batched_params)))
    if normalize_observation:
        env = NormalizeObservation(env, axis_name=axis_name)
    if normalize_reward:
        env = NormalizeReward(env, gamma=gamma, axis_name=axis_name)
    return env

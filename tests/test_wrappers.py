"""Wrapper contracts, checked with hand-computed values on a tiny deterministic env.

The toy env ``Toy`` counts steps: after ``t`` steps its observation is
``[t, pos]`` with ``pos = start + sum(actions)``, the reward of step ``t`` is
``reward_scale * t``, and it terminates when ``t == terminate_at`` or
``pos >= goal``. So an episode with ``terminate_at=3`` returns
``1 + 2 + 3 = 6`` in 3 steps, and every value below can be worked out by hand.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import EPISODE_DONE, EPISODE_LENGTH, EPISODE_RETURN, FINAL_OBSERVATION
from jrl.core.normalization import NormalizeObservation, NormalizeReward, copy_statistics, freeze
from jrl.core.observation_wrappers import FlattenObservation, FrameStack
from jrl.core.wrappers import (
    AutoReset,
    CheckActions,
    ClipAction,
    EpisodeStatistics,
    RescaleAction,
    TimeLimit,
    VmapEnv,
    wrap_for_training,
)

# ---------------------------------------------------------------------------
# The toy environment
# ---------------------------------------------------------------------------


@struct.dataclass
class ToyParams:
    terminate_at: int = 3  # terminates on the step where t reaches this
    goal: float = 1e6  # ... or where pos reaches this
    reward_scale: float = 1.0  # reward of step t is reward_scale * t
    start: float = 0.0  # pos at reset


@struct.dataclass
class ToyState:
    t: jax.Array  # int32 steps taken
    pos: jax.Array  # float32 start + sum of actions
    reset_bits: jax.Array  # uint32[2] the reset key's data (to check key splitting)
    step_bits: jax.Array  # uint32[2] the last step key's data


class Toy(Environment):
    """A counter. ``obs_kind``: "vector" ``[t, pos]``, "grid" ``10 t + arange(6)`` as (2, 3),
    "dict" ``{"z": [pos], "a": [t, 2 t]}``. ``discrete``: actions 0, 1, 2 instead of Box [0, 4]."""

    id = "Toy-v0"

    def __init__(self, obs_kind: str = "vector", discrete: bool = False):
        self.obs_kind, self.discrete = obs_kind, discrete

    @property
    def default_params(self):
        return ToyParams()

    def _obs(self, t, pos):
        t = jnp.asarray(t, jnp.float32)
        if self.obs_kind == "vector":
            return jnp.stack([t, pos])
        if self.obs_kind == "grid":
            return 10.0 * t + jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
        return {"z": pos[None], "a": jnp.stack([t, 2.0 * t])}

    def reset_env(self, key, params):
        bits = jax.random.key_data(key)
        state = ToyState(
            jnp.zeros((), jnp.int32), jnp.asarray(params.start, jnp.float32), bits, bits
        )
        return state, self._obs(state.t, state.pos)

    def step_env(self, key, state, action, params):
        t = state.t + 1
        a = jnp.asarray(action, jnp.float32)
        pos = state.pos + (a if self.discrete else a[0])
        reward = params.reward_scale * t
        terminated = (t >= params.terminate_at) | (pos >= params.goal)
        new = ToyState(t, pos, state.reset_bits, jax.random.key_data(key))
        return new, self._obs(t, pos), reward, terminated, {}

    def observation_space(self, params=None):
        if self.obs_kind == "vector":
            return spaces.Box(-np.inf, np.inf, (2,))
        if self.obs_kind == "grid":
            return spaces.Box(0.0, np.inf, (2, 3))
        return spaces.Dict(
            {"z": spaces.Box(-np.inf, np.inf, (1,)), "a": spaces.Box(0.0, np.inf, (2,))}
        )

    def action_space(self, params=None):
        return spaces.Discrete(3) if self.discrete else spaces.Box(0.0, 4.0, (1,))


def P(**kw):
    """Toy params. If any value is a list, every field becomes a per-env array of that
    length (``batched_params=True`` maps every leaf)."""
    n = next((len(v) for v in kw.values() if isinstance(v, list)), None)
    if n is None:
        return ToyParams(**kw)
    params = ToyParams(**{k: jnp.asarray(v) for k, v in kw.items()})
    return jax.tree.map(lambda v: jnp.broadcast_to(jnp.asarray(v), (n,)), params)


_JITTED: dict = {}


def _jitted(env):
    """``jit(env.reset), jit(env.step)``, compiled once per env object (compiling is the slow
    part)."""
    if env not in _JITTED:
        _JITTED[env] = (jax.jit(env.reset), jax.jit(env.step))
    return _JITTED[env]


def rollout(env, actions, params=None, jit=False, seed=0, state=None):
    """Resets (unless ``state`` is given) and steps through ``actions``; returns
    ``(states, timesteps)`` with the reset first (unless ``state`` was given)."""
    reset, step = _jitted(env) if jit else (env.reset, env.step)
    keys = jax.random.split(jax.random.key(seed), len(actions) + 1)
    states, tss = [], []
    if state is None:
        state, ts = reset(keys[0], params)
        states.append(state)
        tss.append(ts)
    for k, a in zip(keys[1:], actions):
        state, ts = step(
            k, state, jnp.asarray(a, jnp.int32 if env.unwrapped.discrete else jnp.float32), params
        )
        states.append(state)
        tss.append(ts)
    return states, tss


def stack(tss, fn):
    return np.stack([np.asarray(fn(ts)) for ts in tss])


def prior_stats(x, eps=1e-4):
    """Mean/var/count of RunningMeanStd after seeing all of ``x`` ([n, *shape]),
    starting from its prior (mean 0, var 1, count eps), in float64 (Chan's merge)."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    m, v = x.mean(0), x.var(0)
    tot = n + eps
    mean = m * n / tot
    var = (1.0 * eps + v * n + m**2 * eps * n / tot) / tot
    return mean, var, tot


JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])

# ---------------------------------------------------------------------------
# The toy itself (so that the expectations below rest on something checked)
# ---------------------------------------------------------------------------


def test_toy_env_counts():
    env = Toy()
    states, tss = rollout(env, [[1.0], [2.0]], P(start=0.5))
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.observation), [[0, 0.5], [1, 1.5], [2, 3.5]]
    )
    np.testing.assert_array_equal(stack(tss, lambda t: t.reward), [0, 1, 2])
    assert not stack(tss, lambda t: t.truncated).any()


# ---------------------------------------------------------------------------
# TimeLimit
# ---------------------------------------------------------------------------


@JIT
def test_time_limit_truncates_exactly_at_the_limit(jit):
    env = TimeLimit(Toy(), max_episode_steps=4)
    states, tss = rollout(env, [[0.0]] * 4, P(terminate_at=100), jit=jit)
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.truncated), [False, False, False, False, True]
    )
    np.testing.assert_array_equal(stack(tss, lambda t: t.terminated), [False] * 5)
    np.testing.assert_array_equal([int(s.time) for s in states], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(stack(tss, lambda t: t.observation[0]), [0, 1, 2, 3, 4])


@JIT
def test_time_limit_and_termination_on_the_same_step_set_both_flags(jit):
    env = TimeLimit(Toy(), 4)
    _, tss = rollout(env, [[0.0]] * 4, P(terminate_at=4), jit=jit)
    assert bool(tss[4].terminated) and bool(tss[4].truncated)
    # Terminating one step earlier: only terminated.
    _, tss = rollout(env, [[0.0]] * 3, P(terminate_at=3), jit=jit)
    assert bool(tss[3].terminated) and not bool(tss[3].truncated)


def test_time_limit_resets_with_auto_reset():
    env = AutoReset(TimeLimit(Toy(), 3))
    states, tss = rollout(env, [[0.0]] * 7, P(terminate_at=100), jit=True)
    np.testing.assert_array_equal(stack(tss, lambda t: t.truncated), [0, 0, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(stack(tss, lambda t: t.terminated), [0] * 8)
    np.testing.assert_array_equal([int(s.time) for s in states], [0, 1, 2, 0, 1, 2, 0, 1])
    np.testing.assert_array_equal(stack(tss, lambda t: t.observation[0]), [0, 1, 2, 0, 1, 2, 0, 1])
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.info[FINAL_OBSERVATION][0]), [0, 1, 2, 3, 1, 2, 3, 1]
    )


def test_time_limit_over_a_batch():
    env = TimeLimit(VmapEnv(Toy(), 2), 2)
    _, tss = rollout(env, [[[0.0], [0.0]]] * 2, P(terminate_at=100))
    np.testing.assert_array_equal(stack(tss, lambda t: t.truncated), [[0, 0], [0, 0], [1, 1]])


def test_time_limit_rejects_non_positive_limit():
    with pytest.raises(ValueError, match="positive"):
        TimeLimit(Toy(), 0)


# ---------------------------------------------------------------------------
# AutoReset
# ---------------------------------------------------------------------------


@JIT
def test_auto_reset_unbatched(jit):
    env = AutoReset(Toy())
    params = P(terminate_at=3, start=0.5)
    states, tss = rollout(env, [[1.0]] * 5, params, jit=jit)
    obs = stack(tss, lambda t: t.observation)
    final = stack(tss, lambda t: t.info[FINAL_OBSERVATION])
    # reset, 1, 2, 3 (done: the new episode's first observation), 1, 2
    np.testing.assert_array_equal(obs, [[0, 0.5], [1, 1.5], [2, 2.5], [0, 0.5], [1, 1.5], [2, 2.5]])
    np.testing.assert_array_equal(
        final, [[0, 0.5], [1, 1.5], [2, 2.5], [3, 3.5], [1, 1.5], [2, 2.5]]
    )
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.reward), [0, 1, 2, 3, 1, 2]
    )  # finished step's reward
    np.testing.assert_array_equal(stack(tss, lambda t: t.terminated), [0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(stack(tss, lambda t: t.truncated), [0] * 6)
    np.testing.assert_array_equal([int(s.t) for s in states], [0, 1, 2, 0, 1, 2])
    # The new episode was reset with a fresh key, not the first reset's.
    assert not np.array_equal(states[0].reset_bits, states[3].reset_bits)
    np.testing.assert_array_equal(states[3].reset_bits, states[5].reset_bits)


# Per-env expectations for terminate_at=[2, 3], start=[0, 10], action 1 on every step.
BATCH_PARAMS = dict(terminate_at=[2, 3], start=[0.0, 10.0])
BATCH_OBS = [
    [[0, 0], [0, 10]],
    [[1, 1], [1, 11]],
    [[0, 0], [2, 12]],
    [[1, 1], [0, 10]],
    [[0, 0], [1, 11]],
]
BATCH_FINAL = [
    [[0, 0], [0, 10]],
    [[1, 1], [1, 11]],
    [[2, 2], [2, 12]],
    [[1, 1], [3, 13]],
    [[2, 2], [1, 11]],
]
BATCH_REWARD = [[0, 0], [1, 1], [2, 2], [1, 3], [2, 1]]
BATCH_TERM = [[0, 0], [0, 0], [1, 0], [0, 1], [1, 0]]


@pytest.mark.parametrize(
    "order,jit",
    [
        ("autoreset_inside_vmap", False),
        ("autoreset_inside_vmap", True),
        ("autoreset_outside_vmap", True),
    ],
)
def test_auto_reset_batched(order, jit):
    if order == "autoreset_inside_vmap":
        env = VmapEnv(AutoReset(Toy()), 2, batched_params=True)
    else:
        env = AutoReset(VmapEnv(Toy(), 2, batched_params=True))
    states, tss = rollout(env, [[[1.0], [1.0]]] * 4, P(**BATCH_PARAMS), jit=jit)
    np.testing.assert_array_equal(stack(tss, lambda t: t.observation), BATCH_OBS)
    np.testing.assert_array_equal(stack(tss, lambda t: t.info[FINAL_OBSERVATION]), BATCH_FINAL)
    np.testing.assert_array_equal(stack(tss, lambda t: t.reward), BATCH_REWARD)
    np.testing.assert_array_equal(stack(tss, lambda t: t.terminated), BATCH_TERM)
    np.testing.assert_array_equal(
        np.stack([s.t for s in states]), [[0, 0], [1, 1], [0, 2], [1, 0], [0, 1]]
    )


def _random_rollout(env, params, steps, key):
    """``steps`` steps of ``env`` with random actions in [0, 1] from ``key``: stacked
    (states, timesteps)."""
    state, ts = env.reset(jax.random.fold_in(key, 0), params)

    def body(carry, t):
        state, key = carry
        key, k_act, k_step = jax.random.split(key, 3)
        state, ts = env.step(k_step, state, jax.random.uniform(k_act, (env.num_envs, 1)), params)
        return (state, key), (state, ts)

    return jax.lax.scan(body, (state, key), jnp.arange(steps))[1]


def _rollout_fn(env, params, steps):
    return jax.jit(lambda key: _random_rollout(env, params, steps, key))


# Per-env episode lengths 1..5 and goals reached at random times: many envs finish on the same step.
SPARSE_PARAMS = dict(
    terminate_at=[1 + i % 5 for i in range(24)],
    goal=[1.0 + (i % 7) / 2 for i in range(24)],
    start=[float(i) / 10 for i in range(24)],
)


@pytest.mark.parametrize("chunk", [1, 3, 24])
def test_sparse_auto_reset_equals_the_per_env_reset(chunk):
    """AutoReset outside VmapEnv resets only the finished envs, ``chunk`` at a time (chunk=1: up to
    24 passes of its loop on one step), and gives bit-identical states and timesteps to AutoReset
    inside VmapEnv, which resets every env every step and keeps the finished ones' resets."""
    params = P(**SPARSE_PARAMS)
    dense = VmapEnv(AutoReset(Toy()), 24, batched_params=True)
    sparse = AutoReset(VmapEnv(Toy(), 24, batched_params=True), sparse_from=1, chunk=chunk)
    assert sparse.sparse and sparse.chunk == chunk
    key = jax.random.key(0)
    want, got = _rollout_fn(dense, params, 30)(key), _rollout_fn(sparse, params, 30)(key)
    done = np.asarray(want[1].done)
    assert (
        done.sum(axis=1).max() >= 5 and done.sum() > 100
    )  # several resets per step, in many steps
    jax.tree.map(np.testing.assert_array_equal, got, want)


@pytest.mark.parametrize("chunk", [2, 24])
def test_sparse_auto_reset_under_vmap_over_seeds(chunk):
    """Seeds vmapped over the sparse reset (its loop runs as long as any seed has envs to reset;
    chunk=24 holds the batch: a cond, a select under vmap) equal each seed run alone; the
    small-batch branch-free path gives the same too."""
    params = P(**SPARSE_PARAMS)
    sparse = AutoReset(VmapEnv(Toy(), 24, batched_params=True), sparse_from=1, chunk=chunk)
    branch_free = AutoReset(VmapEnv(Toy(), 24, batched_params=True), sparse_from=1000)
    assert not branch_free.sparse
    seeds = jax.random.split(jax.random.key(3), 3)
    batched = jax.jit(jax.vmap(lambda k: _random_rollout(sparse, params, 20, k)))(seeds)
    alone, alone_branch_free = _rollout_fn(sparse, params, 20), _rollout_fn(branch_free, params, 20)
    for i in range(3):
        one = alone(seeds[i])
        jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[i], batched), one)
        jax.tree.map(np.testing.assert_array_equal, alone_branch_free(seeds[i]), one)


def test_auto_reset_of_a_batch_of_one():
    """B=1 outside VmapEnv (a cond around the reset) equals AutoReset inside VmapEnv."""
    params = P(terminate_at=3)
    key = jax.random.key(5)
    want = _rollout_fn(VmapEnv(AutoReset(Toy()), 1), params, 12)(key)
    got = _rollout_fn(AutoReset(VmapEnv(Toy(), 1)), params, 12)(key)
    assert int(np.asarray(want[1].done).sum()) == 4
    jax.tree.map(np.testing.assert_array_equal, got, want)


def test_auto_reset_of_a_batch_of_one_in_the_runs_axis():
    """B=1 under the runner's vmap over runs (parallel.runs_axis): the reset stays a branch,
    taken on steps where some run's env finished, and every run equals that run alone."""
    from jrl.core import parallel

    params = P(terminate_at=6, goal=1.0)
    env = AutoReset(VmapEnv(Toy(), 1))
    assert env.sparse and env.chunk == 1
    seeds = jax.random.split(jax.random.key(7), 4)

    def mapped(keys):
        with parallel.runs_axis():
            return jax.vmap(lambda k: _random_rollout(env, params, 16, k), axis_name=parallel.RUNS)(
                keys
            )

    batched = jax.jit(mapped)(seeds)
    done = np.asarray(batched[1].done)[..., 0]  # [runs, steps]
    assert done.any(axis=0).sum() > done.all(axis=0).sum()  # runs finish on different steps
    alone = _rollout_fn(env, params, 16)
    for i in range(4):
        one = jax.tree.map(lambda x, i=i: x[i], batched)
        jax.tree.map(np.testing.assert_array_equal, one, alone(seeds[i]))
    assert "cond[" in str(jax.make_jaxpr(mapped)(seeds))


def test_sparse_auto_reset_rejects_a_bad_chunk():
    with pytest.raises(ValueError, match="chunk"):
        AutoReset(VmapEnv(Toy(), 4), chunk=0)


def test_auto_reset_info_has_the_same_structure_on_reset_and_step():
    env = AutoReset(Toy())
    states, tss = rollout(env, [[1.0]], P())
    assert jax.tree.structure(tss[0]) == jax.tree.structure(tss[1])


# ---------------------------------------------------------------------------
# EpisodeStatistics
# ---------------------------------------------------------------------------


@JIT
def test_episode_statistics_across_episodes_of_different_lengths(jit):
    env = EpisodeStatistics(AutoReset(Toy()))
    # terminate_at=4, goal=2.5: ep 1 reaches pos 3 at t=3 (return 1+2+3=6); ep 2 stands still
    # until t=4 (return 1+2+3+4=10); ep 3 jumps to pos 3 at t=1 (return 1); then one more step.
    actions = [[1.0]] * 3 + [[0.0]] * 4 + [[3.0]] + [[0.0]]
    states, tss = rollout(env, actions, P(terminate_at=4, goal=2.5), jit=jit)
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.info[EPISODE_RETURN]), [0, 0, 0, 6, 0, 0, 0, 10, 1, 0]
    )
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.info[EPISODE_LENGTH]), [0, 0, 0, 3, 0, 0, 0, 4, 1, 0]
    )
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.info[EPISODE_DONE]), [0, 0, 0, 1, 0, 0, 0, 1, 1, 0]
    )
    assert (
        tss[0].info[EPISODE_RETURN].dtype == jnp.float32
        and tss[0].info[EPISODE_LENGTH].dtype == jnp.int32
    )
    after_7 = states[7]
    assert (int(after_7.num_episodes), float(after_7.last_return), int(after_7.last_length)) == (
        2,
        10.0,
        4,
    )
    last = states[-1]
    assert int(last.num_episodes) == 3
    assert float(last.last_return) == 1.0 and int(last.last_length) == 1
    assert float(last.episode_return) == 1.0 and int(last.episode_length) == 1  # running episode
    assert int(last.total_steps) == 9
    np.testing.assert_array_equal(
        [float(s.episode_return) for s in states], [0, 1, 3, 0, 1, 3, 6, 0, 0, 1]
    )


@pytest.mark.parametrize(
    "order,jit",
    [("stats_inside_vmap", False), ("stats_inside_vmap", True), ("stats_outside_vmap", True)],
)
def test_episode_statistics_batch_finishing_at_different_times(order, jit):
    if order == "stats_inside_vmap":
        env = VmapEnv(EpisodeStatistics(AutoReset(Toy())), 2, batched_params=True)
    else:
        env = EpisodeStatistics(AutoReset(VmapEnv(Toy(), 2, batched_params=True)))
    states, tss = rollout(env, [[[0.0], [0.0]]] * 7, P(terminate_at=[2, 3]), jit=jit)
    # env 0 finishes (return 1+2=3) at steps 2, 4, 6; env 1 (return 1+2+3=6) at steps 3, 6.
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.info[EPISODE_RETURN])[1:],
        [[0, 0], [3, 0], [0, 6], [3, 0], [0, 0], [3, 6], [0, 0]],
    )
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.info[EPISODE_LENGTH])[1:],
        [[0, 0], [2, 0], [0, 3], [2, 0], [0, 0], [2, 3], [0, 0]],
    )
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.info[EPISODE_DONE])[1:],
        [[0, 0], [1, 0], [0, 1], [1, 0], [0, 0], [1, 1], [0, 0]],
    )
    last = states[-1]
    np.testing.assert_array_equal(last.num_episodes, [3, 2])
    np.testing.assert_array_equal(last.last_return, [3, 6])
    np.testing.assert_array_equal(last.last_length, [2, 3])
    np.testing.assert_array_equal(last.episode_return, [1, 1])
    np.testing.assert_array_equal(last.episode_length, [1, 1])
    np.testing.assert_array_equal(last.total_steps, [7, 7])


# ---------------------------------------------------------------------------
# Composition order
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: TimeLimit(AutoReset(Toy()), 5), "TimeLimit"),
        (lambda: TimeLimit(EpisodeStatistics(AutoReset(Toy())), 5), "TimeLimit"),
        (lambda: AutoReset(EpisodeStatistics(Toy())), "EpisodeStatistics"),
        (lambda: AutoReset(AutoReset(Toy())), "twice"),
        (lambda: AutoReset(ClipAction(AutoReset(Toy()))), "twice"),
        (lambda: FrameStack(AutoReset(Toy()), 2), "FrameStack"),
        (lambda: FrameStack(VmapEnv(Toy(), 2), 2), "VmapEnv"),
        (lambda: VmapEnv(VmapEnv(Toy(), 2), 3), "VmapEnv applied twice"),
        (lambda: VmapEnv(EpisodeStatistics(VmapEnv(Toy(), 2)), 3), "VmapEnv applied twice"),
        (lambda: VmapEnv(Toy(), 0), "positive"),
    ],
    ids=[
        "timelimit_over_autoreset",
        "timelimit_over_stats",
        "autoreset_over_stats",
        "autoreset_twice",
        "autoreset_twice_indirect",
        "framestack_over_autoreset",
        "framestack_over_vmap",
        "vmap_twice",
        "vmap_twice_indirect",
        "vmap_zero",
    ],
)
def test_wrong_orders_raise_at_construction(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_wrappers_reject_non_environments():
    with pytest.raises(TypeError, match="Environment"):
        AutoReset(object())


def test_allowed_orders_build():
    env = EpisodeStatistics(AutoReset(FrameStack(ClipAction(TimeLimit(Toy(), 5)), 2)))
    assert env.wrappers == (EpisodeStatistics, AutoReset, FrameStack, ClipAction, TimeLimit)
    assert isinstance(env.unwrapped, Toy) and env.id == "Toy-v0" and env.num_envs is None


# ---------------------------------------------------------------------------
# VmapEnv
# ---------------------------------------------------------------------------


def test_vmap_env_splits_keys_per_env():
    env = VmapEnv(Toy(), 3)
    key = jax.random.key(7)
    state, ts = env.reset(key)
    assert env.num_envs == 3 and ts.observation.shape == (3, 2) and ts.reward.shape == (3,)
    expected = jax.random.key_data(jax.random.split(key, 3))
    np.testing.assert_array_equal(state.reset_bits, expected)
    assert len({tuple(b) for b in np.asarray(state.reset_bits).tolist()}) == 3  # all different
    step_key = jax.random.key(8)
    state, _ = jax.jit(env.step)(step_key, state, jnp.ones((3, 1)))
    np.testing.assert_array_equal(
        state.step_bits, jax.random.key_data(jax.random.split(step_key, 3))
    )
    # Spaces stay those of one env.
    assert env.observation_space() == Toy().observation_space()
    assert env.action_space() == Toy().action_space()


@pytest.mark.parametrize("shape", [(2, 1), (3,), (3, 2), (1,)])
@JIT
def test_vmap_env_wrong_action_batch_raises(shape, jit):
    env = VmapEnv(Toy(), 3)
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step) if jit else env.step
    with pytest.raises(ValueError, match=r"Toy-v0.*3 envs.*\(3, 1\).*got " + re.escape(str(shape))):
        step(jax.random.key(1), state, jnp.zeros(shape))


def test_vmap_env_wrong_discrete_action_batch_raises():
    env = VmapEnv(Toy(discrete=True), 4)
    state, _ = env.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"\(4,\)"):
        env.step(jax.random.key(1), state, jnp.zeros((4, 1), jnp.int32))
    state, ts = env.step(jax.random.key(1), state, jnp.asarray([0, 1, 2, 1], jnp.int32))
    np.testing.assert_array_equal(ts.observation[:, 1], [0, 1, 2, 1])


@JIT
def test_vmap_env_batched_params(jit):
    env = VmapEnv(Toy(), 3, batched_params=True)
    params = P(terminate_at=[1, 2, 3], reward_scale=[1.0, 10.0, 100.0], start=[0.0, 5.0, 7.0])
    _, tss = rollout(env, [[[1.0], [2.0], [3.0]]] * 2, params, jit=jit)
    np.testing.assert_array_equal(tss[0].observation, [[0, 0], [0, 5], [0, 7]])
    np.testing.assert_array_equal(tss[1].observation, [[1, 1], [1, 7], [1, 10]])
    np.testing.assert_array_equal(tss[1].reward, [1, 10, 100])
    np.testing.assert_array_equal(tss[2].reward, [2, 20, 200])
    np.testing.assert_array_equal(tss[1].terminated, [True, False, False])
    np.testing.assert_array_equal(tss[2].terminated, [True, True, False])


def test_vmap_env_shared_params():
    env = VmapEnv(Toy(), 2)
    _, tss = rollout(env, [[[1.0], [2.0]]], P(reward_scale=2.5, start=1.0))
    np.testing.assert_array_equal(tss[0].observation, [[0, 1], [0, 1]])
    np.testing.assert_array_equal(tss[1].observation, [[1, 2], [1, 3]])
    np.testing.assert_array_equal(tss[1].reward, [2.5, 2.5])


# ---------------------------------------------------------------------------
# NormalizeObservation
# ---------------------------------------------------------------------------

NORM_PARAMS = dict(terminate_at=[2, 3, 4], start=[0.0, 5.0, -3.0])
NORM_ACTIONS = np.random.default_rng(0).uniform(0.0, 4.0, size=(5, 3, 1)).astype(np.float32)
NORM_ENV = NormalizeObservation(VmapEnv(AutoReset(Toy()), 3, batched_params=True))


def _raw_observations():
    """By hand: the observations (and final observations) the normaliser sees for
    NORM_PARAMS and NORM_ACTIONS, ``[T+1, 3, 2]`` each."""
    obs, final = [], []
    t = np.zeros(3)
    pos = np.array(NORM_PARAMS["start"])
    obs.append(np.stack([t, pos], -1))
    final.append(obs[-1])
    for a in NORM_ACTIONS[:, :, 0]:
        t, pos = t + 1, pos + a
        final.append(np.stack([t, pos], -1))
        done = t >= np.array(NORM_PARAMS["terminate_at"])
        t, pos = np.where(done, 0, t), np.where(done, NORM_PARAMS["start"], pos)
        obs.append(np.stack([t, pos], -1))
    return np.stack(obs), np.stack(final)


_NORM_ROLLOUTS: dict = {}


def _norm_rollout(jit):
    if jit not in _NORM_ROLLOUTS:
        _NORM_ROLLOUTS[jit] = rollout(NORM_ENV, NORM_ACTIONS, P(**NORM_PARAMS), jit=jit)
    return _NORM_ROLLOUTS[jit]


@JIT
def test_normalize_observation_statistics_and_output(jit):
    raw_obs, raw_final = _raw_observations()
    assert not np.array_equal(raw_obs, raw_final)  # some episodes ended
    states, tss = _norm_rollout(jit)
    for t in range(len(tss)):
        mean, var, count = prior_stats(raw_obs[: t + 1].reshape(-1, 2))
        stats = states[t].stats
        np.testing.assert_allclose(stats.mean, mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(stats.var, var, rtol=1e-4)
        np.testing.assert_allclose(stats.count, count, rtol=1e-6)
        # Normalised with the statistics that include this step's observations.
        np.testing.assert_allclose(
            tss[t].observation, (raw_obs[t] - mean) / np.sqrt(var + 1e-8), rtol=1e-4, atol=1e-4
        )
        np.testing.assert_allclose(
            tss[t].info[FINAL_OBSERVATION],
            (raw_final[t] - mean) / np.sqrt(var + 1e-8),
            rtol=1e-4,
            atol=1e-4,
        )
    # After the reset alone: count = 3 + 1e-4, mean ~ the mean of the three starts.
    np.testing.assert_allclose(states[0].stats.mean, [0.0, 2.0 / 3.0], atol=1e-4)
    np.testing.assert_allclose(states[0].stats.count, 3.0001, rtol=1e-6)
    assert NORM_ENV.observation_space() == spaces.Box(-10.0, 10.0, (2,))


def test_normalize_observation_unbatched_and_clip():
    raw = np.array([[0, 1], [1, 2], [2, 4], [3, 10]], np.float64)
    actions = [[1.0], [2.0], [6.0]]
    states, tss = rollout(NormalizeObservation(Toy()), actions, P(start=1.0, terminate_at=100))
    mean, var, count = prior_stats(raw)
    np.testing.assert_allclose(states[-1].stats.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(states[-1].stats.var, var, rtol=1e-5)
    np.testing.assert_allclose(states[-1].stats.count, 4 + 1e-4, rtol=1e-6)
    unclipped = (raw[-1] - mean) / np.sqrt(var + 1e-8)
    np.testing.assert_allclose(tss[-1].observation, unclipped, rtol=1e-4)
    # The same with clip=0.5, which this observation exceeds.
    env = NormalizeObservation(Toy(), clip=0.5)
    assert env.observation_space() == spaces.Box(-0.5, 0.5, (2,))
    _, tss = rollout(env, actions, P(start=1.0, terminate_at=100))
    assert (np.abs(unclipped) > 0.5).any()
    np.testing.assert_allclose(tss[-1].observation, np.clip(unclipped, -0.5, 0.5), rtol=1e-4)
    assert np.abs(stack(tss, lambda t: t.observation)).max() <= 0.5


def test_normalize_observation_freeze():
    states, tss = _norm_rollout(True)
    params = P(**NORM_PARAMS)
    frozen = freeze(states[2])
    assert bool(frozen.frozen) and not bool(states[2].frozen)
    fstates, ftss = rollout(NORM_ENV, NORM_ACTIONS[2:], params, jit=True, state=frozen)
    for s in fstates:
        np.testing.assert_array_equal(s.stats.mean, frozen.stats.mean)
        np.testing.assert_array_equal(s.stats.var, frozen.stats.var)
        np.testing.assert_array_equal(s.stats.count, frozen.stats.count)
    # The same observations as unfrozen, normalised with the frozen statistics.
    raw_obs, raw_final = _raw_observations()
    mean, std = np.asarray(frozen.stats.mean), np.sqrt(np.asarray(frozen.stats.var) + 1e-8)
    np.testing.assert_allclose(
        ftss[-1].observation, (raw_obs[-1] - mean) / std, rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
        ftss[-1].info[FINAL_OBSERVATION], (raw_final[-1] - mean) / std, rtol=1e-4, atol=1e-5
    )
    assert not np.allclose(ftss[-1].observation, tss[-1].observation)
    # Unfreezing resumes the updates.
    tstates, _ = rollout(
        NORM_ENV, NORM_ACTIONS[:1], params, jit=True, state=freeze(fstates[-1], False)
    )
    assert float(tstates[-1].stats.count) == pytest.approx(float(frozen.stats.count) + 3)


def test_copy_statistics_into_a_state_of_another_batch_size():
    src = _norm_rollout(True)[0][-1]
    evaluation = NormalizeObservation(VmapEnv(AutoReset(Toy()), 5))
    dst, _ = evaluation.reset(jax.random.key(1), P(start=2.0))
    assert not np.allclose(dst.stats.mean, src.stats.mean)
    out = freeze(copy_statistics(src, dst))
    np.testing.assert_array_equal(out.stats.mean, src.stats.mean)
    np.testing.assert_array_equal(out.stats.var, src.stats.var)
    np.testing.assert_array_equal(out.stats.count, src.stats.count)
    assert out.env_state.t.shape == (5,)  # the evaluation env's own state is kept
    np.testing.assert_array_equal(out.env_state.pos, [2.0] * 5)
    _, ts = evaluation.step(jax.random.key(2), out, jnp.ones((5, 1)), P(start=2.0))
    expected = (np.array([1.0, 3.0]) - np.asarray(src.stats.mean)) / np.sqrt(
        np.asarray(src.stats.var) + 1e-8
    )
    np.testing.assert_allclose(ts.observation, np.broadcast_to(expected, (5, 2)), rtol=1e-5)


def test_copy_statistics_rejects_different_chains():
    norm = NormalizeObservation(VmapEnv(Toy(), 2))
    both = NormalizeReward(NormalizeObservation(VmapEnv(Toy(), 2)))
    s_norm, _ = norm.reset(jax.random.key(0))
    s_both, _ = both.reset(jax.random.key(0))
    s_plain, _ = VmapEnv(Toy(), 2).reset(jax.random.key(0))
    with pytest.raises(ValueError, match="different wrapper chains"):
        copy_statistics(s_norm, s_plain)
    with pytest.raises(ValueError, match="different wrapper chains"):
        copy_statistics(s_both, s_norm)
    with pytest.raises(ValueError, match="different wrapper chains"):
        copy_statistics(s_norm, s_both)
    reward_only, _ = NormalizeReward(VmapEnv(Toy(), 2)).reset(jax.random.key(0))
    with pytest.raises(ValueError, match="different wrapper chains"):
        copy_statistics(s_norm, reward_only)  # observation statistics into a reward normaliser
    grid, _ = NormalizeObservation(FlattenObservation(Toy("grid"))).reset(jax.random.key(0))
    with pytest.raises(ValueError, match="different wrapper chains"):
        copy_statistics(s_norm, grid)  # statistics of another observation shape
    out = copy_statistics(s_both, s_both)  # same chain: fine
    assert jax.tree.structure(out) == jax.tree.structure(s_both)


def test_normalize_observation_axis_name_merges_devices():
    """Two halves of a batch under ``vmap(axis_name="d")`` share the statistics of the whole
    batch."""
    starts = np.array([0.0, 1.0, 5.0, 9.0])
    actions = np.random.default_rng(1).uniform(0.0, 4.0, size=(3, 4, 1)).astype(np.float32)
    # By hand: observations [t, start + sum of actions so far] of all 4 envs at t = 0..3.
    pos = starts + np.concatenate([np.zeros((1, 4)), np.cumsum(actions[:, :, 0], 0)])
    raw = np.stack([np.broadcast_to(np.arange(4.0)[:, None], (4, 4)), pos], -1)  # [T+1, 4 envs, 2]
    mean, var, count = prior_stats(raw.reshape(-1, 2))
    for half in (raw[:, :2], raw[:, 2:]):  # what each half alone would give: different
        assert not np.allclose(prior_stats(half.reshape(-1, 2))[0], mean, rtol=1e-3)

    env = NormalizeObservation(VmapEnv(Toy(), 2, batched_params=True), axis_name="d")
    params = ToyParams(
        terminate_at=jnp.full((2, 2), 100),
        goal=jnp.full((2, 2), 1e6),
        reward_scale=jnp.ones((2, 2)),
        start=jnp.asarray(starts.reshape(2, 2), jnp.float32),
    )
    reset = jax.jit(jax.vmap(env.reset, axis_name="d"))
    step = jax.jit(jax.vmap(env.step, axis_name="d"))
    state, ts = reset(jax.random.split(jax.random.key(0), 2), params)
    for a in actions:
        state, ts = step(jax.random.split(jax.random.key(1), 2), state, a.reshape(2, 2, 1), params)
    for d in range(2):
        np.testing.assert_allclose(state.stats.mean[d], mean, rtol=1e-5)
        np.testing.assert_allclose(state.stats.var[d], var, rtol=1e-5)
        np.testing.assert_allclose(state.stats.count[d], count, rtol=1e-6)
    np.testing.assert_allclose(
        ts.observation.reshape(4, 2), (raw[-1] - mean) / np.sqrt(var + 1e-8), rtol=1e-4
    )


# ---------------------------------------------------------------------------
# NormalizeReward
# ---------------------------------------------------------------------------

# terminate_at=3, action 0: rewards 1, 2, 3, 1, 2, 3, 1; with gamma=0.9 the discounted
# return G is 1, 0.9+2=2.9, 2.61+3=5.61, then (reset after the done step) 1, 2.9, 5.61, 1.
REWARDS = [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0]
RETURNS = [1.0, 2.9, 5.61, 1.0, 2.9, 5.61, 1.0]


@JIT
def test_normalize_reward(jit):
    env = NormalizeReward(AutoReset(Toy()), gamma=0.9)
    states, tss = rollout(env, [[0.0]] * 7, P(terminate_at=3), jit=jit)
    assert float(tss[0].reward) == 0.0
    for t in range(1, 8):
        mean, var, count = prior_stats(np.array(RETURNS[:t])[:, None])
        np.testing.assert_allclose(states[t].stats.var, var[0], rtol=1e-5)
        np.testing.assert_allclose(states[t].stats.mean, mean[0], rtol=1e-5)
        np.testing.assert_allclose(states[t].stats.count, count, rtol=1e-6)
        scaled = np.clip(REWARDS[t - 1] / np.sqrt(var[0] + 1e-8), -10.0, 10.0)  # default clip 10
        np.testing.assert_allclose(tss[t].reward, scaled, rtol=1e-5)
    # The first return has (almost) no spread, so the first scaled reward is clipped; later ones
    # are not.
    assert float(tss[1].reward) == 10.0 and 0.0 < float(tss[7].reward) < 1.0
    # The running return is zeroed after a done step.
    np.testing.assert_allclose(
        [float(s.discounted_return) for s in states], [0, 1, 2.9, 0, 1, 2.9, 0, 1], rtol=1e-6
    )


def test_normalize_reward_resets_at_truncation_and_clips():
    env = NormalizeReward(AutoReset(TimeLimit(Toy(), 2)), gamma=0.5, clip=0.8)
    states, tss = rollout(env, [[0.0]] * 3, P(terminate_at=100, reward_scale=10.0))
    # rewards 10, 20 (truncated), 10; G = 10, 25, 10
    np.testing.assert_allclose([float(s.discounted_return) for s in states], [0, 10, 0, 10])
    _, var, _ = prior_stats(np.array([[10.0], [25.0], [10.0]]))
    assert 10.0 / np.sqrt(var[0]) > 0.8  # the clip is active
    np.testing.assert_allclose(tss[3].reward, 0.8)
    np.testing.assert_allclose(states[3].stats.var, var[0], rtol=1e-5)


def test_normalize_reward_frozen():
    env = NormalizeReward(AutoReset(Toy()), gamma=0.9)
    states, _ = rollout(env, [[0.0]] * 2, P(terminate_at=3), jit=True)
    frozen = freeze(states[-1])
    fstates, ftss = rollout(env, [[0.0]] * 3, P(terminate_at=3), jit=True, state=frozen)
    var = float(frozen.stats.var)
    for s in fstates:
        assert float(s.stats.var) == var and float(s.stats.count) == float(frozen.stats.count)
    np.testing.assert_allclose(
        [float(t.reward) for t in ftss], np.array([3.0, 1.0, 2.0]) / np.sqrt(var + 1e-8), rtol=1e-6
    )
    # the running return keeps being tracked while frozen
    np.testing.assert_allclose(
        [float(s.discounted_return) for s in fstates], [0, 1, 2.9], rtol=1e-6
    )


def test_normalize_reward_batch_statistics():
    env = NormalizeReward(VmapEnv(Toy(), 2, batched_params=True), gamma=0.9)
    states, tss = rollout(env, [[[0.0], [0.0]]] * 2, P(terminate_at=100, reward_scale=[1.0, 3.0]))
    # G: step 1 [1, 3]; step 2 [0.9+2, 2.7+6] = [2.9, 8.7]
    np.testing.assert_allclose(states[-1].discounted_return, [2.9, 8.7], rtol=1e-6)
    _, var, _ = prior_stats(np.array([[1.0], [3.0], [2.9], [8.7]]))
    np.testing.assert_allclose(states[-1].stats.var, var[0], rtol=1e-5)
    np.testing.assert_allclose(
        tss[-1].reward, np.array([2.0, 6.0]) / np.sqrt(var[0] + 1e-8), rtol=1e-5
    )


def test_normalize_reward_rejects_bad_gamma():
    with pytest.raises(ValueError, match="gamma"):
        NormalizeReward(Toy(), gamma=1.5)


# ---------------------------------------------------------------------------
# Actions: ClipAction, RescaleAction, CheckActions
# ---------------------------------------------------------------------------


def test_clip_action():
    env = ClipAction(Toy())
    assert env.action_space() == spaces.Box(0.0, 4.0, (1,))
    _, tss = rollout(env, [[7.0], [-3.0], [1.5]], P(terminate_at=100))
    np.testing.assert_array_equal(
        stack(tss, lambda t: t.observation[1]), [0, 4, 4, 5.5]
    )  # +4, +0, +1.5
    with pytest.raises(TypeError, match="Box"):
        ClipAction(Toy(discrete=True))


@JIT
def test_rescale_action(jit):
    env = RescaleAction(Toy())  # [-1, 1] -> [0, 4]: a -> 2 (a + 1)
    assert env.action_space() == spaces.Box(-1.0, 1.0, (1,))
    assert env.env.action_space() == spaces.Box(0.0, 4.0, (1,))
    _, tss = rollout(env, [[-1.0], [0.0], [0.5], [1.0]], P(terminate_at=100), jit=jit)
    np.testing.assert_allclose(
        stack(tss, lambda t: t.observation[1]), [0, 0, 2, 5, 9]
    )  # +0, +2, +3, +4
    env = RescaleAction(Toy(), min_action=0.0, max_action=10.0)  # a -> 0.4 a
    _, tss = rollout(env, [[5.0]], P(terminate_at=100), jit=jit)
    np.testing.assert_allclose(tss[1].observation[1], 2.0)


def test_rescale_action_errors():
    class Unbounded(Toy):
        def action_space(self, params=None):
            return spaces.Box(-np.inf, np.inf, (1,))

    with pytest.raises(ValueError, match="bounded"):
        RescaleAction(Unbounded())
    with pytest.raises(ValueError, match="min_action < max_action"):
        RescaleAction(Toy(), 1.0, 1.0)
    with pytest.raises(TypeError, match="Box"):
        RescaleAction(Toy(discrete=True))


def _assert_action_error(excinfo_value, *parts):
    msg = str(excinfo_value)
    for p in parts:
        assert p in msg, f"{p!r} not in error message: {msg[-500:]}"


# Values are checked through jax.debug.callback: eagerly the callback's ValueError surfaces as
# is; from a jitted function (jax 0.10) it surfaces as jax.errors.JaxRuntimeError (a
# RuntimeError) whose message carries the callback's traceback and message.
ACTION_ERRORS = (ValueError, jax.errors.JaxRuntimeError)


@JIT
def test_check_actions_out_of_space_raises_naming_the_env(jit):
    env = CheckActions(Toy())
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step) if jit else env.step
    # A valid action passes and steps like the bare env.
    _, ts = step(jax.random.key(1), state, jnp.asarray([1.5]))
    np.testing.assert_array_equal(ts.observation, [1.0, 1.5])
    with pytest.raises(ACTION_ERRORS) as e:
        jax.block_until_ready(step(jax.random.key(1), state, jnp.asarray([5.0])))
    _assert_action_error(e.value, "Toy-v0", "[5.0]", "outside")
    if not jit:
        assert type(e.value) is ValueError


@JIT
def test_check_actions_discrete_and_batched(jit):
    env = CheckActions(Toy(discrete=True))
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step) if jit else env.step
    with pytest.raises(ACTION_ERRORS) as e:
        jax.block_until_ready(step(jax.random.key(1), state, jnp.asarray(3, jnp.int32)))
    _assert_action_error(e.value, "Toy-v0", "Discrete(3)")
    benv = CheckActions(VmapEnv(Toy(), 2))
    bstate, _ = benv.reset(jax.random.key(0))
    bstep = jax.jit(benv.step) if jit else benv.step
    _, ts = bstep(jax.random.key(1), bstate, jnp.asarray([[1.0], [4.0]]))
    np.testing.assert_array_equal(ts.observation, [[1, 1], [1, 4]])
    with pytest.raises(ACTION_ERRORS) as e:
        jax.block_until_ready(bstep(jax.random.key(1), bstate, jnp.asarray([[1.0], [-0.5]])))
    _assert_action_error(e.value, "Toy-v0", "outside")


@JIT
def test_check_actions_wrong_shape_raises_value_error_at_trace_time(jit):
    env = CheckActions(Toy())
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step) if jit else env.step
    with pytest.raises(ValueError, match=r"Toy-v0: action shape \(2,\), expected \(1,\)"):
        step(jax.random.key(1), state, jnp.asarray([1.0, 2.0]))
    benv = CheckActions(VmapEnv(Toy(), 3))
    bstate, _ = benv.reset(jax.random.key(0))
    bstep = jax.jit(benv.step) if jit else benv.step
    with pytest.raises(ValueError, match=r"expected \(3, 1\)"):
        bstep(jax.random.key(1), bstate, jnp.zeros((2, 1)))


# ---------------------------------------------------------------------------
# Observations: FlattenObservation, FrameStack
# ---------------------------------------------------------------------------


def test_flatten_observation_box():
    env = FlattenObservation(Toy("grid"))
    assert env.env.observation_space().shape == (2, 3)
    assert env.observation_space() == spaces.Box(0.0, np.inf, (6,))
    _, tss = rollout(env, [[0.0]] * 2, P(terminate_at=100))
    np.testing.assert_array_equal(tss[2].observation, 20.0 + np.arange(6))
    assert tss[2].observation.dtype == jnp.float32


def test_flatten_observation_dict_in_sorted_key_order():
    env = FlattenObservation(Toy("dict"))
    space = env.observation_space()
    np.testing.assert_array_equal(space.low, [0, 0, -np.inf])  # "a" (2 dims) then "z" (1 dim)
    np.testing.assert_array_equal(space.high, [np.inf] * 3)
    assert space.shape == (3,)
    _, tss = rollout(env, [[1.5], [1.0]], P(terminate_at=100, start=1.0))
    np.testing.assert_array_equal(tss[1].observation, [1, 2, 2.5])  # [t, 2t, pos]
    np.testing.assert_array_equal(tss[2].observation, [2, 4, 3.5])
    assert bool(space.contains(tss[2].observation))


def test_flatten_observation_batched_and_final_observation():
    env = FlattenObservation(AutoReset(VmapEnv(Toy("grid"), 2)))
    _, tss = rollout(env, [[[0.0], [0.0]]] * 3, P(terminate_at=3))
    assert tss[0].observation.shape == (2, 6)
    np.testing.assert_array_equal(
        tss[3].observation, np.broadcast_to(np.arange(6.0), (2, 6))
    )  # reset
    np.testing.assert_array_equal(
        tss[3].info[FINAL_OBSERVATION], np.broadcast_to(30.0 + np.arange(6), (2, 6))
    )
    np.testing.assert_array_equal(tss[2].info[FINAL_OBSERVATION], tss[2].observation)


def test_flatten_observation_dict_through_auto_reset():
    env = AutoReset(FlattenObservation(Toy("dict")))
    _, tss = rollout(env, [[1.0]] * 3, P(terminate_at=3))
    np.testing.assert_array_equal(tss[3].observation, [0, 0, 0])
    np.testing.assert_array_equal(tss[3].info[FINAL_OBSERVATION], [3, 6, 3])


def test_flatten_observation_rejects_discrete():
    class DiscreteObs(Toy):
        def observation_space(self, params=None):
            return spaces.Discrete(4)

    with pytest.raises(TypeError, match="FlattenObservation"):
        FlattenObservation(DiscreteObs())


@JIT
def test_frame_stack(jit):
    env = FrameStack(Toy(), 3)
    assert env.observation_space().shape == (3, 2)
    _, tss = rollout(env, [[1.0]] * 3, P(terminate_at=100, start=0.5), jit=jit)
    f0, f1, f2, f3 = [0, 0.5], [1, 1.5], [2, 2.5], [3, 3.5]
    np.testing.assert_array_equal(tss[0].observation, [f0, f0, f0])  # first obs repeated
    np.testing.assert_array_equal(tss[1].observation, [f0, f0, f1])  # oldest first
    np.testing.assert_array_equal(tss[2].observation, [f0, f1, f2])
    np.testing.assert_array_equal(tss[3].observation, [f1, f2, f3])


def test_frame_stack_refills_on_auto_reset():
    env = AutoReset(FrameStack(Toy(), 2))
    _, tss = rollout(env, [[1.0]] * 4, P(terminate_at=3), jit=True)
    np.testing.assert_array_equal(tss[2].observation, [[1, 1], [2, 2]])
    np.testing.assert_array_equal(tss[3].observation, [[0, 0], [0, 0]])  # new episode: refilled
    np.testing.assert_array_equal(tss[3].info[FINAL_OBSERVATION], [[2, 2], [3, 3]])
    np.testing.assert_array_equal(tss[4].observation, [[0, 0], [1, 1]])


def test_frame_stack_errors():
    with pytest.raises(ValueError, match="num_stack"):
        FrameStack(Toy(), 0)
    with pytest.raises(TypeError, match="Box"):
        FrameStack(Toy("dict"), 2)


# ---------------------------------------------------------------------------
# wrap_for_training, freeze over the whole chain
# ---------------------------------------------------------------------------


def test_wrap_for_training_order():
    base = TimeLimit(Toy(), 5)
    env = wrap_for_training(
        base, 4, normalize_observation=True, normalize_reward=True, gamma=0.5, axis_name="d"
    )
    assert env.wrappers == (
        NormalizeReward,
        NormalizeObservation,
        EpisodeStatistics,
        AutoReset,
        VmapEnv,
        TimeLimit,
    )
    assert env.num_envs == 4 and isinstance(env.unwrapped, Toy)
    assert env.gamma == 0.5 and env.axis_name == "d" and env.env.axis_name == "d"
    assert wrap_for_training(base, None).wrappers == (EpisodeStatistics, AutoReset, TimeLimit)
    assert wrap_for_training(base, None).num_envs is None
    assert wrap_for_training(base, 2).wrappers == (EpisodeStatistics, AutoReset, VmapEnv, TimeLimit)
    assert wrap_for_training(base, 2, normalize_reward=True).wrappers[0] is NormalizeReward


def test_wrap_for_training_runs_under_scan():
    env = wrap_for_training(
        TimeLimit(Toy(), 2),
        3,
        normalize_observation=True,
        normalize_reward=True,
        batched_params=True,
    )
    params = P(terminate_at=[1, 3, 100])

    @jax.jit
    def run(key):
        state, ts = env.reset(key, params)

        def body(state, key):
            state, ts = env.step(key, state, jnp.ones((3, 1)), params)
            return state, ts

        return jax.lax.scan(body, state, jax.random.split(key, 4))

    state, tss = run(jax.random.key(0))
    # env 0 terminates every step, env 1 is truncated at 2 steps, env 2 too.
    np.testing.assert_array_equal(
        tss.info[EPISODE_DONE], [[1, 0, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]]
    )
    np.testing.assert_array_equal(tss.terminated, [[1, 0, 0], [1, 0, 0], [1, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(tss.truncated, [[0, 0, 0], [0, 1, 1], [0, 0, 0], [0, 1, 1]])
    np.testing.assert_array_equal(
        tss.info[EPISODE_RETURN], [[1, 0, 0], [1, 3, 3], [1, 0, 0], [1, 3, 3]]
    )
    # Both normalisers are frozen by one call, found through the chain.
    frozen = freeze(state)
    assert bool(frozen.frozen) and bool(frozen.env_state.frozen)
    assert not bool(state.frozen) and not bool(state.env_state.frozen)

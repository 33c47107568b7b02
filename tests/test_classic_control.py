"""Classic-control environments: Gymnasium parity, resets, spaces, rendering, hand-computed steps.

Parity tests copy our (float32) state into Gymnasium's unwrapped env before
every step, apply the same action and compare the next observation, reward,
``terminated`` and (through Gymnasium's TimeLimit) the episode length.
Gymnasium computes in float64 for most of these envs; copying the state each
step keeps the comparison to one step's rounding, so tolerances stay tight.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from jrl.envs import acrobot, cartpole, mountain_car, pendulum  # noqa: E402

from jrl.core import spaces  # noqa: E402

# Tolerances (rtol = atol) sit 4-10x above the largest error measured on CPU, leaving room
# for other platforms' float32 rounding (e.g. GPU sin/cos).
RTOL = 1e-5  # one float32 step against Gymnasium's float64 step (passes at 1e-6 on CPU)
# Acrobot: velocities up to 9 pi rad/s enter squared, over 4 RK4 stages (passes at 1e-5).
TOL = {"Acrobot-v1": 1e-4}
# From states anywhere in the box (velocities at their bounds) a float32 RK4 step of Acrobot
# differs from float64 by up to 5e-4 (p99 1.5e-5); in float64 our step matches Gymnasium's
# to 1e-12, so the difference is float32 rounding, not the equations.
RANDOM_STATE_TOL = {"Acrobot-v1": 2e-3}
# 50 steps without re-synchronising (CartPole passes at 1e-5, Acrobot at 1e-4).
OPEN_LOOP_TOL = {"CartPole-v1": 1e-4, "Acrobot-v1": 1e-3}


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[], Any]
    max_episode_steps: int
    fields: tuple[str, ...]  # our state fields, in the order of Gymnasium's `state`
    reset_low: tuple[float, ...]  # Gymnasium's documented reset bounds, per field
    reset_high: tuple[float, ...]
    state_low: tuple[float, ...]  # a broad box of states for single-step parity
    state_high: tuple[float, ...]
    action_range: tuple[float, float] | None = None  # continuous: sampled wider than the space
    pump: Callable[[jax.Array], jax.Array] | None = None  # obs -> energy-pumping action

    @property
    def discrete(self) -> bool:
        return self.action_range is None


PI = math.pi
CASES = {
    c.id: c
    for c in [
        Case(
            "CartPole-v1",
            cartpole.CartPole,
            cartpole.MAX_EPISODE_STEPS,
            ("x", "x_dot", "theta", "theta_dot"),
            (-0.05,) * 4,
            (0.05,) * 4,
            (-2.4, -3.0, -0.21, -3.0),
            (2.4, 3.0, 0.21, 3.0),
        ),
        Case(
            "Acrobot-v1",
            acrobot.Acrobot,
            acrobot.MAX_EPISODE_STEPS,
            ("theta1", "theta2", "theta1_dot", "theta2_dot"),
            (-0.1,) * 4,
            (0.1,) * 4,
            (-PI, -PI, -4 * PI, -9 * PI),
            (PI, PI, 4 * PI, 9 * PI),
            pump=lambda obs: jnp.where(obs[4] > 0, 0, 2),
        ),
        Case(
            "MountainCar-v0",
            mountain_car.MountainCar,
            mountain_car.MAX_EPISODE_STEPS,
            ("position", "velocity"),
            (-0.6, 0.0),
            (-0.4, 0.0),
            (-1.2, -0.07),
            (0.6, 0.07),
            pump=lambda obs: jnp.where(obs[1] > 0, 2, 0),
        ),
        Case(
            "MountainCarContinuous-v0",
            mountain_car.MountainCarContinuous,
            mountain_car.MAX_EPISODE_STEPS_CONTINUOUS,
            ("position", "velocity"),
            (-0.6, 0.0),
            (-0.4, 0.0),
            (-1.2, -0.07),
            (0.6, 0.07),
            action_range=(-1.5, 1.5),
            pump=lambda obs: jnp.where(obs[1:2] > 0, 1.0, -1.0),
        ),
        Case(
            "Pendulum-v1",
            pendulum.Pendulum,
            pendulum.MAX_EPISODE_STEPS,
            ("theta", "theta_dot"),
            (-PI, -1.0),
            (PI, 1.0),
            (-3 * PI, -8.0),
            (3 * PI, 8.0),
            action_range=(-3.0, 3.0),
        ),
    ]
}
IDS = list(CASES)


# -- helpers -------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def compiled(env_id: str):
    """The env and its jitted reset/step (one compilation per env for the whole file)."""
    env = CASES[env_id].make()
    return env, jax.jit(env.reset), jax.jit(env.step)


def to_vec(case: Case, state) -> np.ndarray:
    """[..., n] float64 Gymnasium's state variables from our state."""
    return np.stack([np.asarray(getattr(state, f), np.float64) for f in case.fields], axis=-1)


def from_vec(case: Case, template, vec):
    """Our state with Gymnasium's state variables ``vec`` [n] (other fields from ``template``)."""
    values = {f: jnp.asarray(vec[i], jnp.float32) for i, f in enumerate(case.fields)}
    return template.replace(**values)


def sample_action(case: Case, rng: np.random.Generator, n: int):
    if case.discrete:
        return np.int32(rng.integers(n))
    lo, hi = case.action_range
    return rng.uniform(lo, hi, (1,)).astype(np.float32)


def gym_action(case: Case, action):
    return int(action) if case.discrete else np.asarray(action, np.float32)


def make_gym(env_id: str):
    return gymnasium.make(env_id, disable_env_checker=True)


# -- parity --------------------------------------------------------------------


def random_actions(case: Case, env, key, n: int) -> jax.Array:
    """[n] int32 uniform discrete actions, or [n, 1] float32 uniform over ``case.action_range``."""
    if case.discrete:
        return jax.random.randint(key, (n,), 0, env.action_space().n, jnp.int32)
    return jax.random.uniform(key, (n, 1), jnp.float32, *case.action_range)


@functools.lru_cache(maxsize=None)
def rollout(env_id: str, n_steps: int = 2000, seed: int = 0):
    """``n_steps`` steps of our env, resetting at episode ends (one jitted scan, cached).

    Actions are uniformly random; for envs with a pump policy, that policy's
    action is taken instead with probability 0.75, so that episodes terminate.
    Returns numpy ``(states [T], actions [T], steps [T], observations [T],
    rewards [T], terminated [T])``: the state before each step, the action, the
    episode's step count after the step, and what the step returned. An episode
    ends when it terminates or reaches MAX_EPISODE_STEPS.
    """
    case = CASES[env_id]
    env, _, _ = compiled(env_id)
    params = env.default_params

    def body(carry, x):
        state, obs, t = carry
        key, random_action, use_pump, reset_state, reset_obs = x
        action = random_action
        if case.pump is not None:
            action = jnp.where(use_pump, case.pump(obs).astype(action.dtype), action)
        next_state, ts = env.step(key, state, action, params)
        done = ts.terminated | (t + 1 >= case.max_episode_steps)
        carry = jax.tree.map(
            lambda r, n: jnp.where(done, r, n),
            (reset_state, reset_obs, 0),
            (next_state, ts.observation, t + 1),
        )
        return carry, (state, action, t + 1, ts.observation, ts.reward, ts.terminated)

    @jax.jit
    def run(key):
        k_reset, k_step, k_act, k_pump = jax.random.split(key, 4)
        reset_keys = jax.random.split(k_reset, n_steps + 1)
        resets, reset_ts = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
        xs = (
            jax.random.split(k_step, n_steps),
            random_actions(case, env, k_act, n_steps),
            jax.random.uniform(k_pump, (n_steps,)) < 0.75,
            jax.tree.map(lambda a: a[1:], resets),
            reset_ts.observation[1:],
        )
        carry = (jax.tree.map(lambda a: a[0], resets), reset_ts.observation[0], jnp.int32(0))
        return jax.lax.scan(body, carry, xs)[1]

    return jax.device_get(run(jax.random.key(seed)))


def assert_close_per_step(ours, theirs, tol, what: str, extra: Callable[[int], str]):
    """``ours``/``theirs`` [T, ...]: all close, else the first bad step is named."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    bad = ~np.isclose(ours, theirs, rtol=tol, atol=tol)
    bad = bad.reshape(len(bad), -1).any(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(
            f"{what} differs at step {i} ({extra(i)}): ours {ours[i]}, Gymnasium {theirs[i]}"
        )


@pytest.mark.parity
@pytest.mark.parametrize("env_id", IDS)
def test_parity_trajectories(env_id):
    """2000 steps over many episodes, our state copied into Gymnasium before each step.

    An episode ends on termination or when our step count reaches
    MAX_EPISODE_STEPS; Gymnasium's own TimeLimit must truncate on that step.
    """
    case = CASES[env_id]
    states, actions, steps, obs, rewards, terminated = rollout(env_id)
    n = len(steps)
    state_vecs = to_vec(case, states)
    genv = make_gym(env_id)
    g_obs, g_rewards, g_terminated, g_truncated = [], [], [], []
    for i in range(n):
        if steps[i] == 1:  # first step of an episode: also resets Gymnasium's TimeLimit
            genv.reset(seed=i)
        genv.unwrapped.state = state_vecs[i]
        o, r, term, trunc, _ = genv.step(gym_action(case, actions[i]))
        g_obs.append(o), g_rewards.append(r), g_terminated.append(term), g_truncated.append(trunc)

    def where(i):
        return f"episode step {steps[i]}, state {state_vecs[i]}, action {actions[i]}"

    tol = TOL.get(env_id, RTOL)
    assert_close_per_step(obs, g_obs, tol, "observation", where)
    assert_close_per_step(rewards, g_rewards, tol, "reward", where)
    assert_close_per_step(terminated, g_terminated, 0, "terminated", where)
    truncated = steps >= case.max_episode_steps
    assert_close_per_step(truncated, g_truncated, 0, "Gymnasium's truncation", where)
    n_terminated, n_truncated = int(terminated.sum()), int(truncated.sum())
    assert n_terminated + n_truncated >= 5, (n_terminated, n_truncated)
    if env_id != "Pendulum-v1":  # Pendulum never terminates
        assert n_terminated >= 5, n_terminated


@pytest.mark.parity
@pytest.mark.parametrize("env_id", IDS)
def test_parity_random_states(env_id):
    """One step from each of 1000 states spread over the state space.

    Reaches the branches rare in episodes: velocity clipping, angle wrapping, walls, goals.
    """
    case = CASES[env_id]
    env, reset, step = compiled(env_id)
    params = env.default_params
    template, _ = reset(jax.random.key(0), params)
    n = 1000
    rng = np.random.default_rng(1)
    n_actions = getattr(env.action_space(), "n", 0)
    vecs = rng.uniform(case.state_low, case.state_high, (n, len(case.fields))).astype(np.float32)
    actions = [sample_action(case, rng, n_actions) for _ in range(n)]
    ts = [
        step(jax.random.key(i), from_vec(case, template, vecs[i]), actions[i], params)[1]
        for i in range(n)
    ]
    ts = jax.tree.map(lambda *x: np.stack(x), *jax.device_get(ts))
    genv = make_gym(env_id)
    genv.reset(seed=0)
    g_obs, g_rewards, g_terminated = [], [], []
    for i in range(n):
        genv.unwrapped.state = vecs[i].astype(np.float64)
        genv.unwrapped.steps_beyond_terminated = None  # CartPole: pay the terminating step again
        o, r, term, _, _ = genv.unwrapped.step(gym_action(case, actions[i]))
        g_obs.append(o), g_rewards.append(r), g_terminated.append(term)

    def where(i):
        return f"state {vecs[i]}, action {actions[i]}"

    tol = RANDOM_STATE_TOL.get(env_id, RTOL)
    assert_close_per_step(ts.observation, g_obs, tol, "observation", where)
    assert_close_per_step(ts.reward, g_rewards, tol, "reward", where)
    assert_close_per_step(ts.terminated, g_terminated, 0, "terminated", where)
    if env_id != "Pendulum-v1":
        assert ts.terminated.any(), "the sampled states never reach the terminal branch"


@pytest.mark.parity
@pytest.mark.parametrize("env_id", IDS)
def test_parity_open_loop(env_id):
    """Gymnasium replays our first episodes' actions from the same start, never re-synchronised.

    Up to 50 steps of each of the first 4 episodes of the rollout above. Our
    float32 and Gymnasium's float64 trajectories drift apart only by
    accumulated rounding, amplified by the dynamics: CartPole (an inverted
    pendulum) and Acrobot (chaotic) amplify it most, hence their looser tolerance.
    """
    case = CASES[env_id]
    states, actions, steps, obs, rewards, terminated = rollout(env_id)
    state_vecs = to_vec(case, states)
    tol = OPEN_LOOP_TOL.get(env_id, RTOL)
    genv = make_gym(env_id)
    starts = np.flatnonzero(steps == 1)[:4]
    assert len(starts) == 4
    for start in starts:
        genv.reset(seed=int(start))
        genv.unwrapped.state = state_vecs[start]
        for i in range(start, start + 50):
            g_obs, g_reward, g_terminated, _, _ = genv.step(gym_action(case, actions[i]))
            where = f"{env_id} episode step {steps[i]} from step {start}"
            np.testing.assert_allclose(obs[i], g_obs, rtol=tol, atol=tol, err_msg=where)
            np.testing.assert_allclose(rewards[i], g_reward, rtol=tol, atol=tol, err_msg=where)
            assert bool(terminated[i]) == g_terminated, where
            if g_terminated:
                break


# -- resets, spaces, constants -----------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_reset_distribution(env_id):
    """4096 vmapped resets lie in Gymnasium's reset box, spread over all of it."""
    case = CASES[env_id]
    env = case.make()
    keys = jax.random.split(jax.random.key(0), 4096)
    reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    states, ts = jax.device_get(reset(keys, env.default_params))
    vec = to_vec(case, states)
    low, high = np.asarray(case.reset_low), np.asarray(case.reset_high)
    assert ts.observation.shape == (4096, *env.observation_space().shape)
    assert ts.observation.dtype == np.float32
    assert (vec >= low).all() and (vec <= high).all()
    span = high - low
    random_dims = span > 0
    assert (vec.min(0) < low + 0.01 * span)[random_dims].all()
    assert (vec.max(0) > high - 0.01 * span)[random_dims].all()
    assert (np.abs(vec.mean(0) - (low + high) / 2) < 0.05 * span + 1e-12).all()
    assert len(np.unique(vec[:, random_dims], axis=0)) > 4000  # not all equal (float32 may collide)
    assert not ts.reward.any() and not ts.terminated.any() and not ts.truncated.any()


@pytest.mark.parametrize("env_id", IDS)
def test_spaces_match_gymnasium(env_id):
    env = CASES[env_id].make()
    genv = make_gym(env_id)
    for ours, theirs in [
        (env.observation_space(), genv.observation_space),
        (env.action_space(), genv.action_space),
    ]:
        if isinstance(theirs, gymnasium.spaces.Discrete):
            assert isinstance(ours, spaces.Discrete) and ours.n == theirs.n and theirs.start == 0
            assert ours.dtype == jnp.int32
        else:
            assert isinstance(ours, spaces.Box)
            assert ours.shape == theirs.shape
            assert ours.dtype == jnp.float32 == theirs.dtype
            np.testing.assert_array_equal(ours.low, theirs.low.astype(np.float64))
            np.testing.assert_array_equal(ours.high, theirs.high.astype(np.float64))
    _, reset, _ = compiled(env_id)
    state, ts = reset(jax.random.key(0), env.default_params)
    assert ts.observation.shape == env.observation_space().shape
    assert bool(env.observation_space().contains(ts.observation))
    assert env.id == env_id


def test_spaces_under_jit_and_for_batched_params():
    """Spaces are static: traced params fall back to the defaults, equal batched params are fine."""
    env = pendulum.Pendulum()
    params = env.default_params

    @jax.jit
    def high(p):
        return jnp.asarray(env.action_space(p).high)

    np.testing.assert_array_equal(high(params), [2.0])
    batch = jax.tree.map(lambda x: jnp.full((3,), x), params)
    assert env.observation_space(batch) == env.observation_space()
    assert env.action_space(params.replace(max_torque=1.0)).high[0] == 1.0
    with pytest.raises(ValueError, match="max_torque"):
        env.action_space(batch.replace(max_torque=jnp.array([1.0, 2.0, 3.0])))


def test_max_episode_steps_match_gymnasium():
    for case in CASES.values():
        assert gymnasium.spec(case.id).max_episode_steps == case.max_episode_steps


def test_params_can_be_vmapped():
    """A batch of params (here gravity) steps a batch of the same state differently."""
    env, reset, step = compiled("CartPole-v1")
    state, _ = reset(jax.random.key(0), env.default_params)
    params = jax.tree.map(lambda x: jnp.full((3,), x, jnp.float32), env.default_params)
    params = params.replace(gravity=jnp.array([9.8, 0.0, 20.0]))
    batched_step = jax.jit(jax.vmap(env.step, in_axes=(None, None, None, 0)))
    new_state, ts = jax.device_get(batched_step(jax.random.key(1), state, jnp.int32(1), params))
    assert ts.observation.shape == (3, 4)
    assert len(np.unique(np.asarray(new_state.theta_dot))) == 3
    _, single = step(jax.random.key(1), state, jnp.int32(1), env.default_params)
    np.testing.assert_allclose(ts.observation[0], single.observation, rtol=1e-6)


# -- hand-computed steps (each run eagerly and jitted) ----------------------------------

WITH_AND_WITHOUT_JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])


def stepper(env, jit: bool):
    """``(state, action) -> (state, TimeStep)`` with the default params, eager or jitted."""

    def step(state, action):
        return env.step(jax.random.key(0), state, action, env.default_params)

    return jax.jit(step) if jit else step


@WITH_AND_WITHOUT_JIT
def test_cartpole_step_by_hand(jit):
    """CartPole's equations of motion worked out in float64 numpy, then one Euler step."""
    step = stepper(cartpole.CartPole(), jit)
    x, x_dot, th, th_dot = 0.01, -0.02, 0.03, 0.04
    g, m_cart, m_pole, half_len, f_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    m_total = m_cart + m_pole
    for action, force in [(0, -f_mag), (1, f_mag)]:
        temp = (force + m_pole * half_len * th_dot**2 * np.sin(th)) / m_total
        th_acc = (g * np.sin(th) - np.cos(th) * temp) / (
            half_len * (4 / 3 - m_pole * np.cos(th) ** 2 / m_total)
        )
        x_acc = temp - m_pole * half_len * th_acc * np.cos(th) / m_total
        expected = [x + tau * x_dot, x_dot + tau * x_acc, th + tau * th_dot, th_dot + tau * th_acc]
        state = cartpole.CartPoleState(*(jnp.float32(v) for v in (x, x_dot, th, th_dot)))
        _, ts = step(state, jnp.int32(action))
        np.testing.assert_allclose(ts.observation, expected, rtol=1e-6, atol=1e-7)
        assert float(ts.reward) == 1.0 and not bool(ts.terminated)
        # Pushing right speeds the cart up to the right and tips the pole to the left.
        assert np.sign(expected[1] - x_dot) == np.sign(force) == -np.sign(expected[3] - th_dot)
    # Crossing x = 2.4 terminates, and the terminating step still pays 1.
    state = cartpole.CartPoleState(*(jnp.float32(v) for v in (2.399, 0.1, 0.0, 0.0)))
    _, ts = step(state, jnp.int32(1))
    np.testing.assert_allclose(np.asarray(ts.observation)[0], 2.401, rtol=1e-6)
    assert bool(ts.terminated) and float(ts.reward) == 1.0
    # Crossing theta = 12 degrees (0.20944 rad) terminates too: 0.2094 + 0.02 * 0.1 = 0.2114.
    state = cartpole.CartPoleState(*(jnp.float32(v) for v in (0.0, 0.0, 0.2094, 0.1)))
    _, ts = step(state, jnp.int32(0))
    assert bool(ts.terminated)


@WITH_AND_WITHOUT_JIT
def test_pendulum_step_by_hand(jit):
    """Pendulum with g = 10, m = l = 1, dt = 0.05: thdot += (15 sin th + 3 u) dt, clipped to 8."""
    step = stepper(pendulum.Pendulum(), jit)
    cases = [
        # th, thdot, action -> clipped u, new thdot, reward
        (0.5, -1.0, 3.0, 2.0, -1.0 + (15 * np.sin(0.5) + 6.0) * 0.05, -(0.25 + 0.1 + 0.004)),
        # speed clipped: 7.9 + (15 sin 1.5 - 3) 0.05 = 8.498 -> 8; reward -(2.25 + 6.241 + 0.001)
        (1.5, 7.9, -1.0, -1.0, 8.0, -(2.25 + 6.241 + 0.001)),
        # th = 4 is normalised to 4 - 2 pi in the cost
        (4.0, 0.0, 0.5, 0.5, (15 * np.sin(4.0) + 1.5) * 0.05, -((4 - 2 * np.pi) ** 2 + 0.00025)),
    ]
    for th, thdot, action, u, new_thdot, reward in cases:
        state = pendulum.PendulumState(jnp.float32(th), jnp.float32(thdot), jnp.float32(0.0))
        new_state, ts = step(state, jnp.array([action], jnp.float32))
        new_th = th + new_thdot * 0.05
        np.testing.assert_allclose(
            ts.observation, [np.cos(new_th), np.sin(new_th), new_thdot], rtol=1e-6, atol=1e-6
        )
        np.testing.assert_allclose(float(ts.reward), reward, rtol=1e-6)
        np.testing.assert_allclose(float(new_state.last_u), u)
        assert not bool(ts.terminated)


@WITH_AND_WITHOUT_JIT
def test_mountain_car_walls_and_goal_by_hand(jit):
    step = stepper(mountain_car.MountainCar(), jit)
    # At the left wall moving left: position clipped to -1.2, velocity zeroed.
    state = mountain_car.MountainCarState(jnp.float32(-1.19), jnp.float32(-0.05))
    new_state, ts = step(state, jnp.int32(0))
    assert float(new_state.position) == np.float32(-1.2) and float(new_state.velocity) == 0.0
    assert float(ts.reward) == -1.0 and not bool(ts.terminated)
    # v = 0.02 + 0.001 - 0.0025 cos(1.47) = 0.0207527...; x = 0.49 + v >= 0.5: goal.
    state = mountain_car.MountainCarState(jnp.float32(0.49), jnp.float32(0.02))
    _, ts = step(state, jnp.int32(2))
    v = 0.02 + 0.001 - 0.0025 * np.cos(3 * 0.49)
    np.testing.assert_allclose(ts.observation, [0.49 + v, v], rtol=1e-6)
    assert bool(ts.terminated) and float(ts.reward) == -1.0
    # Continuous: the action is clipped for the force, not for the cost; +100 at the goal.
    step = stepper(mountain_car.MountainCarContinuous(), jit)
    state = mountain_car.MountainCarState(jnp.float32(0.44), jnp.float32(0.02))
    _, ts = step(state, jnp.array([2.0], jnp.float32))
    v = 0.02 + 0.0015 - 0.0025 * np.cos(3 * 0.44)
    np.testing.assert_allclose(ts.observation, [0.44 + v, v], rtol=1e-6)
    assert bool(ts.terminated)
    np.testing.assert_allclose(float(ts.reward), 100.0 - 0.1 * 4.0, rtol=1e-6)


# -- jit, vmap, render -------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_jit_matches_eager(env_id):
    case = CASES[env_id]
    env, reset, step = compiled(env_id)
    rng = np.random.default_rng(0)
    n_actions = getattr(env.action_space(), "n", 0)
    key = jax.random.key(3)
    s_eager, ts_eager = env.reset(key)
    s_jit, ts_jit = reset(key, env.default_params)
    for t in range(5):
        np.testing.assert_allclose(ts_eager.observation, ts_jit.observation, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(ts_eager.reward, ts_jit.reward, rtol=1e-6, atol=1e-6)
        assert bool(ts_eager.terminated) == bool(ts_jit.terminated)
        action = sample_action(case, rng, n_actions)
        k = jax.random.fold_in(key, t)
        s_eager, ts_eager = env.step(k, s_eager, action)
        s_jit, ts_jit = step(k, s_jit, action, env.default_params)


@pytest.mark.parametrize("env_id", IDS)
def test_render(env_id):
    """Frames are uint8 [H, W, 3], jittable and vmappable, and follow the state."""
    case = CASES[env_id]
    env, reset, _ = compiled(env_id)
    params = env.default_params
    template, _ = jax.device_get(reset(jax.random.key(0), params))
    rng = np.random.default_rng(0)
    vecs = np.stack(
        [
            to_vec(case, template),  # a reset state and a random one
            rng.uniform(case.state_low, case.state_high),
        ]
    ).astype(np.float32)
    states = jax.tree.map(lambda x: np.stack([x, x]), template).replace(
        **{f: vecs[:, i] for i, f in enumerate(case.fields)}
    )
    frames = np.asarray(jax.jit(jax.vmap(env.render, in_axes=(0, None)))(states, params))
    h, w = env.render_shape
    assert frames.shape == (2, h, w, 3) and frames.dtype == np.uint8
    # One frame (params=None: the defaults), traced without compiling; compiled single frames
    # are checked pixel by pixel in test_render_shapes_and_content.
    single = jax.eval_shape(env.render, jax.tree.map(lambda x: x[1], states))
    assert single.shape == (h, w, 3) and single.dtype == jnp.uint8
    assert (frames[0] != frames[1]).any(axis=-1).sum() > 50, "different states, different frames"
    for frame in frames:
        colours = np.unique(frame.reshape(-1, 3).astype(np.int64) @ np.array([1 << 16, 1 << 8, 1]))
        assert len(colours) > 2  # background plus drawn shapes
        assert (frame == 255).all(axis=-1).mean() > 0.5  # mostly white background


def test_render_shapes_and_content():
    """Smaller frames scale the scene; known pixels; a vmapped frame equals the single one."""
    env = cartpole.CartPole(render_shape=(80, 120))
    state = cartpole.CartPoleState(*(jnp.float32(v) for v in (0.0, 0.0, 0.0, 0.0)))
    frame = np.asarray(jax.jit(env.render)(state))
    assert frame.shape == (80, 120, 3)
    tilted = state.replace(x=jnp.float32(1.0), theta=jnp.float32(0.2))
    batch = jax.tree.map(lambda a, b: np.stack([a, b]), state, tilted)
    frames = np.asarray(jax.jit(jax.vmap(env.render))(batch), int)
    assert np.abs(frames[0] - frame).max() <= 1 and (frames[0] != frames[1]).any()
    # cart centre at x = 60 px, y = 100 * 120 / 600 = 20 px from the bottom -> row 80 - 20 = 60
    np.testing.assert_array_equal(frame[59, 57], [0, 0, 0])
    assert (frame[5, 5] == 255).all()  # background is white
    env = pendulum.Pendulum(render_shape=(64, 64))
    upright = pendulum.PendulumState(*(jnp.float32(0.0) for _ in range(3)))
    up = np.asarray(jax.jit(env.render)(upright))
    # Upright rod (theta = 0): red above the axle, white below it.
    np.testing.assert_array_equal(up[24, 32], [204, 77, 77])
    assert (up[54, 32] == 255).all()

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

from jrl import spaces  # noqa: E402
from jrl.envs import acrobot, cartpole, mountain_car, pendulum  # noqa: E402

RTOL = 1e-5  # rtol = atol for one float32 step against Gymnasium's float64 step
TOL = {"Acrobot-v1": 1e-4}  # velocities up to 9 pi rad/s, squared in the accelerations, over 4 RK4 stages
OPEN_LOOP_TOL = {"CartPole-v1": 1e-3, "Acrobot-v1": 1e-2}  # after 50 steps without re-synchronising


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
    action_range: tuple[float, float] | None = None  # continuous actions: sampled wider than the space
    pump: Callable[[jax.Array], jax.Array] | None = None  # obs -> an energy-pumping action, so episodes terminate

    @property
    def discrete(self) -> bool:
        return self.action_range is None


PI = math.pi
CASES = {
    c.id: c
    for c in [
        Case("CartPole-v1", cartpole.CartPole, cartpole.MAX_EPISODE_STEPS,
             ("x", "x_dot", "theta", "theta_dot"), (-0.05,) * 4, (0.05,) * 4,
             (-2.4, -3.0, -0.21, -3.0), (2.4, 3.0, 0.21, 3.0)),
        Case("Acrobot-v1", acrobot.Acrobot, acrobot.MAX_EPISODE_STEPS,
             ("theta1", "theta2", "theta1_dot", "theta2_dot"), (-0.1,) * 4, (0.1,) * 4,
             (-PI, -PI, -4 * PI, -9 * PI), (PI, PI, 4 * PI, 9 * PI),
             pump=lambda obs: jnp.where(obs[4] > 0, 0, 2)),
        Case("MountainCar-v0", mountain_car.MountainCar, mountain_car.MAX_EPISODE_STEPS,
             ("position", "velocity"), (-0.6, 0.0), (-0.4, 0.0), (-1.2, -0.07), (0.6, 0.07),
             pump=lambda obs: jnp.where(obs[1] > 0, 2, 0)),
        Case("MountainCarContinuous-v0", mountain_car.MountainCarContinuous,
             mountain_car.MAX_EPISODE_STEPS_CONTINUOUS,
             ("position", "velocity"), (-0.6, 0.0), (-0.4, 0.0), (-1.2, -0.07), (0.6, 0.07),
             action_range=(-1.5, 1.5), pump=lambda obs: jnp.where(obs[1:2] > 0, 1.0, -1.0)),
        Case("Pendulum-v1", pendulum.Pendulum, pendulum.MAX_EPISODE_STEPS,
             ("theta", "theta_dot"), (-PI, -1.0), (PI, 1.0), (-3 * PI, -8.0), (3 * PI, 8.0),
             action_range=(-3.0, 3.0)),
    ]
}
IDS = list(CASES)


# -- helpers -------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def compiled(env_id: str):
    """The env and its jitted reset/step (one compilation per env for the whole file)."""
    env = CASES[env_id].make()
    return env, jax.jit(env.reset), jax.jit(env.step)


def to_vec(case: Case, state) -> jax.Array:
    """[..., n] Gymnasium's state variables from our state."""
    return jnp.stack([getattr(state, f) for f in case.fields], axis=-1)


def from_vec(case: Case, template, vec):
    """Our state with Gymnasium's state variables ``vec`` [n] (other fields from ``template``)."""
    return template.replace(**{f: jnp.asarray(vec[i], jnp.float32) for i, f in enumerate(case.fields)})


def set_gym_state(case: Case, genv, state) -> None:
    genv.unwrapped.state = np.asarray(to_vec(case, state), np.float64)


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

def policy(case: Case, env, key, obs):
    """A random action; for envs with a pump policy, that policy's action with probability 0.75."""
    k_mix, k_act = jax.random.split(key)
    if case.discrete:
        action = jax.random.randint(k_act, (), 0, env.action_space().n, jnp.int32)
    else:
        action = jax.random.uniform(k_act, (1,), jnp.float32, *case.action_range)
    if case.pump is None:
        return action
    return jnp.where(jax.random.uniform(k_mix) < 0.75, case.pump(obs).astype(action.dtype), action)


@functools.lru_cache(maxsize=None)
def rollout_fn(env_id: str, n_steps: int):
    """A jitted ``key -> trajectory`` of ``n_steps`` steps with resets at episode ends.

    Returns ``(states [T], actions [T], steps [T] (the episode step count after the step),
    observations [T], rewards [T], terminated [T])``: the state before each step and what
    the step returned. An episode ends when it terminates or reaches MAX_EPISODE_STEPS.
    """
    case = CASES[env_id]
    env, _, _ = compiled(env_id)
    params = env.default_params

    def body(carry, key):
        state, obs, t = carry
        k_act, k_step, k_reset = jax.random.split(key, 3)
        action = policy(case, env, k_act, obs)
        next_state, ts = env.step(k_step, state, action, params)
        done = ts.terminated | (t + 1 >= case.max_episode_steps)
        reset_state, reset_ts = env.reset(k_reset, params)
        carry = jax.tree.map(lambda r, n: jnp.where(done, r, n), (reset_state, reset_ts.observation, 0),
                             (next_state, ts.observation, t + 1))
        return carry, (state, action, t + 1, ts.observation, ts.reward, ts.terminated)

    def rollout(key):
        k_reset, k_steps = jax.random.split(key)
        state, ts = env.reset(k_reset, params)
        _, out = jax.lax.scan(body, (state, ts.observation, jnp.int32(0)), jax.random.split(k_steps, n_steps))
        return out

    return jax.jit(rollout)


def assert_close_per_step(ours, theirs, tol, what: str, extra: Callable[[int], str]):
    """``ours``/``theirs`` [T, ...]: all close, else the first bad step is named."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    bad = ~np.isclose(ours, theirs, rtol=tol, atol=tol)
    bad = bad.reshape(len(bad), -1).any(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(f"{what} differs at step {i} ({extra(i)}): ours {ours[i]}, Gymnasium {theirs[i]}")


@pytest.mark.parity
@pytest.mark.parametrize("env_id", IDS)
def test_parity_trajectories(env_id):
    """2000 steps over many episodes, our state copied into Gymnasium before each step.

    An episode ends on termination or when our step count reaches
    MAX_EPISODE_STEPS; Gymnasium's own TimeLimit must truncate on that step.
    """
    case = CASES[env_id]
    n = 2000
    states, actions, steps, obs, rewards, terminated = jax.device_get(rollout_fn(env_id, n)(jax.random.key(0)))
    state_vecs = np.asarray(np.stack([getattr(states, f) for f in case.fields], -1), np.float64)
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
    assert_close_per_step(steps >= case.max_episode_steps, g_truncated, 0, "Gymnasium's truncation", where)
    n_terminated, n_truncated = int(terminated.sum()), int((steps >= case.max_episode_steps).sum())
    assert n_terminated + n_truncated >= 5, (n_terminated, n_truncated)
    if env_id != "Pendulum-v1":  # Pendulum never terminates
        assert n_terminated >= 5, n_terminated


@pytest.mark.parity
@pytest.mark.parametrize("env_id", IDS)
def test_parity_random_states(env_id):
    """One step from 1000 states spread over the whole state space (clipping, wrapping, goal branches)."""
    case = CASES[env_id]
    env, reset, _ = compiled(env_id)
    params = env.default_params
    template, _ = reset(jax.random.key(0), params)
    n = 1000
    rng = np.random.default_rng(1)
    vecs = rng.uniform(case.state_low, case.state_high, (n, len(case.fields))).astype(np.float32)
    random_policy = dataclasses.replace(case, pump=None)

    @jax.jit
    @jax.vmap
    def step_from(key, vec):
        action = policy(random_policy, env, key, None)
        return action, env.step(key, from_vec(case, template, vec), action, params)[1]

    actions, ts = jax.device_get(step_from(jax.random.split(jax.random.key(1), n), vecs))
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

    tol = TOL.get(env_id, RTOL)
    assert_close_per_step(ts.observation, g_obs, tol, "observation", where)
    assert_close_per_step(ts.reward, g_rewards, tol, "reward", where)
    assert_close_per_step(ts.terminated, g_terminated, 0, "terminated", where)
    if env_id != "Pendulum-v1":
        assert ts.terminated.any(), "the sampled states never reach the terminal branch"


@pytest.mark.parity
@pytest.mark.parametrize("env_id", IDS)
def test_parity_open_loop(env_id):
    """Both envs run 50 steps from the same reset state with the same actions, never re-synchronised.

    Our float32 and Gymnasium's float64 trajectories drift apart only by
    accumulated rounding, amplified by the dynamics: CartPole (an inverted
    pendulum) and Acrobot (chaotic) amplify it most, hence their looser tolerance.
    """
    case = CASES[env_id]
    env, _, _ = compiled(env_id)
    params = env.default_params
    tol = OPEN_LOOP_TOL.get(env_id, 1e-4)
    genv = make_gym(env_id)
    random_policy = dataclasses.replace(case, pump=None)

    @jax.jit
    def run(key):
        """50 steps from a reset state: (start state, actions [50], TimeSteps [50])."""
        state, _ = env.reset(key, params)
        keys = jax.random.split(key, 50)
        actions = jax.vmap(lambda k: policy(random_policy, env, k, None))(keys)
        _, ts = jax.lax.scan(lambda s, ka: env.step(ka[0], s, ka[1], params), state, (keys, actions))
        return state, actions, ts

    for episode in range(3):
        state, actions, ts = jax.device_get(run(jax.random.key(100 + episode)))
        genv.reset(seed=episode)
        set_gym_state(case, genv, state)
        for t in range(50):
            g_obs, g_reward, g_terminated, _, _ = genv.step(gym_action(case, actions[t]))
            where = f"{env_id} episode {episode} step {t}"
            np.testing.assert_allclose(ts.observation[t], g_obs, rtol=tol, atol=tol, err_msg=where)
            np.testing.assert_allclose(ts.reward[t], g_reward, rtol=tol, atol=tol, err_msg=where)
            assert bool(ts.terminated[t]) == g_terminated, where
            if g_terminated:
                break


# -- resets, spaces, constants -----------------------------------------------------

@pytest.mark.parametrize("env_id", IDS)
def test_reset_distribution(env_id):
    """4096 vmapped resets lie in Gymnasium's reset box, spread over all of it."""
    case = CASES[env_id]
    env = case.make()
    keys = jax.random.split(jax.random.key(0), 4096)
    states, ts = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, env.default_params)
    vec = np.asarray(to_vec(case, states), np.float64)
    low, high = np.asarray(case.reset_low), np.asarray(case.reset_high)
    assert ts.observation.shape == (4096, *env.observation_space().shape)
    assert ts.observation.dtype == jnp.float32
    assert (vec >= low).all() and (vec <= high).all()
    span = high - low
    random_dims = span > 0
    assert (vec.min(0) < low + 0.01 * span)[random_dims].all()
    assert (vec.max(0) > high - 0.01 * span)[random_dims].all()
    assert (np.abs(vec.mean(0) - (low + high) / 2) < 0.05 * span + 1e-12).all()
    assert len(np.unique(vec[:, random_dims], axis=0)) > 4000  # not all equal (float32 draws may collide)
    assert not ts.reward.any() and not ts.terminated.any() and not ts.truncated.any()


@pytest.mark.parametrize("env_id", IDS)
def test_spaces_match_gymnasium(env_id):
    env = CASES[env_id].make()
    genv = make_gym(env_id)
    for ours, theirs in [(env.observation_space(), genv.observation_space),
                         (env.action_space(), genv.action_space)]:
        if isinstance(theirs, gymnasium.spaces.Discrete):
            assert isinstance(ours, spaces.Discrete) and ours.n == theirs.n and theirs.start == 0
            assert ours.dtype == jnp.int32
        else:
            assert isinstance(ours, spaces.Box)
            assert ours.shape == theirs.shape
            assert ours.dtype == jnp.float32 == theirs.dtype
            np.testing.assert_array_equal(ours.low, theirs.low.astype(np.float64))
            np.testing.assert_array_equal(ours.high, theirs.high.astype(np.float64))
    state, ts = env.reset(jax.random.key(0))
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
    env = cartpole.CartPole()
    state, _ = env.reset(jax.random.key(0))
    params = jax.tree.map(lambda x: jnp.full((3,), x, jnp.float32), env.default_params)
    params = params.replace(gravity=jnp.array([9.8, 0.0, 20.0]))
    step = jax.vmap(env.step, in_axes=(None, None, None, 0))
    new_state, ts = step(jax.random.key(1), state, jnp.int32(1), params)
    assert ts.observation.shape == (3, 4)
    assert len(np.unique(np.asarray(new_state.theta_dot))) == 3
    _, single = env.step(jax.random.key(1), state, jnp.int32(1))
    np.testing.assert_allclose(ts.observation[0], single.observation, rtol=1e-6)


# -- hand-computed steps -------------------------------------------------------------

def test_cartpole_step_by_hand():
    """CartPole's equations of motion worked out in float64 numpy, then one Euler step."""
    env = cartpole.CartPole()
    x, x_dot, th, th_dot = 0.01, -0.02, 0.03, 0.04
    g, m_cart, m_pole, half_len, f_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    m_total = m_cart + m_pole
    for action, force in [(0, -f_mag), (1, f_mag)]:
        temp = (force + m_pole * half_len * th_dot**2 * np.sin(th)) / m_total
        th_acc = (g * np.sin(th) - np.cos(th) * temp) / (
            half_len * (4 / 3 - m_pole * np.cos(th) ** 2 / m_total))
        x_acc = temp - m_pole * half_len * th_acc * np.cos(th) / m_total
        expected = [x + tau * x_dot, x_dot + tau * x_acc, th + tau * th_dot, th_dot + tau * th_acc]
        state = cartpole.CartPoleState(*(jnp.float32(v) for v in (x, x_dot, th, th_dot)))
        _, ts = env.step(jax.random.key(0), state, jnp.int32(action))
        np.testing.assert_allclose(ts.observation, expected, rtol=1e-6, atol=1e-7)
        assert float(ts.reward) == 1.0 and not bool(ts.terminated)
    # Pushing left: x_acc = temp - ... with temp ~ -9.09, the cart speeds up to the left.
    assert expected[1] > x_dot  # (the last loop pushed right)
    # Crossing x = 2.4 terminates, and the terminating step still pays 1.
    state = cartpole.CartPoleState(*(jnp.float32(v) for v in (2.399, 0.1, 0.0, 0.0)))
    _, ts = env.step(jax.random.key(0), state, jnp.int32(1))
    np.testing.assert_allclose(ts.observation[0], 2.401, rtol=1e-6)
    assert bool(ts.terminated) and float(ts.reward) == 1.0
    # Crossing theta = 12 degrees (0.20944 rad) terminates too.
    state = cartpole.CartPoleState(*(jnp.float32(v) for v in (0.0, 0.0, 0.2094, 0.1)))
    _, ts = env.step(jax.random.key(0), state, jnp.int32(0))
    assert bool(ts.terminated)


def test_pendulum_step_by_hand():
    """Pendulum with g = 10, m = l = 1, dt = 0.05: thdot += (15 sin th + 3 u) dt, clipped to 8."""
    env = pendulum.Pendulum()
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
        new_state, ts = env.step(jax.random.key(0), state, jnp.array([action], jnp.float32))
        new_th = th + new_thdot * 0.05
        np.testing.assert_allclose(ts.observation, [np.cos(new_th), np.sin(new_th), new_thdot], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(float(ts.reward), reward, rtol=1e-6)
        np.testing.assert_allclose(float(new_state.last_u), u)
        assert not bool(ts.terminated)


def test_mountain_car_walls_and_goal_by_hand():
    env = mountain_car.MountainCar()
    # At the left wall moving left: position clipped to -1.2, velocity zeroed.
    state = mountain_car.MountainCarState(jnp.float32(-1.19), jnp.float32(-0.05))
    new_state, ts = env.step(jax.random.key(0), state, jnp.int32(0))
    assert float(new_state.position) == np.float32(-1.2) and float(new_state.velocity) == 0.0
    assert float(ts.reward) == -1.0 and not bool(ts.terminated)
    # v = 0.02 + 0.001 - 0.0025 cos(1.47) = 0.0207527...; x = 0.49 + v >= 0.5: goal.
    state = mountain_car.MountainCarState(jnp.float32(0.49), jnp.float32(0.02))
    new_state, ts = env.step(jax.random.key(0), state, jnp.int32(2))
    v = 0.02 + 0.001 - 0.0025 * np.cos(3 * 0.49)
    np.testing.assert_allclose(ts.observation, [0.49 + v, v], rtol=1e-6)
    assert bool(ts.terminated) and float(ts.reward) == -1.0
    # Continuous: the action is clipped for the force, not for the cost; +100 at the goal.
    env_c = mountain_car.MountainCarContinuous()
    state = mountain_car.MountainCarState(jnp.float32(0.44), jnp.float32(0.02))
    _, ts = env_c.step(jax.random.key(0), state, jnp.array([2.0], jnp.float32))
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
    for t in range(8):
        np.testing.assert_allclose(ts_eager.observation, ts_jit.observation, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(ts_eager.reward, ts_jit.reward, rtol=1e-6, atol=1e-6)
        assert bool(ts_eager.terminated) == bool(ts_jit.terminated)
        action = sample_action(case, rng, n_actions)
        k = jax.random.fold_in(key, t)
        s_eager, ts_eager = env.step(k, s_eager, action)
        s_jit, ts_jit = step(k, s_jit, action, env.default_params)


@pytest.mark.parametrize("env_id", IDS)
def test_render(env_id):
    case = CASES[env_id]
    env, reset, _ = compiled(env_id)
    params = env.default_params
    s0, _ = reset(jax.random.key(0), params)
    template, _ = reset(jax.random.key(1), params)
    rng = np.random.default_rng(0)
    s1 = from_vec(case, template, rng.uniform(case.state_low, case.state_high).astype(np.float32))
    states = jax.tree.map(lambda a, b: jnp.stack([a, b]), s0, s1)
    frames = jax.jit(jax.vmap(env.render, in_axes=(0, None)))(states, params)
    h, w = env.render_shape
    assert frames.shape == (2, h, w, 3) and frames.dtype == jnp.uint8
    single = jax.jit(env.render)(s1)  # params=None: the defaults
    assert single.shape == (h, w, 3) and single.dtype == jnp.uint8
    assert np.abs(np.asarray(single, int) - np.asarray(frames[1], int)).max() <= 1
    assert (frames[0] != frames[1]).any(axis=-1).sum() > 50, "different states give different frames"
    for frame in frames:
        colours = np.unique(np.asarray(frame).reshape(-1, 3), axis=0)
        assert len(colours) > 2  # background plus drawn shapes
        assert (np.asarray(frame) == 255).all(axis=-1).mean() > 0.5  # mostly white background


def test_render_shapes_and_content():
    """Smaller frames scale the scene; a known pixel: the cart's centre is black."""
    env = cartpole.CartPole(render_shape=(80, 120))
    state = cartpole.CartPoleState(*(jnp.float32(v) for v in (0.0, 0.0, 0.0, 0.0)))
    frame = np.asarray(env.render(state))
    assert frame.shape == (80, 120, 3)
    # cart centre at x = 60 px, y = 100 * 120 / 600 = 20 px from the bottom -> row 80 - 20 = 60
    np.testing.assert_array_equal(frame[59, 57], [0, 0, 0])
    assert (frame[5, 5] == 255).all()  # background is white
    env = pendulum.Pendulum(render_shape=(64, 64))
    up = np.asarray(env.render(pendulum.PendulumState(jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.0))))
    # Upright rod (theta = 0): red above the axle, white below it.
    np.testing.assert_array_equal(up[24, 32], [204, 77, 77])
    assert (up[54, 32] == 255).all()

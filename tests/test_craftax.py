"""Craftax (the optional ``craftax`` extra): ``craftax:<name>`` ids, their spaces, the steps
equal to craftax's own bit for bit, craftax's time limit lifted and applied by jrl's
TimeLimit, unknown names, the message without craftax, params, render, and PPO beating the
random policy on Craftax-Classic-Symbolic.

Everything skips when craftax is not installed. Craftax's pixel renderer processes its textures
on its first use in an installation and caches them in craftax's own package folder (the
adapter's docstring): the tests that draw work with or without that cache.
"""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jrl.envs as jrl_envs
import numpy as np
import pytest

import jrl
from jrl.core import spaces, wrappers
from jrl.core.types import FINAL_OBSERVATION

pytest.importorskip("craftax")

from craftax.craftax_env import make_craftax_env_from_name  # noqa: E402

from jrl.envs import craftax_adapter  # noqa: E402

JRL = [sys.executable, "-m", "jrl.app.cli"]
CLASSIC = "craftax:Craftax-Classic-Symbolic-v1"
SHAPES = {  # name: (observation shape, actions, achievements, craftax's time limit)
    "Craftax-Classic-Symbolic-v1": ((1345,), 17, 22, 10_000),
    "Craftax-Classic-Pixels-v1": ((63, 63, 3), 17, 22, 10_000),
    "Craftax-Symbolic-v1": ((8268,), 43, 67, 100_000),
    "Craftax-Pixels-v1": ((130, 110, 3), 43, 67, 100_000),
}
NOOP = 0


def run(*args, cwd, env=None):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.run(
        JRL + [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


def test_ids_spaces_and_shapes():
    """Each id but Craftax-Pixels-v1: its time limit is craftax's, Box(0, 1) float32
    observations of craftax's shape, Discrete actions; reset and step (shapes only, nothing
    compiled) give that observation, a float32 reward, bool flags and the achievements in info.
    Craftax-Pixels-v1 is left out: building it first processes full Craftax's textures (72 s
    on this machine, once per installation), which a fresh CI venv would pay here."""
    assert craftax_adapter.craftax_names() == list(SHAPES)
    for name, (shape, actions, achievements, limit) in SHAPES.items():
        if name == "Craftax-Pixels-v1":
            continue
        env, params = jrl_envs.make("craftax:" + name)
        assert isinstance(env, wrappers.TimeLimit) and env.max_episode_steps == limit, name
        assert jrl_envs.entry("craftax:" + name).source == "craftax"
        assert env.observation_space(params) == spaces.Box(0.0, 1.0, shape, jnp.float32), name
        assert env.action_space(params) == spaces.Discrete(actions), name
        state, first = jax.eval_shape(env.reset, jax.random.key(0), params)
        _, ts = jax.eval_shape(env.step, jax.random.key(1), state, jnp.int32(0), params)
        for t in (first, ts):
            assert (t.observation.shape, t.observation.dtype) == (shape, jnp.float32), name
            assert (t.reward.dtype, t.terminated.dtype, t.truncated.dtype) == (
                jnp.float32,
                jnp.bool_,
                jnp.bool_,
            )
            assert t.info["achievements"].shape == (achievements,), name
        assert jax.tree.structure(first) == jax.tree.structure(ts), name  # one pytree type


def _rollout(env, params, key, steps, n):
    """``n`` envs, ``steps`` uniform random actions (jitted scan): the reset's and steps'
    time steps, and the actions and keys drawn."""

    def one(key):
        k_reset, k_run = jax.random.split(key)
        state, first = env.reset(k_reset, params)

        def body(state, k):
            k_act, k_step = jax.random.split(k)
            action = jax.random.randint(k_act, (), 0, env.action_space(params).n)
            state, ts = env.step(k_step, state, action, params)
            return state, (ts, action, k_step)

        return first, jax.lax.scan(body, state, jax.random.split(k_run, steps))[1]

    return jax.jit(jax.vmap(one))(jax.random.split(key, n))


@pytest.fixture(scope="module")
def classic_rollout():
    """The bare Classic-Symbolic env's reset and 300 random steps in 8 envs (key 0)."""
    env, params = jrl_envs.make(CLASSIC)
    return env, params, _rollout(env.unwrapped, params, jax.random.key(0), 300, 8)


def test_steps_equal_craftax_own_bit_for_bit(classic_rollout):
    """8 envs x 300 random steps (random play dies after ~145 steps: most envs see an
    episode end, after which a dead player's world steps on in the bare env): the bare adapter
    equals craftax's non-resetting reset_env / step_env given the raw data of the same keys,
    and jrl's AutoReset(TimeLimit(adapter)) equals craftax's auto-resetting env's ``step``:
    the same observations, rewards and episode ends."""
    env, params, (first, (ts, actions, keys)) = classic_rollout
    theirs = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=False)
    raw = jax.random.key_data(keys)

    def replay(key, actions, raw):
        obs, state = theirs.reset_env(jax.random.key_data(jax.random.split(key)[0]), params)

        def body(state, x):
            obs, state, reward, done, _ = theirs.step_env(x[1], state, x[0], params)
            return state, (obs, reward, done)

        return obs, jax.lax.scan(body, state, (actions, raw))[1]

    obs0, (obs, reward, done) = jax.jit(jax.vmap(replay))(
        jax.random.split(jax.random.key(0), 8), actions, raw
    )
    np.testing.assert_array_equal(first.observation, obs0)
    np.testing.assert_array_equal(ts.observation, obs)
    np.testing.assert_array_equal(ts.reward, reward)
    np.testing.assert_array_equal(ts.terminated, done)
    assert int(np.asarray(done).any(axis=1).sum()) >= 6 and not np.asarray(ts.truncated).any()
    assert np.asarray(ts.reward).max() >= 1.0  # achievements were unlocked

    auto = wrappers.AutoReset(env)
    resetting = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=True)
    first, (ts, actions, keys) = _rollout(auto, params, jax.random.key(1), 300, 8)

    def replay_auto(key, actions, raw):
        obs, state = resetting.reset_env(jax.random.key_data(jax.random.split(key)[0]), params)

        def body(state, x):
            obs, state, reward, done, _ = resetting.step(x[1], state, x[0], params)
            return state, (obs, reward, done)

        return obs, jax.lax.scan(body, state, (actions, raw))[1]

    obs0, (obs, reward, done) = jax.jit(jax.vmap(replay_auto))(
        jax.random.split(jax.random.key(1), 8), actions, jax.random.key_data(keys)
    )
    np.testing.assert_array_equal(first.observation, obs0)
    # craftax computes a reset's light level inside its own jitted step, which XLA may round
    # 1 ulp apart from the reset compiled into jrl's AutoReset: equal to float rounding
    np.testing.assert_allclose(ts.observation, obs, rtol=2e-7, atol=0)
    np.testing.assert_array_equal(ts.reward, reward)
    np.testing.assert_array_equal(ts.terminated | ts.truncated, done)
    assert int(np.asarray(done).sum()) >= 8  # episodes ended and were reset


def test_observations_lie_in_the_space_and_info_holds_the_achievements(classic_rollout):
    """Over 8 envs x 300 random steps: every observation is in the observation space; the
    achievements in info only ever grow within an episode, and each step's reward is the
    number it unlocked plus craftax's health term (a tenth of the health change)."""
    env, params, (first, (ts, _, _)) = classic_rollout
    space = env.observation_space(params)
    assert bool(jax.vmap(space.contains)(first.observation).all())
    assert bool(jax.vmap(jax.vmap(space.contains))(ts.observation).all())
    got = np.asarray(ts.info["achievements"])
    assert not np.asarray(first.info["achievements"]).any()
    before = np.concatenate([np.zeros_like(got[:, :1]), got[:, :-1]], axis=1)
    assert (got >= before).all()
    new = (got & ~before).sum(-1)
    ended = np.asarray(ts.terminated)
    alive = np.cumsum(ended, axis=1) - ended == 0  # no episode end before this step
    health = np.asarray(ts.reward) - new
    assert np.all(np.abs(np.round(health[alive] * 10) - health[alive] * 10) < 1e-4)
    assert new.sum() > 0


def test_time_limit_is_lifted_and_applied_by_jrl():
    """craftax ends an episode at ``timestep >= max_timesteps`` (10000); ``make``'s TimeLimit
    truncates at that same step (truncated, not terminated) and the bare adapter goes on past
    it, never terminated (a world 5 steps before the limit, then 7 no-op steps)."""
    env, params = jrl_envs.make(CLASSIC)
    theirs = jax.jit(env.unwrapped.craftax_env.step_env)
    state, _ = jax.jit(env.reset)(jax.random.key(3), params)
    late = state.env_state.replace(timestep=jnp.asarray(9995, jnp.int32))  # 5 steps to go
    state = wrappers.TimeLimitState(late, jnp.asarray(9995, jnp.int32))
    step = jax.jit(env.step)
    for t in range(9996, 10003):
        key = jax.random.key(t)
        their_done = theirs(jax.random.key_data(key), state.env_state, NOOP, params)[3]
        state, ts = step(key, state, NOOP, params)
        assert bool(their_done) == (t >= 10_000), t  # craftax's own time limit
        assert bool(ts.truncated) == (t >= 10_000) and not bool(ts.terminated), t
    assert int(state.env_state.timestep) == 10_002  # the bare env went on


def test_autoreset_carries_the_final_observation():
    """``make(..., max_episode_steps=20)`` truncates at step 20 (no-op steps, not
    terminated), and AutoReset(TimeLimit(adapter, 20)) carries the finished episode's last
    observation: ``final_observation`` is the bare env's observation after each step, and
    after the truncating step the observation is a fresh reset's."""
    env, params = jrl_envs.make(CLASSIC, max_episode_steps=20)
    assert env.max_episode_steps == 20
    auto = wrappers.AutoReset(env)
    bare = env.unwrapped
    state, _ = auto.reset(jax.random.key(5), params)
    inner = state.env_state
    step, bare_step = jax.jit(auto.step), jax.jit(bare.step)
    for t in range(20):
        key = jax.random.key(200 + t)
        k_step, k_reset = jax.random.split(key)
        inner, expected = bare_step(k_step, inner, NOOP, params)
        state, ts = step(key, state, NOOP, params)
        np.testing.assert_array_equal(ts.info[FINAL_OBSERVATION], expected.observation)
        assert bool(ts.truncated) == (t == 19) and not bool(ts.terminated), t
    _, fresh = jax.jit(bare.reset)(k_reset, params)
    np.testing.assert_array_equal(ts.observation, fresh.observation)
    assert not np.array_equal(ts.observation, expected.observation)


def test_unknown_name_suggests_the_closest(tmp_path):
    """A misspelt name: UnknownEnvError naming the closest id; ``jrl train`` exits 2 with one
    line and writes nothing."""
    with pytest.raises(
        jrl_envs.UnknownEnvError, match="Did you mean 'craftax:Craftax-Classic-Symbolic-v1'"
    ):
        jrl_envs.make("craftax:Craftax-Clasic-Symbolic-v1")
    out = run("train", "ppo", "--env", "craftax:Typo", "--out", tmp_path / "x", cwd=tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "craftax:Typo" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_without_craftax_the_message_names_the_extra(monkeypatch, tmp_path):
    """craftax that cannot be imported: CraftaxMissingError (an ImportError) naming
    ``pip install jrl-jax[craftax]``; ``jrl train`` exits 2 with that one line, and ``jrl
    envs`` lists no craftax ids."""
    monkeypatch.setitem(sys.modules, "craftax", None)
    monkeypatch.setitem(sys.modules, "craftax.craftax_env", None)
    craftax_adapter._make.cache_clear()
    try:
        with pytest.raises(craftax_adapter.CraftaxMissingError, match=r"jrl-jax\[craftax\]"):
            jrl_envs.make(CLASSIC)
        with pytest.raises(craftax_adapter.CraftaxMissingError):
            craftax_adapter.craftax_names()
        assert issubclass(craftax_adapter.CraftaxMissingError, ImportError)
    finally:
        craftax_adapter._make.cache_clear()
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "craftax.py").write_text("raise ImportError(\"No module named 'craftax'\")\n")
    out = run(
        "train",
        "ppo",
        "--env",
        CLASSIC,
        "--out",
        tmp_path / "x",
        cwd=tmp_path,
        env={"PYTHONPATH": str(fake)},
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "pip install jrl-jax[craftax]" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    listed = run("envs", cwd=tmp_path, env={"PYTHONPATH": str(fake)})
    assert listed.returncode == 0 and "craftax:" not in listed.stdout


def test_jrl_envs_lists_the_craftax_ids(tmp_path):
    out = run("envs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.splitlines() if line.startswith("craftax:")]
    assert listed == ["craftax:" + name for name in SHAPES]


def test_params_overrides_and_their_time_limit_field():
    """craftax's EnvParams are the params: ``make(id, field=value)`` overrides them (a zombie
    health of 1 reaches the step), unknown fields raise, and ``max_timesteps`` no longer ends
    an episode (the TimeLimit does)."""
    env, params = jrl_envs.make(CLASSIC, zombie_health=1, max_timesteps=3)
    assert params.zombie_health == 1 and params.max_timesteps == 3
    with pytest.raises(TypeError, match="unknown parameter"):
        jrl_envs.make(CLASSIC, gravity=1.0)
    bare = env.unwrapped
    state, _ = bare.reset(jax.random.key(6), params)
    step = jax.jit(bare.step)
    for t in range(5):
        state, ts = step(jax.random.key(t), state, NOOP, params)
        assert not bool(ts.terminated), t
    assert int(state.timestep) == 5


def test_render_draws_the_state_jitted_and_vmapped():
    """``render`` is craftax's pixel picture at 16 pixels a block: uint8[144, 144, 3] for
    Classic, jittable and vmappable; two worlds give two pictures. The Pixels id's
    observation is craftax's pixel observation in [0, 1]."""
    env, params = jrl_envs.make(CLASSIC)
    states, _ = jax.vmap(env.unwrapped.reset, (0, None))(
        jax.random.split(jax.random.key(7), 2), params
    )
    frames = jax.jit(jax.vmap(lambda s: env.unwrapped.render(s, params)))(states)
    assert frames.shape == (2, 144, 144, 3) and frames.dtype == jnp.uint8
    frames = np.asarray(frames)
    assert frames.std() > 10 and not np.array_equal(frames[0], frames[1])
    single = jax.jit(env.unwrapped.render)(jax.tree.map(lambda x: x[0], states), params)
    np.testing.assert_array_equal(single, frames[0])

    pixels, p = jrl_envs.make("craftax:Craftax-Classic-Pixels-v1")
    theirs = pixels.unwrapped.craftax_env
    state, ts = jax.jit(pixels.reset)(jax.random.key(8), p)
    expected, _ = jax.jit(theirs.reset_env)(jax.random.key_data(jax.random.key(8)), p)
    np.testing.assert_array_equal(ts.observation, expected)
    assert bool(pixels.observation_space(p).contains(ts.observation))
    assert jax.jit(pixels.render)(state, p).shape == (144, 144, 3)  # through its TimeLimit


SMALL = dict(
    total_steps=16_384,
    num_envs=16,
    num_steps=64,
    num_epochs=2,
    num_minibatches=4,
    learning_rate=1e-3,
)
"""PPO's default configuration (Craftax has no preset: a 64x64 tanh MLP on the 1345 symbolic
features) with 16 envs x 64 steps, 2 epochs of 4 minibatches and lr 1e-3, for 16 iterations."""

RANDOM_RETURN = 1.50
"""The uniform random policy's mean return on Craftax-Classic-Symbolic-v1: 1.503 (std 1.303,
-0.9 .. 5.1; episodes of 143 steps on average) over 1000 episodes (``episode_returns``, key 0,
2026-12-05)."""


@pytest.mark.learning
def test_ppo_craftax_classic_beats_random(learning_seed):
    """PPO on craftax:Craftax-Classic-Symbolic-v1 for 16k steps (2 seeds vmapped) unlocks more
    than the random policy: the training return averaged over the last quarter of the
    iterations (4 of 16, ~28 episodes a seed; the last iteration alone, ~7 episodes, is too
    noisy to judge a seed by).

    Measured 2026-12-05 on 8 seeds from 1000 (one vmapped call): 2.67 +- 0.16 (2.37 .. 2.81),
    the worst pair's mean 2.43. So the two seeds' mean must reach 2.0 (1.33 times random's
    1.50; margin 0.43 over the worst pair) and each seed 1.8 (margin 0.57 over the lowest
    seed). A random policy's mean over ~28 episodes has a std of ~0.25, so it stays below.
    The budget is about 8 s of training on 2 CPU cores; compiling Craftax's step and reset
    costs ~30 s more on a cold compilation cache."""
    result = jrl.train("ppo", CLASSIC, 2, seed=learning_seed, progress=False, **SMALL)
    final = result.final_returns(fraction=0.25)
    assert (final >= 1.8).all() and final.mean() >= 2.0, final
    assert np.isfinite(result.metrics["train/loss"]).all()

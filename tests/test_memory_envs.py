"""The memory tasks (envs/memory.py), step by step by hand."""

import jax
import jax.numpy as jnp
import jrl.envs
import numpy as np
import pytest
from jrl.envs.cartpole import CartPoleState


def play(env, params, key, actions):
    state, ts = env.reset(key, params)
    steps = [ts]
    for a in actions:
        state, ts = env.step(jax.random.key(9), state, jnp.asarray(a), params)
        steps.append(ts)
    return steps


@pytest.mark.parametrize("seed", range(4))
def test_memory_chain_by_hand(seed):
    """length 3: cue only at t = 0, query flag only at t = 3, elapsed t / 3; zero reward until
    the query; +1 for the action matching the cue (1 for +1, 0 for -1), else -1; then done."""
    env, params = jrl.envs.make("MemoryChain-v0", length=3)
    key = jax.random.key(seed)
    cue = float(play(env, params, key, [])[0].observation[0])
    assert cue in (1.0, -1.0)
    right = int(cue > 0)
    for answer, reward in ((right, 1.0), (1 - right, -1.0)):
        steps = play(env, params, key, [1 - right, right, 1 - right, answer])
        obs = np.stack([np.asarray(ts.observation) for ts in steps[:4]])
        np.testing.assert_allclose(
            obs, [[cue, 0, 0], [0, 0, 1 / 3], [0, 0, 2 / 3], [0, 1, 1]], rtol=1e-6
        )
        assert [float(ts.reward) for ts in steps[1:]] == [0.0, 0.0, 0.0, reward]
        assert [bool(ts.terminated) for ts in steps[1:]] == [False, False, False, True]
        assert not any(bool(ts.truncated) for ts in steps[1:])


def test_memory_chain_cues_are_balanced_and_length_is_checked():
    env, params = jrl.envs.make("MemoryChain-v0")
    assert params.length == 10.0
    cues = jax.vmap(lambda k: env.reset(k, params)[1].observation[0])(
        jax.random.split(jax.random.key(0), 2000)
    )
    assert set(np.unique(cues).tolist()) == {-1.0, 1.0} and abs(float(cues.mean())) < 0.1
    steps = play(env, params, jax.random.key(1), [0] * 11)
    assert [bool(ts.terminated) for ts in steps[1:]] == [False] * 10 + [True]
    with pytest.raises(ValueError, match="length"):
        jrl.envs.make("MemoryChain-v0", length=0)[0].observation_space(
            jrl.envs.make("MemoryChain-v0", length=0)[1]
        )


def test_cartpole_without_velocities_is_cartpole_observed_in_part():
    """Same states, rewards, terminations and time limit as CartPole-v1; the observation is
    (x, theta) of the full one."""
    full, fp = jrl.envs.make("CartPole-v1")
    novel, npar = jrl.envs.make("CartPoleNoVel-v1")
    assert jrl.envs.entry("CartPoleNoVel-v1").max_episode_steps == 500
    assert novel.observation_space(npar).shape == (2,)
    np.testing.assert_allclose(novel.observation_space(npar).high, [4.8, 0.41887903], rtol=1e-6)
    key = jax.random.key(3)
    actions = [1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    a, b = play(full, fp, key, actions), play(novel, npar, key, actions)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x.observation)[[0, 2]], y.observation)
        assert float(x.reward) == float(y.reward) and bool(x.terminated) == bool(y.terminated)
    assert any(bool(x.terminated) for x in b)
    state = CartPoleState(*(jnp.float32(v) for v in (0.1, 0.2, 0.03, -0.4)))
    np.testing.assert_allclose(novel.unwrapped._obs(state), [0.1, 0.03])

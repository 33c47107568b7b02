"""Evaluation rollouts: one whole episode per env, counted by hand on probe envs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jrl.envs as jrl_envs
from jrl.envs.probes import TruncationProbe
from jrl.evaluation import episode_returns
from jrl.wrappers import VmapEnv


def test_truncation_probe_episodes_return_their_length():
    env, params = jrl_envs.make("TruncationProbe-v0")  # reward 1 per step, truncated at 20
    ret, length = jax.jit(
        lambda k: episode_returns(lambda o, k: jnp.zeros(o.shape[0], jnp.int32), env, k, 5, params)
    )(jax.random.key(0))
    np.testing.assert_array_equal(ret, [20.0] * 5)
    np.testing.assert_array_equal(length, [20] * 5)


def test_episodes_of_different_lengths_stop_counting_when_they_end():
    """CartPole pushed left every step: each env falls after its own number of steps (reward 1
    each); nothing is counted after an env's first episode ends."""
    env, params = jrl_envs.make("CartPole-v1")
    ret, length = episode_returns(
        lambda o, k: jnp.zeros(o.shape[0], jnp.int32), env, jax.random.key(3), 16, params
    )
    np.testing.assert_array_equal(ret, length.astype(np.float32))
    assert (
        5 <= int(length.min())
        and int(length.max()) <= 15
        and len(np.unique(np.asarray(length))) > 1
    )


def test_max_steps_cuts_an_env_without_a_time_limit():
    env = TruncationProbe()  # bare: never terminates
    ret, length = episode_returns(
        lambda o, k: jnp.zeros(o.shape[0], jnp.int32), env, jax.random.key(0), 3, max_steps=7
    )
    np.testing.assert_array_equal(length, [7, 7, 7])


def test_masked_probe_best_valid_action_policy():
    """Taking the highest valid action each of 8 steps returns between 8 * 1/4 and 8 * 4/4."""
    env, params = jrl_envs.make("MaskedProbe-v0")
    best = lambda o, k: 3 - jnp.argmax(o["action_mask"][:, ::-1], axis=1)  # noqa: E731
    ret, length = episode_returns(best, env, jax.random.key(1), 64, params)
    np.testing.assert_array_equal(length, [8] * 64)
    assert float(ret.min()) >= 2.0 and float(ret.max()) <= 8.0 and float(ret.mean()) > 6.0


def test_bad_input():
    env, params = jrl_envs.make("CartPole-v1")
    policy = lambda o, k: jnp.zeros(o.shape[0], jnp.int32)  # noqa: E731
    with pytest.raises(ValueError, match="unbatched"):
        episode_returns(policy, VmapEnv(env, 2), jax.random.key(0), 2)
    with pytest.raises(ValueError, match="positive"):
        episode_returns(policy, env, jax.random.key(0), 0)

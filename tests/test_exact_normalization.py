"""Exact outputs of the normalising wrappers (jrl/core/normalization.py) with an epsilon large
enough to show: the statistics by the pooled formula of the prior pseudo-sample and the data,
the outputs divided by ``sqrt(var + epsilon)`` (tools/mutation.py's targets)."""

import jax
import numpy as np

from jrl import envs
from jrl.core.normalization import NormalizeObservation, NormalizeReward

C0 = 1e-4  # the prior: count 1e-4 of mean 0 and variance 1


def pooled(samples):
    """Mean and variance of the prior pseudo-sample together with ``samples``."""
    x = np.asarray(samples, np.float64)
    count = C0 + x.size
    mean = x.sum() / count
    return mean, (C0 * 1.0 + np.square(x).sum()) / count - mean**2


def test_normalize_observation_divides_by_sqrt_of_var_plus_epsilon():
    """TruncationProbe's observations are t / 20: 0 after the reset, 0.05 after one step."""
    env, params = envs.make("TruncationProbe-v0")
    wrapped = NormalizeObservation(env, epsilon=1.0)
    state, ts = wrapped.reset(jax.random.key(0), params)
    np.testing.assert_allclose(ts.observation, [0.0], atol=1e-7)
    state, ts = wrapped.step(jax.random.key(1), state, 0, params)
    mean, var = pooled([0.0, 0.05])
    np.testing.assert_allclose(state.stats.mean, [mean], rtol=1e-5)
    np.testing.assert_allclose(state.stats.var, [var], rtol=1e-4)
    np.testing.assert_allclose(ts.observation, [(0.05 - mean) / np.sqrt(var + 1.0)], rtol=1e-5)


def test_normalize_reward_divides_by_sqrt_of_the_returns_var_plus_epsilon():
    """Reward 1 every step, gamma 0.5: the discounted returns are 1, then 1.5; each reward is
    divided by the square root of the returns' variance (so far) plus epsilon."""
    env, params = envs.make("TruncationProbe-v0")
    wrapped = NormalizeReward(env, gamma=0.5, epsilon=1.0)
    state, _ = wrapped.reset(jax.random.key(0), params)
    for t, returns in enumerate(([1.0], [1.0, 1.5])):
        state, ts = wrapped.step(jax.random.key(t + 1), state, 0, params)
        _, var = pooled(returns)
        np.testing.assert_allclose(float(state.stats.var), var, rtol=1e-4)
        np.testing.assert_allclose(float(ts.reward), 1.0 / np.sqrt(var + 1.0), rtol=1e-5)
        np.testing.assert_allclose(float(state.discounted_return), returns[-1], rtol=1e-6)

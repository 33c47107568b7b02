"""Exact values at the boundaries where a mutant used to pass for equivalent only in
distribution or in float32 (tools/mutation_equivalents.txt's former entries): the sign of the
reparameterised Normal sample, epsilon-greedy at ``u == epsilon``, the masked logit of every
float dtype, and folding an empty sample into running statistics."""

import jax
import jax.numpy as jnp
import numpy as np

from jrl.agents.evolution import population
from jrl.core.normalization import RunningMeanStd
from jrl.ops import action_distributions as ad


def test_normal_sample_is_mean_plus_std_times_the_keys_standard_normal():
    """``sample(key) = mean + exp(log_std) * eps`` with ``eps = normal(key, shape)``: the
    sample moves with ``eps``, not against it (the reparameterisation the gradients use)."""
    mean, log_std = jnp.array([1.0, -2.0, 0.5]), jnp.log(jnp.array([0.5, 2.0, 3.0]))
    key = jax.random.key(3)
    eps = jax.random.normal(key, (3,), jnp.float32)
    got = ad.Normal(mean, log_std).sample(key)
    np.testing.assert_allclose(got, mean + jnp.exp(log_std) * eps, rtol=1e-6)
    grad = jax.grad(lambda m: ad.Normal(m, log_std).sample(key).sum())(mean)
    np.testing.assert_array_equal(grad, [1.0, 1.0, 1.0])
    grad_std = jax.grad(lambda s: ad.Normal(mean, s).sample(key).sum())(log_std)
    np.testing.assert_allclose(grad_std, jnp.exp(log_std) * eps, rtol=1e-6)


def test_epsilon_greedy_explores_only_below_epsilon():
    """Each row's first uniform decides: it explores when ``u < epsilon``. With ``epsilon``
    set to exactly that uniform the row acts greedily; just above it, it takes the argmax of
    its other uniforms (the values are built so that the two actions differ)."""
    keys = jax.random.split(jax.random.key(0), 4)
    u = jax.vmap(lambda k: jax.random.uniform(k, (4,)))(keys)  # [N, A + 1], A = 3
    explore_action = np.argmax(np.asarray(u[:, 1:]), axis=-1)
    greedy = (explore_action + 1) % 3
    values = jax.nn.one_hot(greedy, 3)
    at = ad.epsilon_greedy(keys, values, u[:, 0])
    np.testing.assert_array_equal(at, greedy)
    above = ad.epsilon_greedy(keys, values, jnp.nextafter(u[:, 0], 2.0))
    np.testing.assert_array_equal(above, explore_action)


def test_masked_logit_is_minus_1e9_or_half_the_lowest_float():
    """-1e9 where the dtype holds it (float32, float64, bfloat16), else half the dtype's
    lowest finite number (float16: -65504 / 2)."""
    assert ad._masked_logit(jnp.float32) == -1e9
    assert ad._masked_logit(np.float64) == -1e9
    assert ad._masked_logit(jnp.bfloat16) == -1e9
    assert ad._masked_logit(jnp.float16) == -32752.0


def test_folding_an_empty_sample_leaves_the_statistics_bit_identical():
    """``count = 0``: the statistics are returned as they were. (Merging a sample of weight 0
    would give ``var * count / count``, which in float32 is 6.8875823, not 6.887583.)"""
    stats = RunningMeanStd(
        jnp.array([0.25], jnp.float32),
        jnp.array([6.887583], jnp.float32),
        jnp.asarray(704.0001, jnp.float32),
    )
    same = population._fold_moments(stats, jnp.float32(0), jnp.zeros(1), jnp.zeros(1))
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(stats)):
        np.testing.assert_array_equal(a, b)

"""Hand-computed values for the loss functions, with and without jit."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.ops import losses

JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])


def maybe_jit(fn, jit):
    return jax.jit(fn) if jit else fn


@JIT
def test_clipped_surrogate_hand_computed(jit):
    # ratios: exp(0)=1, exp(log 1.5)=1.5, exp(log 0.5)=0.5 ; eps = 0.2
    log_prob = jnp.log(jnp.array([1.0, 1.5, 0.5]))
    old = jnp.zeros(3)
    adv = jnp.array([2.0, 1.0, -1.0])
    loss, frac = maybe_jit(losses.clipped_surrogate_loss, jit)(log_prob, old, adv, 0.2)
    # sample 0: min(1*2, 1*2) = 2
    # sample 1: min(1.5*1, 1.2*1) = 1.2
    # sample 2: min(0.5*-1, 0.8*-1) = -0.8
    np.testing.assert_allclose(loss, -(2.0 + 1.2 - 0.8) / 3, rtol=1e-6)
    np.testing.assert_allclose(frac, 2 / 3, rtol=1e-6)


@JIT
def test_value_loss_plain_and_clipped(jit):
    v = jnp.array([1.0, 3.0])
    g = jnp.array([2.0, 0.0])
    np.testing.assert_allclose(maybe_jit(losses.value_loss, jit)(v, g), 0.5 * (1 + 9) / 2)
    old = jnp.array([0.0, 2.5])
    # sample 0: clipped v = 0 + clip(1, -.5, .5) = .5 -> (0.5-2)^2 = 2.25 ; unclipped 1 -> max 2.25
    # sample 1: clipped v = 2.5 + clip(.5) = 3.0 -> 9 ; unclipped 9 -> 9
    out = maybe_jit(lambda *a: losses.value_loss(*a), jit)(v, g, old, 0.5)
    np.testing.assert_allclose(out, 0.5 * (2.25 + 9) / 2, rtol=1e-6)


def test_policy_gradient_loss_stops_advantage_gradient():
    log_prob = jnp.array([-1.0, -2.0])
    adv = jnp.array([3.0, -1.0])
    np.testing.assert_allclose(losses.policy_gradient_loss(log_prob, adv), -(-3.0 + 2.0) / 2)
    g_adv = jax.grad(lambda a: losses.policy_gradient_loss(log_prob, a))(adv)
    np.testing.assert_array_equal(g_adv, 0.0)
    g_lp = jax.grad(lambda lp: losses.policy_gradient_loss(lp, adv))(log_prob)
    np.testing.assert_allclose(g_lp, -adv / 2)


def test_normalize():
    x = jnp.array([1.0, 2.0, 3.0, 4.0])
    z = losses.normalize(x)
    np.testing.assert_allclose(z, (np.array([1, 2, 3, 4]) - 2.5) / math.sqrt(1.25), rtol=1e-5)


def test_normalize_with_a_std_floor_divides_by_the_larger():
    x = jnp.array([1.0, 3.0])  # mean 2, std 1
    np.testing.assert_allclose(losses.normalize(x, std_floor=4.0), [-0.25, 0.25], rtol=1e-6)
    np.testing.assert_allclose(losses.normalize(x, std_floor=0.5), [-1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(losses.normalize(x, std_floor=jnp.float32(1.0)), [-1, 1], rtol=1e-6)


def test_normalize_guards_a_zero_spread_with_eps():
    """The eps of the denominator: a constant input normalises to zeros, and a spread of eps
    itself halves the normalised values ((x - mean) / (std + eps) with std = eps)."""
    np.testing.assert_array_equal(losses.normalize(jnp.full(4, 3.0)), 0.0)
    np.testing.assert_allclose(losses.normalize(jnp.array([0.0, 2e-8])), [-0.5, 0.5], rtol=1e-5)


def test_clip_fraction_counts_ratios_outside_the_range_only():
    """A ratio on the edge of [1 - eps, 1 + eps] is not clipped (clipping leaves it as it is):
    with eps = 0, ratios of exactly 1 count 0 and one ratio of e counts 1 of 3."""
    log_prob = jnp.array([0.0, 0.0, 1.0])
    _, frac = losses.clipped_surrogate_loss(log_prob, jnp.zeros(3), jnp.ones(3), 0.0)
    np.testing.assert_allclose(frac, 1 / 3, rtol=1e-6)


def test_value_loss_clips_only_with_both_old_values_and_clip_eps():
    v, g, old = jnp.array([1.0, 3.0]), jnp.array([2.0, 0.0]), jnp.array([0.0, 2.5])
    plain = 0.5 * (1 + 9) / 2
    np.testing.assert_allclose(losses.value_loss(v, g, old, None), plain)
    np.testing.assert_allclose(losses.value_loss(v, g, None, 0.5), plain)

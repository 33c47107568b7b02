"""Shared optimiser chain and linear schedule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.parts.optim import OPTIMIZERS, grad_norm_metric, linear_schedule, make_optimizer


def test_linear_schedule_by_hand():
    values = [float(linear_schedule(n, 1.0, 0.05, 100)) for n in (0, 50, 100, 1000)]
    np.testing.assert_allclose(values, [1.0, 0.525, 0.05, 0.05], rtol=1e-6)
    # traced arguments, increasing schedules, zero duration
    f = jax.jit(linear_schedule)
    np.testing.assert_allclose(f(jnp.asarray(3), 0.4, 1.0, jnp.asarray(12.0)), 0.55, rtol=1e-6)
    assert float(linear_schedule(0, 1.0, 0.0, 0)) == 0.0


@pytest.mark.parametrize("name", ["adam", "radam", "rmsprop"])
def test_optimizer_clips_the_global_norm_before_scaling(name):
    """A gradient of norm 5 clipped to norm 1 is the scaler applied to that gradient / 5
    (a large eps keeps the first step from being scale-free, so clipping shows)."""
    tx = make_optimizer(name, max_grad_norm=1.0, eps=1.0)
    params = {"w": jnp.zeros(3)}
    grad = {"w": jnp.array([3.0, 0.0, 4.0])}
    got, _ = tx.update(grad, tx.init(params), params)
    scaler = OPTIMIZERS[name](1.0)
    want, _ = scaler.update(jax.tree.map(lambda g: g / 5.0, grad), scaler.init(params), params)
    unclipped, _ = scaler.update(grad, scaler.init(params), params)
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-6)
    assert not np.allclose(got["w"], unclipped["w"])


def test_unknown_optimizer():
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        make_optimizer("sgd", 1.0)


@pytest.mark.parametrize("name", ["adam", "rmsprop"])
def test_optimizer_without_clipping_is_the_scaler_alone(name):
    """max_grad_norm = 0: a gradient of norm 5 goes to the scaler unclipped, bit for bit."""
    tx = make_optimizer(name, max_grad_norm=0.0, eps=1.0)
    params = {"w": jnp.zeros(3)}
    grad = {"w": jnp.array([3.0, 0.0, 4.0])}
    got, _ = tx.update(grad, tx.init(params), params)
    scaler = OPTIMIZERS[name](1.0)
    want, _ = scaler.update(grad, scaler.init(params), params)
    np.testing.assert_array_equal(got["w"], want["w"])
    with pytest.raises(ValueError, match="max_grad_norm must be >= 0"):
        make_optimizer(name, -1.0)


def test_grad_norm_metric_only_with_clipping():
    grads = {"a": jnp.array([3.0, 0.0]), "b": jnp.array([[4.0]])}
    np.testing.assert_allclose(grad_norm_metric(grads, 0.5)["train/grad_norm"], 5.0, rtol=1e-6)
    assert grad_norm_metric(grads, 0.0) == {}

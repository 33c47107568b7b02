"""The device-axis helpers outside a sharded trace (inside one, see tests/test_distributed.py)."""

import jax
import jax.numpy as jnp
import numpy as np

from jrl import parallel


def test_local_keys_on_one_device():
    key = jax.random.key(7)
    np.testing.assert_array_equal(jax.random.key_data(parallel.local_keys(key, 3)),
                                  jax.random.key_data(jax.random.split(key, 3)))
    one = parallel.local_keys(key, 1)  # a single item takes the key itself: no split to pay for
    assert one.shape == (1,)
    np.testing.assert_array_equal(jax.random.key_data(one[0]), jax.random.key_data(key))


def test_reductions_are_identities_outside_a_sharded_trace():
    x = {"a": jnp.arange(3.0)}
    assert parallel.current_axis() is None and parallel.axis_size() == 1 and int(parallel.axis_index()) == 0
    np.testing.assert_array_equal(parallel.pmean(x)["a"], x["a"])
    np.testing.assert_array_equal(parallel.psum(x)["a"], x["a"])
    np.testing.assert_allclose(parallel.global_mean(jnp.array([1.0, 2.0, 6.0])), 3.0)
    np.testing.assert_allclose(parallel.global_mean(jnp.array([1.0, 3.0]), jnp.array([3.0, 1.0])), 1.5)

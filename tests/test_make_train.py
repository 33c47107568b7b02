"""jrl.make_train (jrl/app/functional.py): the whole run as one pure function of a key. It
computes what jrl.train computes for the same seed, jits, vmaps over seeds and
hyperparameters (each vmapped run is the run alone), differentiates with respect to a
hyperparameter, and refuses what it cannot scan."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jrl

SMALL = dict(total_steps=1024, num_envs=8, num_steps=64, hidden_sizes=(16, 16))


def params_of(state):
    return [np.asarray(x) for x in jax.tree.leaves(state.agent_state.params)]


def test_a_jitted_train_equals_the_runners_run_of_the_same_seed():
    train = jrl.make_train("ppo", "CartPole-v1", **SMALL)
    assert train.config.num_iterations == 2
    state, metrics = jax.jit(train)(jax.random.key(3))
    assert metrics["train/episode_return"].shape == (2,)
    assert int(metrics["train/env_steps"][-1]) == 1024
    ran = jrl.train("ppo", "CartPole-v1", seeds=1, seed=3, progress=False, **SMALL)
    for mine, theirs in zip(params_of(state), jax.tree.leaves(ran.final_params), strict=True):
        np.testing.assert_allclose(mine, np.asarray(theirs)[0], rtol=0, atol=1e-6)


def test_vmapped_over_seeds_and_learning_rates_each_run_is_the_run_alone():
    train = jrl.make_train("ppo", "CartPole-v1", num_iterations=1, **SMALL)
    keys = jax.vmap(jax.random.key)(jnp.arange(3))
    lrs = jnp.array([1e-4, 1e-3, 1e-2], jnp.float32)
    states, metrics = jax.jit(jax.vmap(train))(keys, {"learning_rate": lrs})
    assert metrics["train/episode_return"].shape == (3, 1)
    alone, _ = jax.jit(train)(keys[2], {"learning_rate": lrs[2]})
    for batched, single in zip(params_of(states), params_of(alone), strict=True):
        np.testing.assert_allclose(batched[2], single, rtol=0, atol=1e-6)
    # the learning rate reached the update: the same key with another rate learns otherwise
    other, _ = jax.jit(train)(keys[2], {"learning_rate": lrs[0]})
    assert any(np.abs(a - b).max() > 1e-6 for a, b in zip(params_of(alone), params_of(other)))


def test_the_run_differentiates_with_respect_to_its_learning_rate():
    """A meta-gradient: the value loss of a 1-iteration run as a function of the learning
    rate (the sampled actions pass no gradient; the update's step does)."""
    train = jrl.make_train("ppo", "CartPole-v1", num_iterations=1, **SMALL)
    loss = lambda lr: train(jax.random.key(0), {"learning_rate": lr})[1]["train/value_loss"]
    grad = float(jax.grad(lambda lr: loss(lr).mean())(jnp.float32(1e-3)))
    assert np.isfinite(grad) and grad != 0.0
    h = 1e-4  # a central difference agrees in sign with the gradient
    slope = (float(loss(1e-3 + h).mean()) - float(loss(1e-3 - h).mean())) / (2 * h)
    assert np.sign(slope) == np.sign(grad), (slope, grad)


def test_what_make_train_cannot_scan_is_refused():
    pytest.importorskip("gymnasium")  # the test extra installs it
    with pytest.raises(ValueError, match="steps on the host"):
        jrl.make_train("ppo", "gymnasium:CartPole-v1")
    with pytest.raises(ValueError, match="num_iterations must be >= 1"):
        jrl.make_train("ppo", "CartPole-v1", num_iterations=0)
    with pytest.raises(TypeError, match="unknown ppo config field"):
        jrl.make_train("ppo", "CartPole-v1", learning_rte=1e-3)
    train = jrl.make_train("ppo", "CartPole-v1", num_iterations=1, **SMALL)
    with pytest.raises(ValueError, match=r"cannot set \['num_envs'\] after init"):
        train(jax.random.key(0), {"num_envs": 4})

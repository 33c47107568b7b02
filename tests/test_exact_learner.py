"""Exact values of the learner's small helpers (jrl/parts/learner.py, jrl/parts/optim.py):
hand-computed expectations that tell every operator apart (tools/mutation.py's targets)."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jrl.parts.learner import apply_gradients, epsilon_schedule, minibatch_epochs, scheduled_lr
from jrl.parts.optim import grad_norm_metric, linear_schedule, make_optimizer


def test_scheduled_lr_anneals_linearly_to_zero_by_hand():
    # 0.5 * (1 - 25 / 100) = 0.375; past the end the rate stays 0; without annealing 0.5
    assert float(scheduled_lr(0.5, 25, 100, True)) == 0.375
    assert float(scheduled_lr(0.5, 0, 100, True)) == 0.5
    assert float(scheduled_lr(0.5, 150, 100, True)) == 0.0
    assert float(scheduled_lr(0.5, 25, 100, False)) == 0.5


def test_apply_gradients_steps_against_the_update_by_hand():
    """With the identity transform the step is ``params - lr * grads``: 1 - 0.25 * 2 = 0.5,
    -1 - 0.25 * (-4) = 0."""
    tx = optax.identity()
    params = {"w": jnp.array([1.0, -1.0])}
    new, _ = apply_gradients(tx, params, tx.init(params), {"w": jnp.array([2.0, -4.0])}, 0.25)
    np.testing.assert_array_equal(new["w"], [0.5, 0.0])


def test_epsilon_schedule_by_hand():
    """From 1.0 to 0.2 over the first half of 100 updates: 1 + (25 / 50) * (0.2 - 1) = 0.6."""
    hp = SimpleNamespace(epsilon_start=1.0, epsilon_end=0.2, exploration_fraction=0.5)
    np.testing.assert_allclose(float(epsilon_schedule(hp, 25, 100)), 0.6, rtol=1e-6)
    np.testing.assert_allclose(float(epsilon_schedule(hp, 0, 100)), 1.0, rtol=1e-6)
    np.testing.assert_allclose(float(epsilon_schedule(hp, 80, 100)), 0.2, rtol=1e-6)


def test_linear_schedule_between_and_past_its_ends():
    # 2 + (3 / 4) * (10 - 2) = 8; a step before 0 is clipped to the start
    np.testing.assert_allclose(float(linear_schedule(3, 2.0, 10.0, 4)), 8.0, rtol=1e-6)
    np.testing.assert_allclose(float(linear_schedule(-3, 2.0, 10.0, 4)), 2.0, rtol=1e-6)
    np.testing.assert_allclose(float(linear_schedule(9, 2.0, 10.0, 4)), 10.0, rtol=1e-6)
    # a negative duration means "already at the end"
    np.testing.assert_allclose(float(linear_schedule(0, 2.0, 10.0, -1)), 10.0, rtol=1e-6)
    # a duration below one step: 0.5 steps done of 0.5 is the end
    np.testing.assert_allclose(float(linear_schedule(0.25, 0.0, 1.0, 0.5)), 0.5, rtol=1e-6)


def test_clipping_bound_is_exactly_max_grad_norm():
    """A gradient of norm exactly 1 with max_grad_norm = 1 is not scaled; norm 2 is halved
    (with eps = 1 Adam's first step is g / (|g| + 1), so the scale shows)."""
    tx = make_optimizer("adam", max_grad_norm=1.0, eps=1.0)
    params = {"w": jnp.zeros(2)}
    for g, clipped in (([0.6, 0.8], [0.6, 0.8]), ([1.2, 1.6], [0.6, 0.8])):
        got, _ = tx.update({"w": jnp.array(g)}, tx.init(params), params)
        c = np.array(clipped)
        np.testing.assert_allclose(got["w"], c / (np.abs(c) + 1.0), rtol=1e-5)
    assert grad_norm_metric({"w": jnp.array([3.0, 4.0])}, 1e-3) == {
        "train/grad_norm": grad_norm_metric({"w": jnp.array([3.0, 4.0])}, 1e-3)["train/grad_norm"]
    }
    np.testing.assert_allclose(
        grad_norm_metric({"w": jnp.array([3.0, 4.0])}, 1e-3)["train/grad_norm"], 5.0, rtol=1e-6
    )


def test_minibatch_epochs_runs_every_minibatch_of_every_epoch_and_averages_metrics():
    """3 epochs of 2 minibatches of data summing to 0 + 1 + ... + 7 = 28: the state adds every
    minibatch's sum (3 * 28 = 84) and counts the steps (6); the metric is the mean of the six
    minibatch sums (84 / 6 = 14), and of the step index 0..5 (2.5)."""
    data = jnp.arange(8.0).reshape(4, 2)

    def sgd_step(state, mb):
        total, steps = state
        return (total + mb.sum(), steps + 1), {"sum": mb.sum(), "step": steps.astype(jnp.float32)}

    config = SimpleNamespace(num_epochs=3, num_minibatches=2)
    state0 = (jnp.zeros(()), jnp.zeros((), jnp.int32))
    (total, steps), metrics = minibatch_epochs(sgd_step, state0, data, jax.random.key(0), config)
    assert float(total) == 84.0 and int(steps) == 6
    assert float(metrics["sum"]) == 14.0 and float(metrics["step"]) == 2.5


def test_acting_epsilon_decays_over_the_runs_updates_by_hand():
    """DQN's acting epsilon: ``epsilon_start`` before the first update, then linear to
    ``epsilon_end`` over ``exploration_fraction`` of ``max(num_updates, 1)`` updates: with 4
    updates and fraction 0.5, 1 update is half way (1 -> 0.5 * (0.2 - 1) + 1 = 0.6); a run of
    no updates counts as one, so its fraction 1.0 ends after 1 update."""
    from jrl.agents.value.common import acting_epsilon

    hp = SimpleNamespace(epsilon_start=1.0, epsilon_end=0.2, exploration_fraction=0.5)
    eps = acting_epsilon(SimpleNamespace(num_updates=4))
    at = lambda n: float(eps(SimpleNamespace(hparams=hp, num_updates=n)))
    np.testing.assert_allclose([at(0), at(1), at(2), at(3)], [1.0, 0.6, 0.2, 0.2], rtol=1e-6)
    hp.exploration_fraction = 1.0
    eps = acting_epsilon(SimpleNamespace(num_updates=0))
    np.testing.assert_allclose(at(1), 0.2, rtol=1e-6)
    np.testing.assert_allclose(at(0), 1.0, rtol=1e-6)


def test_greedy_next_actions_online_or_target_over_valid_actions():
    from jrl.agents.value.common import greedy_next_actions

    online = jnp.array([[0.0, 5.0, 1.0], [3.0, 0.0, 2.0]])
    target = jnp.array([[4.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    np.testing.assert_array_equal(greedy_next_actions(online, target, True), [1, 0])
    np.testing.assert_array_equal(greedy_next_actions(online, target, False), [0, 2])
    mask = jnp.array([[True, False, True], [False, True, True]])
    np.testing.assert_array_equal(greedy_next_actions(online, target, True, mask), [2, 2])
    np.testing.assert_array_equal(greedy_next_actions(online, target, False, mask), [0, 2])

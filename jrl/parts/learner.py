"""Learner mechanics shared by the agents (the parts layer).

- :func:`scheduled_lr`: the traced learning rate of an update, optionally
  annealed linearly to 0;
- :func:`apply_gradients`: one optimiser step with that rate (the optax chain
  of :func:`jrl.parts.optim.make_optimizer` holds no learning rate, so the rate can
  be a swept, traced value);
- :func:`minibatch_epochs`: ``num_epochs`` passes over a rollout in
  env-stratified minibatches, with the metrics averaged (over minibatches,
  epochs and devices);
- :func:`epsilon_schedule`: the exploration rate of epsilon-greedy agents.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from jrl.core import parallel
from jrl.core.types import PRNGKey, PyTree
from jrl.parts import minibatches
from jrl.parts.optim import linear_schedule

__all__ = ["apply_gradients", "epsilon_schedule", "minibatch_epochs", "scheduled_lr"]


def scheduled_lr(learning_rate, count, total: int, anneal: bool) -> jax.Array:
    """``learning_rate``, times ``1 - count / total`` (clipped to [0, 1]) when ``anneal``;
    ``count`` is the number of updates done (``[]``, traced)."""
    return learning_rate * (linear_schedule(count, 1.0, 0.0, total) if anneal else 1.0)


def apply_gradients(
    tx: optax.GradientTransformation, params: PyTree, opt_state: PyTree, grads: PyTree, lr
) -> tuple[PyTree, PyTree]:
    """``(params, opt_state)`` after one step ``params - lr * tx(grads)``."""
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, jax.tree.map(lambda u: -lr * u, updates))
    return params, opt_state


SGDStep = Callable[[Any, PyTree], tuple[Any, dict[str, jax.Array]]]
"""``sgd_step(state, minibatch) -> (state, metrics)``."""


def minibatch_epochs(
    sgd_step: SGDStep,
    state: Any,
    data: PyTree,
    key: PRNGKey,
    config: Any,
    split: Callable[[PyTree, PRNGKey, int], PyTree] = minibatches.rollout_minibatches,
) -> tuple[Any, dict[str, jax.Array]]:
    """Runs ``sgd_step`` over ``config.num_epochs`` passes of ``data`` (``[T, N, ...]``), each
    pass cut into ``config.num_minibatches`` minibatches by ``split``: by default
    :func:`jrl.parts.minibatches.rollout_minibatches` (every env's steps shuffled with its own key);
    :func:`jrl.parts.minibatches.sequence_minibatches` keeps each env's sequence whole.
    Returns the final state and every metric's mean over all minibatches (and devices)."""
    num_minibatches = config.num_minibatches

    def epoch(st, k):
        return jax.lax.scan(sgd_step, st, split(data, k, num_minibatches))

    state, metrics = jax.lax.scan(epoch, state, jax.random.split(key, config.num_epochs))
    return state, parallel.pmean(jax.tree.map(jnp.mean, metrics))


def epsilon_schedule(hp: Any, count, total_updates) -> jax.Array:
    """Epsilon after ``count`` updates: from ``hp.epsilon_start`` linearly to ``hp.epsilon_end``
    over the first ``hp.exploration_fraction`` of ``total_updates`` (all may be traced)."""
    duration = hp.exploration_fraction * total_updates
    return linear_schedule(count, hp.epsilon_start, hp.epsilon_end, duration)

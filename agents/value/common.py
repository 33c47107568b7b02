"""What DQN (:mod:`jrl.agents.value.dqn`) and its recurrent form R2D2
(:mod:`jrl.agents.value.r2d2`) share: the train state and its sweepable hyperparameters, the
contract of a value head, the bootstrap action, target-network updates and the exploration
rate the agent acts with."""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jrl.core.types import PyTree
from jrl.ops.action_distributions import masked_argmax
from jrl.parts.agent_config import ReplayConfig
from jrl.parts.learner import epsilon_schedule

__all__ = [
    "DQNHParams",
    "DQNState",
    "Head",
    "acting_epsilon",
    "greedy_next_actions",
    "update_target",
]


@struct.dataclass
class DQNHParams:
    """Hyperparameters that may be vmapped (swept) without recompiling; all [] float32."""

    learning_rate: jax.Array
    gamma: jax.Array
    epsilon_start: jax.Array
    epsilon_end: jax.Array
    exploration_fraction: jax.Array
    tau: jax.Array


@struct.dataclass
class DQNState:
    params: PyTree  # online Q-network parameters
    target_params: PyTree  # target network parameters
    opt_state: PyTree  # optax state (clipping + Adam, without the learning rate)
    hparams: DQNHParams
    num_updates: jax.Array  # [] int32 gradient updates so far (epsilon, beta, target updates)


def greedy_next_actions(q_next_online, q_next_target, double_q: bool = True, next_mask=None):
    """``[B]`` bootstrap actions: ``argmax_a Q_online(s', a)`` (double Q) or
    ``argmax_a Q_target(s', a)``,
    over the valid actions of ``s'`` (``next_mask [B, A]``) when the env masks actions."""
    return masked_argmax(q_next_online if double_q else q_next_target, next_mask)


def update_target(target_params, params, num_updates, interval: int, tau):
    """After update number ``num_updates`` (counted from 1): every ``interval`` updates
    ``target <- tau * online + (1 - tau) * target`` (``tau = 1``: a hard copy)."""
    due = (num_updates % interval) == 0
    return jax.tree.map(
        lambda t, p: jnp.where(due, tau * p + (1.0 - tau) * t, t), target_params, params
    )


class Head(NamedTuple):
    """How the Q-network's output becomes action values and a TD loss.

    ``q_values(out)``: ``[B, A(, K)] -> [B, A]``. ``loss(taken, next_target,
    reward, discount)``: the output at the action taken and the target
    network's output at the bootstrap action (``[B]`` or ``[B, K]`` each),
    n-step ``reward [B]`` and ``discount [B]`` -> (loss per item ``[B]``, new
    priority ``[B]``).
    """

    num_atoms: int  # outputs per action (1: a scalar Q-value)
    q_values: Callable
    loss: Callable


def acting_epsilon(config: ReplayConfig) -> Callable[[DQNState], jax.Array]:
    """``epsilon(agent_state)``: the exploration rate the agent acts with, ``epsilon_start``
    until the first update (the warm-up of ``learning_starts`` env steps), then decaying
    linearly to ``epsilon_end`` over the first ``exploration_fraction`` of the run's updates
    (``config``: a :class:`jrl.agents.value.dqn.DQNConfig`)."""
    total_updates = max(config.num_updates, 1)
    return lambda state: epsilon_schedule(state.hparams, state.num_updates, total_updates)

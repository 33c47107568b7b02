"""Conservative Q-learning for discrete actions, CQL(H) (Kumar et al., 2020).

A Q-network (:class:`jrl.parts.networks.QNetwork`) with a Polyak-averaged target network,
trained on the dataset's one-step transitions with the TD loss of a double DQN plus
``cql_alpha`` times the conservative term ``logsumexp_a Q(s, a) - Q(s, a_data)``
(:func:`jrl.agents.offline.common.cql_penalty`), which lowers the values of actions the data
did not take, so the greedy policy stays where the data is. The target is ``r + discount *
Q_target(s', a*)`` with ``a* = argmax_a Q(s', a)`` (``double_q``) or of ``Q_target``, and
``discount = gamma * (1 - terminated)``. The greedy ``policy`` is ``argmax_a Q``; the
behaviour policy ``act`` samples from ``softmax(Q)``, the policy CQL(H)'s regulariser
implicitly compares the data with.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jrl.agents.offline.common import (
    OfflineConfig,
    build_offline,
    cql_penalty,
    gradient_step,
    obs_ndim,
    taken,
)
from jrl.agents.value.common import greedy_next_actions, update_target
from jrl.core import parallel
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec, Learned
from jrl.parts.agent_config import NON_NEGATIVE, UNIT_INTERVAL
from jrl.parts.optim import make_optimizer
from jrl.run.builders import Built

__all__ = ["CQLConfig", "CQLHParams", "CQLState", "build", "cql_loss", "make_cql"]


@struct.dataclass
class CQLHParams:
    """The sweepable hyperparameters ([] float32)."""

    learning_rate: jax.Array
    gamma: jax.Array
    cql_alpha: jax.Array
    tau: jax.Array


@struct.dataclass
class CQLState:
    params: Any  # the Q-network
    target_params: Any  # its Polyak average
    opt_state: Any
    hparams: CQLHParams
    num_updates: jax.Array  # [] int32


@dataclasses.dataclass(frozen=True)
class CQLConfig(OfflineConfig):
    """CQL(H): a double-DQN TD loss plus cql_alpha times the conservative logsumexp term."""

    HPARAMS: ClassVar[type] = CQLHParams
    PRESETS: ClassVar[dict[str, dict]] = {"CartPole-v1": {}, "Acrobot-v1": {}}
    RANGES: ClassVar[dict] = {"cql_alpha": NON_NEGATIVE, "tau": UNIT_INTERVAL}

    cql_alpha: float = 1.0
    """Weight of the conservative term (sweepable; 0: plain offline double DQN)."""
    tau: float = 0.005
    """Polyak rate of the target network, applied after every update (sweepable; 1: a copy)."""
    double_q: bool = True
    """Bootstrap from the online network's greedy action at s' (double Q-learning)."""


def cql_loss(q, next_q_online, next_q_target, batch, alpha, double_q: bool = True):
    """CQL(H)'s loss from the network's outputs: ``q [B, A]`` at ``s``, ``next_q_online`` and
    ``next_q_target [B, A]`` at ``s'``, the batch's ``action``, ``reward`` and ``discount``
    ``[B]``. Returns ``(loss, (td_loss, penalty, q_taken))`` with ``td_loss = mean 0.5 (Q(s,
    a) - y)^2`` (``y`` without gradient) and ``loss = td_loss + alpha * penalty``."""
    q_taken = taken(q, batch.action)
    a_star = greedy_next_actions(next_q_online, next_q_target, double_q)
    y = batch.reward + batch.discount * taken(next_q_target, a_star)
    td_loss = 0.5 * jnp.mean((q_taken - jax.lax.stop_gradient(y)) ** 2)
    penalty = cql_penalty(q, batch.action)
    return td_loss + alpha * penalty, (td_loss, penalty, q_taken)


def make_cql(config: CQLConfig, spec: EnvSpec) -> tuple[Agent, Any]:
    """The CQL agent and its Q-network."""
    obs_space, num_actions = spec.value_based("cql")
    network = networks.QNetwork(
        num_actions,
        tuple(config.hidden_sizes),
        config.activation,
        obs_ndim(obs_space),
        torso=config.torso,
    )
    tx = make_optimizer("adam", config.max_grad_norm)

    def init(key, spec: EnvSpec) -> CQLState:
        params = network.init(key, networks.example_observation(spec.observation_space))
        zero = jnp.zeros((), jnp.int32)
        return CQLState(params, params, tx.init(params), config.hparams(), zero)

    def act(state, obs, key):  # a sample of softmax(Q), one key per env
        q = network.apply(state.params, obs)
        keys = parallel.local_keys(key, q.shape[0])
        return jax.vmap(jax.random.categorical)(keys, q).astype(jnp.int32), {}

    def policy(params, obs, key):
        return jnp.argmax(network.apply(params, obs), axis=-1).astype(jnp.int32)

    def loss_fn(params, target_params, batch, alpha):
        next_target = jax.lax.stop_gradient(network.apply(target_params, batch.next_observation))
        next_online = jax.lax.stop_gradient(network.apply(params, batch.next_observation))
        q = network.apply(params, batch.observation)
        loss, (td, penalty, q_taken) = cql_loss(
            q, next_online, next_target, batch, alpha, config.double_q
        )
        return loss, {"train/td_loss": td, "train/cql_penalty": penalty, "train/q": q_taken.mean()}

    def learn(state, sample, key) -> Learned:
        hp = state.hparams
        params, opt_state, metrics = gradient_step(
            tx, config, loss_fn, state, state.target_params, sample.items, hp.cql_alpha
        )
        count = state.num_updates + 1
        target = update_target(state.target_params, params, count, 1, hp.tau)
        new = CQLState(params, target, opt_state, hp, count)
        return Learned(new, metrics)

    return Agent(init=init, act=act, learn=learn, policy=policy), network


def build(config: CQLConfig, env, env_params, num_devices: int = 1) -> Built:
    """CQL on ``env`` (Discrete actions) from ``config.dataset``."""
    return build_offline(config, env, env_params, num_devices, make_cql)

"""Implicit Q-learning for discrete actions (Kostrikov et al., 2022).

Three networks learn together from the dataset's one-step transitions, never querying an
action the data did not take:

- ``V(s)`` by expectile regression towards the target network's ``Q(s, a_data)``
  (:func:`jrl.agents.offline.common.expectile_loss`, ``expectile`` > 0.5 leans towards the
  best actions in the data);
- ``Q(s, a)`` towards ``r + discount * V(s')`` (``discount = gamma * (1 - terminated)``), with
  a Polyak-averaged target copy;
- the policy, a categorical, by advantage-weighted log-likelihood of the data's actions, the
  weights ``min(exp(beta * (Q_target(s, a) - V(s))), max_weight)``
  (:func:`jrl.agents.offline.common.weighted_log_likelihood_loss`).

The three losses are summed into one gradient step: each loss's gradient reaches only its
own network (the cross terms carry no gradient), but the three share one optimiser, so
``max_grad_norm`` clips their global norm together (the paper's code steps three optimisers
without clipping; a large Q gradient here shortens the V and policy steps). The greedy
``policy`` is the policy's most likely action; ``act`` samples from it. (One Q-network,
where the paper's continuous version takes the minimum of two.)
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
    expectile_loss,
    gradient_step,
    obs_ndim,
    taken,
    weighted_log_likelihood_loss,
)
from jrl.agents.value.common import update_target
from jrl.core import parallel
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec, Learned
from jrl.parts.agent_config import NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, Range
from jrl.parts.optim import make_optimizer
from jrl.run.builders import Built

__all__ = ["IQLConfig", "IQLHParams", "IQLState", "build", "iql_loss", "make_iql"]


@struct.dataclass
class IQLHParams:
    """The sweepable hyperparameters ([] float32)."""

    learning_rate: jax.Array
    gamma: jax.Array
    expectile: jax.Array
    beta: jax.Array
    tau: jax.Array


@struct.dataclass
class IQLState:
    params: Any  # {"q", "v", "policy"}: the three networks' parameters
    target_params: Any  # the Q-network's Polyak average
    opt_state: Any
    hparams: IQLHParams
    num_updates: jax.Array  # [] int32


@dataclasses.dataclass(frozen=True)
class IQLConfig(OfflineConfig):
    """IQL: expectile V, Q towards r + gamma V(s'), advantage-weighted policy extraction."""

    HPARAMS: ClassVar[type] = IQLHParams
    PRESETS: ClassVar[dict[str, dict]] = {"CartPole-v1": {}, "Acrobot-v1": {}}
    RANGES: ClassVar[dict] = {
        "expectile": Range(0.0, 1.0, low_open=True, high_open=True),
        "beta": NON_NEGATIVE,
        "tau": UNIT_INTERVAL,
        "max_weight": POSITIVE,
    }

    expectile: float = 0.7
    """The expectile V regresses to, in (0, 1) (sweepable; 0.5: the mean, V = the data's value)."""
    beta: float = 3.0
    """Inverse temperature of the advantage weights (sweepable; 0: plain behaviour cloning)."""
    max_weight: float = 100.0
    """Upper clip of the advantage weights exp(beta * A)."""
    tau: float = 0.005
    """Polyak rate of the target Q-network, after every update (sweepable)."""


def iql_loss(q, q_target, v, v_next, log_probs, batch, hp, max_weight: float):
    """IQL's three losses from the networks' outputs: ``q`` and ``q_target [B, A]`` at ``s``,
    ``v`` and ``v_next [B]`` at ``s`` and ``s'``, the policy's ``log_probs [B, A]``, the
    batch's ``action``, ``reward``, ``discount`` ``[B]``, and ``hp`` (``expectile``,
    ``beta``). Returns ``(loss, parts)``: the sum of the value loss (expectile of
    ``Q_target(s, a) - V(s)``), the Q loss (``0.5 (Q(s, a) - r - discount V(s'))^2``) and the
    policy loss (advantage-weighted log-likelihood), with ``parts`` holding each and the
    weights."""
    sg = jax.lax.stop_gradient
    q_data = sg(taken(q_target, batch.action))
    v_loss = expectile_loss(q_data - v, hp.expectile)
    y = batch.reward + batch.discount * sg(v_next)
    q_loss = 0.5 * jnp.mean((taken(q, batch.action) - y) ** 2)
    pi_loss, w = weighted_log_likelihood_loss(
        log_probs, batch.action, q_data - sg(v), hp.beta, max_weight
    )
    return v_loss + q_loss + pi_loss, {"v": v_loss, "q": q_loss, "policy": pi_loss, "w": w}


class IQLNetworks:
    """The Q-network, the value network (a one-output Q-network) and the policy."""

    def __init__(self, config: IQLConfig, obs_space, num_actions: int):
        sizes, act, nd = tuple(config.hidden_sizes), config.activation, obs_ndim(obs_space)
        self.q = networks.QNetwork(num_actions, sizes, act, nd, torso=config.torso)
        self.v = networks.QNetwork(1, sizes, act, nd, torso=config.torso)
        self.policy = networks.CategoricalActor(num_actions, sizes, act, nd, config.torso)

    def init(self, key, obs) -> dict:
        kq, kv, kp = jax.random.split(key, 3)
        return {
            "q": self.q.init(kq, obs),
            "v": self.v.init(kv, obs),
            "policy": self.policy.init(kp, obs),
        }

    def value(self, params, obs):
        return self.v.apply(params["v"], obs)[..., 0]

    def apply(self, params, obs):
        """The policy's distribution (what evaluation and export call a network for)."""
        return self.policy.apply(params["policy"], obs)


def make_iql(config: IQLConfig, spec: EnvSpec) -> tuple[Agent, Any]:
    """The IQL agent and its networks."""
    obs_space, num_actions = spec.value_based("iql")
    nets = IQLNetworks(config, obs_space, num_actions)
    tx = make_optimizer("adam", config.max_grad_norm)

    def init(key, spec: EnvSpec) -> IQLState:
        params = nets.init(key, networks.example_observation(spec.observation_space))
        zero = jnp.zeros((), jnp.int32)
        return IQLState(params, params["q"], tx.init(params), config.hparams(), zero)

    def act(state, obs, key):  # a sample of the policy, one key per env
        log_probs = nets.apply(state.params, obs).log_probs
        keys = parallel.local_keys(key, log_probs.shape[0])
        return jax.vmap(jax.random.categorical)(keys, log_probs).astype(jnp.int32), {}

    def policy(params, obs, key):
        return nets.apply(params, obs).mode()

    def loss_fn(params, target_q, batch, hp):
        loss, parts = iql_loss(
            nets.q.apply(params["q"], batch.observation),
            nets.q.apply(target_q, batch.observation),
            nets.value(params, batch.observation),
            nets.value(params, batch.next_observation),
            nets.apply(params, batch.observation).log_probs,
            batch,
            hp,
            config.max_weight,
        )
        names = ("v", "q", "policy")
        metrics = {f"train/{n}_loss": parts[n] for n in names}
        return loss, {**metrics, "train/weight": parts["w"].mean()}

    def learn(state, sample, key) -> Learned:
        hp = state.hparams
        params, opt_state, metrics = gradient_step(
            tx, config, loss_fn, state, state.target_params, sample.items, hp
        )
        count = state.num_updates + 1
        target = update_target(state.target_params, params["q"], count, 1, hp.tau)
        return Learned(IQLState(params, target, opt_state, hp, count), metrics)

    return Agent(init=init, act=act, learn=learn, policy=policy), nets


def build(config: IQLConfig, env, env_params, num_devices: int = 1) -> Built:
    """IQL on ``env`` (Discrete actions) from ``config.dataset``."""
    return build_offline(config, env, env_params, num_devices, make_iql)

"""Behaviour cloning (BC): a policy fitted by maximum likelihood to the dataset's actions.

The policy is a categorical over the Discrete actions
(:class:`jrl.parts.networks.CategoricalActor`), trained with the cross-entropy
``-mean log pi(a | s)`` of the dataset's ``(s, a)`` pairs
(:func:`jrl.agents.offline.common.log_likelihood_loss`); rewards are not used, so BC copies
whatever behaviour wrote the dataset, an expert's or a mixture's. The greedy ``policy`` is the
most likely action; the behaviour policy ``act`` samples from the categorical.
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
    gradient_step,
    log_likelihood_loss,
    obs_ndim,
)
from jrl.core import parallel
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec, Learned
from jrl.parts.optim import make_optimizer
from jrl.run.builders import Built

__all__ = ["BCConfig", "BCHParams", "BCState", "build", "make_bc"]


@struct.dataclass
class BCHParams:
    """The sweepable hyperparameters ([] float32)."""

    learning_rate: jax.Array


@struct.dataclass
class BCState:
    params: Any  # the policy network's parameters
    opt_state: Any
    hparams: BCHParams
    num_updates: jax.Array  # [] int32


@dataclasses.dataclass(frozen=True)
class BCConfig(OfflineConfig):
    """Behaviour cloning: cross-entropy on the dataset's actions."""

    HPARAMS: ClassVar[type] = BCHParams
    PRESETS: ClassVar[dict[str, dict]] = {"CartPole-v1": {}, "Acrobot-v1": {}}

    def checks(self):
        """Also that ``gamma`` is left alone: cloning uses no rewards, so a value would be
        ignored silently."""
        default = next(f.default for f in dataclasses.fields(self) if f.name == "gamma")
        return super().checks() + [
            (
                self.gamma == default,
                f"bc learns no values: gamma is not used (got {self.gamma}; leave it out)",
            )
        ]


def make_bc(config: BCConfig, spec: EnvSpec) -> tuple[Agent, Any]:
    """The BC agent and its policy network."""
    obs_space, num_actions = spec.value_based("bc")
    network = networks.CategoricalActor(
        num_actions,
        tuple(config.hidden_sizes),
        config.activation,
        obs_ndim(obs_space),
        config.torso,
    )
    tx = make_optimizer("adam", config.max_grad_norm)

    def init(key, spec: EnvSpec) -> BCState:
        params = network.init(key, networks.example_observation(spec.observation_space))
        zero = jnp.zeros((), jnp.int32)
        return BCState(params, tx.init(params), config.hparams(), zero)

    def act(state, obs, key):  # a sample of the categorical, one key per env
        log_probs = network.apply(state.params, obs).log_probs  # [N, A]
        keys = parallel.local_keys(key, log_probs.shape[0])
        return jax.vmap(jax.random.categorical)(keys, log_probs).astype(jnp.int32), {}

    def policy(params, obs, key):
        return network.apply(params, obs).mode()

    def loss_fn(params, batch):
        dist = network.apply(params, batch.observation)
        loss = log_likelihood_loss(dist.log_probs, batch.action)
        agree = jnp.mean(dist.mode() == batch.action.astype(jnp.int32))
        return loss, {"train/entropy": dist.entropy().mean(), "train/accuracy": agree}

    def learn(state, sample, key) -> Learned:
        params, opt_state, metrics = gradient_step(tx, config, loss_fn, state, sample.items)
        count = state.num_updates + 1
        return Learned(
            state.replace(params=params, opt_state=opt_state, num_updates=count), metrics
        )

    return Agent(init=init, act=act, learn=learn, policy=policy), network


def build(config: BCConfig, env, env_params, num_devices: int = 1) -> Built:
    """BC on ``env`` (Discrete actions) from ``config.dataset``."""
    return build_offline(config, env, env_params, num_devices, make_bc, discount=_no_discount)


def _no_discount(agent_state):
    return jnp.ones((), jnp.float32)  # BC uses no rewards, so no discount either

"""Soft Actor-Critic for discrete actions: a categorical actor with SAC's critics and temperature.

After Christodoulou (2019), "Soft Actor-Critic for Discrete Action Settings". With finitely
many actions the expectations over the policy that SAC estimates from one sampled action are
exact sums, so nothing is reparameterised:

- critics: ``num_critics`` Q-networks as one vmapped module
  (:class:`~jrl.parts.networks.DiscreteQEnsemble`), each giving ``Q_n(s, .)`` for every
  action and regressing, at the replayed action, on ``r + discount * V'(s')`` with the soft
  value ``V'(s') = sum_a pi(a | s') [min_n Q'_n(s', a) - alpha log pi(a | s')]``
  (:func:`soft_value`; the minimum over ``target_critics`` of them drawn per update with REDQ's
  subsets), Polyak-averaged targets (``tau``);
- actor: minimises ``sum_a pi(a | s) [alpha log pi(a | s) - min_n Q_n(s, a)]``
  (:func:`actor_loss`; the critics' mean with ``actor_q="mean"``), with the critics just
  updated;
- temperature: ``alpha = alpha_0 exp(d)``, ``d`` learned by SAC's
  :func:`~jrl.agents.continuous.sac.alpha_loss` with ``-log pi`` replaced by the policy's
  entropy, towards ``target_entropy_scale * log |A_s|`` (``|A_s|`` the valid actions of the
  state: all of them, or those of its action mask). The default scale is 0.5. The paper's
  0.98 asks for a nearly uniform policy (on two actions an entropy of 0.98 log 2 is a 59/41
  split), which keeps the temperature rising where good policies are nearly deterministic;
  CleanRL's Atari agent takes 0.89. 0.5 (an 89/11 split of two actions, about 85% on the
  likeliest of three) still tries every action; on Acrobot-v1 (1e5 steps, 4 seeds from 1000,
  2026-12-05) 0.89 left every seed at -500 and 0.5 half of them.

A masked env's observation ``{"observation", "action_mask"}`` gives invalid actions
probability 0 in acting, in the soft value and in the actor's loss, and the critics see only
the observation. Before the first update the agent acts uniformly over the valid actions.

The train state, the update order and the optimisers are SAC's
(:func:`jrl.agents.continuous.sac.make_soft_learn`); the loop is
:func:`jrl.run.loops.off_policy` (a truncated episode bootstraps from its final observation).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from jrl.agents.continuous.common import (
    build_replay_agent,
    critic_loss,
    critic_subset,
    critic_target,
    subset_key,
)
from jrl.agents.continuous.sac import SACConfig, SACState, make_soft_init, make_soft_learn
from jrl.core import parallel, spaces
from jrl.core.types import split_action_mask
from jrl.ops.action_distributions import masked_argmax
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec
from jrl.parts.agent_config import Check, Range
from jrl.parts.optim import make_optimizer
from jrl.run.builders import Built

__all__ = [
    "SACDiscreteConfig",
    "actor_loss",
    "build",
    "entropy_unit",
    "make_sac_discrete",
    "make_sac_discrete_losses",
    "soft_value",
]


def _reduce(q, ensemble: str) -> jax.Array:
    """``[..., A]``: the critics' minimum (``"min"``) or mean (``"mean"``) of ``q [N, ..., A]``."""
    return jnp.mean(q, axis=0) if ensemble == "mean" else jnp.min(q, axis=0)


def soft_value(next_q, probs, entropy, alpha) -> jax.Array:
    """``[B]`` soft values ``sum_a pi(a | s) min_n Q_n(s, a) + alpha H(pi(. | s))``, which is
    ``sum_a pi(a | s) [min_n Q_n(s, a) - alpha log pi(a | s)]``; ``next_q [N, B, A]`` (the
    target critics), ``probs [B, A]`` (0 for masked actions), ``entropy [B]`` (over the valid
    actions)."""
    return jnp.sum(probs * jnp.min(next_q, axis=0), axis=-1) + alpha * entropy


def actor_loss(probs, entropy, q, alpha, ensemble: str = "min") -> jax.Array:
    """``mean_b sum_a pi(a | s_b) [alpha log pi(a | s_b) - Q(s_b, a)]``, written ``mean_b
    (-alpha H(pi(. | s_b)) - sum_a pi(a | s_b) Q(s_b, a))`` (``probs [B, A]``, ``entropy [B]``,
    ``q [N, B, A]``; ``alpha`` takes no gradient), with ``Q`` the critics' minimum
    (``ensemble="min"``) or mean (``"mean"``)."""
    expected_q = jnp.sum(probs * _reduce(q, ensemble), axis=-1)
    return jnp.mean(-jax.lax.stop_gradient(alpha) * entropy - expected_q)


def entropy_unit(obs, num_actions: int) -> jax.Array:
    """``log |A_s|``, the largest entropy of a policy in state ``s``: ``[B]`` from the action
    masks of masked observations ``obs`` (their valid actions; 0 where one is valid), else
    ``[]`` ``log num_actions``."""
    _, mask = split_action_mask(obs)
    if mask is None:
        return jnp.log(jnp.asarray(num_actions, jnp.float32))
    return jnp.log(jnp.sum(mask, axis=-1).astype(jnp.float32))


def make_sac_discrete_losses(actor, critic, subset: int = 0, ensemble: str = "min"):
    """``(critic_loss_fn, actor_loss_fn)`` of discrete SAC (the signatures of
    :func:`jrl.agents.continuous.sac.make_soft_learn`).

    ``critic_loss_fn(critic_params, state, batch, alpha, key) -> (loss, q [N, B])``: the
    critics' squared error at the replayed action to ``r + discount * V'(s')``
    (:func:`soft_value` over the current actor and the target critics, their minimum over
    ``subset`` of them drawn from ``key``, 0: all); ``actor_loss_fn(actor_params,
    critic_params, obs, alpha, key) -> (loss, -entropy [B])``: :func:`actor_loss`."""

    def critic_loss_fn(critic_params, state: SACState, batch, alpha, key):
        _, k_subset = subset_key(key, subset)
        next_dist = actor.apply(state.params["actor"], batch.next_observation)
        next_obs, _ = split_action_mask(batch.next_observation)
        next_q = critic_subset(critic.apply(state.target_critic, next_obs), k_subset, subset)
        value = soft_value(next_q, next_dist.probs, next_dist.entropy(), alpha)
        target = critic_target(batch.reward, batch.discount, value[None])
        obs, _ = split_action_mask(batch.observation)
        q_all = critic.apply(critic_params, obs)  # [N, B, A]
        action = batch.action.astype(jnp.int32)
        q = jnp.take_along_axis(q_all, action[None, :, None], axis=-1).squeeze(-1)  # [N, B]
        return critic_loss(q, target), q

    def actor_loss_fn(actor_params, critic_params, obs, alpha, key):
        del key
        dist = actor.apply(actor_params, obs)
        q = critic.apply(critic_params, split_action_mask(obs)[0])
        entropy = dist.entropy()
        return actor_loss(dist.probs, entropy, q, alpha, ensemble), -entropy

    return critic_loss_fn, actor_loss_fn


def _acting(actor):
    """``(act, policy)``: sampling from the actor (uniform over the valid actions before the
    first update), one Gumbel draw per env from :func:`jrl.core.parallel.local_keys` (so D
    devices draw what one does), and the greedy (most likely valid) action."""

    def act(state: SACState, obs, key):
        dist = actor.apply(state.params["actor"], obs)
        log_probs = dist.log_probs  # [N, A]
        keys = parallel.local_keys(key, log_probs.shape[0])
        gumbel = jax.vmap(lambda k: jax.random.gumbel(k, log_probs.shape[-1:]))(keys)
        sampled = masked_argmax(log_probs + gumbel, dist.mask)  # Gumbel-max: a draw from pi
        uniform = masked_argmax(gumbel, dist.mask)
        return jnp.where(state.num_updates > 0, sampled, uniform), {}

    def policy(params, obs, key):
        del key
        return actor.apply(params["actor"], obs).mode()

    return act, policy


def make_sac_discrete(actor, critic, num_actions: int, config: "SACDiscreteConfig") -> Agent:
    """The discrete SAC agent (see the module docstring) for ``actor`` (a
    :class:`~jrl.parts.networks.CategoricalActor`) and ``critic`` (a
    :class:`~jrl.parts.networks.DiscreteQEnsemble`) over ``num_actions`` actions."""
    tx = make_optimizer("adam", config.max_grad_norm)

    def init_params(key, spec: EnvSpec) -> dict:
        k_actor, k_critic = jax.random.split(key)
        obs = networks.example_observation(spec.observation_space)
        return {
            "actor": actor.init(k_actor, obs),
            "critic": critic.init(k_critic, split_action_mask(obs)[0]),
        }

    init = make_soft_init(init_params, tx, config.hparams())
    act, policy = _acting(actor)
    losses = make_sac_discrete_losses(actor, critic, config.target_subset, config.actor_q)
    learn = make_soft_learn(*losses, config, lambda obs: entropy_unit(obs, num_actions))
    return Agent(init=init, act=act, learn=learn, policy=policy)


CLASSIC_CONTROL = {
    "total_steps": 50_000,
    "num_envs": 4,
    "learning_starts": 1_000,
    "buffer_size": 50_000,
    "batch_size": 128,
    "learning_rate": 1e-3,
    "hidden_sizes": (64, 64),
    "alpha": 0.1,
    "tau": 0.02,
}
"""Discrete SAC on CartPole-v1: 5e4 steps of 4 envs, one update of 128 per 4 env steps from 1e3
random steps on, a replay that holds the whole run, 64-64 networks (a 4-dimensional observation
needs no more) at Adam 1e-3; the temperature starts at 0.1, the size of a step's reward (at
1.0 the entropy bonus, up to log |A| per step, outweighs the reward until the temperature has
fallen), and the targets move 4 times faster than SAC's 0.005 (at 0.005, after 5e4 steps,
Acrobot-v1's critics had come to -43 of the -100 that the unsuccessful episodes are worth, and
no seed learned). 8 seeds: a training return of 246 +- 33 after 5e4 steps
(BENCHMARKS.md "Learning reach", tests/test_sac_discrete.py)."""

ACROBOT = {**CLASSIC_CONTROL, "total_steps": 100_000, "buffer_size": 100_000}
"""Discrete SAC on Acrobot-v1: the CartPole preset for 1e5 steps (DQN's Acrobot budget). At
this budget about half the seeds learn (2 of 4 seeds from 1000, 2026-12-05: -97 and -118);
the others never reach the goal once their policy has sharpened, and stay at -500."""


@dataclasses.dataclass(frozen=True)
class SACDiscreteConfig(SACConfig):
    """Discrete SAC settings: SAC's (2 critics, Polyak rate 0.005, temperature tuned from 1.0,
    Adam 3e-4) with a target entropy of ``0.5 log |A|`` (see the module docstring)."""

    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Discrete,)
    Q_OF_ACTION: ClassVar[bool] = False
    RANGES: ClassVar[dict[str, Range]] = {
        **SACConfig.RANGES,
        "target_entropy_scale": Range(0.0, 1.0, high_open=True),
    }
    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": CLASSIC_CONTROL,
        "Acrobot-v1": ACROBOT,
    }

    target_entropy_scale: float = 0.5
    """Target entropy as a fraction, in [0, 1), of the largest, ``log |A_s|`` of a state's
    valid actions: target = target_entropy_scale * log |A_s| (sweepable; the paper: 0.98)."""

    def env_checks(self, action_space, agent: str = "this agent") -> list[Check]:
        return []

    def make_agent(self, num_actions: int, obs_ndim: int) -> tuple[Agent, tuple]:
        """``(agent, (actor, critic ensemble))`` for ``num_actions`` actions and observations
        of ``obs_ndim`` dimensions."""
        actor = networks.CategoricalActor(
            num_actions, tuple(self.hidden_sizes), self.activation, obs_ndim, self.torso
        )
        critic = networks.DiscreteQEnsemble(
            num_actions,
            self.num_critics,
            tuple(self.hidden_sizes),
            self.activation,
            obs_ndim,
            self.torso,
        )
        return make_sac_discrete(actor, critic, num_actions, self), (actor, critic)


def build(config: SACDiscreteConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles discrete SAC on ``env`` (a Discrete action space, with or without an action
    mask in the observation)."""
    config.validate()
    EnvSpec.from_env(env, env_params).value_based("sac_discrete")  # refused before wrapping

    def make_agent(spec: EnvSpec):  # from the training env's spec, as build_continuous does
        obs_space, num_actions = spec.value_based("sac_discrete")
        return config.make_agent(num_actions, max(len(obs_space.shape), 1))

    return build_replay_agent(config, env, env_params, num_devices, "sac_discrete", make_agent)

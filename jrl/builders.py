"""Assembly of an agent, its wrapped env and its training loop (layer 6).

Every agent module's ``build(config, env, env_params, num_devices=1)``
returns a :class:`Built`: the :class:`~jrl.loops.Algorithm` the runner
compiles, plus the agent, the training env and the network that evaluation
and rendering need. :func:`build_on_policy` is the whole of ``build`` for
the actor-critic agents (PPO, A2C), which differ only in their loss.

This sits above :mod:`jrl.loops` because it builds loops; the agents
themselves (:mod:`jrl.actor_critic`, layer 5) know nothing of loops.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jrl import config as cfg
from jrl import networks, spaces
from jrl.actor_critic import ActorCriticConfig, LossFn, make_actor_critic
from jrl.agent import Agent, EnvSpec
from jrl.loops import Algorithm, on_policy
from jrl.wrappers import ClipAction, wrap_for_training

__all__ = ["Built", "build_on_policy"]


@dataclasses.dataclass(frozen=True)
class Built:
    """An assembled experiment: the algorithm and what evaluation needs."""

    algorithm: Algorithm
    agent: Agent
    env: Any  # the training env (batched, wrapped)
    env_params: Any
    spec: EnvSpec
    network: Any = None  # the flax module (``apply(params, obs)`` -> (distribution, value))


def build_on_policy(
    config: ActorCriticConfig, env, env_params, loss_fn: LossFn, num_devices: int = 1
) -> Built:
    """Wraps ``env`` for training, builds the network and agent, returns the loop.

    With ``num_devices > 1`` each device steps ``num_envs / num_devices`` envs
    (the loop must then run sharded, see :func:`jrl.run.anakin.run`).
    """
    config.validate()
    local_envs = cfg.envs_per_device(config.num_envs, num_devices)
    action_space = env.action_space(env_params)
    if isinstance(action_space, spaces.Box) and config.continuous == "normal":
        env = ClipAction(env)
    env = wrap_for_training(
        env,
        local_envs,
        normalize_observation=config.normalize_observations,
        normalize_reward=config.normalize_rewards,
        gamma=config.gamma,
    )
    spec = EnvSpec.from_env(env, env_params)
    obs_ndim = max(len(spec.observation_space.shape), 1)
    network = networks.ActorCritic(
        spec.action_space,
        tuple(config.hidden_sizes),
        config.activation,
        obs_ndim,
        config.continuous,
        config.init_log_std,
    )
    agent = make_actor_critic(
        network,
        loss_fn,
        config.hparams(),
        num_epochs=config.num_epochs,
        num_minibatches=config.num_minibatches,
        total_learn_steps=config.num_iterations,
        anneal_lr=config.anneal_lr,
        normalize_advantages=config.normalize_advantages,
        max_grad_norm=config.max_grad_norm,
        optimizer=config.optimizer,
    )
    return Built(
        on_policy(agent, env, config.num_steps, env_params, num_devices),
        agent,
        env,
        env_params,
        spec,
        network,
    )

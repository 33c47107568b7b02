"""Multi-agent actor-critic learning: what IPPO and MAPPO share.

A team of ``A`` agents (:class:`jrl.core.multi_agent_env.MultiAgentEnvironment`) is learned by the
same
on-policy actor-critic agent as PPO (:func:`jrl.agents.actor_critic.common.make_actor_critic`) and
the same
on-policy loop (:func:`jrl.run.loops.on_policy`), with the agent axis carried as a trailing
batch axis: a rollout is ``[T, N, A]`` (rewards, flags, log-probs, values, actions
``[T, N, A, ...]``), minibatches ``[M, A]``, and every loss term is a mean over both. What
is specific to a team:

- :class:`MultiAgentActorCritic`, the network: actors on each agent's own observation (one
  set of parameters shared by all agents, or one set per agent) and a critic that is
  either local (per agent, on its own observation: IPPO) or centralised (one network on
  the global state with one value per agent: MAPPO). Per-agent action masks come with
  the observation;
- :func:`agent_gae`: GAE per agent (:func:`jrl.ops.returns.gae_advantages` with the agents as
  columns of the batch);
- :func:`build_multi_agent`: the env wrapped for training with the agent view
  (:func:`jrl.core.multi_agent_env.wrap_agents_for_training`), the network, the agent and the loop.
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jrl.agents.actor_critic.common import ActorCriticConfig, LossFn, make_actor_critic

from jrl.core import spaces
from jrl.core.multi_agent_env import GLOBAL_STATE, is_multi_agent, wrap_agents_for_training
from jrl.core.types import ACTION_MASK, OBSERVATION, Transition
from jrl.core.wrappers import ClipAction
from jrl.ops import returns
from jrl.parts.agent import EnvSpec
from jrl.parts.agent_config import envs_per_device
from jrl.parts.networks import PolicyHead
from jrl.parts.torsos import make_torso
from jrl.run.builders import Built
from jrl.run.loops import on_policy

__all__ = ["MultiAgentActorCritic", "agent_gae", "build_multi_agent", "multi_agent_checks"]


def agent_gae(rollout: Transition, bootstrap_values: jax.Array, hp: Any):
    """GAE (``hp.gamma``, ``hp.gae_lambda``) of every agent: ``rollout`` ``[T, N, A]``
    (``extras["value"]`` included) and ``bootstrap_values`` ``[T, N, A]`` ->
    ``(advantages, value_targets)`` ``[T, N, A]``; each agent's episode ends where its own
    ``terminated``/``truncated`` say."""
    shape = rollout.reward.shape
    flat = lambda x: jnp.reshape(x, (shape[0], -1))
    adv, target = returns.gae_advantages(
        flat(rollout.reward),
        flat(rollout.extras["value"]),
        flat(bootstrap_values),
        flat(rollout.terminated),
        flat(rollout.truncated),
        hp.gamma,
        hp.gae_lambda,
    )
    return jnp.reshape(adv, shape), jnp.reshape(target, shape)


class _Actor(nn.Module):
    """One agent's policy: ``obs [..., *obs_shape] -> distribution [...]``."""

    action_space: spaces.Space
    hidden_sizes: Sequence[int]
    activation: str
    obs_ndim: int
    torso: str
    continuous: str
    init_log_std: float

    @nn.compact
    def __call__(self, obs, mask=None):
        features = make_torso(self.torso, self.hidden_sizes, self.activation, self.obs_ndim)(obs)
        return PolicyHead(self.action_space, self.continuous, self.init_log_std)(features, mask)


class _Critic(nn.Module):
    """``x [..., *shape] -> value [...]`` (``outputs = 0``) or ``[..., outputs]``."""

    hidden_sizes: Sequence[int]
    activation: str
    obs_ndim: int
    torso: str
    outputs: int = 0

    @nn.compact
    def __call__(self, x):
        features = make_torso(self.torso, self.hidden_sizes, self.activation, self.obs_ndim)(x)
        head = nn.Dense(
            max(self.outputs, 1),
            kernel_init=nn.initializers.orthogonal(1.0),
            bias_init=nn.initializers.zeros,
        )
        value = head(features)
        return value[..., 0] if self.outputs == 0 else value


def _stack(outputs: list, axis: int):
    """Per-agent outputs (pytrees of equal structure) stacked on ``axis``."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves, axis=axis), *outputs)


class MultiAgentActorCritic(nn.Module):
    """``team observation -> (distribution [..., A], value [..., A])`` for a team of
    ``num_agents`` agents acting in ``action_space`` (one agent's).

    The team observation is the dict of :mod:`jrl.core.multi_agent_env`: ``"observation" [..., A,
    *obs_shape]``, ``"global_state" [..., S]`` and, optionally, ``"action_mask" [..., A,
    n]``. ``share_parameters``: one actor (and local critic) for all agents, else one per
    agent. ``centralised_critic``: the values come from one critic on the global state (one
    output per agent) instead of each agent's critic on its own observation.
    """

    action_space: spaces.Space
    num_agents: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1
    torso: str = "mlp"
    continuous: str = "normal"
    init_log_std: float = 0.0
    share_parameters: bool = True
    centralised_critic: bool = False

    def setup(self):
        common = dict(hidden_sizes=self.hidden_sizes, activation=self.activation)
        copies = 1 if self.share_parameters else self.num_agents
        self.actors = [
            _Actor(
                action_space=self.action_space,
                obs_ndim=self.obs_ndim,
                torso=self.torso,
                continuous=self.continuous,
                init_log_std=self.init_log_std,
                **common,
            )
            for _ in range(copies)
        ]
        if self.centralised_critic:
            self.critic = _Critic(obs_ndim=1, torso="mlp", outputs=self.num_agents, **common)
        else:
            self.critics = [
                _Critic(obs_ndim=self.obs_ndim, torso=self.torso, **common) for _ in range(copies)
            ]

    def __call__(self, obs):
        return self.policy(obs), self.value(obs)

    def _batch_ndim(self, obs) -> int:
        return obs[OBSERVATION].ndim - self.obs_ndim - 1

    def policy(self, obs):
        """The agents' action distribution, batched ``[..., A]``."""
        x, mask = obs[OBSERVATION], obs.get(ACTION_MASK)
        if self.share_parameters:
            return self.actors[0](x, mask)
        nb = self._batch_ndim(obs)
        agent = lambda t, i: None if t is None else jnp.take(t, i, axis=nb)
        dists = [actor(agent(x, i), agent(mask, i)) for i, actor in enumerate(self.actors)]
        return _stack(dists, nb)

    def value(self, obs) -> jax.Array:
        """``[..., A]`` every agent's value."""
        if self.centralised_critic:
            return self.critic(obs[GLOBAL_STATE])
        x = obs[OBSERVATION]
        if self.share_parameters:
            return self.critics[0](x)
        nb = self._batch_ndim(obs)
        return _stack([c(jnp.take(x, i, axis=nb)) for i, c in enumerate(self.critics)], -1)


def multi_agent_checks(config: ActorCriticConfig, agent: str) -> list[tuple[bool, str]]:
    """The actor-critic options a team learner does not support, as config checks."""
    return [
        (config.recurrent == "none", f"{agent} has no recurrent core (recurrent must be 'none')"),
        (
            not (config.normalize_observations or config.normalize_rewards),
            f"{agent} does not normalise observations or rewards "
            "(normalize_observations and normalize_rewards must be False)",
        ),
        (not config.shared_torso, f"{agent} keeps actor and critic apart (no shared_torso)"),
    ]


def build_multi_agent(
    config: ActorCriticConfig,
    env,
    env_params,
    loss_fn: LossFn,
    *,
    share_parameters: bool,
    centralised_critic: bool,
    agent_name: str,
    num_devices: int = 1,
) -> Built:
    """Assembles a team actor-critic learner on the multi-agent ``env`` (as
    :func:`jrl.envs.make` returns it): ``num_envs / num_devices`` envs per device with the
    agent view, :class:`MultiAgentActorCritic`, :func:`make_actor_critic` with ``loss_fn``
    and :func:`agent_gae`, and :func:`jrl.run.loops.on_policy`. ``ValueError`` (naming
    ``agent_name``) for a single-agent env."""
    if not is_multi_agent(env):
        raise ValueError(
            f"{agent_name} trains a team of agents and needs a multi-agent env "
            f"(Coordination-v0, jaxmarl:<name>), got the single-agent {env.id}"
        )
    config.validate()
    team = env.unwrapped
    agent_space = team.agent_action_space(env_params)
    if isinstance(agent_space, spaces.Box) and config.continuous == "normal":
        env = ClipAction(env)
    # a local critic never reads the global state: the rollout leaves it out
    num_envs = envs_per_device(config.num_envs, num_devices)
    env = wrap_agents_for_training(env, num_envs, global_state=centralised_critic)
    spec = EnvSpec.from_env(env, env_params)
    obs_shape = team.agent_observation_space(env_params).shape
    network = MultiAgentActorCritic(
        agent_space,
        team.num_agents,
        tuple(config.hidden_sizes),
        config.activation,
        max(len(obs_shape), 1),
        config.torso,
        config.continuous,
        config.init_log_std,
        share_parameters,
        centralised_critic,
    )
    agent = make_actor_critic(network, loss_fn, config, agent_gae)
    algorithm = on_policy(agent, env, config.num_steps, env_params, num_devices)
    return Built(algorithm, agent, env, env_params, spec, network)

"""Assembly of an agent, its wrapped env and its training loop (layer 6).

Every agent's ``build(config, env, env_params, num_devices=1)`` returns a
:class:`Built`: the :class:`~jrl.loops.Algorithm` the runner compiles, plus
the agent, the training env and the network that evaluation and rendering
need. The steps every build shares are here: :func:`training_env` (validate
the config, split the envs over devices, wrap the env for training) and
:func:`build_on_policy`, the whole of ``build`` for the actor-critic agents
(PPO, A2C, REINFORCE), which differ only in their loss, their
hyperparameters and, optionally, their advantage estimator.

This sits above :mod:`jrl.loops` because it builds loops; the agents
themselves (:mod:`jrl.actor_critic`, layer 5) know nothing of loops.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

from jrl import buffers, networks, spaces
from jrl.actor_critic import ActorCriticConfig, AdvantageFn, LossFn, make_actor_critic
from jrl.agent import Agent, EnvSpec
from jrl.config import AgentConfig, envs_per_device
from jrl.continuous import ActionScale, ContinuousConfig
from jrl.loops import Algorithm, ReplaySchedule, ReplayUpdates, off_policy, on_policy
from jrl.wrappers import ClipAction, wrap_for_training

__all__ = ["ActorReplay", "Built", "build_continuous", "build_on_policy", "training_env"]


@dataclasses.dataclass(frozen=True)
class Built:
    """An assembled experiment: the algorithm and what evaluation needs."""

    algorithm: Algorithm
    agent: Agent
    env: Any  # the training env (batched, wrapped)
    env_params: Any
    spec: EnvSpec
    network: Any = None  # the flax module (``apply(params, obs)`` -> (distribution, value))
    player: Any = None  # two-player games: ``player(agent_state)`` -> ``play(env_state [E],
    # obs [E], key) -> action [E]``, how the trained agent plays evaluation games
    replay: "ActorReplay | None" = None  # agents whose Sebulba actors push replay items (Ape-X)


class ActorReplay(NamedTuple):
    """How the Sebulba runner (``jrl/run/sebulba.py``) drives an agent that learns from a
    replay its actors fill (Ape-X, ``agents/apex.py``), in place of on-policy rollouts:

    - ``act(agent_state, obs [n], key, env_index [n]) -> (action [n], act_info)``: the
      actors' behaviour policy; ``env_index`` is each env's index among the run's
      ``num_envs`` (over all actors), for per-env exploration;
    - ``prepare(agent_state, batch, key) -> (items, priorities)``: on the actor, a trajectory
      ``Transition [T, n]`` acted with ``agent_state`` becomes replay ``items`` ``[T, n, ...]``
      and their initial ``priorities`` ``[T, n]``;
    - ``buffer``: the learner's replay buffer (one device), which the items fill in time
      order (a FIFO ring of its capacity);
    - ``updates``: the learner's updates after every insertion (:class:`jrl.loops.ReplayUpdates`);
    - ``learning_starts``: items inserted (one per env step) before the first update.
    """

    act: Callable
    prepare: Callable
    buffer: buffers.ReplayBuffer
    updates: ReplayUpdates
    learning_starts: int


def training_env(
    config: AgentConfig, env, env_params, num_devices: int = 1, **wrap_kwargs: Any
) -> tuple[Any, EnvSpec]:
    """Validates ``config`` and wraps ``env`` for training: ``num_envs / num_devices``
    envs per device (:func:`jrl.wrappers.wrap_for_training` with ``wrap_kwargs``).
    Returns the wrapped env and its :class:`~jrl.agent.EnvSpec`."""
    config.validate()
    local_envs = envs_per_device(config.num_envs, num_devices)
    env = wrap_for_training(env, local_envs, **wrap_kwargs)
    return env, EnvSpec.from_env(env, env_params)


def build_on_policy(
    config: ActorCriticConfig,
    env,
    env_params,
    loss_fn: LossFn,
    advantages: AdvantageFn,
    num_devices: int = 1,
    learner_outputs: bool = False,
) -> Built:
    """Wraps ``env`` for training, builds the network and agent (``loss_fn``, ``advantages``
    and ``learner_outputs``: see :func:`jrl.actor_critic.make_actor_critic`), returns the loop.

    With ``num_devices > 1`` each device steps ``num_envs / num_devices`` envs
    (the loop must then run sharded, see :func:`jrl.run.anakin.run`).
    """
    if isinstance(env.action_space(env_params), spaces.Box) and config.continuous == "normal":
        env = ClipAction(env)
    env, spec = training_env(
        config,
        env,
        env_params,
        num_devices,
        normalize_observation=config.normalize_observations,
        normalize_reward=config.normalize_rewards,
        gamma=config.gamma,
    )
    network = _actor_critic_network(config, spec, num_devices)
    agent = make_actor_critic(network, loss_fn, config, advantages, learner_outputs)
    algorithm = on_policy(agent, env, config.num_steps, env_params, num_devices)
    return Built(algorithm, agent, env, env_params, spec, network)


def _actor_critic_network(config: ActorCriticConfig, spec: EnvSpec, num_devices: int):
    """The actor-critic network ``config`` asks for: feed-forward, or with a recurrent core
    (whose minibatches of whole sequences need ``num_envs / num_devices`` divisible by
    ``num_minibatches``)."""
    obs_ndim = max(len(spec.observation_space.shape), 1)
    head = (config.continuous, config.init_log_std, config.torso)
    if config.recurrent == "none":
        return networks.ActorCritic(
            spec.action_space,
            tuple(config.hidden_sizes),
            config.activation,
            obs_ndim,
            *head,
            config.shared_torso,
        )
    local_envs = config.num_envs // num_devices
    if local_envs % config.num_minibatches:
        raise ValueError(
            f"{local_envs} envs per device are not divisible by num_minibatches = "
            f"{config.num_minibatches} (with recurrent, each minibatch holds whole env sequences)"
        )
    return networks.RecurrentActorCritic(
        spec.action_space,
        config.recurrent,
        config.core_size,
        tuple(config.hidden_sizes),
        config.activation,
        obs_ndim,
        *head,
    )


def build_continuous(
    config: ContinuousConfig,
    env,
    env_params,
    num_devices: int = 1,
    agent_name: str = "this agent",
) -> Built:
    """Assembles an off-policy continuous-control agent (SAC, TD3, DDPG) on ``env``, whose
    action space must be a bounded 1-D Box: the training env, the agent from
    ``config.make_agent(ActionScale, obs_ndim) -> (agent, networks)``, a uniform replay
    buffer stratified by env (so D devices sample what one device does) and
    :func:`jrl.loops.off_policy`."""
    config.validate()
    scale = ActionScale.from_space(env.action_space(env_params), agent_name)
    local_envs = envs_per_device(config.num_envs, num_devices)
    if config.batch_size % config.num_envs or config.buffer_size % config.num_envs:
        raise ValueError(
            f"{agent_name} samples the same number of items from every env: batch_size "
            f"({config.batch_size}) and buffer_size ({config.buffer_size}) must be multiples "
            f"of num_envs ({config.num_envs})"
        )
    env, spec = training_env(config, env, env_params, num_devices)
    agent, network = config.make_agent(scale, max(len(spec.observation_space.shape), 1))
    buffer = buffers.uniform_buffer(config.buffer_size // num_devices, stratify=local_envs)
    schedule = ReplaySchedule(
        config.steps_per_iteration,
        config.updates_per_iteration,
        config.learning_starts,
        config.batch_size,
    )
    algorithm = off_policy(
        agent, env, buffer, schedule, env_params=env_params, num_devices=num_devices
    )
    return Built(algorithm, agent, env, env_params, spec, network)

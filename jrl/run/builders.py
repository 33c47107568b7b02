"""Assembly of an agent, its wrapped env and its training loop (the run layer, ``jrl/run``).

Every agent's ``build(config, env, env_params, num_devices=1)`` returns a
:class:`Built`: the :class:`~jrl.run.loops.Algorithm` the runner compiles, plus
the agent, the training env and the network that evaluation and rendering
need. The steps every build shares are here: :func:`training_env` (validate
the config, split the envs over devices, wrap the env for training), and
:class:`ActorReplay`, how the Sebulba runner drives an agent whose actors push
replay items. The families' own builds (e.g. ``build_on_policy`` of
:mod:`jrl.agents.actor_critic.common`) sit above, in ``agents/``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

from jrl.core.wrappers import wrap_for_training
from jrl.parts import buffers
from jrl.parts.agent import Agent, EnvSpec
from jrl.parts.agent_config import AgentConfig, envs_per_device
from jrl.run.loops import Algorithm, ReplayUpdates

__all__ = ["ActorReplay", "Built", "training_env"]


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
    """How the Sebulba runner (``jrl/run/sebulba/``) drives an agent that learns from a
    replay its actors fill (Ape-X, ``agents/value/apex.py``), in place of on-policy rollouts:

    - ``act(agent_state, obs [n], key, env_index [n]) -> (action [n], act_info)``: the
      actors' behaviour policy; ``env_index`` is each env's index among the run's
      ``num_envs`` (over all actors), for per-env exploration;
    - ``prepare(agent_state, batch, key) -> (items, priorities)``: on the actor, a trajectory
      ``Transition [T, n]`` acted with ``agent_state`` becomes replay ``items`` ``[T, n, ...]``
      and their initial ``priorities`` ``[T, n]``;
    - ``buffer``: the learner's replay buffer (one device), which the items fill in time
      order (a FIFO ring of its capacity);
    - ``updates``: the learner's updates after every insertion
    (:class:`jrl.run.loops.ReplayUpdates`);
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
    envs per device (:func:`jrl.core.wrappers.wrap_for_training` with ``wrap_kwargs``).
    Returns the wrapped env and its :class:`~jrl.parts.agent.EnvSpec`."""
    config.validate()
    local_envs = envs_per_device(config.num_envs, num_devices)
    env = wrap_for_training(env, local_envs, **wrap_kwargs)
    return env, EnvSpec.from_env(env, env_params)

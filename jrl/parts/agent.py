"""The agent contract: a bundle of pure functions, like an optax transformation.

An :class:`Agent` is a ``NamedTuple`` of

- ``init(key, env_spec) -> agent_state``
- ``act(agent_state, observation, key) -> (action, act_info)``: the behaviour
  policy on a batch ``[N, *obs_shape] -> [N, *act_shape]``; ``act_info`` is a
  dict of ``[N]`` arrays learning needs (log-prob, value, ...), stored in
  ``Transition.extras``;
- ``learn(agent_state, batch, key) -> Learned(agent_state, metrics,
  priorities)``: one update from a batch of transitions (for on-policy agents
  a time-major rollout ``Transition`` of ``[T, N]``, for replay agents a
  :class:`jrl.parts.buffers.Sample`); ``metrics`` is a flat dict of scalars;
  ``priorities`` (``[B]``, optional) are the new priorities of a prioritised
  replay sample;
- ``policy(params, observation, key) -> action`` (optional): the evaluation
  policy, greedy by default;
- ``with_hparams(agent_state, values) -> agent_state``: the agent's state with
  the named hyperparameters set to ``values`` (a dict of ``[]`` arrays); the
  runner calls it (vmapped over runs) to give each run of a sweep its value.
  The default, :func:`replace_hparams`, serves agents whose state keeps its
  hyperparameters in an ``hparams`` dataclass;
- ``recurrent`` (optional, a :class:`Recurrent`): set by agents whose policy has memory
  (a recurrent network). They act through ``recurrent.act``, which also takes and returns
  the *acting state* (per env, e.g. the hidden state), kept by the loop in its train state.

Everything is pure and jittable; hyperparameters that may be swept without
recompiling (learning rate, gamma, ...) live in the agent state as traced
scalars, so vmapping over agent states vmaps over them too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax.numpy as jnp

from jrl.core import spaces
from jrl.core.types import PRNGKey, PyTree, split_action_mask


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What an agent needs to know about an environment to build its networks."""

    observation_space: spaces.Space  # one (unbatched) observation
    action_space: spaces.Space  # one (unbatched) action

    @classmethod
    def from_env(cls, env, params=None) -> "EnvSpec":
        params = env.default_params if params is None else params
        return cls(env.observation_space(params), env.action_space(params))

    def value_based(self, agent: str) -> tuple[spaces.Space, int]:
        """``(observation space without any action mask, number of actions)`` for a value-based
        agent; ``ValueError`` naming ``agent`` unless actions are Discrete and a mask (see
        :func:`jrl.core.types.split_action_mask`) has one entry per action."""
        if not isinstance(self.action_space, spaces.Discrete):
            raise ValueError(f"{agent} needs a Discrete action space, got {self.action_space!r}")
        num_actions = int(self.action_space.n)
        obs_space, mask_space = split_action_mask(self.observation_space)
        if mask_space is not None and tuple(mask_space.shape) != (num_actions,):
            raise ValueError(
                f"action_mask has shape {tuple(mask_space.shape)}, expected ({num_actions},)"
            )
        return obs_space, num_actions


InitFn = Callable[[PRNGKey, EnvSpec], PyTree]
ActFn = Callable[[PyTree, PyTree, PRNGKey], tuple[Any, dict[str, Any]]]
LearnFn = Callable[[PyTree, PyTree, PRNGKey], "Learned"]
PolicyFn = Callable[[PyTree, PyTree, PRNGKey], Any]
HParamsFn = Callable[[PyTree, dict[str, Any]], PyTree]


class Learned(NamedTuple):
    """What ``learn`` returns."""

    agent_state: PyTree
    metrics: dict[str, Any]  # flat dict of [] scalars
    priorities: Any = None  # [B] new priorities of the replay sample learned from, or None


def replace_hparams(agent_state: PyTree, values: dict[str, Any]) -> PyTree:
    """``agent_state`` with fields of its ``hparams`` dataclass replaced by ``values``
    (each cast to the field's dtype and shape); ``ValueError`` for a name the
    dataclass does not have."""
    if not values:
        return agent_state
    hp = agent_state.hparams
    known = {f.name for f in dataclasses.fields(hp)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"cannot sweep {unknown}: sweepable fields are {sorted(known)}")
    updates = {}
    for name, value in values.items():
        old = getattr(hp, name)
        updates[name] = jnp.broadcast_to(jnp.asarray(value, old.dtype), old.shape)
    return agent_state.replace(hparams=hp.replace(**updates))


class Recurrent(NamedTuple):
    """What an agent with memory adds to the contract: its acting state.

    - ``initial_state(num_envs) -> acting_state``: ``[N, ...]`` per leaf, the state every
      episode starts from (the loop puts env ``i``'s row back to it where env ``i``'s episode
      ends, so the next episode starts from it);
    - ``act(agent_state, acting_state, obs, key) -> (action, act_info, acting_state)``: the
      behaviour policy from ``acting_state``; ``act_info`` as for :attr:`Agent.act` (a
      recurrent learner keeps the state it acted from there, to replay its sequences);
    - ``policy(params, acting_state, obs, key) -> (action, acting_state)``: the greedy
      evaluation policy; None when only the behaviour policy has an acting state (e.g.
      temporally correlated exploration noise) and the greedy one is the agent's memoryless
      :attr:`Agent.policy`.
    """

    initial_state: Callable[[int], PyTree]
    act: Callable[[PyTree, PyTree, PyTree, PRNGKey], tuple[Any, dict[str, Any], PyTree]]
    policy: Callable[[PyTree, PyTree, PyTree, PRNGKey], tuple[Any, PyTree]] | None = None

    def stateful(self, greedy: bool) -> bool:
        """Whether the greedy (or, ``greedy=False``, the behaviour) policy carries the
        acting state."""
        return self.policy is not None or not greedy


class Agent(NamedTuple):
    """A bundle of pure functions; see the module docstring."""

    init: InitFn
    act: ActFn
    learn: LearnFn
    policy: PolicyFn | None = None
    with_hparams: HParamsFn = replace_hparams
    recurrent: Recurrent | None = None

"""Core data types shared by environments, agents and loops.

Every type here is a ``flax.struct.dataclass``: an immutable pytree that
``jit``, ``vmap`` and ``lax.scan`` carry without conversion, updated with
``.replace(...)``. Shapes are written as comments; ``[...]`` stands for any
leading batch dimensions (none for a single environment, ``[N]`` for a
batch of N environments, ``[T, N]`` for a rollout).
"""

from __future__ import annotations

from typing import Any

import jax
from flax import struct

PRNGKey = jax.Array
Array = jax.Array
PyTree = Any

# Keys that jrl's wrappers place in ``TimeStep.info``; documented once here so
# that the info dict is a contract, not a grab bag.
FINAL_OBSERVATION = "final_observation"
"""Set by AutoReset: the last observation of the episode that just ended
(equal to ``observation`` on steps where no episode ended)."""
EPISODE_RETURN = "episode_return"
"""Set by EpisodeStatistics: undiscounted return of the episode that finished
on this step (0 where none finished)."""
EPISODE_LENGTH = "episode_length"
"""Set by EpisodeStatistics: length of the episode that finished on this
step (0 where none finished)."""
EPISODE_DONE = "episode_done"
"""Set by EpisodeStatistics: True where an episode finished on this step."""

# Action masks travel in the observation: an env with a mask has a Dict
# observation ``{"observation": x, "action_mask": bool[..., num_actions]}``
# (True = valid), so ``act`` sees the mask of the state it acts in and a
# replayed transition carries the mask of its next state for the target.
OBSERVATION = "observation"
"""Key of the observation proper in a masked env's Dict observation."""
ACTION_MASK = "action_mask"
"""Key of the ``bool[..., num_actions]`` valid-action mask (True = valid) in a masked env's
observation."""


def split_action_mask(obs: Any) -> tuple[Any, Any]:
    """``(observation, mask)`` of a masked env's observation (or observation space), else
    ``(obs, None)``.

    Works on observations (dicts of arrays) and on :class:`jrl.core.spaces.Dict` alike.
    """
    items = getattr(obs, "spaces", obs)
    if isinstance(items, dict) and ACTION_MASK in items:
        if set(items) != {OBSERVATION, ACTION_MASK}:
            raise ValueError(
                f"a masked observation has exactly the keys {OBSERVATION!r} and {ACTION_MASK!r}, "
                f"got {sorted(items)}"
            )
        return items[OBSERVATION], items[ACTION_MASK]
    return obs, None


@struct.dataclass
class TimeStep:
    """What an environment returns from ``reset`` and ``step``.

    ``terminated`` and ``truncated`` are kept apart: a terminated step ends
    the episode in an absorbing state (no bootstrap), a truncated step ends it
    for an outside reason such as a time limit (bootstrap from the final
    observation).
    """

    observation: PyTree  # [..., *obs_shape] observation after this step
    reward: Array  # [...] float32 reward of the transition (0 after reset)
    terminated: Array  # [...] bool, the episode reached a terminal state
    truncated: Array  # [...] bool, the episode was cut short (e.g. time limit)
    info: dict[str, Any]  # extra per-step values; jrl's keys are listed above

    @property
    def done(self) -> Array:
        """[...] bool, ``terminated | truncated``: the episode ended here."""
        return self.terminated | self.truncated


@struct.dataclass
class Transition:
    """One environment transition as a learner consumes it.

    In a rollout every field gains leading ``[T, N]`` dimensions (time-major).
    ``next_observation`` is the true successor of ``observation`` (on the
    step an episode ended it is the final observation of that episode, never
    the first observation of the next one).
    """

    observation: PyTree  # [..., *obs_shape] o_t
    action: Array  # [..., *act_shape] a_t
    reward: Array  # [...] r_{t+1}
    terminated: Array  # [...] bool, o_{t+1} is terminal (no bootstrap)
    truncated: Array  # [...] bool, the episode was cut after o_{t+1}
    next_observation: PyTree  # [..., *obs_shape] o_{t+1}
    extras: dict[str, Any] = struct.field(
        default_factory=dict
    )  # agent's act_info (log-prob, value, ...)


def is_key(x: Any) -> bool:
    """Whether ``x`` (an array or a ``ShapeDtypeStruct``) holds typed PRNG keys."""
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)

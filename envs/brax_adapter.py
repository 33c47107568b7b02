"""Brax environments (MJX backend) as jrl :class:`~jrl.core.env.Environment`\\ s.

``jrl.envs.make("brax:halfcheetah")`` builds a :class:`BraxEnv` around
``brax.envs.get_environment("halfcheetah", backend="mjx")`` and wraps it in a
:class:`~jrl.core.wrappers.TimeLimit` of :data:`EPISODE_LENGTH` steps (brax's own
training episode length); pass ``max_episode_steps=`` to ``make`` to change it.
Needs the optional extra: ``pip install jrl-jax[brax]``.

What the adapter does, and does not do:

- It wraps brax's bare env, never brax's ``EpisodeWrapper``/``AutoResetWrapper``/
  ``VmapWrapper``: the time limit, the auto-reset and the batch are jrl's
  (:class:`~jrl.core.wrappers.TimeLimit`, :class:`~jrl.core.wrappers.AutoReset`,
  :class:`~jrl.core.wrappers.VmapEnv`). So ``terminated`` is exactly brax's ``done`` of the
  bare env (a fall, for the locomotion envs), ``truncated`` comes only from the
  TimeLimit (brax's wrapper reports it as ``info["truncation"]``; here it is the
  :class:`~jrl.core.types.TimeStep` field), and AutoReset carries the finished episode's
  last observation in ``info["final_observation"]``, so learners bootstrap from it.
- The env state is brax's ``State`` pytree; ``reset`` gets brax's raw ``uint32[2]`` key
  (the key data of jrl's typed key), ``step`` is brax's ``step`` (deterministic: the
  step's key is not used).
- Spaces: the observation is ``Box(-inf, inf, (observation_size,))``; the action is
  ``Box(-1, 1, (action_size,))``, brax's own convention: envs whose actuators have another
  control range (``inverted_pendulum``'s [-3, 3], ``humanoid``'s [-0.4, 0.4], ``pusher``)
  map [-1, 1] onto it in their ``step``, the others have actuators limited to [-1, 1].
  ``params`` are None (nothing to override).
- ``render`` is not provided (brax draws through its HTML viewer or MuJoCo's renderer).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import PRNGKey, PyTree
from jrl.envs.entries import (
    BRAX_PREFIX,
    EnvEntry,
    ExtraMissingError,
    UnknownEnvError,
    import_extra,
    install_hint,
)

__all__ = [
    "EPISODE_LENGTH",
    "INSTALL",
    "BraxEnv",
    "BraxMissingError",
    "brax_entry",
    "brax_names",
]

EPISODE_LENGTH = 1000
"""The time limit of every ``brax:`` env: brax's training default ``episode_length``."""
INSTALL = install_hint("brax")


class BraxMissingError(ExtraMissingError):
    """brax cannot be imported: a user error (``jrl`` exits with 2) naming the extra."""


def _import_brax_envs():
    # mujoco's MJX prints "Failed to import warp" on stdout when its optional warp backend is
    # missing (brax uses the JAX one): sent to stderr, so stdout stays jrl's
    with contextlib.redirect_stdout(sys.stderr):
        return import_extra("brax.envs", "brax", "brax environments", BraxMissingError)


def brax_names() -> list[str]:
    """The env names brax registers (``brax:<name>`` ids); ImportError without brax."""
    return sorted(_import_brax_envs()._envs)


@functools.cache
def _make(name: str):
    envs = _import_brax_envs()
    if name not in envs._envs:
        known = sorted(envs._envs)
        raise UnknownEnvError(
            name, known, prefix=BRAX_PREFIX, listing=f"brax has: {', '.join(known)}."
        )
    with warnings.catch_warnings():  # brax says it is unmaintained, pointing to MJX: it uses MJX
        warnings.filterwarnings("ignore", message="Brax System, piplines")
        return envs.get_environment(name, backend="mjx")


def brax_entry(name: str) -> EnvEntry:
    """The :class:`~jrl.envs.EnvEntry` of ``brax:<name>`` (time limit
    :data:`EPISODE_LENGTH`); unknown names raise :class:`~jrl.envs.UnknownEnvError` with
    the closest brax names, and a missing brax an ImportError naming the extra."""
    _make(name)
    return EnvEntry(
        BRAX_PREFIX + name, BraxEnv, EPISODE_LENGTH, source="brax", kwargs=(("env", name),)
    )


class BraxEnv(Environment):
    """A brax env (MJX backend) behind jrl's ``reset_env`` / ``step_env``; see the module
    docstring."""

    def __init__(self, env: str):
        self.brax_env = _make(env)
        self.id = BRAX_PREFIX + env
        size = int(self.brax_env.action_size)
        # brax's envs take actions in [-1, 1] and scale them to their actuators themselves
        self._action_space = spaces.Box(-np.ones(size), np.ones(size), (size,), jnp.float32)
        self._observation_space = spaces.Box(
            -np.inf, np.inf, (int(self.brax_env.observation_size),), jnp.float32
        )

    @property
    def default_params(self) -> PyTree:
        return None

    def reset_env(self, key: PRNGKey, params: PyTree) -> tuple[PyTree, PyTree]:
        state = self.brax_env.reset(jax.random.key_data(key))
        return state, state.obs

    def step_env(self, key: PRNGKey, state: PyTree, action: Any, params: PyTree):
        state = self.brax_env.step(state, action)
        return state, state.obs, state.reward, state.done > 0.5, {}

    def observation_space(self, params: PyTree | None = None) -> spaces.Space:
        return self._observation_space

    def action_space(self, params: PyTree | None = None) -> spaces.Space:
        return self._action_space

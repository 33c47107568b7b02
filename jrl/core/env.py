"""The functional environment API.

An environment is a stateless Python object; everything that changes lives
in an explicit ``state`` pytree and everything configurable in a ``params``
pytree, so that both can be ``jit``-compiled, ``vmap``ped (a batch of
environments, or a batch of *parameters* for domain randomisation) and
carried through ``lax.scan``::

    env, params = jrl.envs.make("CartPole-v1")
    state, ts = env.reset(key, params)                  # ts: TimeStep
    state, ts = env.step(key, state, action, params)

Concrete environments implement the private ``reset_env`` / ``step_env``
pair; the public ``reset`` / ``step`` wrap their outputs into a
:class:`~jrl.core.types.TimeStep`. A bare environment never truncates and never
resets itself: time limits and auto-reset are wrappers
(:mod:`jrl.core.wrappers`), applied by :func:`jrl.envs.make` in a fixed order.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jrl.core import spaces
from jrl.core.types import PRNGKey, PyTree, TimeStep


class Environment:
    """Base class of every jrl environment and wrapper.

    Subclasses set ``id`` (registry name) and implement ``default_params``,
    ``reset_env``, ``step_env``, ``observation_space`` and ``action_space``;
    ``render`` is optional.
    """

    id: str = "Environment"

    @property
    def default_params(self) -> PyTree:
        """The environment's parameters (a pytree of scalars/arrays)."""
        return None

    # -- to implement -------------------------------------------------------
    def reset_env(self, key: PRNGKey, params: PyTree) -> tuple[PyTree, PyTree]:
        """Returns ``(state, observation)`` of a fresh episode."""
        raise NotImplementedError

    def step_env(
        self, key: PRNGKey, state: PyTree, action: Any, params: PyTree
    ) -> tuple[PyTree, PyTree, jax.Array, jax.Array, dict[str, Any]]:
        """Returns ``(state, observation, reward, terminated, info)``."""
        raise NotImplementedError

    def observation_space(self, params: PyTree | None = None) -> spaces.Space:
        raise NotImplementedError

    def action_space(self, params: PyTree | None = None) -> spaces.Space:
        raise NotImplementedError

    def render(self, state: PyTree, params: PyTree | None = None) -> jax.Array:
        """An RGB frame ``uint8[H, W, 3]`` of ``state`` (no display needed)."""
        raise NotImplementedError(f"{self.id} has no render()")

    # -- public API ---------------------------------------------------------
    def reset(self, key: PRNGKey, params: PyTree | None = None) -> tuple[PyTree, TimeStep]:
        """Starts an episode: ``(state, TimeStep)`` with reward 0 and no flags set."""
        params = self.default_params if params is None else params
        state, obs = self.reset_env(key, params)
        return state, TimeStep(
            observation=obs,
            reward=jnp.zeros((), jnp.float32),
            terminated=jnp.zeros((), bool),
            truncated=jnp.zeros((), bool),
            info={},
        )

    def step(
        self, key: PRNGKey, state: PyTree, action: Any, params: PyTree | None = None
    ) -> tuple[PyTree, TimeStep]:
        """Advances one step. ``truncated`` is always False on a bare environment."""
        params = self.default_params if params is None else params
        state, obs, reward, terminated, info = self.step_env(key, state, action, params)
        return state, TimeStep(
            observation=obs,
            reward=jnp.asarray(reward, jnp.float32),
            terminated=jnp.asarray(terminated, bool),
            truncated=jnp.zeros((), bool),
            info=info,
        )

    @property
    def unwrapped(self) -> "Environment":
        """The innermost environment under any wrappers."""
        return self

    @property
    def wrappers(self) -> tuple[type, ...]:
        """Wrapper classes from the outermost inwards (empty for a bare env)."""
        return ()

    @property
    def num_envs(self) -> int | None:
        """Batch size when this env steps a batch (VmapEnv), else None."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"


class Wrapper(Environment):
    """An environment built around another one.

    Stateless wrappers pass the inner state through unchanged; stateful ones
    keep ``state.env_state`` for the inner environment and override
    :meth:`inner_state`. Parameters are always the inner environment's.
    """

    def __init__(self, env: Environment):
        if not isinstance(env, Environment):
            raise TypeError(
                f"{type(self).__name__} wraps a jrl Environment, got {type(env).__name__}"
            )
        self.env = env

    @property
    def id(self) -> str:  # type: ignore[override]
        return self.env.id

    @property
    def default_params(self) -> PyTree:
        return self.env.default_params

    def observation_space(self, params: PyTree | None = None) -> spaces.Space:
        return self.env.observation_space(params)

    def action_space(self, params: PyTree | None = None) -> spaces.Space:
        return self.env.action_space(params)

    def inner_state(self, state: PyTree) -> PyTree:
        """The inner environment's part of ``state``."""
        return state

    def render(self, state: PyTree, params: PyTree | None = None) -> jax.Array:
        return self.env.render(self.inner_state(state), params)

    def reset(self, key: PRNGKey, params: PyTree | None = None) -> tuple[PyTree, TimeStep]:
        return self.env.reset(key, params)

    def step(self, key: PRNGKey, state: PyTree, action: Any, params: PyTree | None = None):
        return self.env.step(key, state, action, params)

    @property
    def unwrapped(self) -> Environment:
        return self.env.unwrapped

    @property
    def wrappers(self) -> tuple[type, ...]:
        return (type(self),) + self.env.wrappers

    @property
    def num_envs(self) -> int | None:
        return self.env.num_envs

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"

"""jrl environments as Gymnasium environments (for SB3, CleanRL and the rest of the ecosystem).

``jrl.envs.to_gymnasium("CartPole-v1")`` returns a ``gymnasium.Env`` that
steps the jitted jrl env one transition at a time, with Gymnasium's
conventions: ``reset(seed=...) -> (obs, info)`` (the same seed gives the same
episode), ``step(action) -> (obs, reward, terminated, truncated, info)``
with the registered time limit as ``truncated``, spaces converted to
``gymnasium.spaces``, and ``render_mode="rgb_array"`` for envs that draw
themselves. It needs the ``gymnasium`` package (in the test extra).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl import spaces
from jrl.env import Environment

__all__ = ["GymnasiumEnv", "to_gymnasium", "to_gymnasium_space"]


def to_gymnasium_space(space: spaces.Space):
    """The ``gymnasium.spaces`` counterpart of a jrl space."""
    import gymnasium

    gs = gymnasium.spaces
    if isinstance(space, spaces.Discrete):
        return gs.Discrete(int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return gs.MultiDiscrete(np.asarray(space.nvec))
    if isinstance(space, spaces.Box):
        dtype = np.dtype(space.dtype)
        if dtype == np.bool_:
            return gs.MultiBinary(tuple(space.shape))
        low = np.broadcast_to(np.asarray(space.low, dtype), space.shape)
        high = np.broadcast_to(np.asarray(space.high, dtype), space.shape)
        return gs.Box(low, high, tuple(space.shape), dtype)
    if isinstance(space, spaces.Dict):
        return gs.Dict({k: to_gymnasium_space(v) for k, v in space.spaces.items()})
    if isinstance(space, spaces.Tuple):
        return gs.Tuple(tuple(to_gymnasium_space(s) for s in space.spaces))
    raise TypeError(f"no Gymnasium space for {space!r}")


def to_gymnasium(env_id: str, render_mode: str | None = None, **param_overrides: Any):
    """A :class:`GymnasiumEnv` of the registered env ``env_id`` (its time limit included)."""
    from jrl.envs.registry import make

    env, params = make(env_id, **param_overrides)
    return GymnasiumEnv(env, params, render_mode=render_mode, env_id=env_id)


def _gymnasium_env_base():
    import gymnasium

    return gymnasium.Env


class GymnasiumEnv(_gymnasium_env_base()):  # type: ignore[misc]
    """A jrl env (with its wrappers) behind Gymnasium's API; see the module docstring."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        env: Environment,
        params: Any = None,
        render_mode: str | None = None,
        env_id: str | None = None,
    ):
        if env.num_envs is not None:
            raise ValueError("GymnasiumEnv takes an unbatched env (one episode at a time)")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self._env = env
        self._params = env.default_params if params is None else params
        self.render_mode = render_mode
        self.observation_space = to_gymnasium_space(env.observation_space(self._params))
        self.action_space = to_gymnasium_space(env.action_space(self._params))
        self.spec = None
        self._name = env_id or env.id
        self._reset = jax.jit(env.reset)
        self._step = jax.jit(env.step)
        self._render = jax.jit(env.render)
        self._key = None
        self._state = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None or self._key is None:
            self._key = jax.random.key(int(self.np_random.integers(2**31 - 1)))
        self._key, k = jax.random.split(self._key)
        self._state, ts = self._reset(k, self._params)
        return self._host(ts.observation), {}

    def step(self, action):
        if self._state is None:
            raise RuntimeError(f"{self._name}: call reset() before step()")
        self._key, k = jax.random.split(self._key)
        self._state, ts = self._step(k, self._state, jnp.asarray(action), self._params)
        reward = float(ts.reward)
        return self._host(ts.observation), reward, bool(ts.terminated), bool(ts.truncated), {}

    def render(self):
        if self.render_mode != "rgb_array" or self._state is None:
            return None
        return np.asarray(self._render(self._state, self._params))

    def _host(self, obs):
        out = jax.tree.map(np.asarray, jax.device_get(obs))
        if isinstance(self.observation_space, _gymnasium_spaces().MultiBinary):
            return out.astype(np.int8)
        if isinstance(out, dict) and isinstance(self.observation_space, _gymnasium_spaces().Dict):
            return {k: (v.astype(np.int8) if v.dtype == np.bool_ else v) for k, v in out.items()}
        return out


def _gymnasium_spaces():
    import gymnasium

    return gymnasium.spaces

"""jrl environments as Gymnasium environments (for SB3, CleanRL and the rest of the ecosystem).

``jrl.envs.to_gymnasium("CartPole-v1")`` returns a ``gymnasium.Env`` that
steps the jitted jrl env one transition at a time, with Gymnasium's
conventions: ``reset(seed=...) -> (obs, info)`` (the same seed gives the same
episode), ``step(action) -> (obs, reward, terminated, truncated, info)``
with the registered time limit as ``truncated``, spaces converted to
``gymnasium.spaces``, and ``render_mode="rgb_array"`` for envs that draw
themselves. It needs the ``gymnasium`` package (in the test extra).

``to_gymnasium(id, num_envs=N)`` returns a :class:`GymnasiumVectorEnv`, a
``gymnasium.vector.VectorEnv`` whose N envs step as one jitted, vmapped batch
(jrl's ``AutoReset(VmapEnv(env, N))``). Finished envs reset in the same step
(Gymnasium's ``AutoresetMode.SAME_STEP``): the returned observation is the
new episode's first one, and ``info["final_obs"]`` (an object array, None
where no episode ended; mask ``info["_final_obs"]``) holds the finished
episode's last observation, as Gymnasium's own ``SyncVectorEnv`` in that mode
gives it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.wrappers import AutoReset, VmapEnv
from jrl.envs.registry import make

__all__ = ["GymnasiumEnv", "GymnasiumVectorEnv", "to_gymnasium", "to_gymnasium_space"]


def to_gymnasium_space(space: spaces.Space):
    """The ``gymnasium.spaces`` counterpart of a jrl space."""
    import gymnasium  # optional extra: gymnasium may be absent

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


def to_gymnasium(
    env_id: str,
    render_mode: str | None = None,
    num_envs: int | None = None,
    **param_overrides: Any,
):
    """A :class:`GymnasiumEnv` of the registered env ``env_id`` (its time limit included), or a
    :class:`GymnasiumVectorEnv` of ``num_envs`` copies."""
    env, params = make(env_id, **param_overrides)
    if num_envs is not None:
        return GymnasiumVectorEnv(env, num_envs, params, render_mode=render_mode, env_id=env_id)
    return GymnasiumEnv(env, params, render_mode=render_mode, env_id=env_id)


def _gymnasium_env_base():
    import gymnasium  # optional extra: gymnasium may be absent

    return gymnasium.Env


def _gymnasium_vector_env_base():
    import gymnasium  # optional extra: gymnasium may be absent

    return gymnasium.vector.VectorEnv


def _to_host(obs, space):
    """A (batch of) jrl observation(s) as numpy, booleans as int8 where Gymnasium's space is
    MultiBinary (its dtype)."""
    gs = _gymnasium_spaces()
    out = jax.tree.map(np.asarray, jax.device_get(obs))
    if isinstance(space, gs.MultiBinary):
        return out.astype(np.int8)
    if isinstance(out, dict) and isinstance(space, gs.Dict):
        return {k: (v.astype(np.int8) if v.dtype == np.bool_ else v) for k, v in out.items()}
    return out


def _check_render_mode(render_mode):
    if render_mode not in (None, "rgb_array"):
        raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")


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
        _check_render_mode(render_mode)
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
        return _to_host(obs, self.observation_space)


class GymnasiumVectorEnv(_gymnasium_vector_env_base()):  # type: ignore[misc]
    """``num_envs`` copies of a jrl env behind Gymnasium's vector API, stepped as one jitted
    batch; see the module docstring. Observations ``[num_envs, ...]``, rewards ``float32
    [num_envs]``, flags ``bool [num_envs]``; ``render()`` gives a tuple of ``num_envs``
    frames ``uint8 [H, W, 3]``."""

    def __init__(
        self,
        env: Environment,
        num_envs: int,
        params: Any = None,
        render_mode: str | None = None,
        env_id: str | None = None,
    ):
        import gymnasium  # optional extra: gymnasium may be absent
        from gymnasium.vector.utils import batch_space  # optional extra (gymnasium)

        if env.num_envs is not None:
            raise ValueError("GymnasiumVectorEnv takes an unbatched env; it batches it itself")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        _check_render_mode(render_mode)
        self.metadata = {
            "render_modes": ["rgb_array"],
            "render_fps": 30,
            "autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP,
        }
        self.num_envs, self.render_mode, self.spec = num_envs, render_mode, None
        self._params = env.default_params if params is None else params
        self.single_observation_space = to_gymnasium_space(env.observation_space(self._params))
        self.single_action_space = to_gymnasium_space(env.action_space(self._params))
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._name = env_id or env.id
        batch = AutoReset(VmapEnv(env, num_envs))  # stateless wrappers: the batched env state
        self._reset = jax.jit(batch.reset)
        self._step = jax.jit(batch.step)
        self._render = jax.jit(jax.vmap(env.render, in_axes=(0, None)))
        self._key = self._state = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Resets every env: ``(obs [num_envs, ...], {})``. An int ``seed`` fixes the batch's
        episodes (the same seed, the same first observations)."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"{self._name}: seed must be an int or None, got {seed!r}")
        super().reset(seed=seed)
        if seed is not None or self._key is None:
            self._key = jax.random.key(int(self.np_random.integers(2**31 - 1)))
        self._key, k = jax.random.split(self._key)
        self._state, ts = self._reset(k, self._params)
        return _to_host(ts.observation, self.single_observation_space), {}

    def step(self, actions):
        """Steps every env with ``actions [num_envs, ...]``; finished envs reset in the same
        step (``info["final_obs"]`` holds their last observations)."""
        if self._state is None:
            raise RuntimeError(f"{self._name}: call reset() before step()")
        self._key, k = jax.random.split(self._key)
        self._state, ts = self._step(k, self._state, jnp.asarray(actions), self._params)
        obs = _to_host(ts.observation, self.single_observation_space)
        terminated, truncated = np.asarray(ts.terminated), np.asarray(ts.truncated)
        done = terminated | truncated
        infos: dict[str, Any] = {}
        if done.any():
            final = _to_host(ts.info["final_observation"], self.single_observation_space)
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = jax.tree.map(lambda x, i=i: x[i], final)
            infos = {
                "final_obs": final_obs,
                "_final_obs": done.copy(),
                "final_info": {},
                "_final_info": done.copy(),
            }
        return obs, np.asarray(ts.reward, np.float32), terminated, truncated, infos

    def render(self):
        """A tuple of ``num_envs`` frames (``render_mode="rgb_array"``), else None."""
        if self.render_mode != "rgb_array" or self._state is None:
            return None
        return tuple(np.asarray(self._render(self._state, self._params)))


def _gymnasium_spaces():
    import gymnasium  # optional extra: gymnasium may be absent

    return gymnasium.spaces

"""Any gymnax 1.x environment as a jrl :class:`~jrl.core.env.Environment`.

``jrl.envs.make("gymnax:Breakout-MinAtar")`` builds a :class:`GymnaxEnv`
around ``gymnax.make("Breakout-MinAtar")`` and wraps it in a
:class:`~jrl.core.wrappers.TimeLimit` at gymnax's own limit
(``default_params.max_steps_in_episode``); pass ``max_episode_steps=`` to
``make`` to change it.

What the adapter does, and does not do:

- It calls gymnax's private ``reset_env`` / ``step_env``, never its public
  ``step``: gymnax 1.x's ``step`` auto-resets and truncates by itself, which
  in jrl are the jobs of :class:`~jrl.core.wrappers.AutoReset` and
  :class:`~jrl.core.wrappers.TimeLimit`. The adapter therefore never truncates and
  never resets; ``terminated`` is exactly the flag ``step_env`` returns
  (gymnax 1.x's natural termination, time limits excluded).
- Keys are passed through untouched. AutoReset splits a step's key the way
  gymnax's ``step`` does, so ``AutoReset(TimeLimit(GymnaxEnv(...)))`` with
  ``max_episode_steps == params.max_steps_in_episode`` reproduces gymnax's
  own auto-resetting ``step`` bit for bit.
- ``params`` are gymnax's ``EnvParams`` pytree (overrides through
  ``make(..., field=value)`` work as for jrl envs). ``max_steps_in_episode``
  in them is *not* the time limit any more (the TimeLimit is); a few gymnax
  envs still read it, e.g. to scale an observation.
- Spaces are mapped to :mod:`jrl.core.spaces` (Discrete, Box, Dict, Tuple) with
  their shapes, dtypes and bounds; a Box bound at or beyond the float32 range
  (gymnax writes ``finfo(float32).max`` for "unbounded") becomes ``±inf``, so
  ``Box.bounded`` and ``Box.sample`` treat it as unbounded.
- ``info`` is what ``step_env`` returns (e.g. ``{"discount": ...}``); ``reset``
  returns zeros of the same structure so that reset and step time steps are
  one pytree type (a ``lax.scan`` can carry them).
- Differences from gymnax's own ``step`` that are by design: bsuite's
  DeepSea carries cumulative metrics across its own auto-resets, which a
  fresh ``reset_env`` (what AutoReset uses) does not.
- ``render`` (jittable, ``uint8[H, W, 3]``; gymnax's own visualiser is
  matplotlib on the host) draws the classic-control envs with jrl's own
  pictures of them (the gymnax state mapped to jrl's), and an env whose
  observation is an image ``[H, W, C]`` (MinAtar) from its observation: each
  cell in the colour of its highest set channel, 16 pixels a cell. Other
  gymnax envs raise ``NotImplementedError`` naming what can be drawn.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import PRNGKey, PyTree, TimeStep
from jrl.envs.acrobot import Acrobot
from jrl.envs.cartpole import CartPole
from jrl.envs.entries import GYMNAX_PREFIX, EnvEntry, UnknownEnvError
from jrl.envs.mountain_car import MountainCar, MountainCarContinuous
from jrl.envs.pendulum import Pendulum

__all__ = ["GymnaxEnv", "gymnax_entry", "to_jrl_space"]

_F32_MAX = float(np.finfo(np.float32).max)

_CLASSIC_STATE_FIELDS = {  # gymnax name -> {jrl state field: gymnax state field} (others: same)
    "CartPole-v1": {},
    "Pendulum-v1": {},
    "Acrobot-v1": {
        "theta1": "joint_angle1",
        "theta2": "joint_angle2",
        "theta1_dot": "velocity_1",
        "theta2_dot": "velocity_2",
    },
    "MountainCar-v0": {},
    "MountainCarContinuous-v0": {},
}
"""The gymnax envs drawn by jrl's own env of the same id."""
_CLASSIC_ENVS = {
    "CartPole-v1": CartPole,
    "Pendulum-v1": Pendulum,
    "Acrobot-v1": Acrobot,
    "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous,
}
"""jrl's env of each of those ids (what ``jrl.envs.make`` builds for it)."""
CELL_PIXELS = 16
"""Pixels per observation cell when an image observation is drawn."""


def _import_gymnax():
    try:
        import gymnax  # deferred: gymnax is heavy (start-up time of jrl --help)
    except ImportError as e:  # pragma: no cover - gymnax is a dependency
        raise ImportError(
            "gymnax envs need the `gymnax` package (pip install 'gymnax>=1,<2')"
        ) from e
    return gymnax


@functools.cache
def _make_default(name: str):
    """``gymnax.make(name)[0]``, built once per name (some constructors load data)."""
    return _make(name)


def _make(name: str, **env_kwargs: Any):
    gymnax = _import_gymnax()
    if name not in gymnax.registered_envs:
        known = list(gymnax.registered_envs)
        raise UnknownEnvError(
            name, known, prefix=GYMNAX_PREFIX, listing=f"gymnax has: {', '.join(known)}."
        )
    env, _ = gymnax.make(name, **env_kwargs)
    return env


def gymnax_entry(name: str) -> EnvEntry:
    """The :class:`~jrl.envs.EnvEntry` of ``gymnax:<name>``.

    Its time limit is gymnax's ``default_params.max_steps_in_episode`` (None
    where an env's params have no such field). Unknown names raise
    :class:`~jrl.envs.UnknownEnvError` with the closest gymnax ids.
    """
    genv = _make_default(name)
    limit = getattr(genv.default_params, "max_steps_in_episode", None)
    limit = None if limit is None else int(limit)
    return EnvEntry(
        GYMNAX_PREFIX + name, GymnaxEnv, limit, source="gymnax", kwargs=(("env", name),)
    )


def _render_classic(name: str, state: PyTree, params: PyTree) -> jax.Array:
    """The frame jrl's own ``name`` env draws for the gymnax ``state`` and ``params`` (the
    fields both have; jrl's defaults for the rest)."""
    env = _CLASSIC_ENVS[name]()
    mine = env.default_params
    shared = {
        f: getattr(params, f)
        for f in type(mine).__dataclass_fields__
        if hasattr(params, f) and f != "max_steps_in_episode"
    }
    fields = _CLASSIC_STATE_FIELDS[name]
    state_cls = type(jax.eval_shape(env.reset_env, jax.random.key(0), mine)[0])
    jrl_state = state_cls(
        **{
            f: jnp.asarray(getattr(state, fields.get(f, f), 0.0), jnp.float32)
            for f in state_cls.__dataclass_fields__
        }
    )
    return env.render(jrl_state, mine.replace(**shared))


@functools.cache
def _palette(num_channels: int) -> np.ndarray:
    """``uint8[C + 1, 3]``: black, then one colour per channel (matplotlib's tab20)."""
    from matplotlib import colormaps  # deferred: heavy (start-up time of jrl --help)

    colours = colormaps["tab20"](np.arange(num_channels) % 20)[:, :3]
    return np.concatenate([np.zeros((1, 3)), colours]).__mul__(255).round().astype(np.uint8)


def _render_cells(obs: jax.Array) -> jax.Array:
    """``uint8[16h, 16w, 3]`` of an image observation ``[h, w, C]``: each cell black, or the
    colour of its highest channel that is set (non-zero)."""
    c = obs.shape[-1]
    top = jnp.max(jnp.where(obs != 0, jnp.arange(1, c + 1), 0), axis=-1)  # [h, w] 0: none
    frame = jnp.asarray(_palette(c))[top]  # [h, w, 3]
    return jnp.repeat(jnp.repeat(frame, CELL_PIXELS, axis=0), CELL_PIXELS, axis=1)


def to_jrl_space(space: Any) -> spaces.Space:
    """Maps a gymnax space onto the equivalent :mod:`jrl.core.spaces` space.

    Raises ``TypeError`` for a space kind jrl does not know, and lets JAX's
    tracer errors through when a bound is a traced value (the caller retries
    with concrete params).
    """
    gymnax = _import_gymnax()
    gs = gymnax.environments.spaces
    if isinstance(space, gs.Discrete):
        return spaces.Discrete(int(space.n), dtype=space.dtype)
    if isinstance(space, gs.Box):
        shape = (
            (int(space.shape),) if np.isscalar(space.shape) else tuple(int(s) for s in space.shape)
        )
        low = np.asarray(space.low, dtype=np.float64)
        high = np.asarray(space.high, dtype=np.float64)
        low = np.where(low <= -_F32_MAX, -np.inf, low)
        high = np.where(high >= _F32_MAX, np.inf, high)
        return spaces.Box(low, high, shape, dtype=space.dtype)
    if isinstance(space, gs.Dict):
        return spaces.Dict({k: to_jrl_space(v) for k, v in space.spaces.items()})
    if isinstance(space, gs.Tuple):
        return spaces.Tuple([to_jrl_space(s) for s in space.spaces])
    raise TypeError(f"cannot map gymnax space {space!r} ({type(space).__name__}) to a jrl space")


class GymnaxEnv(Environment):
    """A gymnax 1.x environment behind jrl's ``reset_env`` / ``step_env``.

    Args:
      env: a gymnax registered name (``"CartPole-v1"``) or a gymnax
        ``Environment`` instance (e.g. one built with custom arguments).
      **env_kwargs: constructor arguments, when ``env`` is a name.

    See the module docstring for what is mapped and how.
    """

    def __init__(self, env: Any, **env_kwargs: Any):
        if isinstance(env, str):
            self.gymnax_env = _make(env, **env_kwargs) if env_kwargs else _make_default(env)
            name = env
        else:
            if env_kwargs:
                raise TypeError("env_kwargs are only accepted with a gymnax env name")
            if not all(hasattr(env, a) for a in ("reset_env", "step_env", "default_params")):
                raise TypeError(
                    f"GymnaxEnv needs a gymnax Environment or name, got {type(env).__name__}"
                )
            self.gymnax_env = env
            name = env.name
        self.id = GYMNAX_PREFIX + name
        self._default_spaces: dict[str, spaces.Space] = {}

    @property
    def default_params(self) -> PyTree:
        return self.gymnax_env.default_params

    def reset_env(self, key: PRNGKey, params: PyTree) -> tuple[PyTree, PyTree]:
        obs, state = self.gymnax_env.reset_env(key, params)
        return state, obs

    def step_env(self, key: PRNGKey, state: PyTree, action: Any, params: PyTree):
        obs, state, reward, terminated, info = self.gymnax_env.step_env(key, state, action, params)
        return state, obs, reward, terminated, dict(info)

    def reset(self, key: PRNGKey, params: PyTree | None = None) -> tuple[PyTree, TimeStep]:
        """As :meth:`Environment.reset`, with ``info`` zeros shaped like a step's info."""
        params = self.default_params if params is None else params
        state, ts = super().reset(key, params)
        action = spaces.zeros_like_space(self.action_space(params))
        shapes = jax.eval_shape(self.step_env, key, state, action, params)[4]
        info = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return state, ts.replace(info=info)

    def _space(self, fn_name: str, params: PyTree | None) -> spaces.Space:
        fn = getattr(self.gymnax_env, fn_name)
        if params is not None:
            try:
                return to_jrl_space(fn(params))
            except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
                pass  # traced params (inside jit): spaces are static, use the defaults' bounds
        if fn_name not in self._default_spaces:
            # Some default params are computed with JAX ops (random goals...): evaluate
            # them eagerly even when first asked inside a trace.
            with jax.ensure_compile_time_eval():
                self._default_spaces[fn_name] = to_jrl_space(fn(self.default_params))
        return self._default_spaces[fn_name]

    def observation_space(self, params: PyTree | None = None) -> spaces.Space:
        return self._space("observation_space", params)

    def render(self, state: PyTree, params: PyTree | None = None) -> jax.Array:
        """``uint8[H, W, 3]``: a classic-control env as jrl draws it, an image observation
        ``[h, w, C]`` as ``[16h, 16w]`` coloured cells (see the module docstring)."""
        params = self.default_params if params is None else params
        name = self.gymnax_env.name
        if name in _CLASSIC_STATE_FIELDS:
            return _render_classic(name, state, params)
        space = self.observation_space()
        if isinstance(space, spaces.Box) and len(space.shape) == 3:
            return _render_cells(self.gymnax_env.get_obs(state, params))
        raise NotImplementedError(
            f"jrl draws gymnax's classic-control envs ({', '.join(_CLASSIC_STATE_FIELDS)}) and "
            f"those with image observations (MinAtar); {name} has an observation of shape "
            f"{tuple(getattr(space, 'shape', ()))}"
        )

    def action_space(self, params: PyTree | None = None) -> spaces.Space:
        return self._space("action_space", params)

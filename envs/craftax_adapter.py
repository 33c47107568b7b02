"""Craftax (Matthews et al., 2024) as jrl :class:`~jrl.core.env.Environment`\\ s.

``jrl.envs.make("craftax:Craftax-Classic-Symbolic-v1")`` builds a :class:`CraftaxEnv` around
craftax's ``make_craftax_env_from_name(name, auto_reset=False)`` and wraps it in a
:class:`~jrl.core.wrappers.TimeLimit` at craftax's own limit (``default_params.max_timesteps``:
10000 steps for Craftax-Classic, 100000 for Craftax); pass ``max_episode_steps=`` to ``make``
to change it. The ids are craftax's own names (:data:`NAMES`):

- ``craftax:Craftax-Classic-Symbolic-v1``: ``float32[1345]`` in [0, 1], 17 actions;
- ``craftax:Craftax-Classic-Pixels-v1``: ``float32[63, 63, 3]`` in [0, 1], 17 actions;
- ``craftax:Craftax-Symbolic-v1``: ``float32[8268]`` in [0, 1], 43 actions;
- ``craftax:Craftax-Pixels-v1``: ``float32[130, 110, 3]`` in [0, 1], 43 actions.

Needs the optional extra: ``pip install jrl-jax[craftax]``.

The mapping:

- The state is craftax's ``EnvState`` (its Python numbers, as a reset made outside ``jit``
  leaves them, turned into arrays); the observation is craftax's (symbolic: a flat vector;
  pixels: an ``[H, W, 3]`` image scaled to [0, 1]), a :class:`~jrl.core.spaces.Box` with
  craftax's bounds [0, 1]; the action is ``Discrete(17)`` (Classic) or ``Discrete(43)``.
- It calls craftax's non-resetting ``reset_env`` / ``step_env``, never an auto-resetting
  ``step``: the auto-reset is jrl's :class:`~jrl.core.wrappers.AutoReset`, which splits a
  step's key as craftax's own auto-resetting env does. Keys: craftax gets the raw
  ``uint32[2]`` data of jrl's typed key; the same key gives the same world and step.
- Reward: craftax's (1 for each achievement unlocked for the first time in the episode, plus
  0.1 times the change of health). ``terminated`` is craftax's ``done`` with its time limit
  lifted: craftax ends an episode when ``state.timestep >= params.max_timesteps``, when the
  player's health reaches 0, when it stands in lava (Classic), or when the final boss is
  beaten (Craftax); the adapter steps it with ``max_timesteps`` set to ``2**31 - 1``, so
  ``terminated`` is death (or the boss) only, and the time limit is the TimeLimit's
  ``truncated`` (at the same step craftax would end the episode: ``TimeLimit`` counts steps
  from the reset as craftax's ``timestep`` does).
- ``params`` are craftax's ``EnvParams`` (a flax dataclass: ``make(id, day_length=200)``
  overrides work). Their ``max_timesteps`` is *not* the time limit any more (use
  ``max_episode_steps=``); nothing else in craftax reads it.
- ``info`` is ``{"achievements": bool[K]}``: the achievements unlocked so far in the episode
  (craftax's ``state.achievements``, in the order of craftax's ``Achievement`` enum; K = 22
  for Classic, 67 for Craftax); on an episode's last step they are the episode's. craftax's
  own info (each achievement times 100 and the score, non-zero only on the step its own
  ``done`` is set; the discount) is not passed on: with the time limit lifted it would be
  zero at a truncation. ``reset`` returns the same structure (none unlocked).
- ``render(state, params)`` is craftax's jittable pixel renderer at 16 pixels a block
  (``uint8[144, 144, 3]`` for Classic, ``uint8[208, 176, 3]`` for Craftax; the agent's
  pixel observations use 7 and 10). The first use of a pixel renderer in an installation
  (a ``Pixels`` env, or ``render``) has craftax process its textures (about 20 s for Classic,
  more for Craftax) and cache them in the installed package's ``assets`` folder
  (``craftax/craftax_classic/assets/texture_cache_classic.pbz2`` and
  ``craftax/craftax/assets/texture_cache.pbz2``; ``CRAFTAX_RELOAD_TEXTURES=1`` rebuilds them);
  a read-only installation cannot write that cache and fails there. craftax's messages about
  it go to stderr, so stdout stays jrl's.

What it does not do: craftax's ``static_env_params`` (map size, numbers of mobs) are
craftax's defaults (they fix array shapes, so they are not ``params``); the ``AutoReset``
variants of craftax's names are not ids (jrl's AutoReset does that job).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import PRNGKey, PyTree, TimeStep
from jrl.envs.entries import (
    CRAFTAX_PREFIX,
    EnvEntry,
    ExtraMissingError,
    UnknownEnvError,
    import_extra,
    install_hint,
)

__all__ = [
    "INSTALL",
    "NAMES",
    "RENDER_BLOCK_PIXELS",
    "CraftaxEnv",
    "CraftaxMissingError",
    "craftax_entry",
    "craftax_names",
]

INSTALL = install_hint("craftax")
NAMES = (
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Classic-Pixels-v1",
    "Craftax-Symbolic-v1",
    "Craftax-Pixels-v1",
)
"""The craftax names jrl adapts (ids ``craftax:<name>``)."""
RENDER_BLOCK_PIXELS = 16
"""Pixels a map block is drawn with by :meth:`CraftaxEnv.render` (craftax's image size)."""
_NO_LIMIT = 2**31 - 1
"""``max_timesteps`` the adapter steps craftax with: its own time limit, lifted."""


class CraftaxMissingError(ExtraMissingError):
    """craftax cannot be imported: a user error (``jrl`` exits with 2) naming the extra."""


def _import_make():
    """craftax's ``make_craftax_env_from_name``; :class:`CraftaxMissingError` without craftax."""
    module = import_extra(
        "craftax.craftax_env", "craftax", "craftax environments", CraftaxMissingError
    )
    return module.make_craftax_env_from_name


def craftax_names() -> list[str]:
    """The craftax names jrl adapts (``craftax:<name>`` ids); :class:`CraftaxMissingError`
    (an ImportError) without craftax, so ``jrl envs`` lists them only where it is installed."""
    _import_make()
    return list(NAMES)


@functools.cache
def _make(name: str):
    """craftax's non-resetting env of ``name``, built once per name."""
    if name not in NAMES:
        raise UnknownEnvError(
            name, list(NAMES), prefix=CRAFTAX_PREFIX, listing=f"jrl adapts: {', '.join(NAMES)}."
        )
    make_craftax_env_from_name = _import_make()
    # a Pixels env builds its renderer, whose first use processes and caches textures with
    # messages on stdout: sent to stderr, so stdout stays jrl's
    with contextlib.redirect_stdout(sys.stderr):
        return make_craftax_env_from_name(name, auto_reset=False)


@functools.cache
def _renderer(classic: bool):
    """craftax's jittable pixel renderer (``state -> float32[H, W, 3]`` in [0, 255]) at
    :data:`RENDER_BLOCK_PIXELS` pixels a block."""
    if classic:
        from craftax.craftax_classic import renderer  # optional extra: imported by _make
    else:
        from craftax.craftax import renderer  # optional extra: imported by _make
    # textures as concrete arrays even when first asked inside a trace (this is cached);
    # craftax's texture-cache messages to stderr
    with jax.ensure_compile_time_eval(), contextlib.redirect_stdout(sys.stderr):
        return renderer.make_craftax_pixel_renderer(RENDER_BLOCK_PIXELS)


def craftax_entry(name: str) -> EnvEntry:
    """The :class:`~jrl.envs.EnvEntry` of ``craftax:<name>``: its time limit is craftax's
    ``default_params.max_timesteps``. Unknown names raise :class:`~jrl.envs.UnknownEnvError`
    with the closest names, a missing craftax :class:`CraftaxMissingError`."""
    limit = int(_make(name).default_params.max_timesteps)
    return EnvEntry(
        CRAFTAX_PREFIX + name, CraftaxEnv, limit, source="craftax", kwargs=(("env", name),)
    )


def _box(space: Any) -> spaces.Box:
    """craftax's Box as a jrl Box (float32, its bounds)."""
    shape = tuple(int(s) for s in np.atleast_1d(space.shape))
    low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
    high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
    return spaces.Box(low, high, shape, dtype=jnp.float32)


class CraftaxEnv(Environment):
    """A craftax env behind jrl's ``reset_env`` / ``step_env``; see the module docstring.

    Args:
      env: one of :data:`NAMES`.
    """

    def __init__(self, env: str):
        self.craftax_env = _make(env)
        self.id = CRAFTAX_PREFIX + env
        self.classic = env.startswith("Craftax-Classic")
        params = self.craftax_env.default_params
        self._observation_space = _box(self.craftax_env.observation_space(params))
        self._action_space = spaces.Discrete(int(self.craftax_env.action_space(params).n))

    @property
    def default_params(self) -> PyTree:
        return self.craftax_env.default_params

    def reset_env(self, key: PRNGKey, params: PyTree) -> tuple[PyTree, PyTree]:
        obs, state = self.craftax_env.reset_env(jax.random.key_data(key), params)
        return jax.tree.map(jnp.asarray, state), obs

    def step_env(self, key: PRNGKey, state: PyTree, action: Any, params: PyTree):
        unlimited = params.replace(max_timesteps=_NO_LIMIT)  # the TimeLimit is jrl's
        obs, state, reward, done, _ = self.craftax_env.step_env(
            jax.random.key_data(key), state, action, unlimited
        )
        info = {"achievements": jnp.asarray(state.achievements, bool)}
        return state, obs, jnp.asarray(reward, jnp.float32), jnp.asarray(done, bool), info

    def reset(self, key: PRNGKey, params: PyTree | None = None) -> tuple[PyTree, TimeStep]:
        """As :meth:`Environment.reset`, with ``info`` shaped like a step's (none unlocked)."""
        state, ts = super().reset(key, params)
        info = {"achievements": jnp.asarray(state.achievements, bool)}
        return state, ts.replace(info=info)

    def observation_space(self, params: PyTree | None = None) -> spaces.Space:
        return self._observation_space

    def action_space(self, params: PyTree | None = None) -> spaces.Space:
        return self._action_space

    def render(self, state: PyTree, params: PyTree | None = None) -> jax.Array:
        """``uint8[H, W, 3]``: craftax's pixel picture of ``state`` (the player's view and
        inventory) at :data:`RENDER_BLOCK_PIXELS` pixels a block; jittable."""
        pixels = _renderer(self.classic)(state)
        return jnp.clip(jnp.round(pixels), 0, 255).astype(jnp.uint8)

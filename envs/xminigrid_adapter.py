"""XLand-MiniGrid (the ``xminigrid`` package) as jrl :class:`~jrl.core.env.Environment`\\ s.

``jrl.envs.make("xminigrid:MiniGrid-Empty-6x6")`` builds an :class:`XMiniGridEnv` around
``xminigrid.make("MiniGrid-Empty-6x6")`` and wraps it in a
:class:`~jrl.core.wrappers.TimeLimit` at xminigrid's own limit (its params' ``max_steps``,
144 there); pass ``max_episode_steps=`` to ``make`` to change it. The ids are
``xminigrid:<name>`` for every name of ``xminigrid.registered_environments()``
(:func:`xminigrid_names`): the MiniGrid ports (``MiniGrid-Empty-*``, ``-DoorKey-*``,
``-FourRooms``, ``-Memory*``, ...) and the XLand worlds (``XLand-MiniGrid-R<rooms>-<size>``).
Needs the optional extra: ``pip install jrl-jax[xminigrid]``.

The mapping:

- state: xminigrid's ``TimeStep`` (its ``State`` -- grid, agent, step count, goal and rule
  encodings -- and the last step's fields), as xminigrid's ``step`` takes it.
- observation: xminigrid's own, the agent's egocentric view ``uint8[v, v, 2]``
  (``v = params.view_size``: 7 for MiniGrid, 5 for XLand, 3 for Memory), channel 0 the tile
  id (0..12), channel 1 its colour (0..11); the space is a Box with those bounds.
- action: ``Discrete(6)``, xminigrid's actions (0 forward, 1 turn right, 2 turn left,
  3 pick up, 4 put down, 5 toggle).
- reward: xminigrid's, ``1 - 0.9 * steps / params.max_steps`` on reaching the goal, else 0.
- terminated: the natural end only (xminigrid's ``discount == 0``: the goal reached, or
  Memory's wrong object).
- keys: jrl's typed key goes to xminigrid's ``reset`` as it is (xminigrid splits it with
  ``jax.random``); ``step`` is deterministic and uses no key.
- params: xminigrid's ``EnvParams`` (``XLandEnvParams``, ``PlaygroundEnvParams``), a flax
  dataclass, so ``make(id, height=8)`` overrides work. Its fields but ``ruleset`` are static
  (not pytree leaves): they cannot be vmapped, and a new value compiles anew.
- spaces: as above, from ``params.view_size`` and ``env.num_actions``; ``info`` is ``{}``.
- render: jittable ``uint8[16 h, 16 w, 3]`` of the whole grid, drawn by jrl (16 pixels a cell,
  xminigrid's colours, the agent a red triangle pointing where it faces, its field of view
  lightened, as xminigrid's renderer does), with tile pictures like xminigrid's but not pixel
  for pixel theirs: xminigrid's own ``env.render`` draws on the host (numpy, 32 pixels a cell,
  about 80 ms a tile picture), so it cannot run under jit.

The time limit. xminigrid never stops an episode itself: on the step where ``step_num``
reaches ``params.max_steps`` it only marks the ``TimeStep`` LAST with ``discount`` 1, and a
further ``step`` goes on. The adapter ignores that mark, so a bare env never truncates and
jrl's TimeLimit, set at the same ``max_steps``, truncates on that very step. ``max_steps`` is
*not* lifted (made huge) in the params, because xminigrid's reward divides by it: a huge value
would make every goal worth about 1. So the reward keeps xminigrid's scale; past ``max_steps`` (only
with a longer ``max_episode_steps``) it keeps falling, below 0.1 and, after ``1.11 *
max_steps``, below 0. To lengthen episodes keep both together: ``make(id, max_steps=n,
max_episode_steps=n)``.

What it does not do:

- XLand worlds with their default params have xminigrid's *empty* ruleset: no goal (the
  reward is always 0, episodes end only at the time limit) and no objects. Their tasks come
  from xminigrid's benchmarks (``xminigrid.load_benchmark("trivial-21k")``, downloaded from
  the Hugging Face hub into ``~/.xland_minigrid`` on first use): give one as params,
  ``make(id, ruleset=benchmark.get_ruleset(i))`` or ``params.replace(ruleset=...)``
  (rulesets are pytree leaves: they can be vmapped). The goal and rules are not observed
  (xminigrid's ``RulesAndGoalsObservationWrapper`` is not applied); no benchmark is loaded.
- No RGB observation: xminigrid's ``experimental.img_obs`` wrapper builds its tile cache in
  ``~/.xland_minigrid`` on import; the observation stays the symbolic grid.
- No direction observation (xminigrid's ``DirectionObservationWrapper``): the view is
  already turned to the agent's heading. What the agent carries is not observed either
  (xminigrid leaves it out of the view).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import PRNGKey, PyTree
from jrl.envs.entries import (
    XMINIGRID_PREFIX,
    EnvEntry,
    ExtraMissingError,
    UnknownEnvError,
    import_extra,
    install_hint,
)

__all__ = [
    "INSTALL",
    "TILE_PIXELS",
    "XMiniGridEnv",
    "XMiniGridMissingError",
    "xminigrid_entry",
    "xminigrid_names",
]

INSTALL = install_hint("xminigrid")
TILE_PIXELS = 16
"""Pixels per grid cell in :meth:`XMiniGridEnv.render`."""
NUM_TILES, NUM_COLORS = 13, 12
"""xminigrid's tile ids (0..12) and colour ids (0..11): the observation's bounds."""


class XMiniGridMissingError(ExtraMissingError):
    """xminigrid cannot be imported: a user error (``jrl`` exits with 2) naming the extra."""


def _import_xminigrid():
    return import_extra(
        "xminigrid", "xminigrid", "XLand-MiniGrid environments", XMiniGridMissingError
    )


def xminigrid_names() -> list[str]:
    """The env names xminigrid registers (``xminigrid:<name>`` ids), sorted; ImportError
    without xminigrid."""
    return sorted(_import_xminigrid().registered_environments())


@functools.cache
def _make(name: str):
    """``xminigrid.make(name)``: ``(env, default params)``, built once per name."""
    xminigrid = _import_xminigrid()
    known = sorted(xminigrid.registered_environments())
    if name not in known:
        raise UnknownEnvError(
            name, known, prefix=XMINIGRID_PREFIX, listing=f"xminigrid has: {', '.join(known)}."
        )
    return xminigrid.make(name)


def xminigrid_entry(name: str) -> EnvEntry:
    """The :class:`~jrl.envs.EnvEntry` of ``xminigrid:<name>``: time limit xminigrid's
    ``max_steps`` of the default params. Unknown names raise
    :class:`~jrl.envs.UnknownEnvError` with the closest xminigrid names, and a missing
    xminigrid :class:`XMiniGridMissingError` naming the extra."""
    _, params = _make(name)
    return EnvEntry(
        XMINIGRID_PREFIX + name,
        XMiniGridEnv,
        int(params.max_steps),
        source="xminigrid",
        kwargs=(("env", name),),
    )


class XMiniGridEnv(Environment):
    """An xminigrid environment behind jrl's ``reset_env`` / ``step_env``; see the module
    docstring."""

    def __init__(self, env: str):
        self.xminigrid_env, self._default_params = _make(env)
        self.id = XMINIGRID_PREFIX + env

    @property
    def default_params(self) -> PyTree:
        return self._default_params

    def reset_env(self, key: PRNGKey, params: PyTree) -> tuple[PyTree, PyTree]:
        timestep = self.xminigrid_env.reset(params, key)
        return timestep, timestep.observation

    def step_env(self, key: PRNGKey, state: PyTree, action: Any, params: PyTree):
        timestep = self.xminigrid_env.step(params, state, action)
        # discount 0 is xminigrid's natural end; its time-limit LAST keeps discount 1
        terminated = timestep.discount == 0.0
        return timestep, timestep.observation, timestep.reward, terminated, {}

    def observation_space(self, params: PyTree | None = None) -> spaces.Space:
        view = int((self.default_params if params is None else params).view_size)
        high = np.broadcast_to(np.array([NUM_TILES - 1, NUM_COLORS - 1]), (view, view, 2))
        return spaces.Box(0, high, (view, view, 2), jnp.uint8)

    def action_space(self, params: PyTree | None = None) -> spaces.Space:
        params = self.default_params if params is None else params
        return spaces.Discrete(int(self.xminigrid_env.num_actions(params)))

    def render(self, state: PyTree, params: PyTree | None = None) -> jax.Array:
        """``uint8[16 h, 16 w, 3]``: the whole grid (see the module docstring)."""
        params = self.default_params if params is None else params
        return _render_grid(
            state.state.grid,
            state.state.agent.position,
            state.state.agent.direction,
            int(params.view_size),
        )


# ---------------------------------------------------------------------------------------------
# Rendering: a tile atlas drawn once with numpy, indexed by the grid under jit
# ---------------------------------------------------------------------------------------------

_COLOURS = np.array(
    [
        (0, 0, 0),  # 0 EMPTY (padding: drawn black)
        (255, 0, 0),  # 1 red
        (0, 255, 0),  # 2 green
        (0, 0, 255),  # 3 blue
        (112, 39, 195),  # 4 purple
        (255, 255, 0),  # 5 yellow
        (100, 100, 100),  # 6 grey
        (0, 0, 0),  # 7 black
        (255, 140, 0),  # 8 orange
        (255, 255, 255),  # 9 white
        (160, 82, 45),  # 10 brown
        (225, 20, 147),  # 11 pink
    ],
    np.float64,
)
"""xminigrid's colour ids in RGB (its rendering's palette)."""
_GRID_LINE = np.array((100, 100, 100), np.float64)


def _pixel_coords(p: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of the pixel centres of a ``p x p`` tile, in [0, 1], ``[p, p]`` each."""
    c = (np.arange(p) + 0.5) / p
    return np.meshgrid(c, c)


def _shape_masks(p: int) -> dict[str, np.ndarray]:
    """Boolean ``[p, p]`` masks of the shapes tiles are drawn with."""
    x, y = _pixel_coords(p)

    def rect(x0, x1, y0, y1):
        return (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)

    def below(ax, ay, bx, by):  # the side of the line a->b where the triangle lies
        return (bx - ax) * (y - ay) - (by - ay) * (x - ax)

    def triangle(a, b, c):
        s = [below(*a, *b), below(*b, *c), below(*c, *a)]
        return (s[0] >= 0) & (s[1] >= 0) & (s[2] >= 0) | (s[0] <= 0) & (s[1] <= 0) & (s[2] <= 0)

    r = np.hypot(x - 0.5, y - 0.5)
    up = triangle((0.15, 0.8), (0.85, 0.8), (0.5, 0.2))
    down = triangle((0.15, 0.3), (0.85, 0.3), (0.5, 0.9))
    return {
        "lines": (x < 1 / p) | (y < 1 / p),  # the top and left edges
        "disc": r <= 0.31,
        "square": rect(0.25, 0.75, 0.25, 0.75),
        "pyramid": up,
        "star": up | triangle((0.15, 0.75), (0.85, 0.75), (0.5, 0.15)) | down,
        "hex": (np.abs(y - 0.5) <= 0.35 * 0.866)
        & (0.866 * np.abs(x - 0.5) + 0.5 * np.abs(y - 0.5) <= 0.35 * 0.866),
        "key": rect(0.5, 0.63, 0.31, 0.88)
        | rect(0.38, 0.5, 0.59, 0.66)
        | rect(0.38, 0.5, 0.81, 0.88)
        | (np.hypot(x - 0.56, y - 0.28) <= 0.19) & (np.hypot(x - 0.56, y - 0.28) > 0.064),
        "door_inset": rect(0.06, 0.94, 0.06, 0.94),
        "door_ring": rect(0.04, 0.96, 0.04, 0.96) & ~rect(0.08, 0.92, 0.08, 0.92)
        | rect(0.12, 0.88, 0.12, 0.88) & ~(np.hypot(x - 0.75, y - 0.5) <= 0.08),
        "door_slot": rect(0.52, 0.75, 0.5, 0.56),
        "door_open": rect(0.88, 1.0, 0.0, 1.0) & ~rect(0.92, 0.96, 0.04, 0.96),
        "agent": triangle((0.12, 0.19), (0.87, 0.5), (0.12, 0.81)),  # facing right
    }


def _draw_tile(tile: int, colour: np.ndarray, m: dict[str, np.ndarray], p: int) -> np.ndarray:
    """``float[p, p, 3]``: tile id ``tile`` in ``colour`` (xminigrid's tile ids)."""
    floor = np.where(m["lines"][..., None], _GRID_LINE, 0.0) * np.ones((p, p, 3))
    if tile == 0:  # EMPTY
        return np.zeros((p, p, 3))
    if tile in (1, 6):  # FLOOR (half its colour), GOAL (full)
        return np.where(m["lines"][..., None], _GRID_LINE, colour / (2 if tile == 1 else 1))
    if tile == 2:  # WALL
        return np.broadcast_to(colour, (p, p, 3)).copy()
    shape = {3: "disc", 4: "square", 5: "pyramid", 7: "key", 11: "hex", 12: "star"}.get(tile)
    if shape is not None:  # objects on a black floor
        return np.where(m[shape][..., None], colour, floor)
    if tile == 8:  # DOOR_LOCKED
        img = np.where(m["door_inset"][..., None], 0.45 * colour, colour)
        return np.where(m["door_slot"][..., None], colour, img)
    if tile == 9:  # DOOR_CLOSED
        return np.where(m["door_ring"][..., None], 0.0, colour) * np.ones((p, p, 3))
    return np.where(m["door_open"][..., None], colour, floor)  # DOOR_OPEN


@functools.cache
def _atlas(p: int = TILE_PIXELS) -> tuple[np.ndarray, np.ndarray]:
    """``(uint8[13 * 12, p, p, 3] tiles by tile * 12 + colour, bool[4, p, p] the agent's
    triangle facing up, right, down, left)``."""
    m = _shape_masks(p)
    tiles = [_draw_tile(t, _COLOURS[c], m, p) for t in range(NUM_TILES) for c in range(NUM_COLORS)]
    right = m["agent"]
    agent = np.stack([np.rot90(right, 1), right, np.rot90(right, -1), np.rot90(right, 2)])
    return np.stack(tiles).round().astype(np.uint8), agent


def _render_grid(grid, position, direction, view: int) -> jax.Array:
    """``uint8[p h, p w, 3]`` of an xminigrid grid ``uint8[h, w, 2]`` with the agent at
    ``position`` (row, column) facing ``direction`` (0 up, 1 right, 2 down, 3 left) and its
    ``view x view`` field of view lightened."""
    tiles, agent = (jnp.asarray(a) for a in _atlas())
    h, w, p = grid.shape[0], grid.shape[1], tiles.shape[1]
    index = grid[..., 0].astype(jnp.int32) * NUM_COLORS + grid[..., 1].astype(jnp.int32)
    cells = tiles[index].astype(jnp.float32)  # [h, w, p, p, 3]
    rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
    here = (rows == position[0]) & (cols == position[1])
    triangle = agent[direction][None, None, :, :, None] & here[:, :, None, None, None]
    cells = jnp.where(triangle, jnp.array([255.0, 0.0, 0.0]), cells)
    seen = _view_mask(h, w, position, direction, view)
    cells = jnp.where(seen[:, :, None, None, None], cells + 0.2 * (255.0 - cells), cells)
    frame = cells.round().astype(jnp.uint8).transpose(0, 2, 1, 3, 4)
    return frame.reshape(h * p, w * p, 3)


def _view_mask(h: int, w: int, position, direction, view: int) -> jax.Array:
    """``bool[h, w]``: the cells of the agent's ``view x view`` field of view (xminigrid's crop:
    the agent at the middle of the side opposite its heading)."""
    half = view // 2
    y, x = position[0], position[1]
    top = jnp.array([y - view + 1, y - half, y, y - half])[direction]  # up, right, down, left
    left = jnp.array([x - half, x, x - half, x - view + 1])[direction]
    rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
    return (rows >= top) & (rows < top + view) & (cols >= left) & (cols < left + view)

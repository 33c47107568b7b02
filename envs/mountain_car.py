"""MountainCar-v0 and MountainCarContinuous-v0: drive an underpowered car up a hill.

Same dynamics, reward and termination as Gymnasium's environments (Moore
1990), in pure JAX. The track height is ``0.45 sin(3 x) + 0.55``; one step::

    v <- clip(v + push - gravity cos(3 x), -max_speed, max_speed)
    x <- clip(x + v, min_position, max_position);   v <- 0 if x == min_position and v < 0

MountainCar-v0: ``push = (a - 1) force`` for the int32 action ``a`` in
{0, 1, 2} (left, none, right); reward -1 per step.

MountainCarContinuous-v0: ``push = clip(a, min_action, max_action) power``
for a ``float32[1]`` action; reward ``-0.1 a^2`` (the unclipped action, as in
Gymnasium) plus 100 on reaching the goal.

Both terminate when ``x >= goal_position`` and ``v >= goal_velocity``.
Observation ``float32[2]``: ``(x, v)``. Episodes start at ``x ~ U(-0.6, -0.4)``,
``v = 0``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import PRNGKey
from jrl.envs import raster as R
from jrl.envs.params import concrete_params

MAX_EPISODE_STEPS = 200
"""Time limit of MountainCar-v0."""
MAX_EPISODE_STEPS_CONTINUOUS = 999
"""Time limit of MountainCarContinuous-v0."""


@struct.dataclass
class MountainCarParams:
    """Constants of MountainCar-v0 (Gymnasium's values), all floats so a batch can be vmapped."""

    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001  # velocity change per step of a full push
    gravity: float = 0.0025
    reset_low: float = -0.6  # x starts uniform in [reset_low, reset_high)
    reset_high: float = -0.4


@struct.dataclass
class MountainCarContinuousParams:
    """Constants of MountainCarContinuous-v0 (Gymnasium's values), all floats."""

    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015  # velocity change per step of a full push
    gravity: float = 0.0025
    goal_reward: float = 100.0  # bonus on the terminating step
    action_cost: float = 0.1  # reward -= action_cost * a^2
    reset_low: float = -0.6
    reset_high: float = -0.4


@struct.dataclass
class MountainCarState:
    position: jax.Array  # [] float32 x
    velocity: jax.Array  # [] float32 v (position change per step)


def _reset(key: PRNGKey, params) -> MountainCarState:
    position = jax.random.uniform(key, (), jnp.float32, params.reset_low, params.reset_high)
    return MountainCarState(position=position, velocity=jnp.zeros((), jnp.float32))


def _move(state: MountainCarState, push: jax.Array, params) -> tuple[MountainCarState, jax.Array]:
    """One step of the shared physics; returns the new state and ``terminated``."""
    velocity = state.velocity + push - params.gravity * jnp.cos(3 * state.position)
    velocity = jnp.clip(velocity, -params.max_speed, params.max_speed)
    position = jnp.clip(state.position + velocity, params.min_position, params.max_position)
    velocity = jnp.where((position == params.min_position) & (velocity < 0), 0.0, velocity)
    state = MountainCarState(
        position=position.astype(jnp.float32), velocity=velocity.astype(jnp.float32)
    )
    terminated = (position >= params.goal_position) & (velocity >= params.goal_velocity)
    return state, terminated


def _obs(state: MountainCarState) -> jax.Array:
    return jnp.stack([state.position, state.velocity]).astype(jnp.float32)


def _observation_space(p) -> spaces.Box:
    low = np.array([p.min_position, -p.max_speed], np.float32)
    high = np.array([p.max_position, p.max_speed], np.float32)
    return spaces.Box(low, high, (2,), jnp.float32)


def _height(x):
    return jnp.sin(3 * x) * 0.45 + 0.55


def _render(state: MountainCarState, params, shape: tuple[int, int]) -> jax.Array:
    """Gymnasium's picture: black track, black car with grey wheels, yellow flag at the goal."""
    h, w = shape
    u = w / 600.0  # one Gymnasium pixel
    scale = w / (params.max_position - params.min_position)  # pixels per unit of x
    px, py = R.pixel_grid(h, w)
    img = R.blank(h, w)
    # The track y = height(x) * scale, drawn one pixel wide (distance along the normal).
    x = px / scale + params.min_position
    slope = 1.35 * jnp.cos(3 * x)  # d height / dx (the same in pixels)
    img = R.paint(img, jnp.abs(py - _height(x) * scale) / jnp.sqrt(1 + slope**2) - 0.5, R.BLACK)
    # The car: body and wheels rotated by cos(3 x), as Gymnasium draws it.
    pos = state.position
    angle = jnp.cos(3 * pos)
    cx, cy = (pos - params.min_position) * scale, 10 * u + _height(pos) * scale
    body = R.rect_vertices(-20 * u, 20 * u, 0.0, 20 * u, angle, cx, cy)
    img = R.paint(img, R.sd_convex_polygon(px, py, body), R.BLACK)
    for wheel_x in (10 * u, -10 * u):
        wx, wy = R.rotate(wheel_x, 0.0, angle)
        img = R.paint(img, R.sd_circle(px, py, cx + wx, cy + wy, 8 * u), (128, 128, 128))
    # The flag: a pole 50 px high and a yellow pennant at its top.
    fx = (params.goal_position - params.min_position) * scale
    fy1 = _height(params.goal_position) * scale
    fy2 = fy1 + 50 * u
    img = R.paint(img, R.sd_segment(px, py, fx, fy1, fx, fy2, 0.5), R.BLACK)
    flag = jnp.stack(
        [jnp.stack([fx, fy2 - 10 * u]), jnp.stack([fx + 25 * u, fy2 - 5 * u]), jnp.stack([fx, fy2])]
    )
    img = R.paint(img, R.sd_convex_polygon(px, py, flag), (204, 204, 0))
    return R.to_uint8(img)


class MountainCar(Environment):
    """Gymnasium's ``MountainCar-v0`` in pure JAX (see the module docstring).

    ``render`` draws Gymnasium's scene on a ``render_shape = (height, width)``
    frame, by default ``(400, 600)`` as in Gymnasium.
    """

    id = "MountainCar-v0"

    def __init__(self, render_shape: tuple[int, int] = (400, 600)):
        self.render_shape = (int(render_shape[0]), int(render_shape[1]))

    @property
    def default_params(self) -> MountainCarParams:
        return MountainCarParams()

    def reset_env(self, key: PRNGKey, params: MountainCarParams):
        state = _reset(key, params)
        return state, _obs(state)

    def step_env(
        self, key: PRNGKey, state: MountainCarState, action: jax.Array, params: MountainCarParams
    ):
        push = (jnp.asarray(action).astype(jnp.float32) - 1.0) * params.force
        state, terminated = _move(state, push, params)
        return state, _obs(state), jnp.full((), -1.0, jnp.float32), terminated, {}

    def observation_space(self, params: MountainCarParams | None = None) -> spaces.Box:
        return _observation_space(concrete_params(params, self.default_params))

    def action_space(self, params: MountainCarParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(3)

    def render(self, state: MountainCarState, params: MountainCarParams | None = None) -> jax.Array:
        """``uint8[H, W, 3]`` frame of ``state``."""
        return _render(state, self.default_params if params is None else params, self.render_shape)


class MountainCarContinuous(Environment):
    """Gymnasium's ``MountainCarContinuous-v0`` in pure JAX (see the module docstring).

    ``render`` draws Gymnasium's scene on a ``render_shape = (height, width)``
    frame, by default ``(400, 600)`` as in Gymnasium.
    """

    id = "MountainCarContinuous-v0"

    def __init__(self, render_shape: tuple[int, int] = (400, 600)):
        self.render_shape = (int(render_shape[0]), int(render_shape[1]))

    @property
    def default_params(self) -> MountainCarContinuousParams:
        return MountainCarContinuousParams()

    def reset_env(self, key: PRNGKey, params: MountainCarContinuousParams):
        state = _reset(key, params)
        return state, _obs(state)

    def step_env(
        self,
        key: PRNGKey,
        state: MountainCarState,
        action: jax.Array,
        params: MountainCarContinuousParams,
    ):
        a = jnp.reshape(jnp.asarray(action, jnp.float32), ())  # float32[1] (or a scalar)
        push = jnp.clip(a, params.min_action, params.max_action) * params.power
        state, terminated = _move(state, push, params)
        reward = jnp.where(terminated, params.goal_reward, 0.0) - params.action_cost * a**2
        return state, _obs(state), reward.astype(jnp.float32), terminated, {}

    def observation_space(self, params: MountainCarContinuousParams | None = None) -> spaces.Box:
        return _observation_space(concrete_params(params, self.default_params))

    def action_space(self, params: MountainCarContinuousParams | None = None) -> spaces.Box:
        p = concrete_params(params, self.default_params)
        return spaces.Box(np.float32(p.min_action), np.float32(p.max_action), (1,), jnp.float32)

    def render(
        self, state: MountainCarState, params: MountainCarContinuousParams | None = None
    ) -> jax.Array:
        """``uint8[H, W, 3]`` frame of ``state``."""
        return _render(state, self.default_params if params is None else params, self.render_shape)

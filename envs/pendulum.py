"""Pendulum-v1: swing a torque-limited pendulum up and keep it upright.

Same dynamics and reward as Gymnasium's ``Pendulum-v1``, in pure JAX. With
``θ = 0`` upright (positive counter-clockwise) and torque ``u = clip(a, ±max_torque)``::

    θ'  <- clip(θ' + (3 g / (2 l) sin θ + 3 / (m l^2) u) dt, -max_speed, max_speed)
    θ   <- θ + θ' dt                       (with the new θ')
    r    = -(norm(θ)^2 + 0.1 θ'^2 + 0.001 u^2)   (from the state before the step)

where ``norm(θ) = ((θ + π) mod 2π) - π``. The episode never terminates (the
registry's TimeLimit cuts it). Observation ``float32[3]``:
``(cos θ, sin θ, θ')``; action ``float32[1]``; episodes start at
``θ ~ U(-π, π)``, ``θ' ~ U(-1, 1)``.
"""

from __future__ import annotations

import math

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


@struct.dataclass
class PendulumParams:
    """Physical constants (Gymnasium's values), all floats so a batch can be vmapped."""

    max_speed: float = 8.0  # rad/s, |θ'| bound
    max_torque: float = 2.0  # actions are clipped to ±max_torque
    dt: float = 0.05  # s per step
    g: float = 10.0  # m/s^2
    m: float = 1.0  # kg
    l: float = 1.0  # noqa: E741  m, rod length
    reset_theta: float = math.pi  # θ starts uniform in [-reset_theta, reset_theta)
    reset_theta_dot: float = 1.0  # θ' starts uniform in [-reset_theta_dot, reset_theta_dot)


@struct.dataclass
class PendulumState:
    theta: jax.Array  # [] float32 angle from upright (rad, not wrapped)
    theta_dot: jax.Array  # [] float32 angular velocity (rad/s)
    last_u: jax.Array  # [] float32 last applied (clipped) torque, for render only; 0 after reset


def angle_normalize(x: jax.Array) -> jax.Array:
    """``x`` wrapped to ``[-π, π)``."""
    return jnp.mod(x + jnp.pi, 2 * jnp.pi) - jnp.pi


class Pendulum(Environment):
    """Gymnasium's ``Pendulum-v1`` in pure JAX (see the module docstring).

    ``render`` draws Gymnasium's scene on a ``render_shape = (height, width)``
    frame, by default ``(500, 500)`` as in Gymnasium; the last torque is shown
    as a black arrow around the axle (counter-clockwise for ``u > 0``).
    """

    id = "Pendulum-v1"

    def __init__(self, render_shape: tuple[int, int] = (500, 500)):
        self.render_shape = (int(render_shape[0]), int(render_shape[1]))

    @property
    def default_params(self) -> PendulumParams:
        return PendulumParams()

    def reset_env(self, key: PRNGKey, params: PendulumParams) -> tuple[PendulumState, jax.Array]:
        high = jnp.stack(
            [
                jnp.asarray(params.reset_theta, jnp.float32),
                jnp.asarray(params.reset_theta_dot, jnp.float32),
            ]
        )
        s = jax.random.uniform(key, (2,), jnp.float32, -high, high)
        state = PendulumState(theta=s[0], theta_dot=s[1], last_u=jnp.zeros((), jnp.float32))
        return state, self._obs(state)

    def step_env(
        self, key: PRNGKey, state: PendulumState, action: jax.Array, params: PendulumParams
    ):
        u = jnp.reshape(jnp.asarray(action, jnp.float32), ())  # float32[1] (or a scalar)
        u = jnp.clip(u, -params.max_torque, params.max_torque)
        g, m, l, dt = params.g, params.m, params.l, params.dt  # noqa: E741
        th, thdot = state.theta, state.theta_dot
        cost = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        thdot = thdot + (3 * g / (2 * l) * jnp.sin(th) + 3.0 / (m * l**2) * u) * dt
        thdot = jnp.clip(thdot, -params.max_speed, params.max_speed)
        state = PendulumState(theta=th + thdot * dt, theta_dot=thdot, last_u=u)
        return state, self._obs(state), (-cost).astype(jnp.float32), jnp.zeros((), bool), {}

    @staticmethod
    def _obs(state: PendulumState) -> jax.Array:
        obs = [jnp.cos(state.theta), jnp.sin(state.theta), state.theta_dot]
        return jnp.stack(obs).astype(jnp.float32)

    def observation_space(self, params: PendulumParams | None = None) -> spaces.Box:
        p = concrete_params(params, self.default_params)
        high = np.array([1.0, 1.0, p.max_speed], np.float32)
        return spaces.Box(-high, high, (3,), jnp.float32)

    def action_space(self, params: PendulumParams | None = None) -> spaces.Box:
        p = concrete_params(params, self.default_params)
        return spaces.Box(np.float32(-p.max_torque), np.float32(p.max_torque), (1,), jnp.float32)

    def render(self, state: PendulumState, params: PendulumParams | None = None) -> jax.Array:
        """``uint8[H, W, 3]``: Gymnasium's picture (red rod, torque arrow, black axle)."""
        params = self.default_params if params is None else params
        h, w = self.render_shape
        scale = min(h, w) / 4.4  # pixels per metre: the frame spans ±2.2 m
        cx, cy = w / 2, h / 2
        px, py = R.pixel_grid(h, w)
        img = R.blank(h, w)
        red = (204, 77, 77)
        angle = state.theta + jnp.pi / 2  # the rod points up at theta = 0
        rod = R.rect_vertices(0.0, params.l * scale, -0.1 * scale, 0.1 * scale, angle, cx, cy)
        img = R.paint(img, R.sd_convex_polygon(px, py, rod), red)
        tip_x, tip_y = R.rotate(params.l * scale, 0.0, angle)
        img = R.paint(img, R.sd_circle(px, py, cx, cy, 0.1 * scale), red)
        img = R.paint(img, R.sd_circle(px, py, cx + tip_x, cy + tip_y, 0.1 * scale), red)
        img = R.paint(img, _sd_torque_arrow(px - cx, py - cy, state.last_u, scale), R.BLACK)
        img = R.paint(img, R.sd_circle(px, py, cx, cy, 0.05 * scale), R.BLACK)
        return R.to_uint8(img)


def _sd_torque_arrow(dx: jax.Array, dy: jax.Array, u: jax.Array, scale) -> jax.Array:
    """A three-quarter circle with an arrowhead, radius ``scale |u| / 4`` about the origin,
    turning clockwise for ``u < 0`` and counter-clockwise for ``u > 0``; nothing for ``u = 0``."""
    r = scale * jnp.abs(u) / 4
    lx = jnp.where(u > 0, -dx, dx)  # draw the clockwise arrow, mirrored for u > 0
    half_width = 0.03 * r
    ring = jnp.abs(jnp.hypot(lx, dy) - r) - half_width
    arc = jnp.maximum(ring, jnp.minimum(-lx, dy))  # leave out the upper-left quarter
    a = 0.16 * r  # arrowhead at the left end, pointing up (clockwise motion there)
    head = R.sd_convex_polygon(
        lx,
        dy,
        jnp.stack(
            [
                jnp.stack([-r - a, -0.05 * r]),
                jnp.stack([-r + a, -0.05 * r]),
                jnp.stack([-r, 0.3 * r]),
            ]
        ),
    )
    return jnp.where(r > 1.0, jnp.minimum(arc, head), jnp.inf)

"""Acrobot-v1: swing a two-link chain, actuated at the middle joint, above a line.

Same dynamics, reward and termination as Gymnasium's ``Acrobot-v1`` (Sutton
1996; the equations of Sutton & Barto's book by default), in pure JAX.

State ``s = (θ1, θ2, θ1', θ2')``: ``θ1`` is the first link's angle from
hanging straight down, ``θ2`` the second link's angle relative to the first.
With torque ``τ`` on the middle joint::

    d1  = m1 lc1^2 + m2 (l1^2 + lc2^2 + 2 l1 lc2 cos θ2) + I1 + I2
    d2  = m2 (lc2^2 + l1 lc2 cos θ2) + I2
    φ2  = m2 lc2 g cos(θ1 + θ2 - π/2)
    φ1  = -m2 l1 lc2 θ2'^2 sin θ2 - 2 m2 l1 lc2 θ2' θ1' sin θ2
          + (m1 lc1 + m2 l1) g cos(θ1 - π/2) + φ2
    θ2'' = (τ + d2/d1 φ1 - [book] m2 l1 lc2 θ1'^2 sin θ2 - φ2) / (m2 lc2^2 + I2 - d2^2/d1)
    θ1'' = -(d2 θ2'' + φ1) / d1

integrated with one classic Runge-Kutta-4 step of ``dt``; then the angles are
wrapped to ``[-π, π]`` and the velocities clipped to ``±max_vel``. The
``[book]`` term is ``book_dynamics`` (1: book, 0: the NeurIPS paper's
equations). Reward is -1 per step and 0 on the terminating step; the episode
terminates when the tip is above the line, ``-cos θ1 - cos(θ1 + θ2) > 1``.

Observation ``float32[6]``: ``(cos θ1, sin θ1, cos θ2, sin θ2, θ1', θ2')``.
Action: int32 scalar in {0, 1, 2}, torque ``(a - 1) * torque_mag``.
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

MAX_EPISODE_STEPS = 500


@struct.dataclass
class AcrobotParams:
    """Physical constants (Gymnasium's values), all floats so a batch can be vmapped."""

    dt: float = 0.2  # s per step (one RK4 step)
    link_length_1: float = 1.0  # m
    link_length_2: float = 1.0  # m (drawing only, as in Gymnasium)
    link_mass_1: float = 1.0  # kg
    link_mass_2: float = 1.0  # kg
    link_com_pos_1: float = 0.5  # m, joint to centre of mass of link 1
    link_com_pos_2: float = 0.5  # m, joint to centre of mass of link 2
    link_moi: float = 1.0  # moment of inertia of each link
    max_vel_1: float = 4 * math.pi  # rad/s, |θ1'| bound
    max_vel_2: float = 9 * math.pi  # rad/s, |θ2'| bound
    gravity: float = 9.8  # m/s^2
    torque_mag: float = 1.0  # actions 0, 1, 2 apply torque -1, 0, +1 times this
    torque_noise_max: float = 0.0  # uniform(-max, max) noise added to the torque
    book_dynamics: float = 1.0  # 1: Sutton & Barto book equations, 0: NeurIPS paper's
    reset_low: float = -0.1  # every state variable starts uniform in [reset_low, reset_high)
    reset_high: float = 0.1


@struct.dataclass
class AcrobotState:
    theta1: jax.Array  # [] float32 angle of link 1 from hanging down, in [-π, π]
    theta2: jax.Array  # [] float32 angle of link 2 relative to link 1, in [-π, π]
    theta1_dot: jax.Array  # [] float32 rad/s
    theta2_dot: jax.Array  # [] float32 rad/s


def _dsdt(s: jax.Array, torque: jax.Array, p: AcrobotParams) -> jax.Array:
    """``ds/dt`` [4] of ``s = (θ1, θ2, θ1', θ2')`` under a constant ``torque``."""
    theta1, theta2, dtheta1, dtheta2 = s[0], s[1], s[2], s[3]
    m1, m2, l1 = p.link_mass_1, p.link_mass_2, p.link_length_1
    lc1, lc2, i1, i2, g = p.link_com_pos_1, p.link_com_pos_2, p.link_moi, p.link_moi, p.gravity
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * jnp.cos(theta2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * jnp.cos(theta2)) + i2
    phi2 = m2 * lc2 * g * jnp.cos(theta1 + theta2 - jnp.pi / 2)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * jnp.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * jnp.sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * jnp.cos(theta1 - jnp.pi / 2)
        + phi2
    )
    book = p.book_dynamics * m2 * l1 * lc2 * dtheta1**2 * jnp.sin(theta2)
    ddtheta2 = (torque + d2 / d1 * phi1 - book - phi2) / (m2 * lc2**2 + i2 - d2**2 / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2])


def _wrap(x: jax.Array, low: float, high: float) -> jax.Array:
    """Shifts ``x`` by whole periods ``high - low`` into ``[low, high]`` (edge values stay)."""
    period = high - low
    x = jnp.where(x > high, x - period * jnp.ceil((x - high) / period), x)
    return jnp.where(x < low, x + period * jnp.ceil((low - x) / period), x)


class Acrobot(Environment):
    """Gymnasium's ``Acrobot-v1`` in pure JAX (see the module docstring).

    ``render`` draws Gymnasium's scene on a ``render_shape = (height, width)``
    frame, by default ``(500, 500)`` as in Gymnasium.
    """

    id = "Acrobot-v1"

    def __init__(self, render_shape: tuple[int, int] = (500, 500)):
        self.render_shape = (int(render_shape[0]), int(render_shape[1]))

    @property
    def default_params(self) -> AcrobotParams:
        return AcrobotParams()

    def reset_env(self, key: PRNGKey, params: AcrobotParams) -> tuple[AcrobotState, jax.Array]:
        s = jax.random.uniform(key, (4,), jnp.float32, params.reset_low, params.reset_high)
        state = AcrobotState(theta1=s[0], theta2=s[1], theta1_dot=s[2], theta2_dot=s[3])
        return state, self._obs(state)

    def step_env(self, key: PRNGKey, state: AcrobotState, action: jax.Array, params: AcrobotParams):
        noise = jax.random.uniform(key, (), jnp.float32, -1.0, 1.0) * params.torque_noise_max
        torque = (jnp.asarray(action).astype(jnp.float32) - 1.0) * params.torque_mag + noise
        s = jnp.stack([state.theta1, state.theta2, state.theta1_dot, state.theta2_dot])
        dt = params.dt
        k1 = _dsdt(s, torque, params)
        k2 = _dsdt(s + dt / 2 * k1, torque, params)
        k3 = _dsdt(s + dt / 2 * k2, torque, params)
        k4 = _dsdt(s + dt * k3, torque, params)
        s = s + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        state = AcrobotState(
            theta1=_wrap(s[0], -jnp.pi, jnp.pi),
            theta2=_wrap(s[1], -jnp.pi, jnp.pi),
            theta1_dot=jnp.clip(s[2], -params.max_vel_1, params.max_vel_1),
            theta2_dot=jnp.clip(s[3], -params.max_vel_2, params.max_vel_2),
        )
        terminated = -jnp.cos(state.theta1) - jnp.cos(state.theta1 + state.theta2) > 1.0
        reward = jnp.where(terminated, 0.0, -1.0).astype(jnp.float32)
        return state, self._obs(state), reward, terminated, {}

    @staticmethod
    def _obs(state: AcrobotState) -> jax.Array:
        th1, th2 = state.theta1, state.theta2
        obs = [
            jnp.cos(th1),
            jnp.sin(th1),
            jnp.cos(th2),
            jnp.sin(th2),
            state.theta1_dot,
            state.theta2_dot,
        ]
        return jnp.stack(obs).astype(jnp.float32)

    def observation_space(self, params: AcrobotParams | None = None) -> spaces.Box:
        p = concrete_params(params, self.default_params)
        high = np.array([1.0, 1.0, 1.0, 1.0, p.max_vel_1, p.max_vel_2], np.float32)
        return spaces.Box(-high, high, (6,), jnp.float32)

    def action_space(self, params: AcrobotParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(3)

    def render(self, state: AcrobotState, params: AcrobotParams | None = None) -> jax.Array:
        """``uint8[H, W, 3]``: Gymnasium's picture (cyan links, yellow joints, black goal line)."""
        params = self.default_params if params is None else params
        h, w = self.render_shape
        bound = params.link_length_1 + params.link_length_2 + 0.2
        scale = min(h, w) / (2 * bound)  # pixels per metre
        ox, oy = w / 2, h / 2
        px, py = R.pixel_grid(h, w)
        img = R.blank(h, w)
        goal_y = oy + 1.0 * scale
        goal_line = R.sd_segment(px, py, ox - 2.2 * scale, goal_y, ox + 2.2 * scale, goal_y, 0.5)
        img = R.paint(img, goal_line, R.BLACK)
        x1 = ox + params.link_length_1 * jnp.sin(state.theta1) * scale
        y1 = oy - params.link_length_1 * jnp.cos(state.theta1) * scale
        links = (
            (ox, oy, state.theta1, params.link_length_1),
            (x1, y1, state.theta1 + state.theta2, params.link_length_2),
        )
        for jx, jy, angle, length in links:  # a link hangs straight down at angle 0
            hw = 0.1 * scale  # half width
            rect = R.rect_vertices(0.0, length * scale, -hw, hw, angle - jnp.pi / 2, jx, jy)
            img = R.paint(img, R.sd_convex_polygon(px, py, rect), (0, 204, 204))
            img = R.paint(img, R.sd_circle(px, py, jx, jy, 0.1 * scale), (204, 204, 0))
        return R.to_uint8(img)

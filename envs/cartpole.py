"""CartPole-v1: balance a pole on a cart by pushing the cart left or right.

Same dynamics, reward and termination as Gymnasium's ``CartPole-v1``
(Barto, Sutton & Anderson 1983, with the Florian 2007 equations), in pure JAX.

With force ``F = ±force_mag``, total mass ``M = m_c + m_p`` and half pole
length ``l``::

    temp   = (F + m_p l θ'^2 sin θ) / M
    θ''    = (g sin θ - cos θ temp) / (l (4/3 - m_p cos^2 θ / M))
    x''    = temp - m_p l θ'' cos θ / M

integrated with explicit Euler over ``tau`` seconds (positions use the old
velocities). Reward is 1 on every step, the terminating one included; the
episode terminates when ``|x| > x_threshold`` or ``|θ| > theta_threshold``.
Episodes are cut at ``MAX_EPISODE_STEPS`` by the registry's TimeLimit.

Observation ``float32[4]``: ``(x, x', θ, θ')``. Action: int32 scalar,
0 pushes left, 1 pushes right.
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
class CartPoleParams:
    """Physical constants (Gymnasium's values), all floats so a batch can be vmapped."""

    gravity: float = 9.8  # m/s^2
    masscart: float = 1.0  # kg
    masspole: float = 0.1  # kg
    length: float = 0.5  # m, half the pole's length
    force_mag: float = 10.0  # N, magnitude of the push
    tau: float = 0.02  # s between state updates
    theta_threshold_radians: float = 12 * 2 * math.pi / 360  # terminate beyond ±12°
    x_threshold: float = 2.4  # m, terminate beyond ±2.4
    reset_low: float = -0.05  # every state variable starts uniform in [reset_low, reset_high)
    reset_high: float = 0.05

    @property
    def total_mass(self):
        return self.masspole + self.masscart

    @property
    def polemass_length(self):
        return self.masspole * self.length


@struct.dataclass
class CartPoleState:
    x: jax.Array  # [] float32 cart position (m)
    x_dot: jax.Array  # [] float32 cart velocity (m/s)
    theta: jax.Array  # [] float32 pole angle from upright (rad, positive leans right)
    theta_dot: jax.Array  # [] float32 pole angular velocity (rad/s)


class CartPole(Environment):
    """Gymnasium's ``CartPole-v1`` in pure JAX (see the module docstring).

    ``render`` draws Gymnasium's scene on a ``render_shape = (height, width)``
    frame, by default ``(400, 600)`` as in Gymnasium; smaller shapes scale it.
    """

    id = "CartPole-v1"

    def __init__(self, render_shape: tuple[int, int] = (400, 600)):
        self.render_shape = (int(render_shape[0]), int(render_shape[1]))

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams()

    def reset_env(self, key: PRNGKey, params: CartPoleParams) -> tuple[CartPoleState, jax.Array]:
        s = jax.random.uniform(key, (4,), jnp.float32, params.reset_low, params.reset_high)
        state = CartPoleState(x=s[0], x_dot=s[1], theta=s[2], theta_dot=s[3])
        return state, self._obs(state)

    def step_env(
        self, key: PRNGKey, state: CartPoleState, action: jax.Array, params: CartPoleParams
    ):
        force = jnp.where(jnp.asarray(action) == 1, params.force_mag, -params.force_mag)
        cos, sin = jnp.cos(state.theta), jnp.sin(state.theta)
        temp = (force + params.polemass_length * state.theta_dot**2 * sin) / params.total_mass
        theta_acc = (params.gravity * sin - cos * temp) / (
            params.length * (4.0 / 3.0 - params.masspole * cos**2 / params.total_mass)
        )
        x_acc = temp - params.polemass_length * theta_acc * cos / params.total_mass
        state = CartPoleState(  # explicit Euler: positions advance with the old velocities
            x=state.x + params.tau * state.x_dot,
            x_dot=state.x_dot + params.tau * x_acc,
            theta=state.theta + params.tau * state.theta_dot,
            theta_dot=state.theta_dot + params.tau * theta_acc,
        )
        terminated = (jnp.abs(state.x) > params.x_threshold) | (
            jnp.abs(state.theta) > params.theta_threshold_radians
        )
        reward = jnp.ones((), jnp.float32)
        return state, self._obs(state), reward, terminated, {}

    @staticmethod
    def _obs(state: CartPoleState) -> jax.Array:
        return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]).astype(jnp.float32)

    def observation_space(self, params: CartPoleParams | None = None) -> spaces.Box:
        p = concrete_params(params, self.default_params)
        high = [2 * p.x_threshold, np.inf, 2 * p.theta_threshold_radians, np.inf]
        high = np.array(high, np.float32)  # twice the termination bounds, as in Gymnasium
        return spaces.Box(-high, high, (4,), jnp.float32)

    def action_space(self, params: CartPoleParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def render(self, state: CartPoleState, params: CartPoleParams | None = None) -> jax.Array:
        """``uint8[H, W, 3]``: Gymnasium's picture (black cart, brown pole, blue axle, track)."""
        params = self.default_params if params is None else params
        h, w = self.render_shape
        u = w / 600.0  # one Gymnasium pixel
        scale = w / (2 * params.x_threshold)  # pixels per metre
        px, py = R.pixel_grid(h, w)
        cart_x, cart_y = state.x * scale + w / 2, 100.0 * u
        axle_y = cart_y + 7.5 * u
        pole_len = scale * 2 * params.length
        img = R.blank(h, w)
        cart = R.rect_vertices(-25 * u, 25 * u, -15 * u, 15 * u, 0.0, cart_x, cart_y)
        pole_top = pole_len - 5 * u
        pole = R.rect_vertices(-5 * u, 5 * u, -5 * u, pole_top, -state.theta, cart_x, axle_y)
        img = R.paint(img, R.sd_convex_polygon(px, py, cart), R.BLACK)
        img = R.paint(img, R.sd_convex_polygon(px, py, pole), (202, 152, 101))
        img = R.paint(img, R.sd_circle(px, py, cart_x, axle_y, 5 * u), (129, 132, 203))
        img = R.paint(img, jnp.abs(py - (cart_y + 0.5)) - 0.5, R.BLACK)  # the track, one pixel row
        return R.to_uint8(img)

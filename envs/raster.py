"""A small anti-aliased rasteriser in ``jax.numpy`` for environment frames.

Shapes are signed distance functions ``d(px, py)`` (negative inside, in
pixels) evaluated on the whole pixel grid; ``paint`` blends a colour with
coverage ``clip(0.5 - d, 0, 1)``, which gives one pixel of anti-aliasing.
Everything is plain array math, so a frame is jittable and vmappable.

Coordinates are in pixels with ``y`` pointing up: ``px = col + 0.5`` and
``py = height - (row + 0.5)``, so a world point maps to a pixel position by
one scale and offset and row 0 of the image is the top of the scene.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Color = tuple[int, int, int]

WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)


def pixel_grid(height: int, width: int) -> tuple[jax.Array, jax.Array]:
    """Pixel-centre coordinates ``(px, py)``, each float32 ``[height, width]``, y up."""
    px = jnp.arange(width, dtype=jnp.float32) + 0.5
    py = height - (jnp.arange(height, dtype=jnp.float32) + 0.5)
    shape = (height, width)
    return jnp.broadcast_to(px[None, :], shape), jnp.broadcast_to(py[:, None], shape)


def blank(height: int, width: int, color: Color = WHITE) -> jax.Array:
    """A float32 ``[height, width, 3]`` canvas filled with ``color`` (0..255)."""
    return jnp.broadcast_to(jnp.asarray(color, jnp.float32), (height, width, 3))


def paint(canvas: jax.Array, sd: jax.Array, color: Color) -> jax.Array:
    """Blends ``color`` over ``canvas`` [H, W, 3] where the shape ``sd`` [H, W] covers pixels."""
    coverage = jnp.clip(0.5 - sd, 0.0, 1.0)[..., None]
    return canvas + coverage * (jnp.asarray(color, jnp.float32) - canvas)


def to_uint8(canvas: jax.Array) -> jax.Array:
    """The canvas as a ``uint8[H, W, 3]`` image."""
    return jnp.clip(jnp.round(canvas), 0, 255).astype(jnp.uint8)


def sd_circle(px: jax.Array, py: jax.Array, cx, cy, radius) -> jax.Array:
    """Disc of ``radius`` centred at ``(cx, cy)``."""
    return jnp.hypot(px - cx, py - cy) - radius


def sd_segment(px: jax.Array, py: jax.Array, x0, y0, x1, y1, half_width) -> jax.Array:
    """Capsule: all points within ``half_width`` of the segment ``(x0, y0)-(x1, y1)``."""
    dx, dy = x1 - x0, y1 - y0
    t = ((px - x0) * dx + (py - y0) * dy) / jnp.maximum(dx * dx + dy * dy, 1e-12)
    t = jnp.clip(t, 0.0, 1.0)  # the closest point's position along the segment
    return jnp.hypot(px - (x0 + t * dx), py - (y0 + t * dy)) - half_width


def sd_convex_polygon(px: jax.Array, py: jax.Array, vertices: jax.Array) -> jax.Array:
    """Convex polygon with ``vertices`` [K, 2] in counter-clockwise order.

    ``d = max_k n_k . (p - v_k)`` over the edges' outward unit normals ``n_k``:
    exact inside and along edges, a slight under-estimate near outer corners.
    """
    v0 = vertices
    v1 = jnp.roll(vertices, -1, axis=0)
    edge = v1 - v0
    normal = jnp.stack([edge[:, 1], -edge[:, 0]], axis=-1)
    normal = normal / jnp.maximum(jnp.linalg.norm(normal, axis=-1, keepdims=True), 1e-12)
    d = normal[:, 0, None, None] * (px - v0[:, 0, None, None]) + normal[:, 1, None, None] * (
        py - v0[:, 1, None, None]
    )
    return jnp.max(d, axis=0)


def rotate(x, y, angle) -> tuple[jax.Array, jax.Array]:
    """Rotates the points ``(x, y)`` counter-clockwise by ``angle`` radians about the origin."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    return c * x - s * y, s * x + c * y


def rect_vertices(left, right, bottom, top, angle, ox, oy) -> jax.Array:
    """Corners [4, 2] (counter-clockwise) of the local box ``[left, right] x [bottom, top]``,
    rotated counter-clockwise by ``angle`` about the local origin, then moved to ``(ox, oy)``."""
    xs = jnp.stack([jnp.asarray(v, jnp.float32) for v in (left, right, right, left)])
    ys = jnp.stack([jnp.asarray(v, jnp.float32) for v in (bottom, bottom, top, top)])
    rx, ry = rotate(xs, ys, angle)
    return jnp.stack([rx + ox, ry + oy], axis=-1)

"""Episode videos: the frames of one episode of a fixed policy, and GIF/MP4 files.

Beside :mod:`jrl.run.evaluation`: it uses the env API and wrappers only.
The policy has :func:`jrl.run.evaluation.episode_returns`'s signature,
``policy(obs [1, ...], key) -> action [1, ...]`` (a batch of one), so the
same bound policy serves both; with the same key, :func:`episode_frames`
plays the same episode as ``episode_returns(policy, env, key, 1)``::

    env, params = jrl.envs.make("CartPole-v1")
    frames, ret, length = episode_frames(policy, env, key, params)  # uint8[length + 1, H, W, 3]
    write_video(frames, "runs/cartpole.gif", fps=30)

The episode runs in two compiled steps: a ``while_loop`` plays it, keeping
the env state of every step in a preallocated ``[max_steps + 1]`` buffer
(states are small), and a vmapped ``env.render`` draws those states a
fixed-size chunk at a time, only as many as the episode has. So a 10-step
CartPole episode draws 11 frames, not ``max_steps + 1``, and memory holds
one chunk of frames on the device at a time.

``write_video`` writes ``.gif`` with Pillow (through imageio, always
installed) and ``.mp4`` with ffmpeg (``pip install jrl-jax[video]``, which adds
imageio-ffmpeg), atomically.
"""

from __future__ import annotations

import functools
import io
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core.env import Environment, Wrapper
from jrl.core.types import PyTree
from jrl.core.wrappers import TimeLimit, VmapEnv
from jrl.run.evaluation import as_stateful
from jrl.util import files

__all__ = [
    "VIDEO_EXTENSIONS",
    "check_renders",
    "check_writer",
    "draw_states",
    "encode_gif",
    "episode_frames",
    "episode_states",
    "time_limit",
    "write_video",
]

VIDEO_EXTENSIONS = (".gif", ".mp4")
"""File extensions :func:`write_video` writes."""

_RENDER_CHUNK = 32  # states drawn per compiled render call (bounds frame memory on the device)
_MP4_HINT = (
    "writing .mp4 needs `pip install jrl-jax[video]` (imageio-ffmpeg); .gif works without it"
)


# --------------------------------------------------------------------------
# Rolling out and rendering
# --------------------------------------------------------------------------


def episode_frames(
    policy: Callable[[Any, jax.Array], jax.Array],
    env: Environment,
    key: jax.Array,
    env_params: PyTree | None = None,
    max_steps: int = 1000,
) -> tuple[np.ndarray, float, int]:
    """Plays one episode from a reset and renders every state of it.

    Args:
      policy: ``policy(obs, key) -> action`` (or a
        :class:`~jrl.run.evaluation.StatefulPolicy`) on a batch of one: ``obs`` has a
        leading ``[1]`` axis (every leaf, for a dict observation such as a
        masked env's ``{"observation", "action_mask"}``) and so must the
        action, e.g. ``[1]`` int32 for a discrete action, ``[1, A]`` for a box.
      env: an unbatched, not auto-resetting env that implements ``render``,
        as :func:`jrl.envs.make` returns it (time limit included).
      key: PRNG key; the episode is the one ``episode_returns(policy, env,
        key, 1, env_params)`` plays (up to ``max_steps`` steps).
      env_params: the env's parameters (default: ``env.default_params``).
      max_steps: the episode is cut after this many steps if it has not
        ended (by termination or the env's own time limit) by then.

    Returns:
      ``(frames, total_return, length)``: ``frames`` is a numpy
      ``uint8[length + 1, H, W, 3]``, the reset state's frame and then one per
      step, the last being the state the episode ended in (the terminal
      state, since nothing resets the env here); ``total_return`` (float)
      sums the ``length`` rewards.

    Raises:
      ValueError: a batched env, ``max_steps < 1``, or an env whose
        ``render`` is missing or does not return ``uint8[H, W, 3]``; raised
        before anything is compiled.
    """
    if env.num_envs is not None:
        raise ValueError(
            f"episode_frames takes an unbatched env, got {env!r} with {env.num_envs} envs"
        )
    if int(max_steps) < 1:
        raise ValueError(f"max_steps must be positive, got {max_steps}")
    params = env.default_params if env_params is None else env_params
    check_renders(env, key, params)
    limit = time_limit(env)
    num_steps = int(max_steps) if limit is None else min(int(max_steps), limit)

    rollout = jax.jit(functools.partial(episode_states, policy, env, num_steps))
    states, total_return, length = rollout(key, params)
    length = int(length)
    return draw_states(env, states, params, length), float(total_return), length


def draw_states(env: Environment, states: PyTree, params: PyTree, length: int) -> np.ndarray:
    """``uint8[length + 1, H, W, 3]``: ``env.render`` of ``states[0 .. length]`` (``states``: an
    :func:`episode_states` buffer, a leading ``[N + 1]`` axis with ``N >= length``), drawn a
    fixed-size chunk at a time (one compiled program per env and buffer size)."""
    chunk = min(_RENDER_CHUNK, jax.tree.leaves(states)[0].shape[0])
    drawn = [
        np.asarray(_render_chunk(env, chunk, states, params, start, length))
        for start in range(0, length + 1, chunk)
    ]
    return np.concatenate(drawn)[: length + 1]


def host_episode_frames(
    policy: Callable[[Any, jax.Array], jax.Array],
    host_env: Any,
    key: jax.Array,
    max_steps: int = 1000,
) -> tuple[np.ndarray, float, int]:
    """:func:`episode_frames` for a host env (:mod:`jrl.envs.host`): one episode of the env
    drawing RGB frames (``host_env.render_env()``, e.g. Gymnasium's ``rgb_array`` mode),
    ``policy`` jitted and called on a batch of one each step. Same returns."""
    if int(max_steps) < 1:
        raise ValueError(f"max_steps must be positive, got {max_steps}")
    make = getattr(host_env, "render_env", None)
    if make is None:
        raise ValueError(
            f"{host_env.id} cannot draw frames; render a run of the same env as gymnasium:<id>"
        )
    env = make()
    act = jax.jit(policy)
    try:
        seed = int(jax.random.randint(key, (), 0, 2**30))
        obs, _ = env.reset(seed=seed)
        frames, total, length = [np.asarray(env.render(), np.uint8)], 0.0, 0
        dtype = host_env.observation_space().dtype
        for t in range(int(max_steps)):
            action = np.asarray(act(np.asarray(obs, dtype)[None], jax.random.fold_in(key, t)))[0]
            obs, reward, terminated, truncated, _ = env.step(
                action.item() if action.ndim == 0 else action
            )
            frames.append(np.asarray(env.render(), np.uint8))
            total, length = total + float(reward), length + 1
            if terminated or truncated:
                break
    finally:
        env.close()
    return np.stack(frames), total, length


def episode_states(policy, env: Environment, num_steps: int, key: jax.Array, params: PyTree):
    """One episode of the unbatched ``env`` (played as a batch of one), jittable and vmappable
    over keys: ``(states, return, length)``.

    ``states`` has a leading ``[num_steps + 1]`` axis over the unbatched env
    state: slot 0 is the reset state, slot ``t`` the state after step ``t``,
    for ``t <= length``; later slots repeat the reset state. Keys are drawn as
    in :func:`jrl.run.evaluation.episode_returns`. ``policy`` as in :func:`episode_frames`.
    """
    venv = VmapEnv(env, 1)
    k_reset, key = jax.random.split(key)
    state, ts = venv.reset(k_reset, params)
    states = jax.tree.map(lambda x: jnp.broadcast_to(x[0], (num_steps + 1,) + x.shape[1:]), state)
    policy = as_stateful(policy)

    def cond(carry):
        t, _, _, _, _, _, done = carry
        return ~done & (t < num_steps)

    def body(carry):
        t, (state, memory), obs, key, ret, states, _ = carry
        key, k_act, k_step = jax.random.split(key, 3)
        action, memory = policy.step(memory, obs, k_act)
        state, ts = venv.step(k_step, state, action, params)
        states = jax.tree.map(lambda buf, x: buf.at[t + 1].set(x[0]), states, state)
        return t + 1, (state, memory), ts.observation, key, ret + ts.reward[0], states, ts.done[0]

    carry = (
        jnp.zeros((), jnp.int32),
        (state, policy.initial_state(1)),
        ts.observation,
        key,
        jnp.zeros((), jnp.float32),
        states,
        jnp.zeros((), bool),
    )
    length, _, _, _, ret, states, _ = jax.lax.while_loop(cond, body, carry)
    return states, ret, length


@functools.partial(jax.jit, static_argnums=(0, 1))
def _render_chunk(
    env: Environment, size: int, states: PyTree, params: PyTree, start, last
) -> jax.Array:
    """``uint8[size, H, W, 3]``: frames of ``states[start : start + size]``, indices past
    ``last`` clamped to it (so one compiled program serves every chunk)."""
    index = jnp.minimum(start + jnp.arange(size), last)
    chunk = jax.tree.map(lambda x: x[index], states)
    return jax.vmap(env.render, in_axes=(0, None))(chunk, params)


def _env_name(env: Environment) -> str:
    name = env.id
    return type(env.unwrapped).__name__ if name == Environment.id else str(name)


def check_renders(env: Environment, key: jax.Array, params: PyTree) -> tuple[int, int, int]:
    """The frame shape ``(H, W, 3)`` of ``env.render``, found by abstract evaluation (nothing is
    compiled); ``ValueError`` if the env cannot render or its frames are not ``uint8[H, W, 3]``."""
    name = _env_name(env)
    if type(env.unwrapped).render is Environment.render:
        raise ValueError(
            f"{name} cannot render: {type(env.unwrapped).__name__} does not implement "
            "render(state, params) (jrl's classic-control envs do, and gymnax's classic-control "
            "and MinAtar envs; the probes do not)"
        )
    try:
        state, _ = jax.eval_shape(env.reset, key, params)
        frame = jax.eval_shape(env.render, state, params)
    except NotImplementedError as e:  # a wrapper in between that does not pass render on
        raise ValueError(f"{name} cannot render: {e}") from e
    if (
        not hasattr(frame, "shape")
        or len(frame.shape) != 3
        or frame.shape[-1] != 3
        or frame.dtype != jnp.uint8
    ):
        got = (
            f"{frame.dtype}{list(frame.shape)}" if hasattr(frame, "shape") else type(frame).__name__
        )
        raise ValueError(f"{name} cannot render: render() must return uint8[H, W, 3], got {got}")
    return tuple(int(d) for d in frame.shape)


def time_limit(env: Environment) -> int | None:
    """The tightest TimeLimit in ``env``'s wrapper chain, or None."""
    limits = []
    while isinstance(env, Wrapper):
        if isinstance(env, TimeLimit):
            limits.append(env.max_episode_steps)
        env = env.env
    return min(limits) if limits else None


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


def write_video(frames: np.ndarray | jax.Array, path: str | os.PathLike, fps: float = 30) -> Path:
    """Writes ``frames`` (``uint8[T, H, W, 3]``) as a video, by the extension of ``path``.

    - ``.gif``: Pillow through imageio, looping forever. GIF delays are whole
      hundredths of a second, so each frame shows ``round(100 / fps)`` of
      them (``fps=30`` plays at 33.3 frames per second); ``fps`` must be at
      most 50, since most viewers slow shorter delays down to 0.1 s. Every
      frame is kept, repeated ones included (see :func:`_write_gif`).
    - ``.mp4``: H.264 through imageio's ffmpeg plugin; needs imageio-ffmpeg
      (``pip install jrl-jax[video]``). Odd heights or widths are padded by one
      row or column (repeating the edge), as H.264's yuv420p needs even ones.

    The file is written to a temporary name in the same folder (created if
    missing) and then renamed over ``path``, so an interrupted write never
    leaves a partial video there.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      ValueError: an unsupported extension, frames that are not
        ``uint8[T, H, W, 3]`` with ``T, H, W >= 1``, or an unusable ``fps``.
      ImportError: ``.mp4`` without imageio-ffmpeg installed.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in VIDEO_EXTENSIONS:
        raise ValueError(
            f"cannot write {str(path)!r}: unsupported extension {path.suffix or '(none)'!r}; "
            f"supported: {', '.join(VIDEO_EXTENSIONS)}"
        )
    frames = np.asarray(frames)
    _check_frames(frames)
    writer = _video_writer(suffix, float(fps))
    path.parent.mkdir(parents=True, exist_ok=True)
    # the temporary file ends in the real extension for the writers and is created by the
    # writer itself, so it gets the usual permissions
    with files.replacing(path) as tmp:
        writer(frames, tmp)
    return path


def check_writer(suffix: str) -> None:
    """``ImportError`` (naming the extra) when :func:`write_video` cannot write ``suffix``
    files here (``.mp4`` without imageio-ffmpeg); ``ValueError`` for an unknown suffix."""
    if suffix.lower() not in VIDEO_EXTENSIONS:
        raise ValueError(f"unsupported video extension {suffix!r}; supported: .gif, .mp4")
    _video_writer(suffix.lower(), 30.0)


def _check_frames(frames: np.ndarray) -> None:
    """``ValueError`` unless ``frames`` is ``uint8[T, H, W, 3]`` with ``T, H, W >= 1``."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or 0 in frames.shape:
        raise ValueError(
            f"frames must be uint8[T, H, W, 3] with T, H, W >= 1, "
            f"got {frames.dtype}{list(frames.shape)}"
        )


def _video_writer(suffix: str, fps: float) -> Callable[[np.ndarray, Path], None]:
    """``writer(frames, path)`` of a ``.gif`` or ``.mp4`` file at ``fps`` (checked for it)."""
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a positive number, got {fps}")
    if suffix == ".gif":
        delay = round(100 / fps)  # hundredths of a second per frame
        if fps > 50 or delay > 0xFFFF:
            raise ValueError(
                f"a GIF plays between 100/65535 and 50 frames per second (its delays are whole "
                f"hundredths of a second, and viewers slow delays under 0.02 s), got fps={fps:g}; "
                "use a lower fps or .mp4"
            )
        return functools.partial(_write_gif, delay_ms=10 * delay)
    try:  # the optional video extra
        import imageio_ffmpeg  # noqa: F401  (the ffmpeg binary imageio's plugin runs)
    except ImportError:
        raise ImportError(_MP4_HINT) from None
    return functools.partial(_write_mp4, fps=fps)


def _write_gif(frames: np.ndarray, path: Path | io.BytesIO, delay_ms: int) -> None:
    """Writes an animated GIF with every frame of ``frames`` ``uint8[T, H, W, 3]``.

    Pillow's GIF writer (through Pillow 13 at least, with no option to turn
    it off) merges a frame identical to the one before into it, adding up
    their delays: the animation looks the same but has fewer frames, which
    breaks frame-by-frame viewing and counting. So where a frame repeats the
    one before, we write in its place a fully transparent frame: with every
    frame's disposal set to 1 ("leave in place") it shows the previous image
    unchanged, and Pillow sees a different frame. In a run of repeats every
    second one is transparent (two transparent frames in a row would be
    merged again), the others are the real image. Readers that composite
    frames (browsers, Pillow, imageio) give back the identical image.
    """
    import imageio.v3 as iio  # deferred: every run imports this module (--video-every)

    hold = np.zeros(frames.shape[1:3] + (4,), np.uint8)  # RGBA, alpha 0 everywhere
    with iio.imopen(path, "w", plugin="pillow", extension=".gif") as out:
        repeats = 0
        for t, frame in enumerate(frames):
            repeats = repeats + 1 if t and np.array_equal(frame, frames[t - 1]) else 0
            out.write(
                hold if repeats % 2 else frame,
                is_batch=False,
                duration=delay_ms,
                loop=0,
                disposal=1,
            )


def encode_gif(frames: np.ndarray, fps: float = 30) -> bytes:
    """The bytes of the GIF file :func:`write_video` writes for ``frames`` ``uint8[T, H, W, 3]``
    (e.g. for a TensorBoard image summary, which shows an animated GIF)."""
    frames = np.asarray(frames)
    _check_frames(frames)
    out = io.BytesIO()
    _video_writer(".gif", float(fps))(frames, out)
    return out.getvalue()


def _write_mp4(frames: np.ndarray, path: Path, fps: float) -> None:
    """Writes an H.264 MP4 (yuv420p) of ``frames`` ``uint8[T, H, W, 3]``, padded to even sizes."""
    _, h, w, _ = frames.shape
    if h % 2 or w % 2:
        frames = np.pad(frames, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    # macro_block_size=1: no resampling to multiples of 16 (only even sizes are needed).
    import imageio.v3 as iio  # deferred: every run imports this module (--video-every)

    iio.imwrite(
        path,
        frames,
        plugin="FFMPEG",
        extension=".mp4",
        fps=fps,
        codec="libx264",
        pixelformat="yuv420p",
        macro_block_size=1,
    )

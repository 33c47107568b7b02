"""Periodic evaluation videos (``--video-every``): greedy episodes of a run drawn with the
env's own ``render`` during training, handed to the sinks as :class:`~jrl.app.sinks.Video`.

When a video is due (the chunk that passes a multiple of ``video_every`` env steps per run,
as for ``eval_every``, and the last chunk), :class:`VideoMaker` plays ``video_episodes``
greedy episodes of the drawn runs (run 0; with a sweep, the first run of each swept value)
in one compiled program, which keeps every env state of each episode
(:func:`jrl.app.render.episode_states`, vmapped over runs and episodes), then draws those
states with the env's jittable ``render`` (:func:`jrl.app.render.draw_states`). Episode
``k`` of drawn run ``g`` at iteration ``i`` plays from the key
``split(split(fold_in(fold_in(key(seed), VIDEO_SALT), i), G)[g], K)[k]``, so
``jrl.app.render.episode_frames`` with that key and the same parameters draws the same
frames. The episodes of a video follow each other, each from its reset frame to its last
state: ``sum(length_k + 1)`` frames. Each episode stops at the env's time limit or after
:data:`MAX_VIDEO_STEPS` steps.

:func:`check_videos` refuses, before any folder is touched, what cannot be drawn: the
Sebulba runner (host envs step outside the compiled program), an env without a jittable
``render`` returning ``uint8[H, W, 3]`` (what ``jrl render`` refuses), an unknown format,
and ``mp4`` without imageio-ffmpeg.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jrl.app import render, sinks
from jrl.app.result import sweep_groups
from jrl.app.run_options import RunSpec
from jrl.run import evaluation

__all__ = ["MAX_VIDEO_STEPS", "VIDEO_FPS", "VIDEO_SALT", "VideoMaker", "check_videos", "drawn_runs"]

VIDEO_SALT = 0x71DE0
"""Folded into the base seed's key for the video episodes' keys, apart from every other."""
VIDEO_FPS = 30
"""Frames per second of the videos (``jrl render``'s default)."""
MAX_VIDEO_STEPS = 1000
"""The longest episode a video draws (``jrl render``'s default ``--max-steps``)."""


def check_videos(spec: RunSpec, env, env_params) -> None:
    """``ValueError`` (``ImportError`` for a missing extra) when the run's ``video_every``
    cannot work: the Sebulba runner, an env that does not render, a bad format. ``env`` is
    the env as :func:`jrl.envs.make` returns it; nothing is compiled."""
    opts = spec.options
    if not opts.video_every:
        return
    if opts.runner == "sebulba":
        raise ValueError(
            "--video-every draws episodes with a pure-JAX env's render inside the compiled "
            "program, which the sebulba runner's host envs do not have; draw a trained run's "
            "episodes with `jrl render RUN`"
        )
    if opts.video_format not in sinks.VIDEO_FORMATS:
        raise ValueError(
            f"video_format must be one of {', '.join(sinks.VIDEO_FORMATS)}, "
            f"got {opts.video_format!r}"
        )
    render.check_writer(f".{opts.video_format}")
    try:
        env = evaluation.evaluation_env(env)
        render.check_renders(env, jax.random.key(0), env_params)
    except ValueError as e:
        raise ValueError(f"--video-every: {e}") from None


def drawn_runs(spec: RunSpec) -> list[int]:
    """The runs whose episodes are drawn: run 0, or with a sweep the first run of each swept
    value (PBT: run 0 only, its runs change their hyperparameters)."""
    if spec.options.pbt is not None:
        return [0]
    return [int(idx[0]) for _, idx in sweep_groups(spec.run_sweep, len(spec.run_seeds))]


class VideoMaker:
    """Draws the videos of a run after the chunks where they are due (see the module).

    ``view`` is the shape of the states ``[R, ...]`` the chunks hand over
    (``jax.ShapeDtypeStruct`` leaves, with their sharding): the episodes' program is
    compiled for it now, not in the timed loop.
    """

    def __init__(self, spec: RunSpec, built, view, runs: list[dict]):
        opts = spec.options
        self.every, self.last = int(opts.video_every), spec.config.num_iterations
        self.episodes = int(opts.video_episodes)
        self.per_iter = built.algorithm.env_steps_per_iteration
        self.env, self.params = evaluation.evaluation_env(built.env), built.env_params
        self.key = jax.random.fold_in(jax.random.key(opts.seed), VIDEO_SALT)
        self.drawn = drawn_runs(spec)
        self.runs = [runs[r] for r in self.drawn]
        render.check_renders(self.env, self.key, self.params)
        limit = render.time_limit(self.env)
        self.num_steps = MAX_VIDEO_STEPS if limit is None else min(limit, MAX_VIDEO_STEPS)
        play = _player(built, self.env, self.params, self.drawn, self.episodes, self.num_steps)
        self.play = jax.jit(play).lower(view, self.key).compile()

    def due(self, prev: int, done: int) -> bool:
        """Whether the chunk of iterations ``prev + 1 .. done`` ends with a video: it passes a
        multiple of ``video_every`` env steps per run, or it is the run's last."""
        before, after = prev * self.per_iter, done * self.per_iter
        return after // self.every > before // self.every or done == self.last

    def videos(self, view, done: int) -> list[sinks.Video]:
        """The videos at iteration ``done`` of the states ``view`` ``[R, ...]``, one per drawn
        run (frames on the host)."""
        states, returns, lengths = self.play(view, jax.random.fold_in(self.key, done))
        returns, lengths = np.asarray(returns), np.asarray(lengths)  # [G, K]
        out = []
        for g, run in enumerate(self.runs):
            frames = [
                render.draw_states(
                    self.env, jax.tree.map(lambda x: x[g, k], states), self.params, int(n)
                )
                for k, n in enumerate(lengths[g])
            ]
            out.append(
                sinks.Video(
                    done,
                    done * self.per_iter,
                    sinks.run_name(run),
                    np.concatenate(frames),
                    VIDEO_FPS,
                    run,
                    tuple(float(r) for r in returns[g]),
                )
            )
        return out

    def __call__(self, sink, view, prev: int, done: int) -> None:
        """Hands the videos of iteration ``done`` to ``sink`` when they are due."""
        if self.due(prev, done):
            for video in self.videos(view, done):
                sinks.write_video(sink, video)


def _player(built, env, params, drawn: list[int], episodes: int, num_steps: int):
    """``play(states [R, ...], key) -> (env states [G, K, num_steps + 1, ...], returns [G, K],
    lengths [G, K])``: ``K = episodes`` greedy episodes of each drawn run (``G`` of them)."""
    index = jnp.asarray(drawn)

    def one_run(state, key):
        policy = evaluation.run_policy(
            built.agent, built.env, state.agent_state, state.env_state, greedy=True
        )

        def episode(k):
            return render.episode_states(policy, env, num_steps, k, params)

        return jax.vmap(episode)(jax.random.split(key, episodes))

    def play(states, key):
        picked = jax.tree.map(lambda x: x[index], states)
        return jax.vmap(one_run)(picked, jax.random.split(key, len(drawn)))

    return play

"""Periodic evaluation videos (``--video-every``): the videos sinks take, the files the run
folder gets and their frames, TensorBoard's and wandb's copies, the refusals, resume, the CLI.

Training runs use a CartPole that draws 40 x 60 frames (registered as SMALL below; the
default 400 x 600 frames take tens of milliseconds each to draw on a CPU) and a tiny PPO budget:
8 iterations of 64 env steps in 4 chunks (after iterations 2, 4, 6, 8). ``video_every=192``
passes a multiple of 192 steps in the chunks ending at iterations 4 (192) and 6 (384), and
the last chunk always draws: videos at iterations 4, 6 and 8.
"""

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import types

import imageio.v3 as iio
import jax
import numpy as np
import pytest
from PIL import Image

import jrl
from jrl.app import api as experiment
from jrl.app import cli, render, sinks, videos
from jrl.app.run_options import RunOptions, RunSpec, make_config
from jrl.envs.cartpole import CartPole
from jrl.run.evaluation import evaluation_env
from test_sinks import event_files, read_events

SMALL = "SmallCartPole-v1"
PLUGIN = f"""
import jrl.envs
from jrl.envs.cartpole import CartPole

jrl.envs.register(
    {SMALL!r}, lambda: CartPole(render_shape=(40, 60)), max_episode_steps=50, overwrite=True
)
"""
jrl.envs.register(
    SMALL, lambda: CartPole(render_shape=(40, 60)), max_episode_steps=50, overwrite=True
)

TINY = dict(total_steps=8 * 64, num_envs=4, num_steps=16, num_reports=4, progress=False)
DRAWN = [4, 6, 8]  # the iterations with videos (see the module docstring)
PER_ITER = 64


def frames_of(path) -> np.ndarray:
    """``uint8[T, H, W, 3]``: every frame of a video file."""
    return np.asarray(iio.imread(path, index=None))[..., :3]


def video(iteration=3, name="seed0", frames=None, **kw):
    frames = np.full((4, 6, 8, 3), iteration, np.uint8) if frames is None else frames
    run = {"run": 0, "seed": 0}
    return sinks.Video(iteration, iteration * 100, name, frames, 30, run, **kw)


# ----------------------------------------------------------------------------- the sinks


def test_a_video_must_hold_uint8_rgb_frames():
    with pytest.raises(ValueError, match=r"uint8\[T, H, W, 3\].*got float32\[4, 6, 8, 3\]"):
        video(frames=np.zeros((4, 6, 8, 3), np.float32))
    with pytest.raises(ValueError, match=r"got uint8\[0, 6, 8, 3\]"):
        video(frames=np.zeros((0, 6, 8, 3), np.uint8))


def test_the_file_sink_writes_one_file_per_video_and_drops_later_ones_on_resume(tmp_path):
    folder = tmp_path / "videos"
    sink = sinks.VideoFileSink(folder)
    rng = np.random.default_rng(0)
    clips = {i: (rng.integers(0, 4, (3 + i, 6, 8, 3)) * 60).astype(np.uint8) for i in (2, 5, 12)}
    for i, frames in clips.items():
        sink.write_video(video(i, frames=frames))
    sink.close()
    names = ["seed0_iter000002.gif", "seed0_iter000005.gif", "seed0_iter000012.gif"]
    assert [p.name for p in sink.written()] == names
    for i, frames in clips.items():  # every frame back, in order
        np.testing.assert_array_equal(frames_of(folder / sinks.video_file_name("seed0", i)), frames)
    (folder / "notes.txt").write_text("not a video")
    resumed = sinks.VideoFileSink(folder, resume_from_iteration=5)  # a checkpoint at 5
    assert [p.name for p in resumed.written()] == names[:2]
    assert (folder / "notes.txt").is_file()
    with pytest.raises(RuntimeError, match="closed"):
        sink.write_video(video())


def test_mp4_needs_the_video_extra_before_anything_is_drawn(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # `import imageio_ffmpeg` fails
    with pytest.raises(ImportError, match=r"jrl-jax\[video\]"):
        sinks.VideoFileSink(tmp_path, "mp4")
    with pytest.raises(ValueError, match="video format must be one of gif, mp4, got 'webm'"):
        sinks.VideoFileSink(tmp_path, "webm")


class MetricsOnly:
    def __init__(self):
        self.records = []

    def write(self, record):
        self.records.append(record)

    def close(self):
        pass


class Keeps(MetricsOnly):
    def __init__(self):
        super().__init__()
        self.videos = []

    def write_video(self, v):
        self.videos.append(v)


def test_composites_pass_videos_to_the_sinks_that_take_them():
    plain, keeps, behind = MetricsOnly(), Keeps(), Keeps()
    threaded = sinks.ThreadedSink(behind)
    multi = sinks.MultiSink([plain, keeps, threaded, sinks.ThreadedSink(MetricsOnly())])
    clip = video(7)
    multi.write_video(clip)
    multi.close()
    assert plain.records == [] and keeps.videos[0] is clip and len(keeps.videos) == 1
    assert [v is clip for v in behind.videos] == [True]  # written on the worker thread


def test_a_threaded_sink_holds_at_most_two_videos_and_then_waits():
    """Frames can be large: with PENDING_VIDEOS (2) queued or being written, the next
    ``write_video`` waits until the worker has written one."""
    go = threading.Event()

    class Slow(Keeps):
        def write_video(self, v):
            go.wait(timeout=30)
            super().write_video(v)

    slow = Slow()
    threaded = sinks.ThreadedSink(slow)
    threaded.write_video(video(1))
    threaded.write_video(video(2))  # both slots taken (one being written, one queued)
    third = threading.Thread(target=threaded.write_video, args=(video(3),))
    third.start()
    third.join(timeout=0.5)
    assert third.is_alive() and slow.videos == []
    go.set()
    third.join(timeout=30)
    threaded.close()
    assert not third.is_alive() and [v.iteration for v in slow.videos] == [1, 2, 3]


def test_tensorboard_holds_each_video_as_an_animated_gif_at_its_env_steps(tmp_path):
    sink = sinks.TensorBoardSink(tmp_path, runs=[{"run": 0, "seed": 0}])
    frames = (np.arange(5 * 6 * 8 * 3).reshape(5, 6, 8, 3) % 4 * 60).astype(np.uint8)
    sink.write_video(video(3, frames=frames))
    sink.close()
    (path,) = event_files(tmp_path / "seed0")
    (event,) = [e for e in read_events(path) if e.summary.value]
    (value,) = event.summary.value
    assert (event.step, value.tag) == (300, sinks.VIDEO_TAG)
    assert (value.image.height, value.image.width, value.image.colorspace) == (6, 8, 3)
    gif = value.image.encoded_image_string
    assert gif == render.encode_gif(frames, 30) and Image.open(io.BytesIO(gif)).n_frames == 5
    np.testing.assert_array_equal(np.asarray(iio.imread(gif, index=None))[..., :3], frames)


def test_wandb_logs_each_video_as_a_gif_at_its_env_steps(monkeypatch):
    logged = []

    class Run:
        def log(self, data, step):
            logged.append((step, data))

        def finish(self):
            pass

    class Video:  # reads the file when made, as wandb copies it
        def __init__(self, path, caption=None, format=None):
            self.data, self.caption, self.format = open(path, "rb").read(), caption, format

    module = types.ModuleType("wandb")
    module.init, module.Video = (lambda **kw: Run()), Video
    monkeypatch.setitem(sys.modules, "wandb", module)
    sink = sinks.WandbSink(project="p")
    frames = np.full((3, 6, 8, 3), 200, np.uint8)
    sink.write_video(video(4, frames=frames, returns=(12.0, 9.5)))
    ((step, data),) = logged
    assert step == 400 and list(data) == ["seed0/eval/video"]
    clip = data["seed0/eval/video"]
    assert clip.format == "gif" and clip.data == render.encode_gif(frames, 30)
    assert clip.caption == "returns 12, 9.5"


# ------------------------------------------------------------------------- options, refusals


def test_video_options_are_checked_and_recorded_only_when_on():
    for bad, message in [
        (dict(video_every=-1), "video_every must be >= 0"),
        (dict(video_episodes=0), "video_episodes must be >= 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            RunOptions(**bad).validate()
    with pytest.raises(ValueError, match="video_every write into the run folder: pass out=DIR"):
        RunOptions(video_every=100).validate(has_out=False)
    assert "video_every" not in RunOptions().normalized().record()  # older records unchanged
    on = RunOptions(video_every=100, video_episodes=2, video_format="mp4").normalized()
    record = json.loads(json.dumps(on.record()))
    assert (record["video_every"], record["video_episodes"], record["video_format"]) == (
        100,
        2,
        "mp4",
    )
    assert RunOptions.from_record(record).recorded() == on.recorded()


@pytest.mark.parametrize(
    "env, options, message",
    [
        ("TruncationProbe-v0", {}, "--video-every: TruncationProbe-v0 cannot render"),
        (SMALL, dict(video_format="webm"), "video_format must be one of gif, mp4, got 'webm'"),
        (
            "gymnasium:CartPole-v1",
            dict(runner="sebulba"),
            "the sebulba runner's host envs do not have; draw a trained run's episodes with",
        ),
    ],
)
def test_what_cannot_be_drawn_is_refused_before_the_folder_is_made(env, options, message, tmp_path):
    if env.startswith("gymnasium:"):
        pytest.importorskip("gymnasium")
    with pytest.raises(ValueError, match=message):
        jrl.train("ppo", env, out=tmp_path / "run", video_every=64, **options, **TINY)
    assert not (tmp_path / "run").exists()


def test_the_drawn_runs_are_run_0_or_the_first_of_each_swept_value():
    config = make_config("ppo", "CartPole-v1")

    def drawn(**options):
        return videos.drawn_runs(RunSpec("ppo", "CartPole-v1", config, RunOptions(**options)))

    assert drawn(seeds=3) == [0]
    assert drawn(seeds=2, sweep={"learning_rate": (1e-3, 3e-4, 1e-4)}) == [0, 2, 4]


# ------------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """A run of 2 seeds drawing 2 episodes of run 0 per video, logged to TensorBoard."""
    out = tmp_path_factory.mktemp("videos") / "run"
    kw = dict(video_every=192, video_episodes=2, log=["tensorboard"], checkpoint_every=256)
    return out, jrl.train("ppo", SMALL, 2, out=out, **kw, **TINY)


def test_videos_are_written_after_the_chunks_that_pass_video_every(drawn):
    out, _ = drawn
    names = sorted(p.name for p in (out / sinks.VIDEO_DIR).iterdir())
    assert names == [sinks.video_file_name("seed0", i) for i in DRAWN]


def test_a_video_holds_the_episodes_jrl_render_draws_for_the_same_parameters(drawn):
    """The last video: the final parameters' greedy policy (the checkpoint of iteration 8,
    as `jrl render` loads it), episodes k = 0, 1 from the keys the module documents."""
    out, _ = drawn
    loaded = experiment.load_run(out, 8)
    env = evaluation_env(loaded.built.env)
    base = jax.random.fold_in(jax.random.key(0), videos.VIDEO_SALT)
    keys = jax.random.split(jax.random.split(jax.random.fold_in(base, 8), 1)[0], 2)
    episodes = [
        render.episode_frames(loaded.policy(0), env, k, loaded.built.env_params)[0] for k in keys
    ]
    frames = frames_of(out / sinks.VIDEO_DIR / sinks.video_file_name("seed0", 8))
    assert frames.shape == (sum(len(e) for e in episodes), 40, 60, 3)
    np.testing.assert_array_equal(frames, np.concatenate(episodes))


def test_tensorboard_gets_the_same_videos_at_their_env_steps(drawn):
    out, _ = drawn
    found = {}
    for path in event_files(out / "tb" / "seed0"):
        for event in read_events(path):
            for value in event.summary.value:
                if value.tag == sinks.VIDEO_TAG:
                    found[event.step] = value.image.encoded_image_string
    assert sorted(found) == [i * PER_ITER for i in DRAWN]
    for i in DRAWN:
        path = out / sinks.VIDEO_DIR / sinks.video_file_name("seed0", i)
        assert found[i * PER_ITER] == path.read_bytes()
    tags = {
        v.tag
        for p in event_files(out / "tb" / "seed1")
        for e in read_events(p)
        for v in e.summary.value
    }
    assert "train/episode_return" in tags and sinks.VIDEO_TAG not in tags  # run 1: not drawn


def test_a_resumed_run_draws_the_videos_after_its_checkpoint_once(drawn, tmp_path):
    """A copy of the finished run (checkpoints at iterations 4 and 8, videos at 4, 6, 8) with a
    stray video of iteration 7, resumed from the checkpoint of iteration 4: the videos after 4
    are dropped, those of 6 and 8 drawn once each, and the folder ends with the uninterrupted
    run's videos, byte for byte."""
    whole, _ = drawn
    out = tmp_path / "run"
    shutil.copytree(whole, out)
    folder = out / sinks.VIDEO_DIR
    (folder / sinks.video_file_name("seed0", 7)).write_bytes(b"stray")
    written = []
    original = sinks.VideoFileSink.write_video
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            sinks.VideoFileSink,
            "write_video",
            lambda self, v: written.append(v.iteration) or original(self, v),
        )
        experiment.resume(out, step=4, progress=False)
    assert written == [6, 8]
    names = sorted(p.name for p in folder.iterdir())
    assert names == [sinks.video_file_name("seed0", i) for i in DRAWN]
    for name in names:
        assert (folder / name).read_bytes() == (whole / sinks.VIDEO_DIR / name).read_bytes()


def test_drawing_videos_leaves_training_as_it_is_and_overwrite_removes_them(drawn, tmp_path):
    """The same run without videos, trained over a copy of the folder with ``overwrite``: the
    same final parameters (the videos' keys are their own), and the old videos are gone."""
    whole, with_videos = drawn
    out = tmp_path / "run"
    shutil.copytree(whole, out)
    kw = dict(log=["tensorboard"], checkpoint_every=256, overwrite=True)
    plain = jrl.train("ppo", SMALL, 2, out=out, **kw, **TINY)
    assert not (out / sinks.VIDEO_DIR).exists()
    for a, b in zip(jax.tree.leaves(plain.final_params), jax.tree.leaves(with_videos.final_params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------------------------- CLI


def jrl_cli(*args, cwd):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "PYTHONPATH": str(cwd)}
    command = [sys.executable, "-m", "jrl.app.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def test_the_cli_writes_mp4_videos_and_refuses_an_env_that_cannot_draw(tmp_path, capsys):
    (tmp_path / "small_cartpole.py").write_text(PLUGIN)
    # the budget of TINY and the options of `drawn`, whose compiled programs the cache holds
    small = ["--num-envs", "4", "--num-steps", "16", "--total-steps", "512", "--num-reports", "4"]
    args = [
        "--video-every",
        "192",
        "--video-episodes",
        "2",
        "--video-format",
        "mp4",
        "--seeds",
        "2",
    ]
    args += small
    out = jrl_cli(
        "train", "ppo", "--env", SMALL, "--import", "small_cartpole", "--out", "r", *args,
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    folder = tmp_path / "r" / sinks.VIDEO_DIR
    assert sorted(p.name for p in folder.iterdir()) == [
        sinks.video_file_name("seed0", i, "mp4") for i in DRAWN
    ]
    for path in folder.iterdir():
        frames = frames_of(path)
        assert frames.dtype == np.uint8 and frames.shape[1:] == (40, 60, 3)
        assert 4 <= len(frames) <= 102  # two episodes: each its reset frame and 1 to 50 steps
    # the refusal in this process (a second interpreter would cost a start-up of jax)
    x = tmp_path / "x"
    assert cli.main(["train", "ppo", "--env", "MaskedProbe-v0", "--out", str(x), *args]) == 2
    err = capsys.readouterr().err
    assert "--video-every: MaskedProbe-v0 cannot render" in err
    assert len(err.strip().splitlines()) == 1 and not x.exists()


def test_the_record_of_a_run_keeps_its_video_options(drawn):
    out, _ = drawn
    spec = experiment.read_spec(out)
    assert dataclasses.asdict(spec.options)["video_every"] == 192
    assert spec.options.video_episodes == 2 and spec.options.video_format == "gif"

"""Episode frames and video files (jrl/app/render.py).

The frames of an episode are checked against states stepped by hand, and
GIF/MP4 files by reading them back with imageio.
"""

import sys

import imageio.v3 as iio
import jax
import jax.numpy as jnp
import jrl.envs as jrl_envs
import numpy as np
import pytest
from jrl.envs.pendulum import Pendulum
from jrl.envs.probes import MaskedProbe

from jrl.app import render
from jrl.app.render import episode_frames, write_video
from jrl.core.types import ACTION_MASK
from jrl.core.wrappers import TimeLimit, VmapEnv
from jrl.run.evaluation import episode_returns


def push_left(obs, key):
    return jnp.zeros(obs.shape[0], jnp.int32)


@pytest.fixture(scope="module")
def cartpole_episode():
    env, params = jrl_envs.make("CartPole-v1")
    key = jax.random.key(3)
    frames, ret, length = episode_frames(push_left, env, key, params)
    return env, params, key, frames, ret, length


def test_cartpole_frames_are_the_states_of_the_episode(cartpole_episode):
    """Pushed left every step the pole falls within ~10 steps; frame t is the state after step t,
    the last one the terminal state (nothing resets it)."""
    env, params, key, frames, ret, length = cartpole_episode
    assert 5 <= length <= 15
    assert ret == float(length)  # reward 1 per step, the terminating one included
    h, w = env.unwrapped.render_shape
    assert (
        isinstance(frames, np.ndarray)
        and frames.dtype == np.uint8
        and frames.shape == (length + 1, h, w, 3)
    )
    # The same episode as episode_returns plays with this key.
    ref_ret, ref_len = episode_returns(push_left, env, key, 1, params)
    assert (ret, length) == (float(ref_ret[0]), int(ref_len[0]))

    # By hand: the reset episode_returns draws (the first half of the key, through a batch of one),
    # then CartPole's steps, which use no randomness.
    venv = VmapEnv(env, 1)
    state, _ = venv.reset(jax.random.split(key)[0], params)
    draw = jax.jit(lambda s: env.render(jax.tree.map(lambda x: x[0], s), params))
    np.testing.assert_array_equal(frames[0], draw(state))
    step = jax.jit(lambda s: venv.step(jax.random.key(0), s, jnp.zeros(1, jnp.int32), params))
    for t in range(1, length + 1):
        state, ts = step(state)
        assert bool(ts.terminated[0]) == (t == length)
        assert (
            np.abs(frames[t].astype(int) - np.asarray(draw(state))).max() <= 1
        )  # vmapped vs single render
    assert not np.array_equal(frames[-1], frames[-2])


def test_gif_round_trip_keeps_every_frame(cartpole_episode, tmp_path):
    *_, frames, _, _ = cartpole_episode
    path = write_video(frames, tmp_path / "videos" / "cartpole.gif", fps=25)  # creates the folder
    assert path == tmp_path / "videos" / "cartpole.gif"
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "cartpole.gif"
    ]  # no temporary file left
    back = iio.imread(path, index=None)
    assert back.shape == frames.shape
    assert np.abs(back.astype(int) - frames).mean() < 1.0  # GIF palettes are lossy in general
    meta = iio.immeta(path, index=None)
    assert meta["loop"] == 0 and meta["duration"] == 40  # loops forever, 1/25 s per frame


def test_gif_keeps_repeated_frames(tmp_path):
    """Pillow merges a frame identical to the previous one; write_video must not lose them."""
    a = np.zeros((16, 24, 3), np.uint8)
    b = a.copy()
    b[4:12, 6:18] = (200, 40, 40)
    frames = np.stack([a, a, a, a, b, b, a, b, b, b])
    path = write_video(frames, tmp_path / "repeats.gif", fps=10)
    back = iio.imread(path, index=None, mode="RGB")
    durations = [iio.immeta(path, index=i)["duration"] for i in range(len(frames))]
    np.testing.assert_array_equal(back, frames)
    assert durations == [100] * len(frames)


def test_pendulum_runs_to_its_time_limit():
    limit = jrl_envs.entry("Pendulum-v1").max_episode_steps  # 200
    env = TimeLimit(Pendulum(render_shape=(32, 40)), limit)  # a small frame keeps the test fast
    params = env.default_params
    zero_torque = lambda o, k: jnp.zeros((o.shape[0], 1), jnp.float32)
    key = jax.random.key(1)
    frames, ret, length = episode_frames(zero_torque, env, key, params)
    assert length == limit and frames.shape == (limit + 1, 32, 40, 3) and frames.dtype == np.uint8
    ref_ret, _ = episode_returns(zero_torque, env, key, 1, params)
    assert ret < 0 and ret == pytest.approx(float(ref_ret[0]), rel=1e-5)
    # max_steps cuts an episode that has not ended: the first 50 steps of the same episode.
    cut, _, cut_len = episode_frames(zero_torque, env, key, params, max_steps=50)
    assert cut_len == 50 and cut.shape[0] == 51
    np.testing.assert_array_equal(cut, frames[:51])


class _DrawnMaskedProbe(MaskedProbe):
    """MaskedProbe with a render: red = the valid actions (one column each), green = 10 * time."""

    def render(self, state, params=None):
        red = jnp.repeat(jnp.where(state.mask, 255, 0).astype(jnp.uint8)[None, :], 2, axis=0)
        green = jnp.full((2, self.num_actions), 10 * state.time, jnp.uint8)
        return jnp.stack([red, green, jnp.zeros_like(red)], axis=-1)


def test_dict_observation_env():
    """A masked env: the policy sees the batched dict observation; the last frame is the terminal
    state (time = horizon), not a reset."""
    env = _DrawnMaskedProbe()
    params = env.default_params
    seen = []

    def best_valid(obs, key):
        seen.append(jax.tree.map(jnp.shape, obs))
        return 3 - jnp.argmax(obs[ACTION_MASK][:, ::-1], axis=1)

    key = jax.random.key(2)
    frames, ret, length = episode_frames(best_valid, env, key, params)
    assert seen[0] == {"action_mask": (1, 4), "observation": (1, 4)}
    assert length == params.horizon and frames.shape == (length + 1, 2, 4, 3)
    np.testing.assert_array_equal(frames[:, 0, 0, 1], 10 * np.arange(length + 1))
    ref_ret, _ = episode_returns(best_valid, env, key, 1, params)
    assert ret == pytest.approx(float(ref_ret[0]))


def test_env_without_render_fails_before_compiling():
    env, params = jrl_envs.make("TruncationProbe-v0")
    calls = []
    policy = lambda o, k: calls.append(1) or jnp.zeros(o.shape[0], jnp.int32)
    with pytest.raises(ValueError, match="TruncationProbe-v0 cannot render"):
        episode_frames(policy, env, jax.random.key(0), params)
    assert calls == []  # the rollout was never traced


def test_bad_episode_arguments():
    env, params = jrl_envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="unbatched"):
        episode_frames(push_left, VmapEnv(env, 2), jax.random.key(0), params)
    with pytest.raises(ValueError, match="max_steps"):
        episode_frames(push_left, env, jax.random.key(0), params, max_steps=0)


def test_write_video_rejects_bad_input(tmp_path):
    frames = np.zeros((3, 8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match=r"unsupported extension '\.avi'; supported: \.gif, \.mp4"):
        write_video(frames, tmp_path / "a.avi")
    with pytest.raises(ValueError, match="supported"):
        write_video(frames, tmp_path / "no_extension")
    for bad in (frames.astype(np.float32), frames[0], frames[..., :1], frames[:0], frames[:, :0]):
        with pytest.raises(ValueError, match=r"uint8\[T, H, W, 3\]"):
            write_video(bad, tmp_path / "a.gif")
    with pytest.raises(ValueError, match="fps"):
        write_video(frames, tmp_path / "a.gif", fps=60)
    with pytest.raises(ValueError, match="fps"):
        write_video(frames, tmp_path / "a.gif", fps=0)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "a.gif"
    target.write_bytes(b"previous video")

    def crash(frames, path, delay_ms):
        path.write_bytes(b"GIF89a half")
        raise KeyboardInterrupt

    monkeypatch.setattr(render, "_write_gif", crash)
    with pytest.raises(KeyboardInterrupt):
        write_video(np.zeros((2, 4, 4, 3), np.uint8), target)
    assert target.read_bytes() == b"previous video"
    assert [p.name for p in tmp_path.iterdir()] == ["a.gif"]


def test_mp4_without_imageio_ffmpeg(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # makes `import imageio_ffmpeg` fail
    with pytest.raises(ImportError, match=r"pip install jrl-jax\[video\]"):
        write_video(np.zeros((2, 4, 4, 3), np.uint8), tmp_path / "out" / "a.mp4")
    assert not (tmp_path / "out").exists()


@pytest.mark.filterwarnings(
    "ignore:os.fork:RuntimeWarning"
)  # ffmpeg runs as a subprocess (fork + exec)
def test_mp4_round_trip(tmp_path):
    """MP4 through imageio-ffmpeg, which the test extra installs (no skip: CI checks MP4)."""
    frames = np.zeros((12, 37, 51, 3), np.uint8)  # odd sizes: padded to 38 x 52 for yuv420p
    for t in range(12):
        frames[t, :, 3 * t : 3 * t + 4] = 255
    path = write_video(frames, tmp_path / "a.mp4", fps=24)
    back = iio.imread(path, plugin="FFMPEG", index=None)
    assert back.shape == (12, 38, 52, 3)
    assert np.abs(back[:, :37, :51].astype(int) - frames).mean() < 8  # lossy H.264
    assert [p.name for p in tmp_path.iterdir()] == ["a.mp4"]


# ------------------------------------------------------------------------------------ gymnax


@pytest.mark.parametrize(
    "name,fields",
    [
        ("CartPole-v1", {"x": 0.7, "x_dot": 0.0, "theta": -0.1, "theta_dot": 0.0}),
        ("Pendulum-v1", {"theta": 2.0, "theta_dot": 0.0, "last_u": 1.5}),
        (
            "Acrobot-v1",
            {"theta1": 0.4, "theta2": -1.0, "theta1_dot": 0.0, "theta2_dot": 0.0},
        ),
        ("MountainCar-v0", {"position": -0.9, "velocity": 0.0}),
    ],
)
def test_gymnax_classic_control_draws_as_jrls_own_env(name, fields):
    """The same physical state gives the same picture through gymnax:<id> as through jrl's
    <id> (gymnax's state fields mapped to jrl's)."""
    import gymnax

    gym_env, gym_params = jrl_envs.make(f"gymnax:{name}")
    mine, params = jrl_envs.make(name)
    state, _ = mine.unwrapped.reset_env(jax.random.key(0), params)
    state = state.replace(**{k: jnp.float32(v) for k, v in fields.items()})
    names = {"theta1": "joint_angle1", "theta2": "joint_angle2"}
    names |= {"theta1_dot": "velocity_1", "theta2_dot": "velocity_2"}
    _, gym_state = gymnax.make(name)[0].reset_env(jax.random.key(0), gym_params)
    gym_state = gym_state.replace(**{names.get(k, k): jnp.float32(v) for k, v in fields.items()})
    expected = mine.unwrapped.render(state, params)
    np.testing.assert_array_equal(gym_env.unwrapped.render(gym_state, gym_params), expected)


def test_gymnax_minatar_draws_its_observation_cells():
    env, params = jrl_envs.make("gymnax:Breakout-MinAtar")
    key = jax.random.key(3)
    frames, _, length = episode_frames(
        lambda o, k: jnp.zeros(o.shape[0], jnp.int32), env, key, params, max_steps=5
    )
    assert frames.shape == (length + 1, 160, 160, 3) and frames.dtype == np.uint8
    gym = env.unwrapped.gymnax_env
    state, _ = env.reset(key, params)
    obs = np.asarray(gym.get_obs(state.env_state if hasattr(state, "env_state") else state))
    frame = np.asarray(env.render(state, params))
    cells = frame[::16, ::16]  # one pixel per cell
    assert ((cells.sum(-1) == 0) == (obs.sum(-1) == 0)).all()  # black exactly where no channel
    top = np.where(obs.any(-1), obs.shape[-1] - np.argmax(obs[..., ::-1] != 0, -1), 0)
    for c in np.unique(top):  # one colour per highest set channel
        assert len({tuple(v) for v in cells[top == c]}) == 1


def test_gymnax_env_that_cannot_be_drawn_says_which_can():
    env, params = jrl_envs.make("gymnax:Catch-bsuite")
    with pytest.raises(ValueError, match=r"Catch-bsuite cannot render: jrl draws gymnax's "):
        episode_frames(
            lambda o, k: jnp.zeros(o.shape[0], jnp.int32), env, jax.random.key(0), params
        )

"""jrl envs as Gymnasium envs (jrl.envs.to_gymnasium): Gymnasium's own env checker on every
registered env, seeding, the time limit as ``truncated``, rendering."""

import warnings

import jrl.envs
import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")  # the test extra installs it
from gymnasium.utils.env_checker import check_env  # noqa: E402

RENDERS = {"Acrobot-v1", "CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"}


@pytest.mark.parametrize("env_id", jrl.envs.names())
def test_every_registered_env_passes_gymnasiums_checker(env_id):
    mode = "rgb_array" if env_id in RENDERS else None
    env = jrl.envs.to_gymnasium(env_id, render_mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. infinite Box bounds, as Gymnasium's CartPole has
        check_env(env, skip_render_check=mode is None)
    if mode:
        env.reset(seed=0)
        frame = env.render()
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3


def test_seeding_and_the_time_limit_as_truncated():
    env = jrl.envs.to_gymnasium("CartPole-v1")
    a, _ = env.reset(seed=3)
    b, _ = env.reset(seed=3)
    c, _ = env.reset(seed=4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and env.observation_space.contains(a)
    probe = jrl.envs.to_gymnasium("TruncationProbe-v0")  # reward 1, cut at 20 steps
    probe.reset(seed=0)
    flags = [probe.step(0)[2:4] for _ in range(20)]
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])
    with pytest.raises(ValueError, match="render_mode"):
        jrl.envs.to_gymnasium("CartPole-v1", render_mode="human")


def test_overrides_and_masked_observations():
    heavy = jrl.envs.to_gymnasium("CartPole-v1", gravity=20.0)
    assert heavy._params.gravity == 20.0
    masked = jrl.envs.to_gymnasium("MaskedProbe-v0")
    obs, _ = masked.reset(seed=1)
    assert set(obs) == {"action_mask", "observation"} and obs["action_mask"].dtype == np.int8
    assert masked.observation_space.contains(obs)


# ------------------------------------------------------------------ num_envs: a VectorEnv


def test_vector_env_spaces_seeding_and_batch_shapes():
    from gymnasium.vector import AutoresetMode, VectorEnv
    from gymnasium.vector.utils import batch_space

    venv = jrl.envs.to_gymnasium("CartPole-v1", num_envs=3)
    assert isinstance(venv, VectorEnv) and venv.num_envs == 3
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    single = jrl.envs.to_gymnasium("CartPole-v1")
    assert venv.single_observation_space == single.observation_space
    assert venv.observation_space == batch_space(single.observation_space, 3)
    assert venv.action_space == batch_space(single.action_space, 3)
    a, _ = venv.reset(seed=5)
    b, _ = venv.reset(seed=5)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (3, 4) and venv.observation_space.contains(a)
    assert len({tuple(row) for row in a}) == 3  # each env its own episode
    obs, reward, terminated, truncated, info = venv.step(np.array([0, 1, 0]))
    assert obs.shape == (3, 4) and reward.dtype == np.float32 and reward.shape == (3,)
    assert terminated.dtype == truncated.dtype == np.bool_ and info == {}
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        jrl.envs.to_gymnasium("CartPole-v1", num_envs=0)
    with pytest.raises(TypeError, match="seed must be an int"):
        venv.reset(seed=[1, 2, 3])


def test_vector_env_resets_in_the_same_step_with_the_final_observation():
    """TruncationProbe-v0 (reward 1, cut at 20 steps) and CartPole: on the step an episode
    ends, the flags and reward are the finished episode's, the observation the new episode's
    first, and info["final_obs"] the finished one's last (None for the other envs)."""
    probe = jrl.envs.to_gymnasium("TruncationProbe-v0", num_envs=2)
    first, _ = probe.reset(seed=0)
    for t in range(1, 21):
        obs, reward, terminated, truncated, info = probe.step(np.zeros(2, np.int64))
        assert reward.tolist() == [1.0, 1.0] and not terminated.any()
        assert truncated.all() == (t == 20) and bool(info) == (t == 20)
    assert info["_final_obs"].tolist() == [True, True]
    assert all(final is not None for final in info["final_obs"])

    venv = jrl.envs.to_gymnasium("CartPole-v1", num_envs=4)
    venv.reset(seed=1)
    ended = 0
    for _ in range(60):  # always push left: every env falls within 60 steps
        obs, _, terminated, truncated, info = venv.step(np.zeros(4, np.int64))
        done = terminated | truncated
        if done.any():
            assert info["_final_obs"].tolist() == done.tolist()
            for i in range(4):
                final = info["final_obs"][i]
                if done[i]:
                    x, theta = final[0], final[2]
                    assert abs(x) > 2.4 or abs(theta) > 0.2095  # a terminal state
                    assert np.all(np.abs(obs[i]) <= 0.05)  # the next episode's first state
                    ended += 1
                else:
                    assert final is None
    assert ended >= 4


def test_vector_env_with_gymnasiums_episode_statistics_and_render():
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    venv = RecordEpisodeStatistics(
        jrl.envs.to_gymnasium("TruncationProbe-v0", num_envs=3, render_mode=None)
    )
    venv.reset(seed=0)
    for _ in range(20):
        _, _, _, _, info = venv.step(np.zeros(3, np.int64))
    assert info["episode"]["r"].tolist() == [20.0, 20.0, 20.0]
    assert info["episode"]["l"].tolist() == [20, 20, 20]

    drawn = jrl.envs.to_gymnasium("Pendulum-v1", num_envs=2, render_mode="rgb_array")
    assert drawn.render() is None  # before reset
    drawn.reset(seed=0)
    frames = drawn.render()
    assert len(frames) == 2 and all(f.dtype == np.uint8 and f.shape[2] == 3 for f in frames)

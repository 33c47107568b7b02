"""jrl envs as Gymnasium envs (jrl.envs.to_gymnasium): Gymnasium's own env checker on every
registered env, seeding, the time limit as ``truncated``, rendering."""

import warnings

import numpy as np
import pytest

import jrl.envs

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

"""Brax environments (the optional ``brax`` extra): ``brax:<name>`` ids with terminated and
truncated kept apart and the final observation carried, the action bounds, unknown names,
``jrl envs``, the message without brax, and SAC learning brax:inverted_pendulum.

Everything but the last-but-one test skips when brax is not installed."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jrl.envs as jrl_envs
import numpy as np
import pytest

import jrl
from jrl.core import wrappers
from jrl.core.types import FINAL_OBSERVATION

JRL = [sys.executable, "-m", "jrl.app.cli"]


def run(*args, cwd, env=None):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.run(
        JRL + [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


def test_without_brax_the_message_names_the_extra(tmp_path):
    """A brax that cannot be imported (here: a module of that name that raises ImportError, as
    a missing package does): one line naming `pip install jrl-jax[brax]`, exit 2."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "brax.py").write_text("raise ImportError(\"No module named 'brax'\")\n")
    out = run(
        "train",
        "sac",
        "--env",
        "brax:reacher",
        "--out",
        tmp_path / "x",
        cwd=tmp_path,
        env={"PYTHONPATH": str(fake)},
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "pip install jrl-jax[brax]" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    listed = run("envs", cwd=tmp_path, env={"PYTHONPATH": str(fake)})
    assert listed.returncode == 0 and "brax:" not in listed.stdout


brax = pytest.importorskip("brax")


def test_terminated_and_truncated_stay_apart_and_the_final_observation_is_carried():
    """inverted_pendulum with a 5-step limit, 2 envs: pushed hard the pole falls (terminated,
    not truncated); left alone it is cut by the limit (truncated, not terminated). Either way
    the step's final observation is the bare brax env's successor and the next observation a
    fresh reset."""
    env, params = jrl_envs.make("brax:inverted_pendulum", max_episode_steps=5)
    # brax's convention: actions in [-1, 1]; inverted_pendulum scales them to its [-3, 3]
    space = env.action_space(params)
    assert space.low.tolist() == [-1.0] and space.high.tolist() == [1.0]
    assert jrl_envs.entry("brax:inverted_pendulum").max_episode_steps == 1000
    batched = wrappers.wrap_for_training(env, 2)
    state, ts = jax.jit(batched.reset)(jax.random.key(0), params)
    step = jax.jit(batched.step)
    bare = env.unwrapped.brax_env
    action = jnp.array([[1.0], [0.0]])  # env 0 pushed at full force, env 1 not
    seen_terminated = seen_truncated = False
    for t in range(5):
        inner = state.env_state.env_state  # EpisodeStatistics(AutoReset(VmapEnv(TimeLimit)))
        brax_states = inner.env_state.env_state if hasattr(inner, "env_state") else inner
        expected = jax.vmap(bare.step)(brax_states, action).obs
        state, ts = step(jax.random.key(t + 1), state, action, params)
        np.testing.assert_allclose(ts.info[FINAL_OBSERVATION], expected, rtol=1e-5, atol=1e-6)
        done = np.asarray(ts.terminated | ts.truncated)
        if done.any():
            assert not np.allclose(np.asarray(ts.observation)[done], np.asarray(expected)[done])
        seen_terminated |= bool(ts.terminated[0]) and not bool(ts.truncated[0])
        if t == 4:
            assert bool(ts.truncated[1]) and not bool(ts.terminated[1])
            seen_truncated = True
    assert seen_terminated and seen_truncated


def test_unknown_brax_name_suggests_the_closest():
    with pytest.raises(jrl_envs.UnknownEnvError, match="Did you mean 'brax:reacher'"):
        jrl_envs.make("brax:reachr")


def test_jrl_envs_lists_the_brax_envs(tmp_path):
    out = run("envs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("brax:")]
    assert {"brax:inverted_pendulum", "brax:halfcheetah", "brax:reacher"} <= {
        r.split()[0] for r in rows
    }


@pytest.mark.learning
def test_sac_brax_inverted_pendulum(tmp_path, learning_seed):
    """SAC, its brax:inverted_pendulum preset (2e4 env steps, 2 seeds). The episode return is
    the number of steps balanced, at most 1000 (brax's episode length). Brax's own training
    colab trains SAC on inverted_pendulum for 3e5 env steps (64 envs, 32 gradient updates per
    step), where a balancing policy returns the maximum, 1000; jrl's preset, one env and one
    update per step, reaches it within 2e4 steps (1/15 of that budget) on this machine. The run
    folder's checkpoint (MJX states hold arrays of size 0) loads back for `jrl eval`."""
    res = jrl.train(
        "sac",
        "brax:inverted_pendulum",
        seeds=2,
        seed=learning_seed,
        progress=False,
        num_reports=4,
        out=tmp_path,
    )
    stats = jrl.app.api.evaluate_run(tmp_path, episodes=2)
    assert stats["mean"] >= 900, stats  # the greedy policy balances too
    final = res.final_returns()
    # measured 2026-12-04 (BENCHMARKS.md "Learning reach"), 8 seeds from 1000: 1000.0 +- 0.0
    # (every seed balances the whole episode; at 3/4 of the budget 3 of 8 did not yet), so the
    # worst pair 1000.0; threshold 900, a margin of 100 (10%). 2026-12-01, seeds 0-3: the same.
    # 2 seeds, not 4: the test took 145 s with 4
    assert final.mean() >= 900, (final, res.summary())

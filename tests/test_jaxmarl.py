"""JaxMARL environments (the optional ``jaxmarl`` extra) as ``jaxmarl:<name>`` multi-agent envs:
the message without jaxmarl, MPE / SMAX / Overcooked through the adapter (agent axis, team and
per-agent rewards, masks, episode ends), `jrl envs`, the MPE render, and IPPO learning
MPE simple_spread.

Everything but the first test skips when jaxmarl is not installed."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jrl.envs as jrl_envs
import numpy as np
import pytest

import jrl
from jrl.core.multi_agent_env import AGENT_REWARD, AGENT_TERMINATED, GLOBAL_STATE
from jrl.core.types import ACTION_MASK, OBSERVATION

JRL = [sys.executable, "-m", "jrl.app.cli"]


def run(*args, cwd, env=None):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.run(
        JRL + [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


def test_without_jaxmarl_the_message_names_the_extra(tmp_path):
    """A jaxmarl that cannot be imported (a module of that name raising ImportError, as a
    missing package does): one line naming `pip install jrl-jax[jaxmarl]`, exit 2; `jrl envs`
    lists no jaxmarl ids."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "jaxmarl.py").write_text("raise ImportError(\"No module named 'jaxmarl'\")\n")
    out = run(
        "train",
        "ippo",
        "--env",
        "jaxmarl:MPE_simple_spread_v3",
        "--out",
        tmp_path / "x",
        cwd=tmp_path,
        env={"PYTHONPATH": str(fake)},
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "pip install jrl-jax[jaxmarl]" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    listed = run("envs", cwd=tmp_path, env={"PYTHONPATH": str(fake)})
    assert listed.returncode == 0 and "jaxmarl:" not in listed.stdout


jaxmarl = pytest.importorskip("jaxmarl")


def _steps(env_id, n=3, key=0):
    env, params = jrl_envs.make(env_id)
    state, ts = env.reset(jax.random.key(key), params)
    out = [ts]
    for i in range(n):
        action = env.action_space(params).sample(jax.random.key(100 + i))
        state, ts = env.step(jax.random.key(200 + i), state, action, params)
        out.append(ts)
    return env, params, state, out


def test_mpe_simple_spread_through_the_adapter():
    """3 agents in JaxMARL's order, 18 observations each, 5 actions; the team reward is the sum
    of JaxMARL's per-agent rewards (shared in simple_spread); episodes end after 26 steps
    (JaxMARL's MPE is done on the step taken at step count max_steps = 25)."""
    env, params, state, steps = _steps("jaxmarl:MPE_simple_spread_v3")
    assert env.agents == ("agent_0", "agent_1", "agent_2")
    assert env.action_space(params) == jrl.core.spaces.MultiDiscrete([5, 5, 5])
    ts = steps[-1]
    assert ts.observation[OBSERVATION].shape == (3, 18)
    assert ts.observation[GLOBAL_STATE].shape == (54,) and ACTION_MASK not in ts.observation
    np.testing.assert_allclose(ts.reward, np.sum(ts.info[AGENT_REWARD]), rtol=1e-6)
    # the same step of JaxMARL's own env gives the same observation and rewards
    raw = env.unwrapped.jaxmarl_env
    obs, st = raw.reset(jax.random.key(0))
    np.testing.assert_allclose(steps[0].observation[OBSERVATION][1], obs["agent_1"], rtol=1e-6)
    action = env.action_space(params).sample(jax.random.key(100))
    obs, st, rew, dones, _ = raw.step_env(
        jax.random.key(200), st, {a: action[i] for i, a in enumerate(raw.agents)}
    )
    np.testing.assert_allclose(steps[1].observation[OBSERVATION][2], obs["agent_2"], rtol=1e-6)
    np.testing.assert_allclose(steps[1].info[AGENT_REWARD][0], rew["agent_0"], rtol=1e-6)
    # an episode is 26 steps: JaxMARL's done ends it for every agent
    wrapped = jrl.core.multi_agent_env.wrap_agents_for_training(env, 2)
    s, t = wrapped.reset(jax.random.key(0), params)
    step = jax.jit(lambda s, k: wrapped.step(k, s, jnp.zeros((2, 3), jnp.int32), params))
    for i in range(1, 27):
        s, t = step(s, jax.random.key(i))
        assert bool(np.asarray(t.terminated).all()) == (i == 26), i
    assert np.asarray(t.info["episode_length"]).tolist() == [26, 26]


def test_smax_masks_and_overcooked_images():
    """SMAX: per-agent action masks from JaxMARL's get_avail_actions; Overcooked: two agents
    with image observations [H, W, C]."""
    env, params, state, steps = _steps("jaxmarl:SMAX", n=2)
    n = env.num_agents
    mask = np.asarray(steps[-1].observation[ACTION_MASK])
    avail = env.unwrapped.jaxmarl_env.get_avail_actions(state)
    np.testing.assert_array_equal(mask, np.stack([avail[a] for a in env.agents]))
    assert mask.shape == (n, env.unwrapped.agent_action_space().n)
    assert steps[-1].info[AGENT_TERMINATED].shape == (n,)
    env, params, state, steps = _steps("jaxmarl:overcooked", n=2)
    assert env.agents == ("agent_0", "agent_1")
    obs = steps[-1].observation[OBSERVATION]
    assert obs.ndim == 4 and obs.shape[0] == 2 and obs.shape[-1] == 26
    # the values, not only the shapes: JaxMARL's own env, reset and stepped with the same keys
    # and actions, gives each agent the same image (as float32) and the same reward
    raw = env.unwrapped.jaxmarl_env
    raw_obs, st = raw.reset(jax.random.key(0))
    assert obs.shape[1:] == raw_obs["agent_0"].shape
    for i, a in enumerate(env.agents):
        np.testing.assert_array_equal(steps[0].observation[OBSERVATION][i], raw_obs[a])
    action = env.action_space(params).sample(jax.random.key(100))
    raw_obs, st, rew, _, _ = raw.step_env(
        jax.random.key(200), st, {a: action[i] for i, a in enumerate(env.agents)}
    )
    for i, a in enumerate(env.agents):
        np.testing.assert_array_equal(steps[1].observation[OBSERVATION][i], raw_obs[a])
        np.testing.assert_allclose(steps[1].info[AGENT_REWARD][i], rew[a], rtol=1e-6)
    assert float(np.abs(steps[1].observation[OBSERVATION]).sum()) > 0  # not an empty image


def test_unknown_name_lists_jaxmarl_names():
    with pytest.raises(jrl_envs.UnknownEnvError, match="MPE_simple_spread_v3"):
        jrl_envs.make("jaxmarl:MPE_simple_sprea_v3")


def test_envs_lists_jaxmarl_and_render_draws_the_mpe_scene(tmp_path):
    listed = run("envs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "jaxmarl:MPE_simple_spread_v3" in listed.stdout and "jaxmarl:SMAX" in listed.stdout
    assert "Importing" not in listed.stdout  # JaxMARL's import note goes to stderr
    env, params, state, _ = _steps("jaxmarl:MPE_simple_spread_v3", n=1)
    frame = np.asarray(env.render(state, params))
    assert frame.shape == (400, 400, 3) and frame.dtype == np.uint8
    raw = env.unwrapped.jaxmarl_env
    for e in range(raw.num_agents):  # each agent's disc centre has its colour
        x, y = np.asarray(state.p_pos[e])
        col, row = int((x + 1.5) * 400 / 3), int(400 - (y + 1.5) * 400 / 3)
        if 0 <= row < 400 and 0 <= col < 400:
            assert tuple(frame[row, col]) == tuple(int(c) for c in raw.colour[e])
    with pytest.raises(NotImplementedError, match="MPE envs do"):
        _steps("jaxmarl:overcooked", n=0)[0].render(None)


# JaxMARL's IPPO on MPE simple_spread at the CI budget. The figures JaxMARL publishes (the paper,
# arXiv 2311.10090, and its repository's docs) give no value to read at a CI-sized budget, so
# the threshold comes from their own baseline, baselines/IPPO/ippo_ff_mpe.py of FLAIROx/JaxMARL
# at c793d09, run unchanged (benchmarks/ippo_mpe.py's `peer`) with its ippo_ff_mpe.yaml config
# (16 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, SEED 30, NUM_SEEDS 10)
# and only TOTAL_TIMESTEPS set to this test's budget, 250,000 (122 updates): the team return of
# its last 5% of updates (6), averaged over the 10 seeds, is -70.26 (per seed -69.44, -68.03,
# -70.09, -70.50, -71.72, -70.24, -67.54, -70.35, -73.23, -71.47; near-random play returns
# about -84). Measured 2026-12-02, jax 0.10.2, jaxmarl 0.2.0, CPU.
JAXMARL_IPPO_SPREAD_250K = -70.26


@pytest.mark.learning
def test_ippo_reaches_jaxmarl_ippo_on_mpe_simple_spread(learning_seed):
    """IPPO at JaxMARL's config and budget (16 envs x 128 steps, 250k steps, 4 seeds vmapped in
    one program): the mean team return of the last 5% of iterations is at least JaxMARL's own
    IPPO's at the same budget (see JAXMARL_IPPO_SPREAD_250K)."""
    res = jrl.train(
        "ippo",
        "jaxmarl:MPE_simple_spread_v3",
        seeds=4,
        seed=learning_seed,
        total_steps=250_000,
        num_reports=2,
        progress=False,
    )
    team = np.asarray(res.metrics["train/episode_return"])  # [seeds, iterations]
    assert team.shape == (4, 122)
    tail = team[:, -(122 // 20) :].mean(axis=1)
    # measured 2026-12-02, 4 seeds: -69.55 (-67.51, -70.20, -70.43, -70.07); the first
    # iterations return about -83. 2026-12-05, seeds 2000-2015 in groups of 4 as vmapped here
    # (`benchmarks/seed_checks.py jaxmarl-spread --seeds 2000:4 2004:4 2008:4 2012:4`): per
    # seed -70.6 .. -67.5, group means -69.55, -69.83, -69.18, -68.75; the worst group clears
    # JaxMARL's -70.26 by 0.43, and the four lowest seeds together (-70.48) would not: a near
    # tie with the peer at equal budget, not a margin
    assert team[:, 0].mean() < -80.0
    assert tail.mean() >= JAXMARL_IPPO_SPREAD_250K, tail

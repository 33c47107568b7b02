"""The multi-agent env API (jrl.core.multi_agent_env): the team view, the agent view (AgentSteps)
and
Coordination-v0's rules, payoffs and optimal return."""

import jax
import jax.numpy as jnp
import jrl.envs as jrl_envs
import numpy as np
import pytest
from jrl.envs.coordination import Coordination, TeamTruncationProbe

from jrl.core import spaces
from jrl.core.multi_agent_env import (
    AGENT_EPISODE_RETURN,
    AGENT_REWARD,
    AGENT_TERMINATED,
    GLOBAL_STATE,
    agent_names,
    is_multi_agent,
    joint_action_space,
    wrap_agents_for_training,
)
from jrl.core.types import ACTION_MASK, EPISODE_RETURN, FINAL_OBSERVATION, OBSERVATION


def test_team_view_spaces_and_observation():
    env, params = jrl_envs.make("Coordination-v0")
    assert is_multi_agent(env) and agent_names(env) == ("agent_0", "agent_1")
    assert not is_multi_agent(jrl_envs.make("CartPole-v1")[0])
    assert agent_names(jrl_envs.make("CartPole-v1")[0]) == ()
    assert env.action_space(params) == spaces.MultiDiscrete([3, 3])
    space = env.observation_space(params)
    assert space[OBSERVATION].shape == (2, 6) and space[GLOBAL_STATE].shape == (4,)
    assert space[ACTION_MASK].shape == (2, 3)
    state, ts = env.reset(jax.random.key(0), params)
    assert bool(space.contains(ts.observation))
    g = int(state.cue)
    obs = np.asarray(ts.observation[OBSERVATION])
    np.testing.assert_array_equal(obs[:, :3], np.eye(3)[[g, g]])  # both see the cue
    np.testing.assert_array_equal(obs[:, 3:5], np.eye(2))  # and their own id
    np.testing.assert_array_equal(obs[:, 5], 0.0)
    # agent i must pick (g + i) % 3; (g + i + 1) % 3 is masked
    mask = np.asarray(ts.observation[ACTION_MASK])
    for i in range(2):
        assert not mask[i, (g + i + 1) % 3] and mask[i].sum() == 2


def test_joint_action_space():
    assert joint_action_space(spaces.Discrete(5), 3) == spaces.MultiDiscrete([5, 5, 5])
    box = joint_action_space(spaces.Box(-1.0, 2.0, (4,)), 3)
    assert box.shape == (3, 4) and box.low.min() == -1.0 and box.high.max() == 2.0
    with pytest.raises(TypeError, match="Discrete or Box"):
        joint_action_space(spaces.MultiDiscrete([2, 2]), 2)


def _play(env, params, state, choose):
    """One step with actions ``choose(targets) -> [A]``."""
    action = jnp.asarray(choose(np.asarray(env.unwrapped.targets(state.cue))), jnp.int32)
    return env.step(jax.random.key(7), state, action, params)


def test_coordination_payoffs():
    """Both right: 1 each; one wrong but valid: 0 each; an invalid action: -1 for that agent.
    The team reward is the sum; agents terminate together after 8 rounds."""
    env, params = Coordination(), Coordination().default_params
    state, _ = env.reset(jax.random.key(3), params)
    _, ts = _play(env, params, state, lambda t: t)
    np.testing.assert_array_equal(ts.info[AGENT_REWARD], [1.0, 1.0])
    assert float(ts.reward) == 2.0
    _, ts = _play(env, params, state, lambda t: [t[0], (t[1] + 2) % 3])  # valid, wrong
    np.testing.assert_array_equal(ts.info[AGENT_REWARD], [0.0, 0.0])
    _, ts = _play(env, params, state, lambda t: [(t[0] + 1) % 3, t[1]])  # agent 0 invalid
    np.testing.assert_array_equal(ts.info[AGENT_REWARD], [-1.0, 0.0])
    assert float(ts.reward) == -1.0
    for step in range(8):
        state, ts = _play(env, params, state, lambda t: t)
        assert bool(ts.terminated) == (step == 7)
        np.testing.assert_array_equal(ts.info[AGENT_TERMINATED], [step == 7] * 2)


def test_coordination_global_state_and_render():
    env, params = Coordination(), Coordination().default_params
    state, ts = env.reset(jax.random.key(5), params)
    expected = np.concatenate([np.eye(3)[int(state.cue)], [0.0]])
    np.testing.assert_array_equal(ts.observation[GLOBAL_STATE], expected)
    frame = np.asarray(env.render(state, params))
    assert frame.shape == (120, 180, 3) and frame.dtype == np.uint8
    # the cell the cue asks of agent 0 (top row) is green
    g = int(state.cue)
    r, c = 30, int((g + 0.5) * 60)
    assert tuple(frame[r, c + 20]) == (120, 200, 120)


def test_agent_view_through_the_training_wrappers():
    """AgentSteps: per-agent rewards and flags [N, A], the episode's truncation on every agent,
    each agent's episode return where an episode ended; EpisodeStatistics' return is the sum."""
    env, params = jrl_envs.make("TeamTruncationProbe-v0")  # 1 per agent per step, cut at 20
    venv = wrap_agents_for_training(env, 3)
    state, ts = venv.reset(jax.random.key(0), params)
    assert ts.reward.shape == (3, 2) and ts.terminated.shape == (3, 2)
    step = jax.jit(lambda s, k: venv.step(k, s, jnp.zeros((3, 2), jnp.int32), params))
    for t in range(1, 21):
        state, ts = step(state, jax.random.key(t))
        np.testing.assert_array_equal(ts.reward, np.ones((3, 2)))
        assert not np.asarray(ts.terminated).any()
        np.testing.assert_array_equal(ts.truncated, np.full((3, 2), t == 20))
        want = 20.0 if t == 20 else 0.0
        np.testing.assert_array_equal(ts.info[AGENT_EPISODE_RETURN], np.full((3, 2), want))
        np.testing.assert_array_equal(ts.info[EPISODE_RETURN], np.full(3, 2 * want))
    state, ts = step(state, jax.random.key(99))  # the next episode counts from 0 again
    np.testing.assert_array_equal(state.agent_return, np.ones((3, 2)))
    with pytest.raises(ValueError, match="multi-agent env"):
        wrap_agents_for_training(jrl_envs.make("CartPole-v1")[0], 2)


def test_agent_view_can_leave_out_the_global_state():
    """global_state=False: observations, final observations and the observation space lack the
    global state; everything else (observations, masks, rewards, per-agent returns) is the same
    as with it, step for step, across an episode's end."""
    env, params = jrl_envs.make("Coordination-v0")  # episodes of 8 rounds
    full = wrap_agents_for_training(env, 3)
    local = wrap_agents_for_training(env, 3, global_state=False)
    keys = {OBSERVATION, ACTION_MASK}
    assert set(full.observation_space(params).spaces) == keys | {GLOBAL_STATE}
    assert set(local.observation_space(params).spaces) == keys
    (sf, tf), (sl, tl) = (w.reset(jax.random.key(0), params) for w in (full, local))
    assert set(tl.observation) == keys and set(tf.observation) == keys | {GLOBAL_STATE}
    step_full, step_local = (
        jax.jit(lambda s, k, a, w=w: w.step(k, s, a, params)) for w in (full, local)
    )
    ended = False
    for t in range(1, 10):
        action = jax.vmap(env.action_space(params).sample)(jax.random.split(jax.random.key(t), 3))
        sf, tf = step_full(sf, jax.random.key(t), action)
        sl, tl = step_local(sl, jax.random.key(t), action)
        assert set(tl.observation) == set(tl.info[FINAL_OBSERVATION]) == keys
        assert GLOBAL_STATE in tf.info[FINAL_OBSERVATION]
        for k in keys:
            np.testing.assert_array_equal(tl.observation[k], tf.observation[k])
            np.testing.assert_array_equal(
                tl.info[FINAL_OBSERVATION][k], tf.info[FINAL_OBSERVATION][k]
            )
        np.testing.assert_array_equal(tl.reward, tf.reward)
        np.testing.assert_array_equal(tl.info[AGENT_EPISODE_RETURN], tf.info[AGENT_EPISODE_RETURN])
        ended |= bool(np.asarray(tl.info["episode_done"]).any())
    assert ended


def test_step_env_shapes_are_checked():
    class Broken(TeamTruncationProbe):
        def step_env(self, key, state, action, params):
            return state, self._obs(state, params), jnp.ones(3), jnp.zeros(2, bool), {}

    env = Broken()
    state, _ = env.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(jax.random.key(0), state, jnp.zeros(2, jnp.int32))

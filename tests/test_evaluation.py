"""Evaluation rollouts: one whole episode per env, counted by hand on probe envs; every agent's
greedy and stochastic evaluation policies told apart."""

import dataclasses

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs as jrl_envs
import numpy as np
import pytest
from jrl.agents.evolution.strategies import ESConfig
from jrl.envs.probes import TruncationProbe

from jrl.app import api as experiment
from jrl.app import chunk_work as training
from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.wrappers import VmapEnv
from jrl.run import anakin, evaluation
from jrl.run.evaluation import episode_returns


def test_truncation_probe_episodes_return_their_length():
    env, params = jrl_envs.make("TruncationProbe-v0")  # reward 1 per step, truncated at 20
    ret, length = jax.jit(
        lambda k: episode_returns(lambda o, k: jnp.zeros(o.shape[0], jnp.int32), env, k, 5, params)
    )(jax.random.key(0))
    np.testing.assert_array_equal(ret, [20.0] * 5)
    np.testing.assert_array_equal(length, [20] * 5)


def test_episodes_of_different_lengths_stop_counting_when_they_end():
    """CartPole pushed left every step: each env falls after its own number of steps (reward 1
    each); nothing is counted after an env's first episode ends."""
    env, params = jrl_envs.make("CartPole-v1")
    ret, length = episode_returns(
        lambda o, k: jnp.zeros(o.shape[0], jnp.int32), env, jax.random.key(3), 16, params
    )
    np.testing.assert_array_equal(ret, length.astype(np.float32))
    assert (
        5 <= int(length.min())
        and int(length.max()) <= 15
        and len(np.unique(np.asarray(length))) > 1
    )


def test_max_steps_cuts_an_env_without_a_time_limit():
    env = TruncationProbe()  # bare: never terminates
    ret, length = episode_returns(
        lambda o, k: jnp.zeros(o.shape[0], jnp.int32), env, jax.random.key(0), 3, max_steps=7
    )
    np.testing.assert_array_equal(length, [7, 7, 7])


def test_masked_probe_best_valid_action_policy():
    """Taking the highest valid action each of 8 steps returns between 8 * 1/4 and 8 * 4/4."""
    env, params = jrl_envs.make("MaskedProbe-v0")
    best = lambda o, k: 3 - jnp.argmax(o["action_mask"][:, ::-1], axis=1)  # noqa: E731
    ret, length = episode_returns(best, env, jax.random.key(1), 64, params)
    np.testing.assert_array_equal(length, [8] * 64)
    assert float(ret.min()) >= 2.0 and float(ret.max()) <= 8.0 and float(ret.mean()) > 6.0


def test_bad_input():
    env, params = jrl_envs.make("CartPole-v1")
    policy = lambda o, k: jnp.zeros(o.shape[0], jnp.int32)  # noqa: E731
    with pytest.raises(ValueError, match="unbatched"):
        episode_returns(policy, VmapEnv(env, 2), jax.random.key(0), 2)
    with pytest.raises(ValueError, match="positive"):
        episode_returns(policy, env, jax.random.key(0), 0)


class ActionCount(Environment):
    """The same observation every step; the reward is the action taken (0 or 1); an episode
    ends after 8 steps. A greedy policy returns 8 * its one action in every episode; a
    uniformly random one returns Binomial(8, 1/2), different from episode to episode."""

    id = "ActionCount"
    OBS = (0.5, -0.25, 1.0, 0.75)

    @property
    def default_params(self):
        return None

    def reset_env(self, key, params):
        return jnp.zeros((), jnp.int32), jnp.asarray(self.OBS, jnp.float32)

    def step_env(self, key, state, action, params):
        t = state + 1
        obs = jnp.asarray(self.OBS, jnp.float32)
        return t, obs, action.astype(jnp.float32), t >= 8, {}

    def observation_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (4,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)


class ActionCountBox(ActionCount):
    """ActionCount with one continuous action in [0, 1], the reward: a greedy policy returns 8
    times its action, a uniformly random one about 4, different from episode to episode."""

    id = "ActionCountBox"

    def step_env(self, key, state, action, params):
        return super().step_env(key, state, action[0], params)

    def action_space(self, params=None):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)


EPISODES = 32


@pytest.mark.parametrize(
    "agent",  # two-player games: tests/test_alphazero.py; multi-agent: tests/test_ippo.py
    [
        a
        for a in jrl.agents.names()
        if not jrl.agents.get(a).config_cls.TURN_BASED
        and not getattr(jrl.agents.get(a).config_cls, "MULTI_AGENT", False)
    ],
)
def test_every_agent_has_a_greedy_and_a_stochastic_evaluation_policy(agent, env_for, dataset_for):
    """Evaluating freshly initialised runs (what eval_every, `jrl eval` and `jrl render` do):
    greedy, every episode returns 8 times the action the agent's ``policy`` picks for the
    observation; stochastic, the behaviour policy (uniformly random at the start: a near-uniform
    softmax, or epsilon = 1 for the value-based agents, uniform actions before the first update
    for the continuous off-policy agents) returns about 4 on average, with returns that differ
    between episodes."""
    overrides = {"total_steps": 20_000, **dataset_for(agent)}
    fields = {f.name for f in dataclasses.fields(jrl.agents.get(agent).config_cls)}
    if "epsilon_start" in fields:
        overrides.update(epsilon_start=1.0, epsilon_end=1.0)
    if "epsilon_base" in fields:  # Ape-X's per-env epsilons: all 1
        overrides.update(epsilon_base=1.0)
    continuous = env_for(agent) == "Pendulum-v1"
    env = ActionCountBox() if continuous else ActionCount()
    config = experiment.make_config(agent, env.id, **overrides)
    built = jrl.agents.get(agent).build(config, env, None)
    keys = jax.random.split(jax.random.key(1), 2)
    states = anakin.init_runs(built.algorithm, keys)  # (init is never vmapped)
    obs = jnp.broadcast_to(jnp.asarray(ActionCount.OBS), (1, 4))
    for run in range(2):
        params = jax.tree.map(lambda x, r=run: x[r], states.agent_state.params)
        action = np.asarray(built.agent.policy(params, obs, jax.random.key(0))[0]).item()
        returns, lengths = training.make_evaluator(built, EPISODES, greedy=True)(
            jax.tree.map(lambda x, r=run: x[r : r + 1], states), jax.random.key(2)
        )
        np.testing.assert_array_equal(lengths, 8)
        np.testing.assert_allclose(returns, 8.0 * action, rtol=1e-6, err_msg=f"greedy {run}")
    if isinstance(config, ESConfig):  # explores in parameter space; act is the mean's policy
        return  # (tests/test_es.py::test_behaviour_policy_is_the_means_policy)
    returns, lengths = training.make_evaluator(built, EPISODES, greedy=False)(
        states, jax.random.key(2)
    )
    np.testing.assert_array_equal(lengths, 8)
    # CQL's behaviour policy samples softmax(Q), which an untrained Q-network does not make
    # uniform: only the spread is checked (tests/test_offline.py checks its frequencies)
    low, high = (0.0, 8.0) if "cql_alpha" in fields else (2.5, 5.5)
    for run in range(2):
        r = np.asarray(returns[run])
        assert len(np.unique(r)) > 2 and low < r.mean() < high, (run, r)


def test_run_policy_picks_the_policy_it_is_asked_for():
    """``run_policy``: greedy is the agent's ``policy`` (the mode, whatever the key), otherwise
    its behaviour policy ``act`` (samples that change with the key)."""
    config = experiment.make_config("ppo", "ActionCount", total_steps=20_000)
    built = jrl.agents.get("ppo").build(config, ActionCount(), None)
    state = built.algorithm.init(jax.random.key(0))
    obs = jnp.broadcast_to(jnp.asarray(ActionCount.OBS), (64, 4))
    mode = int(jnp.argmax(built.network.apply(state.agent_state.params, obs[:1])[0].logits))
    greedy = evaluation.run_policy(built.agent, built.env, state.agent_state, state.env_state)
    stochastic = evaluation.run_policy(
        built.agent, built.env, state.agent_state, state.env_state, greedy=False
    )
    for k in range(3):
        np.testing.assert_array_equal(greedy(obs, jax.random.key(k)), mode)
    samples = np.concatenate([np.asarray(stochastic(obs, jax.random.key(k))) for k in range(3)])
    assert 0.3 < samples.mean() < 0.7, samples.mean()  # near-uniform over {0, 1}
    with pytest.raises(ValueError, match="no greedy policy"):
        evaluation.run_policy(
            built.agent._replace(policy=None), built.env, state.agent_state, state.env_state
        )

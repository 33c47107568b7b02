"""Exact counters of the on- and off-policy loops (jrl/run/loops.py) with a stub agent on
TruncationProbe-v0 (reward 1 every step): iterations, env steps, the n-step warm-up, the
learning-starts gate at its boundary, updates, and what ``learn`` is handed, all by hand
(tools/mutation.py's targets)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jrl import envs
from jrl.agents.multi_agent import ippo
from jrl.agents.multi_agent.ippo import IPPOConfig
from jrl.core import spaces
from jrl.core.wrappers import TimeLimit
from jrl.envs.coordination import TeamTruncationProbe
from jrl.core.wrappers import wrap_for_training
from jrl.core.multi_agent_env import agent_names, wrap_agents_for_training
from jrl.parts.agent import Agent, Learned, Recurrent
from jrl.parts.buffers import prioritized_buffer, uniform_buffer
from jrl.run import loops


@struct.dataclass
class HParams:
    gamma: jax.Array


@struct.dataclass
class Stub:
    hparams: HParams
    learns: jax.Array  # learn calls
    rewards: jax.Array  # sum of the rewards learn was handed
    discounts: jax.Array  # sum of the discounts learn was handed (off-policy)
    steps: jax.Array  # sum of the n-step lengths learn was handed (off-policy)


def stub_agent(off_policy: bool) -> Agent:
    def init(key, spec):
        z = jnp.zeros((), jnp.float32)
        return Stub(HParams(jnp.float32(0.5)), jnp.zeros((), jnp.int32), z, z, z)

    def act(state, obs, key):
        return jnp.zeros(obs.shape[:1], jnp.int32), {}

    def learn(state, data, key):
        if off_policy:
            item = data.items
            add = (item.reward.sum(), item.discount.sum(), item.steps.sum().astype(jnp.float32))
        else:
            add = (data.reward.sum(), jnp.float32(0), jnp.float32(0))
        new = state.replace(
            learns=state.learns + 1,
            rewards=state.rewards + add[0],
            discounts=state.discounts + add[1],
            steps=state.steps + add[2],
        )
        return Learned(new, {"stub/learns": new.learns.astype(jnp.float32)})

    return Agent(init, act, learn)


def probe(num_envs: int, horizon: int):
    env, params = envs.make("TruncationProbe-v0", max_episode_steps=horizon, horizon=horizon)
    return wrap_for_training(env, num_envs), params


def run(algorithm, iterations: int):
    state = algorithm.init(jax.random.key(0))
    step = jax.jit(algorithm.step)
    metrics = []
    for _ in range(iterations):
        state, m = step(state)
        metrics.append(m)
    return state, metrics


def test_on_policy_counts_steps_and_learns_once_per_iteration():
    """2 envs, 3 steps an iteration, episodes of 4 steps: after 3 iterations 9 steps per env,
    18 env steps, 3 learns of 6 rewards of 1 each; each env's episode ended at step 4 and 8,
    so the latest return and length are 4."""
    env, params = probe(2, 4)
    algorithm = loops.on_policy(stub_agent(False), env, 3, params)
    assert algorithm.env_steps_per_iteration == 6
    state, metrics = run(algorithm, 3)
    assert int(state.iteration) == 3 and int(state.env_steps) == 18
    assert [int(m["train/env_steps"]) for m in metrics] == [6, 12, 18]
    assert int(state.agent_state.learns) == 3 and float(state.agent_state.rewards) == 18.0
    assert [float(m["stub/learns"]) for m in metrics] == [1.0, 2.0, 3.0]
    assert float(state.last_episode_return) == 4.0 and float(state.last_episode_length) == 4.0
    # the observation carried on is the time within the episode: 9 steps = 4 + 4 + 1
    np.testing.assert_allclose(state.observation, [[0.25], [0.25]])


def test_off_policy_warms_the_window_gates_learning_and_counts_updates():
    """2 envs, 3 steps an iteration, n_step 2 (gamma 0.5 from the agent's hparams): init takes
    n - 1 = 1 step per env (2 env steps) and stores nothing; each iteration stores 6 items of
    reward 1 + 0.5 = 1.5, discount 0.5^2 = 0.25 and 2 steps. learning_starts 14: iterations end
    at 8, 14, 20 env steps, so updates (2 of 4 items each) run in iterations 2 and 3 only."""
    env, params = probe(2, 50)
    schedule = loops.ReplaySchedule(3, 2, 14, 4, n_step=2)
    algorithm = loops.off_policy(
        stub_agent(True), env, uniform_buffer(64), schedule, env_params=params
    )
    assert algorithm.env_steps_per_iteration == 6
    first = algorithm.init(jax.random.key(0))
    assert int(first.env_steps) == 2 and int(first.buffer_state.size) == 0
    assert int(first.iteration) == 0 and int(first.num_updates) == 0
    state, metrics = run(algorithm, 3)
    assert [int(m["train/env_steps"]) for m in metrics] == [8, 14, 20]
    assert [int(m["train/updates"]) for m in metrics] == [0, 2, 4]
    assert int(state.iteration) == 3 and int(state.num_updates) == 4
    assert int(state.buffer_state.size) == 18
    s = state.agent_state
    assert int(s.learns) == 4
    assert float(s.rewards) == 4 * 4 * 1.5
    assert float(s.discounts) == 4 * 4 * 0.25
    assert float(s.steps) == 4 * 4 * 2
    # the metrics of the updates are their mean (learns 1, 2 then 3, 4); zero before learning
    assert [float(m["stub/learns"]) for m in metrics] == [0.0, 1.5, 3.5]
    # each env took 1 + 9 = 10 steps of its 50-step episode
    np.testing.assert_allclose(state.observation, [[0.2], [0.2]])


def test_counters_count_every_device_and_stay_integers():
    """With 2 devices (this process holding one device's 2 envs) an iteration of 3 steps is
    3 * 2 * 2 = 12 env steps, and the off-policy warm-up (n_step 2) 1 * 2 * 2 = 4; the
    counters stay int32."""
    env, params = probe(2, 50)
    algorithm = loops.on_policy(stub_agent(False), env, 3, params, num_devices=2)
    assert algorithm.env_steps_per_iteration == 12
    state, metrics = run(algorithm, 1)
    assert int(state.env_steps) == 12 and state.env_steps.dtype == jnp.int32
    schedule = loops.ReplaySchedule(3, 2, 1000, 4, n_step=2)
    algorithm = loops.off_policy(
        stub_agent(True), env, uniform_buffer(64), schedule, env_params=params, num_devices=2
    )
    first = algorithm.init(jax.random.key(0))
    assert int(first.env_steps) == 4 and first.env_steps.dtype == jnp.int32
    state, _ = run(algorithm, 1)
    assert int(state.env_steps) == 16 and state.env_steps.dtype == jnp.int32


def test_first_state_by_kind_of_agent_and_env():
    """``init``'s state: a plain ``OnPolicyState`` for a memoryless agent on a single-agent
    env (no per-agent returns), ``TeamOnPolicyState`` on a team env, with each of its 2
    agents' latest return NO_EPISODE (NaN, none finished yet), ``RecurrentOnPolicyState``
    for an agent with memory, every env at ``initial_state``."""
    env, params = probe(2, 4)
    state = loops.on_policy(stub_agent(False), env, 3, params).init(jax.random.key(0))
    assert type(state) is loops.OnPolicyState
    team, team_params = envs.make("Coordination-v0")
    names = agent_names(team)
    assert len(names) == 2
    team = wrap_agents_for_training(team, 2)
    state = loops.on_policy(stub_agent(False), team, 3, team_params).init(jax.random.key(0))
    assert type(state) is loops.TeamOnPolicyState
    assert state.last_agent_returns.shape == (2,) and np.all(np.isnan(state.last_agent_returns))
    state = loops.on_policy(counting_agent(), env, 3, params).init(jax.random.key(0))
    assert type(state) is loops.RecurrentOnPolicyState
    np.testing.assert_array_equal(state.acting_state, [7.0, 7.0])


def counting_agent() -> Agent:
    """The stub with memory: its acting state counts the steps since the episode began,
    starting from 7 (``initial_state``) so that a reset is not a zero."""
    base = stub_agent(False)

    def act(agent_state, acting_state, obs, key):
        return jnp.zeros(obs.shape[:1], jnp.int32), {}, acting_state + 1.0

    recurrent = Recurrent(lambda n: jnp.full((n,), 7.0), act)
    return base._replace(recurrent=recurrent)


def test_a_recurrent_agents_acting_state_carries_across_iterations():
    """2 envs, 3 steps an iteration, episodes of 4 steps, the acting state 7 + steps since
    the episode began (reset to 7 where an episode ends): after 3 steps 10, after 6 (an
    episode ended at 4) 7 + 2 = 9, after 9 (ended at 8) 7 + 1 = 8."""
    env, params = probe(2, 4)
    algorithm = loops.on_policy(counting_agent(), env, 3, params)
    state = algorithm.init(jax.random.key(0))
    step = jax.jit(algorithm.step)
    seen = []
    for _ in range(3):
        state, _ = step(state)
        seen.append(np.asarray(state.acting_state).tolist())
    assert seen == [[10.0, 10.0], [9.0, 9.0], [8.0, 8.0]]
    assert int(state.agent_state.learns) == 3 and float(state.agent_state.rewards) == 18.0


def test_replay_updates_write_the_learned_priorities_back():
    """A prioritised buffer (alpha 1, eps 0) of 4 items, each entering at priority 1; learn
    returns priority index + 1 for each sampled item (and keeps the sampled indices as its
    state), so after one update every sampled slot i holds i + 1 in the sum tree (leaf i at
    i), the others still 1, and the largest priority seen is the largest written. A learner
    that returns no priorities leaves the buffer as it is."""
    buffer = prioritized_buffer(4, alpha=1.0, beta=0.0, eps=0.0)
    buffer_state = buffer.add(buffer.init(jnp.zeros(())), jnp.arange(4.0))

    def agent(with_priorities):
        def learn(state, sample, key):
            p = sample.indices.astype(jnp.float32) + 1.0 if with_priorities else None
            return Learned(sample.indices.astype(jnp.int32), {"n": jnp.float32(1)}, p)

        return Agent(None, None, learn)

    start = jnp.zeros((4,), jnp.int32)
    updates = loops.ReplayUpdates(agent(True), buffer, 1, 4, None)
    indices, new_buffer, _ = updates.learn_phase(start, buffer_state, jax.random.key(2))
    indices = np.asarray(indices)
    want = np.ones(4, np.float32)
    want[indices] = indices + 1
    np.testing.assert_array_equal(np.asarray(new_buffer.tree)[:4], want)
    assert float(new_buffer.max_priority) == indices.max() + 1
    updates = loops.ReplayUpdates(agent(False), buffer, 1, 4, None)
    _, same, _ = updates.learn_phase(start, buffer_state, jax.random.key(2))
    np.testing.assert_array_equal(same.tree, buffer_state.tree)
    assert float(same.max_priority) == 1.0


class BoxTeam(TeamTruncationProbe):
    """Two agents, each observing float32[2, 3] (a rank-2 observation: t / horizon
    everywhere) and acting in Box(-1, 1, (2,)); each agent is paid its action's first
    component, so the reward shows the action the env was handed."""

    id = "BoxTeam-v0"

    def _obs(self, time, params):
        return jnp.full((self.num_agents, 2, 3), time / params.horizon, jnp.float32)

    def step_env(self, key, state, action, params):
        time = state + 1
        a = self.num_agents
        return time, self._obs(time, params), action[:, 0], jnp.zeros(a, bool), {}

    def agent_observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (2, 3), jnp.float32)

    def agent_action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


@pytest.mark.parametrize("continuous", ["normal", "tanh_normal"])
def test_team_builder_clips_normal_actions_and_reads_rank_two_observations(continuous):
    """build_multi_agent on a team env with rank-2 agent observations and Box actions: the
    network flattens each agent's [2, 3] observation (obs_ndim 2: one value and one 2-D
    action per agent), and with the (unbounded) normal policy the env clips actions to the
    Box: action 5 pays 1; the tanh-normal policy's actions are in bounds already, so nothing
    clips (5 pays 5)."""
    env = TimeLimit(BoxTeam(), 20)
    params = env.unwrapped.default_params
    config = IPPOConfig(num_envs=2, num_steps=2, num_minibatches=1, continuous=continuous)
    built = ippo.build(config, env, params)
    assert built.network.obs_ndim == 2
    obs = jnp.zeros((2, 2, 2, 3))  # [envs, agents, 2, 3]
    dist, value = built.network.apply(
        built.network.init(jax.random.key(0), {"observation": obs}), {"observation": obs}
    )
    assert value.shape == (2, 2) and dist.mode().shape == (2, 2, 2)
    env_state, _ = built.env.reset(jax.random.key(1), params)
    _, ts = built.env.step(jax.random.key(2), env_state, jnp.full((2, 2, 2), 5.0), params)
    np.testing.assert_array_equal(ts.reward, 1.0 if continuous == "normal" else 5.0)

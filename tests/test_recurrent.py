"""Recurrent policies (``--recurrent lstm|gru``): the hidden state reset at episode starts, the
learner replaying what the agent acted on, sequence minibatches, exact resume, the sharded and
vmapped run, and learning on the memory tasks."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs
import numpy as np
import pytest
from jrl.agents.actor_critic import common as actor_critic
from jrl.agents.actor_critic import ppo

import jrl
from jrl.app import api as experiment
from jrl.app import export, render
from jrl.core.wrappers import wrap_for_training
from jrl.parts import minibatches, networks
from jrl.parts.agent import Agent, Learned, Recurrent
from jrl.run import evaluation, loops

QUIET = dict(progress=False)


def test_reset_core_state_by_hand():
    """Rows whose episode starts take the initial state; the others keep theirs (LSTM: both
    c and h)."""
    c = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    state = (c, -c)
    initial = networks.initial_core_state("lstm", 2, 3)
    new = networks.reset_core_state(state, initial, jnp.array([False, True, False]))
    np.testing.assert_array_equal(new[0], [[1.0, 2.0], [0.0, 0.0], [5.0, 6.0]])
    np.testing.assert_array_equal(new[1], [[-1.0, -2.0], [0.0, 0.0], [-5.0, -6.0]])
    gru = networks.initial_core_state("gru", 4, 2)
    assert gru.shape == (2, 4) and not gru.any()
    with pytest.raises(ValueError, match="rnn"):
        networks.initial_core_state("rnn", 4, 2)


def test_sequence_minibatches_keep_whole_sequences():
    """[T, N] and [1, N] leaves cut into M minibatches of whole env sequences: every env once,
    its steps in order, one env of every block of M consecutive envs per minibatch."""
    T, N, M = 3, 8, 4
    steps = jnp.arange(T)[:, None] * 100 + jnp.arange(N)[None, :]  # step t of env i: 100t + i
    first = jnp.arange(N)[None, :] * 10  # [1, N]
    steps_mb, first_mb = minibatches.sequence_minibatches((steps, first), jax.random.key(0), M)
    assert steps_mb.shape == (M, T, N // M) and first_mb.shape == (M, 1, N // M)
    envs = np.asarray(steps_mb[:, 0, :])  # [M, N/M] the env of each column
    assert sorted(envs.ravel().tolist()) == list(range(N))
    for m in range(M):
        assert sorted(e // M for e in envs[m]) == list(range(N // M))  # one env per block
        np.testing.assert_array_equal(steps_mb[m], np.arange(T)[:, None] * 100 + envs[m])
        np.testing.assert_array_equal(first_mb[m, 0], envs[m] * 10)
    with pytest.raises(ValueError, match="not divisible"):
        minibatches.sequence_minibatches(steps, jax.random.key(0), 3)


def counting_agent() -> Agent:
    """An agent whose acting state counts the steps acted on since it was last reset."""

    def act(agent_state, count, obs, key):
        action = jax.random.randint(key, (count.shape[0],), 0, 2)
        return action, {"count": count}, count + 1

    def learn(agent_state, batch, key):
        return Learned(agent_state, {})

    return Agent(
        init=lambda key, spec: {"params": jnp.zeros(())},
        act=None,
        learn=learn,
        recurrent=Recurrent(lambda n: jnp.zeros((n,), jnp.int32), act, None),
    )


def test_acting_state_restarts_with_every_episode_under_vmapped_seeds():
    """The loop puts an env's acting state back to the initial one exactly where its episode
    ended: a step counter then equals EpisodeStatistics' length of the running episode, for
    every env, after every step, in 2 vmapped seeds (CartPole's episodes end at different
    steps in different envs)."""
    agent = counting_agent()
    env, params = jrl.envs.make("CartPole-v1")
    env = wrap_for_training(env, 6)
    algorithm = loops.on_policy(agent, env, num_steps=7, env_params=params)

    def rollout(key):
        state = algorithm.init(key)
        carry = (state.env_state, state.observation, state.acting_state)

        def step(carry, k):
            carry, transition, _ = loops.collect_recurrent_step(
                agent, env, params, state.agent_state, carry, k
            )
            return carry, (carry[2], carry[0].episode_length, transition)

        return jax.lax.scan(step, carry, jax.random.split(key, 60))[1]

    counts, lengths, batch = jax.jit(jax.vmap(rollout))(jax.random.split(jax.random.key(1), 2))
    np.testing.assert_array_equal(counts, lengths)
    done = np.asarray(batch.terminated | batch.truncated)
    assert done.any() and (~done).any()
    assert (np.asarray(counts)[done] == 0).all() and (np.asarray(counts)[~done] > 0).all()
    # the state each step acted from (stored for the learner) is 0 on an episode's first step
    stored = np.asarray(batch.extras["count"])
    assert (stored[:, 1:][done[:, :-1]] == 0).all()
    # and the whole loop step carries it in the train state
    state, _ = jax.jit(algorithm.step)(algorithm.init(jax.random.key(2)))
    np.testing.assert_array_equal(state.acting_state, state.env_state.episode_length)


def built_ppo(env_id="CartPole-v1", **overrides):
    config = experiment.make_config("ppo", env_id, **overrides)
    env, params = jrl.envs.make(env_id)
    return ppo.build(config, env, params), config


def test_learner_replays_what_the_agent_acted_on():
    """Unrolled from the rollout's first stored state with resets at episode starts, the
    network gives the log-probs and values stored at acting time; bootstrap values are the
    next step's values wherever the episode went on; without the resets they differ."""
    built, config = built_ppo(recurrent="lstm", core_size=16, hidden_sizes=(16,), num_envs=8)
    agent, env, params = built.agent, built.env, built.env_params
    state = built.algorithm.init(jax.random.key(0))

    def step(carry, k):
        carry, transition, _ = loops.collect_recurrent_step(
            agent, env, params, state.agent_state, carry, k
        )
        return carry, transition

    carry = (state.env_state, state.observation, state.acting_state)
    _, batch = jax.lax.scan(step, carry, jax.random.split(jax.random.key(1), 60))
    initial = lambda n: networks.initial_core_state("lstm", 16, n)
    unroll = actor_critic.recurrent_unroll(built.network, initial)
    done = batch.terminated | batch.truncated
    start = jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])
    first = jax.tree.map(lambda x: x[0], batch.extras["hidden"])
    p = state.agent_state.params
    (dist, values), _ = unroll(p, first, batch.observation, start)
    np.testing.assert_allclose(dist.log_prob(batch.action), batch.extras["log_prob"], atol=1e-5)
    np.testing.assert_allclose(values, batch.extras["value"], atol=1e-5)
    _, bootstrap = unroll(p, first, batch.observation, start, batch.next_observation)
    going_on = ~np.asarray(done[:-1])
    np.testing.assert_allclose(
        np.asarray(bootstrap[:-1])[going_on],
        np.asarray(batch.extras["value"][1:])[going_on],
        atol=1e-5,
    )
    assert done.any()
    (_, no_reset), _ = unroll(p, first, batch.observation, jnp.zeros_like(start))
    assert np.abs(np.asarray(no_reset - batch.extras["value"])).max() > 1e-3


def test_config_and_contract_checks():
    with pytest.raises(ValueError, match="recurrent must be"):
        built_ppo(recurrent="rnn")
    with pytest.raises(ValueError, match="num_envs = 6 is not divisible by num_minibatches"):
        built_ppo(recurrent="gru", num_envs=6)
    # recurrent minibatches are cut along envs, so num_steps need not divide
    built_ppo(recurrent="gru", num_envs=8, num_steps=30)
    built, _ = built_ppo(recurrent="gru", num_envs=8)
    with pytest.raises(TypeError, match="hidden state"):
        built.agent.act(None, None, None)
    for agent in ("a2c", "reinforce"):  # the same option of the shared actor-critic agent
        config = experiment.make_config(agent, "CartPole-v1", recurrent="lstm", core_size=8)
        env, params = jrl.envs.make("CartPole-v1")
        built = jrl.agents.get(agent).build(config, env, params)
        state, metrics = jax.jit(built.algorithm.step)(built.algorithm.init(jax.random.key(0)))
        assert np.isfinite(float(metrics["train/loss"])) and state.acting_state[0].shape[-1] == 8


def test_recurrent_run_resumes_exactly(tmp_path):
    """Stopped mid-run and resumed from its checkpoint (hidden states included), a recurrent
    PPO run ends with the same bits as the run that never stopped."""
    kw = dict(total_steps=8 * 16 * 6, num_envs=8, num_steps=16, num_reports=6, recurrent="gru")
    kw.update(core_size=16, hidden_sizes=(16,))
    whole = jrl.train("ppo", "CartPole-v1", 2, out=tmp_path / "whole", **QUIET, **kw)
    with pytest.raises(experiment.TrainingInterrupted):
        jrl.train(
            "ppo", "CartPole-v1", 2, out=tmp_path / "split", stop_at_steps=8 * 16 * 2, **QUIET, **kw
        )
    resumed = experiment.resume(tmp_path / "split", **QUIET)

    def leaves(state):
        state = state.replace(key=jax.random.key_data(state.key))
        return [np.asarray(x) for x in jax.tree.leaves(state)]

    for x, y in zip(leaves(whole.final_state), leaves(resumed.final_state), strict=True):
        np.testing.assert_array_equal(x, y)
    for k in whole.metrics:
        np.testing.assert_array_equal(whole.metrics[k], resumed.metrics[k], err_msg=k)
    hidden = np.asarray(resumed.final_state.acting_state)
    assert hidden.shape == (2, 8, 16) and np.abs(hidden).max() > 0
    # the run folder's policy has memory: evaluated, rendered and exported episode by episode
    # from the initial state (the same episode every way)
    loaded = experiment.load_run(tmp_path / "split")
    policy = loaded.policy(0)
    assert isinstance(policy, evaluation.StatefulPolicy)
    env = evaluation.evaluation_env(loaded.built.env)
    key = jax.random.key(4)
    ret, length = evaluation.episode_returns(policy, env, key, 1)
    frames, frame_ret, frame_len = render.episode_frames(policy, env, key, max_steps=500)
    assert frame_len == int(length[0]) and frame_ret == float(ret[0])
    assert frames.shape[0] == frame_len + 1
    exported = jrl.load_policy(export.export_policy(tmp_path / "split", tmp_path / "policy"))
    assert isinstance(exported, evaluation.StatefulPolicy)
    exported_ret, exported_length = evaluation.episode_returns(exported, env, key, 1)
    assert (float(exported_ret[0]), int(exported_length[0])) == (float(ret[0]), int(length[0]))


SHARDED = """
import sys, json, jax, numpy as np, jrl
devices = int(sys.argv[1]) or None
kw = dict(total_steps=64 * 8 * 2, num_envs=64, num_steps=8, recurrent="lstm", core_size=8)
r = jrl.train("ppo", "CartPole-v1", 2, seed=5, devices=devices, progress=False,
              hidden_sizes=(8,), **kw)
c, h = r.final_state.acting_state
np.savez(sys.argv[2], c=np.asarray(c), h=np.asarray(h),
         length=np.asarray(r.final_state.env_state.episode_length),
         params=np.concatenate([np.ravel(x) for x in jax.tree.leaves(r.final_params)]))
"""


def test_reset_and_device_count_invariance_on_two_devices(tmp_path):
    """2 seeds vmapped over 64 CartPole envs, on 1 and on 2 (fake) devices: after the last
    step, every env whose episode ended there holds the initial (zero) hidden state and
    every other env a non-zero one; and the 2-device run ends with the 1-device parameters
    (minibatches of whole sequences are drawn the same however the envs are split)."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    out = {}
    for devices in (0, 2):
        path = tmp_path / f"{devices}.npz"
        proc = subprocess.run(
            [sys.executable, "-c", SHARDED, str(devices), str(path)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[devices] = np.load(path)
    for d in out.values():
        fresh = d["length"] == 0  # [2 seeds, 64 envs]: the episode ended on the last step
        assert fresh.any() and (~fresh).any()
        for leaf in (d["c"], d["h"]):
            assert (leaf[fresh] == 0).all()
            assert (np.abs(leaf[~fresh]).max(axis=-1) > 0).all()
    # the sharded run's final state is device 0's view: the first 32 of the 64 envs
    np.testing.assert_array_equal(out[0]["length"][:, :32], out[2]["length"])
    np.testing.assert_allclose(out[0]["h"][:, :32], out[2]["h"], atol=1e-5)
    assert np.abs(out[0]["params"] - out[2]["params"]).max() <= 1e-5


def greedy_returns(run_dir, episodes=64):
    stats = experiment.evaluate_run(run_dir, episodes=episodes)
    return np.array([r["mean"] for r in stats["runs"]])


@pytest.mark.learning
def test_recurrent_ppo_solves_memory_chain_and_feed_forward_cannot(tmp_path, learning_seed):
    """MemoryChain-v0 (length 10), PPO's preset, 2 seeds each: with an LSTM every greedy
    episode returns the optimum 1; feed-forward, the query looks the same whichever cue came
    first, so its expected return is 0 and it stays below 0.5 (measured in the docstring of
    BENCHMARKS.md's memory section)."""
    jrl.train("ppo", "MemoryChain-v0", 2, out=tmp_path / "lstm", seed=learning_seed, **QUIET)
    np.testing.assert_array_equal(greedy_returns(tmp_path / "lstm"), [1.0, 1.0])
    ff = dict(recurrent="none", seed=learning_seed)
    jrl.train("ppo", "MemoryChain-v0", 2, out=tmp_path / "ff", **ff, **QUIET)
    assert (greedy_returns(tmp_path / "ff") < 0.5).all()


@pytest.mark.learning
def test_recurrent_ppo_balances_cartpole_without_velocities(tmp_path, learning_seed):
    """CartPoleNoVel-v1 with PPO's preset (LSTM, 250k steps), 2 seeds: greedy return >= 400."""
    jrl.train("ppo", "CartPoleNoVel-v1", 2, out=tmp_path / "run", seed=learning_seed, **QUIET)
    returns = greedy_returns(tmp_path / "run", episodes=16)
    assert (returns >= 400).all(), returns


def test_cli_takes_recurrent():
    proc = subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", "train", "ppo", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=600,
    )
    assert "--recurrent" in proc.stdout and "--core-size" in proc.stdout

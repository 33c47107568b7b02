"""Recurrent DQN (R2D2: ``--recurrent lstm|gru`` of the DQN family): the sequence loss and its
n-step double-Q targets by hand, the acting state reset at episode starts, the learner replaying
what the agent acted on from the stored state, exact resume, 1 vs 2 devices, and learning a
memory task that feed-forward DQN cannot."""

import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import jrl.envs
import numpy as np
import pytest
from jrl.agents.value import dqn, r2d2

import jrl
from jrl.app import api as experiment
from jrl.parts import networks
from jrl.parts.nstep import NStepTransition

QUIET = dict(progress=False)


class ToyCore(nn.Module):
    """A recurrent Q-network simple enough to replay in NumPy: ``embed = scale * obs``,
    ``h' = 0.5 h + embed``, ``q = h' @ w``."""

    num_actions: int = 2

    def setup(self):
        self.scale = self.param("scale", lambda k: jnp.ones(()))
        self.w = self.param("w", lambda k: jnp.zeros((2, self.num_actions)))

    def __call__(self, state, obs):
        state, out = self.core_step(state, self.embed(obs))
        return state, self.q_values(out)

    def embed(self, obs):
        return self.scale * obs

    def core_step(self, h, x):
        h = 0.5 * h + x
        return h, h

    def q_values(self, out):
        return out @ self.w


def numpy_loss(scale, w, w_target, seq, burn_in, n, gamma, double_q):
    """The R2D2 loss replayed step by step in float64; the online state after the burn-in is
    computed with ``scale[1]`` (held constant), the rest with ``scale[0]``."""
    obs, next_obs, stored = seq["obs"], seq["next_obs"], seq["stored"]
    L, B = obs.shape[:2]
    losses = []
    for b in range(B):

        def replay(scales, weights, first):
            h, q, q_next = stored[b].copy(), [], []
            for t in range(first, L):
                if t > 0 and (seq["term"][t - 1, b] or seq["trunc"][t - 1, b]):
                    h = np.zeros(2)
                s = scales[1] if t < burn_in else scales[0]
                h = 0.5 * h + s * obs[t, b]
                q.append(h @ weights)
                q_next.append((0.5 * h + s * next_obs[t, b]) @ weights)
            return np.array(q), np.array(q_next)

        q, q_next = replay(scale, w, 0)
        _, q_next_target = replay((1.0, 1.0), w_target, 0)
        for t in range(burn_in, L):
            ret, disc = 0.0, 1.0
            for k in range(n):
                j = t + k
                ret += disc * seq["reward"][j, b]
                disc *= gamma
                if seq["term"][j, b]:
                    disc = 0.0
                    break
                if seq["trunc"][j, b] or k == n - 1 or j == L - 1:
                    break
            pick = q_next[j] if double_q else q_next_target[j]
            ret += disc * q_next_target[j][np.argmax(pick)]
            losses.append(0.5 * (q[t][seq["action"][t, b]] - ret) ** 2)
    return np.mean(losses)


def toy_sequence(rng, L=7, B=2):
    """Env 0 terminates at step 2, env 1 is truncated at step 3 (its next observation there is
    the final one, not step 4's); the others go on (next observation = the next step's)."""
    obs = rng.normal(size=(L + 1, B, 2))
    next_obs = obs[1:].copy()
    obs = obs[:L]
    term, trunc = np.zeros((L, B), bool), np.zeros((L, B), bool)
    term[2, 0], trunc[3, 1] = True, True
    next_obs[2, 0], next_obs[3, 1] = rng.normal(size=2), rng.normal(size=2)
    return dict(
        obs=obs,
        next_obs=next_obs,
        term=term,
        trunc=trunc,
        reward=rng.normal(size=(L, B)),
        action=rng.integers(0, 2, size=(L, B)),
        stored=rng.normal(size=(B, 2)),
    )


def as_transition(seq):
    L, B = seq["reward"].shape
    core = np.zeros((L, B, 2), np.float32)
    core[0] = seq["stored"]  # only step 0's stored state is read
    f = lambda x: jnp.asarray(x, jnp.float32)
    return NStepTransition(
        f(seq["obs"]),
        jnp.asarray(seq["action"], jnp.int32),
        f(seq["reward"]),
        jnp.zeros((L, B)),  # the learner uses gamma and the flags, not the stored discount
        f(seq["next_obs"]),
        jnp.asarray(seq["term"]),
        jnp.asarray(seq["trunc"]),
        jnp.ones((L, B), jnp.int32),
        {"core": jnp.asarray(core)},
    )


@pytest.mark.parametrize("burn_in,n,double_q", [(2, 2, True), (0, 3, False), (3, 1, True)])
def test_sequence_loss_by_hand(burn_in, n, double_q):
    """Loss and gradients of R2D2's sequence loss equal a NumPy replay: the state starts from
    the stored one, restarts after an episode end (termination and truncation) inside the
    sequence, the burn-in steps take no loss and pass no gradient, the n-step double-Q targets
    stop at an episode end (bootstrapping from the final observation after a truncation, not
    after a termination) and at the sequence's end."""
    rng = np.random.default_rng(burn_in + n)
    seq, gamma = toy_sequence(rng), 0.9
    scale, w, w_target = 1.3, rng.normal(size=(2, 2)), rng.normal(size=(2, 2))
    initial = lambda num: networks.initial_core_state("gru", 2, num)
    loss_fn = r2d2.sequence_loss(
        r2d2.q_unroll(ToyCore(), initial), dqn.scalar_head("mse"), burn_in, n, double_q
    )
    params = {"params": {"scale": jnp.float32(scale), "w": jnp.asarray(w, jnp.float32)}}
    target = {"params": {"scale": jnp.float32(1.0), "w": jnp.asarray(w_target, jnp.float32)}}
    (value, taken), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, target, as_transition(seq), gamma
    )
    assert taken.shape == (7 - burn_in, 2)
    expected = numpy_loss((scale, scale), w, w_target, seq, burn_in, n, gamma, double_q)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    eps = 1e-6
    d_scale = (
        numpy_loss((scale + eps, scale), w, w_target, seq, burn_in, n, gamma, double_q)
        - numpy_loss((scale - eps, scale), w, w_target, seq, burn_in, n, gamma, double_q)
    ) / (2 * eps)
    np.testing.assert_allclose(grads["params"]["scale"], d_scale, rtol=1e-4, atol=1e-6)
    d_w = np.zeros((2, 2))
    for i in np.ndindex(2, 2):
        up, down = w.copy(), w.copy()
        up[i] += eps
        down[i] -= eps
        d_w[i] = (
            numpy_loss((scale, scale), up, w_target, seq, burn_in, n, gamma, double_q)
            - numpy_loss((scale, scale), down, w_target, seq, burn_in, n, gamma, double_q)
        ) / (2 * eps)
    np.testing.assert_allclose(grads["params"]["w"], d_w, rtol=1e-4, atol=1e-6)


SMALL = dict(
    recurrent="lstm",
    core_size=8,
    hidden_sizes=(8,),
    num_envs=4,
    steps_per_iteration=4,
    updates_per_iteration=1,
    batch_size=8,
    buffer_size=4 * 64,
    learning_starts=4 * 60,
    sequence_length=8,
    burn_in=2,
    n_step=2,
    total_steps=4 * 4 * 20,
)


def built_r2d2(**overrides):
    config = experiment.make_config("dqn", "CartPole-v1", **{**SMALL, **overrides})
    env, params = jrl.envs.make("CartPole-v1")
    return dqn.build(config, env, params), config


def test_stored_states_restart_with_every_episode_and_replay_from_the_first():
    """2 vmapped seeds, 40 steps of 4 CartPole envs before learning starts: every stored step
    holds the core state it was acted from, which is the initial (zero) state exactly on an
    episode's first step; replayed by the learner's unroll from the first stored state (with
    resets where episodes start) the network reaches the stored state of a later step, and
    after the last step the loop's acting state."""
    built, _ = built_r2d2()
    algorithm = built.algorithm
    state = jax.jit(jax.vmap(algorithm.init))(jax.random.split(jax.random.key(0), 2))
    step = jax.jit(jax.vmap(algorithm.step))
    for _ in range(10):
        state, metrics = step(state)
    assert (np.asarray(metrics["train/updates"]) == 0).all()  # acted with the initial params
    buffer = state.buffer_state
    assert (np.asarray(buffer.size) == 40).all()
    items = jax.tree.map(lambda x: x[:, :40], buffer.storage)  # [2 seeds, T=40, N=4, ...]
    c, h = items.extras["core"]
    done = np.asarray(items.terminated | items.truncated)
    first = np.concatenate([np.ones_like(done[:, :1]), done[:, :-1]], axis=1)
    assert done.any() and first.sum() > 8
    for leaf in (np.asarray(c), np.asarray(h)):
        assert (leaf[first] == 0).all() and (np.abs(leaf[~first]).max(axis=-1) > 0).all()
    initial = lambda n: networks.initial_core_state("lstm", 8, n)
    unroll = r2d2.q_unroll(built.network, initial)
    for k in (25, 40):
        seq = jax.tree.map(lambda x: x[:, :k], items)
        start = jnp.asarray(first[:, :k]).at[:, 0].set(False)
        stored = jax.tree.map(lambda x: x[:, 0], seq.extras["core"])
        _, _, (c_k, h_k) = jax.vmap(unroll)(
            state.agent_state.params, stored, seq.observation, seq.next_observation, start
        )
        if k == 40:  # the loop's acting state: reset where the last step ended an episode
            end = done[:, -1]
            np.testing.assert_allclose(
                np.asarray(h_k)[~end], state.acting_state[1][~end], atol=1e-6
            )
            assert (np.asarray(state.acting_state[1])[end] == 0).all()
        else:
            keep = ~first[:, k]
            assert keep.any()
            np.testing.assert_allclose(np.asarray(c_k)[keep], np.asarray(c[:, k])[keep], atol=1e-6)
            np.testing.assert_allclose(np.asarray(h_k)[keep], np.asarray(h[:, k])[keep], atol=1e-6)


def test_config_and_contract_checks(tmp_path):
    with pytest.raises(ValueError, match="recurrent must be"):
        built_r2d2(recurrent="rnn")
    with pytest.raises(ValueError, match="burn_in must lie"):
        built_r2d2(burn_in=8)
    for bad in (dict(distribution="categorical"), dict(noisy=True), dict(prioritized=True)):
        with pytest.raises(ValueError, match="scalar Q head"):
            built_r2d2(**bad)
    with pytest.raises(ValueError, match="multiples of num_envs"):
        built_r2d2(batch_size=6)
    with pytest.raises(ValueError, match="cannot hold a sequence"):
        built_r2d2(buffer_size=4 * 6)
    with pytest.raises(ValueError, match="at least sequence_length"):
        built_r2d2(learning_starts=4 * 8 - 1)
    built_r2d2(learning_starts=4 * 8)
    built, config = built_r2d2(recurrent="gru", n_step=3, learning_starts=4 * 8)
    # n steps are summed inside the sequences: no n-step warm-up, so updates start on time
    assert config.num_updates == 20 - 1
    with pytest.raises(TypeError, match="core state"):
        built.agent.act(None, None, None)
    proc = subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", "train", "dqn", "--recurrent", "gru", "--noisy"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=600,
    )
    assert proc.returncode == 2 and "scalar Q head" in proc.stderr, proc.stderr[-2000:]


def leaves(state):
    state = state.replace(key=jax.random.key_data(state.key))
    return [np.asarray(x) for x in jax.tree.leaves(state)]


def test_recurrent_dqn_resumes_exactly(tmp_path):
    """Stopped mid-run and resumed from its checkpoint (core states, replayed sequences and the
    target network included), an R2D2 run ends with the same bits as the run that never
    stopped; its run folder's greedy policy is evaluated episode by episode from the initial
    state."""
    kw = dict(SMALL, recurrent="gru", learning_starts=4 * 16, num_reports=5, **QUIET)
    whole = jrl.train("dqn", "CartPole-v1", 2, out=tmp_path / "whole", **kw)
    with pytest.raises(experiment.TrainingInterrupted):
        jrl.train("dqn", "CartPole-v1", 2, out=tmp_path / "split", stop_at_steps=4 * 4 * 8, **kw)
    resumed = experiment.resume(tmp_path / "split", **QUIET)
    for x, y in zip(leaves(whole.final_state), leaves(resumed.final_state), strict=True):
        np.testing.assert_array_equal(x, y)
    for k in whole.metrics:
        np.testing.assert_array_equal(whole.metrics[k], resumed.metrics[k], err_msg=k)
    assert (np.asarray(whole.metrics["train/updates"])[:, -1] == 17).all()  # iterations 4..20
    core = np.asarray(resumed.final_state.acting_state)
    assert core.shape == (2, 4, 8) and np.abs(core).max() > 0
    stats = experiment.evaluate_run(tmp_path / "split", episodes=2)
    assert all(np.isfinite(r["mean"]) for r in stats["runs"])


SHARDED = """
import sys, jax, numpy as np, jrl
devices = int(sys.argv[1]) or None
kw = dict(recurrent="lstm", core_size=8, hidden_sizes=(8,), num_envs=8, steps_per_iteration=4,
          updates_per_iteration=2, batch_size=16, buffer_size=8 * 32, learning_starts=8 * 8,
          sequence_length=6, burn_in=2, n_step=2, target_update_interval=3,
          total_steps=8 * 4 * 8)
r = jrl.train("dqn", "CartPole-v1", 2, seed=5, devices=devices, progress=False, **kw)
c, h = r.final_state.acting_state
np.savez(sys.argv[2], c=np.asarray(c), h=np.asarray(h),
         first=np.asarray(r.final_state.buffer_state.storage.extras["core"][1]),
         length=np.asarray(r.final_state.env_state.episode_length),
         params=np.concatenate([np.reshape(x, (2, -1)) for x in jax.tree.leaves(r.final_params)],
                               axis=1))
"""


def test_reset_and_device_count_invariance_on_two_devices(tmp_path):
    """2 seeds vmapped over 8 CartPole envs, on 1 and on 2 (fake) devices: after the last step
    every env whose episode ended there holds the initial (zero) core state and every other
    env a non-zero one, and the 2-device run ends with the 1-device parameters (each device
    replays the same sequences of its envs as one device would)."""
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
        fresh = d["length"] == 0
        for leaf in (d["c"], d["h"]):
            assert (leaf[fresh] == 0).all()
            assert (np.abs(leaf[~fresh]).max(axis=-1) > 0).all()
    # the sharded run's final state is device 0's view: the first 4 of the 8 envs
    np.testing.assert_array_equal(out[0]["length"][:, :4], out[2]["length"])
    np.testing.assert_allclose(out[0]["first"][:, :, :4], out[2]["first"], atol=1e-5)
    diff = np.abs(out[0]["params"] - out[2]["params"]).max()
    assert diff <= 1e-5, diff
    seeds = out[0]["params"]  # [2 seeds, all parameters]
    assert np.abs(seeds[0] - seeds[1]).max() > 1e-3  # the comparison is not vacuous


def greedy_returns(run_dir, episodes=64):
    stats = experiment.evaluate_run(run_dir, episodes=episodes)
    return np.array([r["mean"] for r in stats["runs"]])


MEMORY = dict(
    core_size=16,
    hidden_sizes=(16,),
    num_envs=8,
    batch_size=16,
    buffer_size=8 * 250,
    learning_starts=8 * 40,
    total_steps=12_000,
    steps_per_iteration=4,
    updates_per_iteration=1,
    sequence_length=16,
    burn_in=4,
    n_step=3,
    learning_rate=1e-3,
    target_update_interval=100,
    exploration_fraction=0.3,
    epsilon_end=0.05,
)


@pytest.mark.learning
def test_r2d2_solves_memory_chain_and_feed_forward_dqn_cannot(tmp_path, learning_seed):
    """MemoryChain-v0 (length 10), 2 seeds: with a GRU, 48k steps, every greedy episode returns
    the optimum 1; feed-forward, 12k steps, the query looks the same whichever cue came first,
    so its expected return is 0 and it stays below 0.5 (measured 0.0 and -0.125).

    With a GRU, 2026-12-02: 6 of 6 seeds at 12k steps, 3 of 6 at 6k; 2026-12-04 (BENCHMARKS.md
    "Learning reach"), seeds 1000-1007: 5 of 8 at 12k steps (the others 0.06, -0.03, -0.13:
    a pair of them fails), 8 of 8 at 24k; but at 24k seed 27 (0.125) and 1 of seeds
    2000-2007 (-0.06) fail. At 48k: 34 of 34 (26-35, 2000-2007, 3000-3015). So 48k."""
    gru = dict(MEMORY, recurrent="gru", total_steps=48_000, seed=learning_seed)
    jrl.train("dqn", "MemoryChain-v0", 2, out=tmp_path / "gru", **gru, **QUIET)
    np.testing.assert_array_equal(greedy_returns(tmp_path / "gru"), [1.0, 1.0])
    ff = dict(MEMORY, hidden_sizes=(16, 16), seed=learning_seed)
    jrl.train("dqn", "MemoryChain-v0", 2, out=tmp_path / "ff", **ff, **QUIET)
    assert (greedy_returns(tmp_path / "ff") < 0.5).all()


def test_sequence_q_targets_mask_the_bootstrap_action():
    """With an action mask on the successors, the double-Q bootstrap action is the online
    network's best *valid* action (here the masked-out best one would give another target)."""
    q_online = jnp.array([[[5.0, 1.0, 2.0]], [[0.0, 3.0, 1.0]]])  # [L=2, B=1, A=3]
    q_target = jnp.array([[[10.0, 20.0, 30.0]], [[40.0, 50.0, 60.0]]])
    mask = jnp.array([[[False, True, True]], [[True, True, False]]])
    zeros = jnp.zeros((2, 1), bool)
    reward = jnp.array([[1.0], [2.0]])
    got = r2d2.sequence_q_targets(q_online, q_target, reward, zeros, zeros, 0.5, 1, True, mask)
    np.testing.assert_allclose(got, [[1.0 + 0.5 * 30.0], [2.0 + 0.5 * 50.0]])
    got = r2d2.sequence_q_targets(q_online, q_target, reward, zeros, zeros, 0.5, 1, True)
    np.testing.assert_allclose(got, [[1.0 + 0.5 * 10.0], [2.0 + 0.5 * 50.0]])

"""The acting and learning steps of the replay agents (agents/value/dqn.py's epsilon-greedy
``act``, agents/value/r2d2.py's ``learn``) against values worked out in the test: which key
the exploration draws come from, and one R2D2 update's loss, Q metric and update count on a
batch-major sample of sequences (tools/mutation.py's targets)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import jrl.envs
import numpy as np
from jrl.agents.value import dqn, r2d2

from jrl.app import api as experiment
from jrl.core import parallel
from jrl.parts import buffers
from jrl.parts.nstep import NStepTransition


def test_epsilon_greedy_explores_with_the_act_key_itself():
    """A network without noise needs no key of its own, so DQN's ``act`` hands its key whole to
    the exploration: with epsilon 1 every env ``i`` takes the argmax of uniforms 1..A of the
    ``A + 1`` drawn from ``local_keys(key, N)[i]`` (draw 0 decides to explore)."""
    cfg = experiment.make_config("dqn", "CartPole-v1", epsilon_start=1.0, epsilon_end=1.0)
    env, params = jrl.envs.make("CartPole-v1")
    built = dqn.build(cfg, env, params)
    state = built.agent.init(jax.random.key(0), built.spec)
    key = jax.random.key(7)
    actions, _ = built.agent.act(state, jnp.zeros((16, 4)), key)
    u = np.asarray(jax.vmap(lambda k: jax.random.uniform(k, (3,)))(parallel.local_keys(key, 16)))
    want = np.argmax(u[:, 1:], axis=1)
    assert set(want.tolist()) == {0, 1}
    np.testing.assert_array_equal(actions, want)


class ToyCore(nn.Module):
    """``h' = 0.5 h + scale * obs[:2]``, ``q = h' @ w``: simple enough to replay in NumPy."""

    def setup(self):
        self.scale = self.param("scale", lambda k: jnp.ones(()))
        self.w = self.param("w", lambda k: jnp.zeros((2, 2)))

    def __call__(self, state, obs):
        state, out = self.core_step(state, self.embed(obs))
        return state, self.q_values(out)

    def embed(self, obs):
        return self.scale * obs[..., :2]

    def core_step(self, h, x):
        h = 0.5 * h + x
        return h, h

    def q_values(self, out):
        return out @ self.w


def test_r2d2_learn_on_batch_major_sequences_by_hand():
    """One ``learn`` on B = 3 sequences of L = 5 steps, stored batch-major ``[B, L]`` as the
    trajectory buffer samples them: no burn-in, 1-step targets, no episode end, online and
    target networks equal (scale 1.3, w fixed). Replayed per sequence from its stored state in
    float64: ``h_t = 0.5 h_{t-1} + 1.3 obs_t``, ``q_t = h_t w``, the target ``r_t + gamma
    max_a (0.5 h_t + 1.3 next_obs_t) w``; the loss is the mean of 0.5 (q_t[a_t] - target)^2
    over the 15 steps, ``train/q`` the mean of the 15 taken q_t[a_t], and ``num_updates`` goes
    from 0 to 1."""
    config = experiment.make_config(
        "dqn",
        "CartPole-v1",
        recurrent="gru",
        core_size=2,
        hidden_sizes=(4,),
        num_envs=3,
        batch_size=3,
        buffer_size=3 * 16,
        learning_starts=3 * 8,
        sequence_length=5,
        burn_in=0,
        n_step=1,
        total_steps=3 * 64,
    )
    env, env_params = jrl.envs.make("CartPole-v1")
    spec = dqn.build(config, env, env_params).spec
    agent = r2d2.make_r2d2(ToyCore(), config, dqn.scalar_head("mse"))
    state = agent.init(jax.random.key(0), spec)
    rng = np.random.default_rng(0)
    B, L = 3, 5
    w = rng.normal(size=(2, 2))
    params = {"params": {"scale": jnp.float32(1.3), "w": jnp.asarray(w, jnp.float32)}}
    state = state.replace(params=params, target_params=params)
    gamma = float(state.hparams.gamma)

    obs, next_obs = rng.normal(size=(B, L, 2)), rng.normal(size=(B, L, 2))
    reward, action = rng.normal(size=(B, L)), rng.integers(0, 2, size=(B, L))
    stored = rng.normal(size=(B, 2))
    core = np.zeros((B, L, 2))
    core[:, 0] = stored  # only step 0's stored state is read
    f = lambda x: jnp.asarray(x, jnp.float32)
    items = NStepTransition(
        f(obs),
        jnp.asarray(action, jnp.int32),
        f(reward),
        jnp.zeros((B, L)),
        f(next_obs),
        jnp.zeros((B, L), bool),
        jnp.zeros((B, L), bool),
        jnp.ones((B, L), jnp.int32),
        {"core": f(core)},
    )
    sample = buffers.Sample(items, jnp.arange(B, dtype=jnp.int32), jnp.ones(B, jnp.float32))

    losses, taken = [], []
    for b in range(B):
        h = stored[b]
        for t in range(L):
            h = 0.5 * h + 1.3 * obs[b, t]
            q = h @ w
            target = reward[b, t] + gamma * np.max((0.5 * h + 1.3 * next_obs[b, t]) @ w)
            taken.append(q[action[b, t]])
            losses.append(0.5 * (q[action[b, t]] - target) ** 2)

    learned = agent.learn(state, sample, jax.random.key(1))
    np.testing.assert_allclose(learned.metrics["train/loss"], np.mean(losses), rtol=1e-5)
    np.testing.assert_allclose(learned.metrics["train/q"], np.mean(taken), rtol=1e-5)
    assert int(learned.agent_state.num_updates) == 1

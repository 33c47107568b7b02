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
import numpy as np
import pytest

import jrl
import jrl.envs
from jrl import experiment, loops, networks
from jrl.agents import dqn
from jrl.buffers import NStepTransition

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
    loss_fn = dqn.sequence_loss(
        dqn.q_unroll(ToyCore(), initial), dqn.scalar_head("mse"), burn_in, n, double_q
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

"""Exact unroll of MuZero's model along replayed sequences (agents/search/muzero.py
``_model_unroll``) with a linear stand-in network: the latents, the outputs at every unroll
step, the targets (the value targets from the right inputs, the sign of a two-player
discount, zero past an episode's end) and the halved gradient of each dynamics step, all by
hand (tools/mutation.py's targets)."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.agents.search import muzero

K, N, L, B, D = 2, 2, 6, 2, 3  # unroll steps, td steps, sequence length, batch, latent size


class LinearNet:
    """``h(obs) = w * obs``, ``g(s, a) = (s + a, reward logits)``, ``f(s) = (2 s, s + 1)``."""

    @staticmethod
    def apply(params, *args, method):
        return method(params, *args)

    @staticmethod
    def represent(params, obs):
        return params["w"] * obs

    @staticmethod
    def dynamics(params, latent, action):
        new = latent + action[..., None].astype(jnp.float32)
        return new, jnp.stack([new.sum(-1), -new.sum(-1), 3 * new.sum(-1)], -1)

    @staticmethod
    def predict(params, latent):
        return 2.0 * latent, latent + 1.0


def represent(params, obs):
    return params["w"] * obs


def predict(params, latent):  # (policy logits, scalar value)
    return 2.0 * latent, latent.sum(-1)


def sequences():
    rng = np.random.default_rng(0)
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)
    terminated = np.zeros((L, B), bool)
    truncated = np.zeros((L, B), bool)
    terminated[0, 1] = True  # sequence 1 ends at its first step
    truncated[2, 0] = True  # sequence 0 is cut at step 2
    return SimpleNamespace(
        observation=f(L, B, D),
        next_observation=f(L, B, D),
        action=jnp.asarray(rng.integers(0, 3, (L, B)), jnp.int32),
        reward=f(L, B),
        discount=jnp.asarray(rng.uniform(0.5, 1.0, (L, B)), jnp.float32),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        extras={"root_value": f(L, B), "policy": f(L, B, D)},
    )


@pytest.mark.parametrize("bootstrap", ["network", "root_value"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_unroll_by_hand(bootstrap, sign):
    config = SimpleNamespace(unroll_steps=K, td_steps=N, value_bootstrap=bootstrap)
    unroll = muzero._model_unroll(LinearNet(), represent, predict, config, sign)
    params = {"w": jnp.float32(1.5)}
    seq = sequences()
    out = unroll(params, seq)
    w = 1.5
    obs, nxt, a = np.asarray(seq.observation), np.asarray(seq.next_observation), seq.action
    l0 = w * obs[0]
    l1 = l0 + np.asarray(a[0])[:, None]
    l2 = l1 + np.asarray(a[1])[:, None]
    latents = np.stack([l0, l1, l2])
    np.testing.assert_allclose(out.policy_logits, 2 * latents, rtol=1e-6)
    np.testing.assert_allclose(out.value_logits, latents + 1, rtol=1e-6)
    sums = latents[1:].sum(-1)
    np.testing.assert_allclose(out.reward_logits, np.stack([sums, -sums, 3 * sums], -1), rtol=1e-5)
    np.testing.assert_array_equal(out.policy, seq.extras["policy"][: K + 1])
    # sequence 1 ended at step 0: only unroll step 0 is inside its episode
    alive = np.array([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(out.alive, alive)
    np.testing.assert_allclose(out.reward, alive[:K] * np.asarray(seq.reward[:K]), rtol=1e-6)
    boot = (w * obs).sum(-1) if bootstrap == "network" else np.asarray(seq.extras["root_value"])
    done = np.asarray(seq.terminated | seq.truncated)
    targets = muzero.muzero_value_targets(
        seq.reward, sign * seq.discount, done, jnp.asarray(boot), (w * nxt).sum(-1), N
    )[: K + 1]
    np.testing.assert_allclose(out.value, alive * np.asarray(targets), rtol=1e-5, atol=1e-6)


def test_each_dynamics_step_halves_the_gradient_into_the_latent_before_it():
    """d policy_logits[k] / d w: the latent of step k is reached through k dynamics steps, the
    gradient halved by each step but the last's own output: 2 * obs[0] at k = 0 and 1, half of
    it at k = 2; the targets take no gradient."""
    config = SimpleNamespace(unroll_steps=K, td_steps=N, value_bootstrap="network")
    unroll = muzero._model_unroll(LinearNet(), represent, predict, config, -1.0)
    seq = sequences()
    grad = lambda fn: float(jax.grad(lambda w: fn(unroll({"w": w}, seq)))(jnp.float32(1.5)))
    total = float(np.asarray(seq.observation[0]).sum())
    for k, scale in ((0, 1.0), (1, 1.0), (2, 0.5)):
        np.testing.assert_allclose(
            grad(lambda o: o.policy_logits[k].sum()), 2 * scale * total, rtol=1e-5
        )
    assert grad(lambda o: o.value.sum()) == 0.0
    np.testing.assert_allclose(muzero._scale_gradient(jnp.float32(3.0), 0.25), 3.0, rtol=1e-6)
    np.testing.assert_allclose(
        jax.grad(lambda x: muzero._scale_gradient(x * x, 0.25))(jnp.float32(3.0)), 1.5
    )

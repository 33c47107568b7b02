"""A2C's own code (agents/actor_critic/a2c.py): its loss by hand, and one ``learn`` call against a
NumPy/JAX
reference (GAE, normalised advantages, plain policy gradient, value loss, entropy bonus, one
Adam step)."""

import jax
import jax.numpy as jnp
import jrl.envs
import numpy as np
from jrl.agents.actor_critic import a2c
from jrl.agents.actor_critic.common import GAEHParams, Minibatch

from jrl.ops.action_distributions import Categorical


def hparams(vf_coef=0.5, ent_coef=0.1):
    f = jnp.float32
    return GAEHParams(f(7e-4), f(0.99), f(vf_coef), f(0.95), f(ent_coef))


def test_loss_by_hand():
    """``L = -mean(log pi(a|s) A) + vf_coef * 0.5 mean((V - G)^2) - ent_coef * H``."""
    probs = np.array([[0.25, 0.75], [0.5, 0.5]])
    dist = Categorical(jnp.log(jnp.asarray(probs, jnp.float32)))
    mb = Minibatch(
        observation=jnp.zeros((2, 1)),
        action=jnp.asarray([1, 0]),
        old_log_prob=jnp.zeros(2),
        old_value=jnp.zeros(2),
        advantage=jnp.asarray([2.0, -1.0]),
        target=jnp.asarray([1.0, 3.0]),
    )
    values = jnp.asarray([0.0, 1.0])
    entropy = -(probs * np.log(probs)).sum(axis=1)
    total, m = a2c.a2c_loss(dist, values, jnp.asarray(entropy), mb, hparams(0.25, 0.1))
    pg = -(np.log(0.75) * 2.0 + np.log(0.5) * -1.0) / 2
    v_loss = 0.5 * (1.0 + 4.0) / 2
    np.testing.assert_allclose(m["train/policy_loss"], pg, rtol=1e-6)
    np.testing.assert_allclose(m["train/value_loss"], v_loss, rtol=1e-6)
    np.testing.assert_allclose(m["train/entropy"], entropy.mean(), rtol=1e-6)
    np.testing.assert_allclose(total, pg + 0.25 * v_loss - 0.1 * entropy.mean(), rtol=1e-6)
    # the advantage is a constant of the policy gradient: no gradient flows into it
    grad = jax.grad(
        lambda adv: a2c.a2c_loss(
            dist, values, dist.entropy(), mb.replace(advantage=adv), hparams()
        )[0]
    )(mb.advantage)
    np.testing.assert_array_equal(grad, 0.0)


def test_learn_matches_a_numpy_reference(learn_reference):
    """One update on the whole rollout: the metrics are the reference loss and its parts at the
    parameters before the update, and the update is one Adam step down its gradient."""
    gamma, lam, vf, ent_coef, lr = 0.9, 0.8, 0.5, 0.05, 2e-3
    cfg = a2c.A2CConfig(
        total_steps=16 * 10,
        num_envs=2,
        num_steps=8,
        learning_rate=lr,
        gamma=gamma,
        gae_lambda=lam,
        vf_coef=vf,
        ent_coef=ent_coef,
    )
    env, params = jrl.envs.make("CartPole-v1")
    built = a2c.build(cfg, env, params)
    state = built.agent.init(jax.random.key(0), built.spec)
    batch = learn_reference.rollout(jax.random.key(1))
    net = built.network
    boot = np.asarray(net.apply(state.params, batch.next_observation, method=net.value))
    # learn evaluates the critic on the observations itself: the rollout's own "value"
    # extras (unlike the network's) must not be used
    values = np.asarray(net.apply(state.params, batch.observation, method=net.value))
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    adv, target = learn_reference.gae(
        f64(batch.reward),
        f64(values),
        boot,
        f64(batch.terminated),
        f64(batch.truncated),
        gamma,
        lam,
    )
    a = jnp.asarray(learn_reference.normalize(adv).reshape(-1), jnp.float32)
    g = jnp.asarray(target.reshape(-1), jnp.float32)
    obs, action = batch.observation.reshape(-1, 4), np.asarray(batch.action).reshape(-1)

    def reference(p):
        dist, values = net.apply(p, obs)
        log_p = jax.nn.log_softmax(dist.logits)
        pg = -jnp.mean(log_p[jnp.arange(len(action)), action] * a)
        v_loss = 0.5 * jnp.mean((values - g) ** 2)
        entropy = jnp.mean(-jnp.sum(jnp.exp(log_p) * log_p, axis=-1))
        parts = {"train/policy_loss": pg, "train/value_loss": v_loss, "train/entropy": entropy}
        return pg + vf * v_loss - ent_coef * entropy, parts

    (total, parts), grads = jax.value_and_grad(reference, has_aux=True)(state.params)
    learned = built.agent.learn(state, batch, jax.random.key(2))
    np.testing.assert_allclose(learned.metrics["train/loss"], total, rtol=1e-5, atol=1e-6)
    for name, value in parts.items():
        np.testing.assert_allclose(learned.metrics[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(learned.metrics["train/value_target"], target.mean(), rtol=1e-5)
    step = learn_reference.adam_first_step(grads, lr, cfg.max_grad_norm)
    learn_reference.assert_step(learned.agent_state.params, state.params, step)

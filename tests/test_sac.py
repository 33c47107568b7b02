"""SAC: the actor and temperature losses by hand, one ``learn`` call against a reference
written from the paper, and exact resume (the registry entry and the truncation probe:
tests/test_continuous.py; learning: tests/test_learning.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jrl.agents.continuous import common as continuous
from jrl.agents.continuous import sac

from jrl.app import api as experiment
from jrl.core import spaces
from jrl.parts import buffers, nstep
from jrl.parts.agent import EnvSpec


def test_actor_loss_by_hand():
    log_prob = jnp.array([-1.0, 0.5])
    q = jnp.array([[3.0, 1.0], [2.0, 4.0]])  # min over the critics: 2, 1
    # mean(0.2 * (-1) - 2, 0.2 * 0.5 - 1) = mean(-2.2, -0.9)
    np.testing.assert_allclose(sac.actor_loss(log_prob, q, 0.2), -1.55, rtol=1e-6)
    g_alpha = jax.grad(lambda a: sac.actor_loss(log_prob, q, a))(0.2)
    assert float(g_alpha) == 0.0  # the temperature is not trained by the actor's loss
    g_lp = jax.grad(lambda lp: sac.actor_loss(lp, q, 0.2))(log_prob)
    np.testing.assert_allclose(g_lp, [0.1, 0.1], rtol=1e-6)
    # REDQ's actor: the critics' mean, 2.5 and 2.5: mean(-0.2 - 2.5, 0.1 - 2.5) = -2.55
    np.testing.assert_allclose(sac.actor_loss(log_prob, q, 0.2, "mean"), -2.55, rtol=1e-6)
    g_q = jax.grad(lambda q_: sac.actor_loss(log_prob, q_, 0.2, "mean"))(q)
    np.testing.assert_allclose(g_q, np.full((2, 2), -0.25), rtol=1e-6)


def test_alpha_loss_by_hand():
    """Entropy below the target (log pi high): the loss falls as log alpha rises."""
    log_prob = jnp.array([1.0, 3.0])  # entropy -2 on average, below the target -1
    loss = sac.alpha_loss(jnp.asarray(0.5), log_prob, -1.0)
    # -mean(0.5 * (1 - 1), 0.5 * (3 - 1)) = -0.5
    np.testing.assert_allclose(loss, -0.5, rtol=1e-6)
    g = jax.grad(sac.alpha_loss)(jnp.asarray(0.5), log_prob, -1.0)
    np.testing.assert_allclose(g, -1.0, rtol=1e-6)  # gradient descent raises log alpha
    g_lp = jax.grad(lambda lp: sac.alpha_loss(jnp.asarray(0.5), lp, -1.0))(log_prob)
    np.testing.assert_array_equal(g_lp, 0.0)  # no gradient reaches the policy


LOW, HIGH = np.array([-2.0, 0.0]), np.array([2.0, 1.0])  # a 2-D action space, one asymmetric


def _batch(b=6, obs_dim=3):
    k = jax.random.split(jax.random.key(1), 4)
    return nstep.NStepTransition(
        observation=jax.random.normal(k[0], (b, obs_dim)),
        action=jax.random.uniform(k[1], (b, 2), minval=LOW, maxval=HIGH),
        reward=jax.random.uniform(k[2], (b,), minval=-3.0, maxval=0.0),
        discount=jnp.asarray([0.9, 0.0, 0.9, 0.9, 0.0, 0.9]),
        next_observation=jax.random.normal(k[3], (b, obs_dim)),
        terminated=jnp.asarray([False, True, False, False, True, False]),
        truncated=jnp.asarray([False, False, True, False, False, False]),
        steps=jnp.ones(b, jnp.int32),
    )


def _reference_sample(actor, actor_params, obs, key):
    """A tanh-squashed Gaussian sample in [-1, 1]^2 and its log-density, from the paper's
    formula (standard normals per item, from one key per item)."""
    dist = actor.apply(actor_params, obs)
    eps = jax.vmap(lambda k: jax.random.normal(k, (2,)))(jax.random.split(key, obs.shape[0]))
    u = dist.mean + jnp.exp(dist.log_std) * eps
    gauss = jnp.sum(
        -0.5 * eps**2 - dist.log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1
    )  # log N(u; mean, std)
    return jnp.tanh(u), gauss - jnp.sum(jnp.log(1.0 - jnp.tanh(u) ** 2), axis=-1)


@pytest.mark.parametrize("autotune,redq", [(True, False), (False, False), (True, True)])
def test_learn_matches_a_reference(autotune, redq, learn_reference):
    """One update on a 2-D action space: the critics regress on r + discount (min_n Q'_n(s',
    a') - alpha log pi(a'|s')) with a' from the current actor and the target critics apart
    from the online ones; the actor then descends alpha log pi - min_n Q_n with the updated
    critics; log alpha moves against (log pi + target entropy), target entropy -|A| = -2;
    each is one Adam step; the target critics move by tau. REDQ (``target_critics=2,
    actor_q="mean"``): the bootstrap's minimum over 2 of the 3 critics drawn from the critic
    key's second half, the actor against the critics' mean."""
    lr, tau, alpha0 = 1e-3, 0.5, 0.3
    redq_fields = {"target_critics": 2, "actor_q": "mean"} if redq else {}
    cfg = sac.SACConfig(
        total_steps=1000,
        learning_starts=100,
        num_envs=2,
        num_critics=3,
        hidden_sizes=(16, 16),
        learning_rate=lr,
        tau=tau,
        alpha=alpha0,
        autotune=autotune,
        max_grad_norm=0.0,
        **redq_fields,
    )
    agent, (actor, critic) = cfg.make_agent(continuous.ActionScale(LOW, HIGH), 1)
    spec = EnvSpec(spaces.Box(-np.inf, np.inf, (3,)), spaces.Box(LOW, HIGH))
    state = agent.init(jax.random.key(0), spec)
    other = agent.init(jax.random.key(9), spec)
    state = state.replace(target_critic=other.params["critic"], log_alpha=jnp.asarray(0.2))
    items = _batch()
    key = jax.random.key(5)
    new, metrics, priorities = agent.learn(state, buffers.Sample(items, None, None), key)
    assert priorities is None
    k_critic, k_actor = jax.random.split(key)
    k_sample, k_subset = jax.random.split(k_critic) if redq else (k_critic, None)
    alpha = alpha0 * np.exp(0.2)

    def ref_critic_loss(critic_params):
        a2, lp2 = _reference_sample(actor, state.params["actor"], items.next_observation, k_sample)
        nq = critic.apply(state.target_critic, items.next_observation, a2)  # [3, B]
        if redq:
            nq = nq[np.asarray(jax.random.choice(k_subset, 3, (2,), replace=False))]
        y = items.reward + items.discount * (nq.min(0) - alpha * lp2)
        unit = 2.0 * (items.action - LOW) / (HIGH - LOW) - 1.0
        q = critic.apply(critic_params, items.observation, unit)
        loss = sum(jnp.mean(0.5 * (q[n] - jax.lax.stop_gradient(y)) ** 2) for n in range(3))
        return loss, q

    (loss, q), grads = jax.value_and_grad(ref_critic_loss, has_aux=True)(state.params["critic"])
    np.testing.assert_allclose(metrics["train/critic_loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["train/q"], q.mean(), rtol=1e-5)
    learn_reference.assert_step(
        new.params["critic"],
        state.params["critic"],
        learn_reference.adam_first_step(grads, lr, 0.0, eps=1e-5),
    )

    def ref_actor_loss(actor_params):
        a, lp = _reference_sample(actor, actor_params, items.observation, k_actor)
        q = critic.apply(new.params["critic"], items.observation, a)
        return jnp.mean(alpha * lp - (q.mean(0) if redq else q.min(0))), lp

    (a_loss, lp), grads = jax.value_and_grad(ref_actor_loss, has_aux=True)(state.params["actor"])
    np.testing.assert_allclose(metrics["train/actor_loss"], a_loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["train/entropy"], -lp.mean(), rtol=1e-5)
    learn_reference.assert_step(
        new.params["actor"],
        state.params["actor"],
        learn_reference.adam_first_step(grads, lr, 0.0, eps=1e-5),
    )
    # the temperature: d/d log_alpha of -mean(log_alpha (log pi - |A|)) = -mean(log pi - 2)
    g = -float(jnp.mean(lp - 2.0))
    np.testing.assert_allclose(metrics["train/alpha_loss"], np.log(alpha) * g, rtol=1e-5)
    step = -lr * g / (abs(g) + 1e-5) if autotune else 0.0
    np.testing.assert_allclose(float(new.log_alpha) - 0.2, step, rtol=2e-3, atol=1e-7)
    np.testing.assert_allclose(metrics["train/alpha"], alpha, rtol=1e-6)
    for t, old_t, p in zip(
        jax.tree.leaves(new.target_critic),
        jax.tree.leaves(state.target_critic),
        jax.tree.leaves(new.params["critic"]),
    ):
        np.testing.assert_allclose(t, tau * p + (1 - tau) * old_t, rtol=1e-5, atol=1e-7)
    assert int(new.num_updates) == 1


def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path):
    """2 seeds, a short Pendulum run stopped at a third and resumed: the same bits."""
    kw = dict(total_steps=900, learning_starts=200, buffer_size=900, hidden_sizes=(16, 16))
    whole = experiment.train(
        "sac", "Pendulum-v1", 2, out=tmp_path / "whole", progress=False, num_reports=6, **kw
    )
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train(
            "sac",
            "Pendulum-v1",
            2,
            out=tmp_path / "split",
            stop_at_steps=300,
            progress=False,
            num_reports=6,
            **kw,
        )
    resumed = experiment.resume(tmp_path / "split", progress=False)
    for x, y in zip(jax.tree.leaves(whole.final_params), jax.tree.leaves(resumed.final_params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for k in whole.metrics:
        np.testing.assert_array_equal(whole.metrics[k], resumed.metrics[k], err_msg=k)

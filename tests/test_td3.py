"""TD3 and DDPG (one agent, jrl.continuous.make_deterministic): one ``learn`` call against a
reference written from the papers (target policy smoothing, clipped double Q, delayed actor
and target updates; DDPG: one critic, no smoothing, no delay), exploration noise, and exact
resume. Learning: tests/test_learning.py; truncation probe: tests/test_continuous.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jrl.agents
import jrl.envs as jrl_envs
from jrl import buffers, experiment


def _batch(b=6, obs_dim=3):
    k = jax.random.split(jax.random.key(1), 4)
    return buffers.NStepTransition(
        observation=jax.random.normal(k[0], (b, obs_dim)),
        action=jax.random.uniform(k[1], (b, 1), minval=-2.0, maxval=2.0),  # Pendulum's bounds
        reward=jax.random.uniform(k[2], (b,), minval=-3.0, maxval=0.0),
        discount=jnp.asarray([0.9, 0.0, 0.9, 0.9, 0.0, 0.9]),
        next_observation=jax.random.normal(k[3], (b, obs_dim)),
        terminated=jnp.asarray([False, True, False, False, True, False]),
        truncated=jnp.asarray([False, False, True, False, False, False]),
        steps=jnp.ones(b, jnp.int32),
    )


def _built(agent, **kw):
    cfg = experiment.make_config(
        agent,
        "Pendulum-v1",
        total_steps=1000,
        learning_starts=100,
        num_envs=2,
        buffer_size=1000,
        hidden_sizes=(16, 16),
        max_grad_norm=0.0,
        **kw,
    )
    env, params = jrl_envs.make("Pendulum-v1")
    return jrl.agents.get(agent).build(cfg, env, params)


def _state(built):
    """Target networks apart from the online ones; the target actor's weights scaled up, so
    its tanh saturates at the bounds, where the smoothed action must be clipped back."""
    state = built.agent.init(jax.random.key(0), built.spec)
    target = built.agent.init(jax.random.key(9), built.spec).params
    target = {**target, "actor": jax.tree.map(lambda x: 20.0 * x, target["actor"])}
    return state.replace(target_params=target)


@pytest.mark.parametrize("agent,actor_due", [("td3", True), ("td3", False), ("ddpg", True)])
def test_learn_matches_a_reference(agent, actor_due, learn_reference):
    """The critics regress on r + discount min_n Q'_n(s', clip(mu'(s') + clip(0.2 eps, -0.1,
    0.1), -1, 1)) (DDPG: one critic, no smoothing noise): one Adam step. On an update whose
    count is a multiple of policy_delay the actor ascends Q_0(s, mu(s)) of the updated critics
    (one Adam step) and both targets move by tau; on the others neither moves."""
    lr, tau = 1e-3, 0.5
    built = _built(agent, learning_rate=lr, tau=tau, noise_clip=0.1)
    actor, critic = built.network
    state = _state(built)
    delay = {"td3": 2, "ddpg": 1}[agent]
    num_critics = {"td3": 2, "ddpg": 1}[agent]
    policy_noise = {"td3": 0.2, "ddpg": 0.0}[agent]
    state = state.replace(num_updates=jnp.asarray(delay - 1 if actor_due else 0, jnp.int32))
    items = _batch()
    key = jax.random.key(5)
    new, metrics, _ = built.agent.learn(state, buffers.Sample(items, None, None), key)
    assert int(new.num_updates) == int(state.num_updates) + 1

    def ref_critic_loss(critic_params):
        eps = jax.vmap(lambda k: jax.random.normal(k, (1,)))(jax.random.split(key, 6))
        mu_next = actor.apply(state.target_params["actor"], items.next_observation)
        a2 = jnp.clip(mu_next + jnp.clip(policy_noise * eps, -0.1, 0.1), -1.0, 1.0)
        nq = critic.apply(state.target_params["critic"], items.next_observation, a2)
        assert nq.shape == (num_critics, 6)
        y = items.reward + items.discount * nq.min(0)
        q = critic.apply(critic_params, items.observation, items.action / 2.0)  # unit actions
        n = len(q)
        return sum(jnp.mean(0.5 * (q[i] - jax.lax.stop_gradient(y)) ** 2) for i in range(n)), q

    (loss, q), grads = jax.value_and_grad(ref_critic_loss, has_aux=True)(state.params["critic"])
    np.testing.assert_allclose(metrics["train/critic_loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["train/q"], q.mean(), rtol=1e-5)
    learn_reference.assert_step(
        new.params["critic"], state.params["critic"], learn_reference.adam_first_step(grads, lr, 0)
    )
    if not actor_due:
        for x, y in zip(
            jax.tree.leaves(new.params["actor"]), jax.tree.leaves(state.params["actor"])
        ):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(jax.tree.leaves(new.target_params), jax.tree.leaves(state.target_params)):
            np.testing.assert_array_equal(x, y)
        return

    def ref_actor_loss(actor_params):
        a = actor.apply(actor_params, items.observation)
        return -jnp.mean(critic.apply(new.params["critic"], items.observation, a)[0])

    a_loss, grads = jax.value_and_grad(ref_actor_loss)(state.params["actor"])
    np.testing.assert_allclose(metrics["train/actor_loss"], a_loss, rtol=1e-5)
    learn_reference.assert_step(
        new.params["actor"], state.params["actor"], learn_reference.adam_first_step(grads, lr, 0)
    )
    for t, old_t, p in zip(
        jax.tree.leaves(new.target_params),
        jax.tree.leaves(state.target_params),
        jax.tree.leaves(new.params),
    ):
        np.testing.assert_allclose(t, tau * p + (1 - tau) * old_t, rtol=1e-5, atol=1e-7)


def test_exploration_noise_and_the_greedy_policy():
    """After the first update the behaviour action is mu(s) + 0.1 N(0, 1) clipped, in the env's
    bounds; the greedy policy is mu(s) rescaled; before it the actions are uniform."""
    built = _built("td3", exploration_noise=0.1)
    state = _state(built).replace(num_updates=jnp.ones((), jnp.int32))
    obs = jnp.broadcast_to(jnp.array([0.3, -0.2, 0.5]), (4096, 3))
    greedy = built.agent.policy(state.params, obs, None)
    action, _ = built.agent.act(state, obs, jax.random.key(2))
    noise = (np.asarray(action) - np.asarray(greedy)) / 2.0  # in units of the half-range
    assert float(jnp.abs(action).max()) <= 2.0
    assert abs(noise.mean()) < 0.01 and 0.09 < noise.std() < 0.11
    warm, _ = built.agent.act(
        state.replace(num_updates=jnp.zeros((), jnp.int32)), obs, jax.random.key(2)
    )
    assert 1.0 < float(jnp.std(warm)) < 1.3  # uniform on [-2, 2]: std 4 / sqrt(12) = 1.15


def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path):
    """2 seeds of TD3 on Pendulum stopped at a third (between delayed actor updates) and
    resumed: the same bits."""
    kw = dict(total_steps=900, learning_starts=200, buffer_size=900, hidden_sizes=(16, 16))
    whole = experiment.train(
        "td3", "Pendulum-v1", 2, out=tmp_path / "whole", progress=False, num_reports=6, **kw
    )
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train(
            "td3",
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

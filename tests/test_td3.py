"""TD3 and DDPG (one agent, jrl.agents.continuous.common.make_deterministic): one ``learn`` call
against a
reference written from the papers (target policy smoothing, clipped double Q, delayed actor
and target updates; DDPG: one critic, no smoothing, no delay), exploration noise, and exact
resume. Learning: tests/test_learning.py; truncation probe: tests/test_continuous.py."""

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs as jrl_envs
import numpy as np
import pytest

from jrl.app import api as experiment
from jrl.parts import buffers, nstep


def _batch(b=6, obs_dim=3):
    k = jax.random.split(jax.random.key(1), 4)
    return nstep.NStepTransition(
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


@pytest.mark.parametrize(
    "agent,actor_due,subset",
    [("td3", True, 0), ("td3", False, 0), ("ddpg", True, 0), ("td3", True, 2)],
)
def test_learn_matches_a_reference(agent, actor_due, subset, learn_reference):
    """The critics regress on r + discount min_n Q'_n(s', clip(mu'(s') + clip(0.2 eps, -0.1,
    0.1), -1, 1)) (DDPG: one critic, no smoothing noise): one Adam step. On an update whose
    count is a multiple of policy_delay the actor ascends Q_0(s, mu(s)) of the updated critics
    (one Adam step) and both targets move by tau; on the others neither moves. With
    ``target_critics=2`` of 4 critics the minimum runs over the 2 rows drawn from the update
    key's second half (the smoothing noise from its first)."""
    lr, tau = 1e-3, 0.5
    extra = {"num_critics": 4, "target_critics": subset} if subset else {}
    built = _built(agent, learning_rate=lr, tau=tau, noise_clip=0.1, **extra)
    actor, critic = built.network
    state = _state(built)
    delay = {"td3": 2, "ddpg": 1}[agent]
    num_critics = 4 if subset else {"td3": 2, "ddpg": 1}[agent]
    policy_noise = {"td3": 0.2, "ddpg": 0.0}[agent]
    state = state.replace(num_updates=jnp.asarray(delay - 1 if actor_due else 0, jnp.int32))
    items = _batch()
    key = jax.random.key(5)
    new, metrics, _ = built.agent.learn(state, buffers.Sample(items, None, None), key)
    assert int(new.num_updates) == int(state.num_updates) + 1

    k_noise, k_subset = jax.random.split(key) if subset else (key, None)

    def ref_critic_loss(critic_params):
        eps = jax.vmap(lambda k: jax.random.normal(k, (1,)))(jax.random.split(k_noise, 6))
        mu_next = actor.apply(state.target_params["actor"], items.next_observation)
        a2 = jnp.clip(mu_next + jnp.clip(policy_noise * eps, -0.1, 0.1), -1.0, 1.0)
        nq = critic.apply(state.target_params["critic"], items.next_observation, a2)
        assert nq.shape == (num_critics, 6)
        if subset:
            rows = np.asarray(jax.random.choice(k_subset, 4, (2,), replace=False))
            assert len(set(rows.tolist())) == 2
            nq = nq[rows]
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


@pytest.mark.parametrize("agent,extra", [("td3", {}), ("ddpg", {"noise": "ou"})])
def test_interrupted_and_resumed_run_equals_uninterrupted(agent, extra, tmp_path):
    """2 seeds of TD3 on Pendulum stopped at a third (between delayed actor updates) and
    resumed: the same bits. DDPG with OU noise: stopped mid-episode, the noise state (part of
    the train state) resumes where it was."""
    kw = dict(total_steps=900, learning_starts=200, buffer_size=900, hidden_sizes=(16, 16), **extra)
    whole = experiment.train(
        agent, "Pendulum-v1", 2, out=tmp_path / "whole", progress=False, num_reports=6, **kw
    )
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train(
            agent,
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
    if extra:  # OU noise: the greedy policy has no memory, so it evaluates and exports as is
        from jrl.app.export import export_policy

        for greedy in (True, False):  # the behaviour policy runs the OU noise from 0
            stats = experiment.evaluate_run(tmp_path / "split", episodes=2, greedy=greedy)
            assert np.isfinite(stats["mean"]) and stats["mean_length"] == 200.0, stats
        export_policy(tmp_path / "split", tmp_path / "policy")
        # the noisy one has memory (its OU state): exported with the state as input and output
        export_policy(tmp_path / "split", tmp_path / "noisy", greedy=False)
        from jrl.app.export import load_policy

        noisy = load_policy(tmp_path / "noisy")
        state = noisy.initial_state()
        obs = np.zeros((3,), np.float32)
        action, state = noisy.step(state, obs)
        action, state = noisy.step(state, obs)
        assert np.asarray(action).shape == (1,) and np.all(np.isfinite(np.asarray(action)))


def test_ou_noise_by_hand_per_env_and_restarted_with_every_episode():
    """DDPG with noise="ou": the behaviour action is mu(s) + x' clipped, x' = x - theta x dt +
    sigma sqrt(dt) eps (one OU process per env, sigma = exploration_noise), the greedy policy
    has no memory, and the off-policy loop puts every env's x back to 0 where its episode ends
    (Pendulum: all envs truncate at step 200) and nowhere else."""
    from jrl.agents.continuous.common import item_normals, ou_step

    built = _built("ddpg", noise="ou", exploration_noise=0.3, ou_theta=0.5, ou_dt=0.1)
    rec = built.agent.recurrent
    assert rec is not None and rec.policy is None and not rec.stateful(greedy=True)
    state = _state(built).replace(num_updates=jnp.ones((), jnp.int32))
    obs = jax.random.normal(jax.random.key(3), (2, 3))
    x = jnp.array([[0.4], [-0.2]])
    key = jax.random.key(4)
    action, _, x_new = rec.act(state, x, obs, key)
    eps = item_normals(jax.random.split(key)[0], 2, 1)
    np.testing.assert_allclose(x_new, x - 0.5 * x * 0.1 + 0.3 * np.sqrt(0.1) * eps, rtol=1e-6)
    np.testing.assert_allclose(x_new, ou_step(x, eps, 0.5, 0.3, 0.1), rtol=1e-6)
    mu = built.network[0].apply(state.params["actor"], obs)
    np.testing.assert_allclose(action, 2.0 * jnp.clip(mu + x_new, -1, 1), rtol=1e-6)

    algo = built.algorithm
    train_state = jax.jit(algo.init)(jax.random.key(0))
    np.testing.assert_array_equal(train_state.acting_state, np.zeros((2, 1)))
    step = jax.jit(algo.step)
    noise = []
    for _ in range(201):
        train_state, _ = step(train_state)
        noise.append(np.asarray(train_state.acting_state))
    assert int(train_state.env_steps) == 2 * 201
    assert all(np.abs(n).min() > 0 for n in noise[:199] + noise[200:])  # steps 1-199, 201
    np.testing.assert_array_equal(noise[199], 0.0)  # after step 200: new episodes, x = 0
    assert np.abs(noise[198][0] - noise[198][1]).max() > 1e-3  # one process per env

"""PPO's own code (agents/actor_critic/ppo.py) and the actor-critic update it runs on
(agents/actor_critic/common.py):
the loss put together by hand, and one ``learn`` call against a NumPy/JAX reference written
from the PPO paper (GAE, normalised advantages, clipped surrogate and value loss, entropy
bonus, one Adam step)."""

import math

import jax
import jax.numpy as jnp
import jrl.envs
import numpy as np
import pytest
from jrl.agents.actor_critic import ppo
from jrl.agents.actor_critic.common import Minibatch

from jrl.ops.action_distributions import Categorical


def hparams(vf_coef=0.5, ent_coef=0.1, clip_eps=0.2):
    f = jnp.float32
    return ppo.PPOHParams(
        learning_rate=f(1e-3),
        gamma=f(0.99),
        vf_coef=f(vf_coef),
        gae_lambda=f(0.95),
        ent_coef=f(ent_coef),
        clip_eps=f(clip_eps),
    )


# Three samples, two actions. The policy's probabilities of the actions taken are 0.75, 0.5 and
# 0.2; the behaviour policy's were 0.5, 0.5 and 0.4: ratios 1.5, 1 and 0.5.
PROBS = np.array([[0.25, 0.75], [0.5, 0.5], [0.8, 0.2]])
MB = Minibatch(
    observation=jnp.zeros((3, 1)),
    action=jnp.asarray([1, 0, 1]),
    old_log_prob=jnp.log(jnp.asarray([0.5, 0.5, 0.4])),
    old_value=jnp.asarray([0.5, 0.3, 2.5]),
    advantage=jnp.asarray([1.0, 2.0, -1.0]),
    target=jnp.asarray([2.0, 1.0, 0.0]),
)
VALUES = jnp.asarray([1.0, 0.0, 2.0])
ENTROPY = -(PROBS * np.log(PROBS)).sum(axis=1)  # the caller passes the distribution's entropy

# By hand, clip_eps = 0.2:
# surrogate: min(1.5 * 1, 1.2 * 1) = 1.2; min(1 * 2, 1 * 2) = 2; min(0.5 * -1, 0.8 * -1) = -0.8
PG_LOSS = -(1.2 + 2.0 - 0.8) / 3
CLIP_FRACTION = 2 / 3  # |1.5 - 1| and |0.5 - 1| exceed 0.2
# value, clipped around the old value: V_clip = 0.7, 0.1, 2.3;
# max((V - G)^2, (V_clip - G)^2) = max(1, 1.69), max(1, 0.81), max(4, 5.29)
V_LOSS_CLIPPED = 0.5 * (1.69 + 1.0 + 5.29) / 3
V_LOSS_PLAIN = 0.5 * (1.0 + 1.0 + 4.0) / 3
APPROX_KL = (math.log(0.5 / 0.75) + 0.0 + math.log(0.4 / 0.2)) / 3  # mean(old_log_prob - log_prob)


@pytest.mark.parametrize("clip_value", [True, False])
def test_loss_by_hand(clip_value):
    """``L = L_clip + vf_coef * L_V - ent_coef * H``: a larger entropy lowers the loss."""
    dist = Categorical(jnp.log(jnp.asarray(PROBS, jnp.float32)))
    total, m = ppo.ppo_loss(
        dist, VALUES, jnp.asarray(ENTROPY), MB, hparams(0.5, 0.1), clip_value=clip_value
    )
    v_loss = V_LOSS_CLIPPED if clip_value else V_LOSS_PLAIN
    np.testing.assert_allclose(m["train/policy_loss"], PG_LOSS, rtol=1e-6)
    np.testing.assert_allclose(m["train/value_loss"], v_loss, rtol=1e-6)
    np.testing.assert_allclose(m["train/entropy"], ENTROPY.mean(), rtol=1e-6)
    np.testing.assert_allclose(m["train/clip_fraction"], CLIP_FRACTION, rtol=1e-6)
    np.testing.assert_allclose(m["train/approx_kl"], APPROX_KL, rtol=1e-5)
    expected = PG_LOSS + 0.5 * v_loss - 0.1 * ENTROPY.mean()
    np.testing.assert_allclose(total, expected, rtol=1e-6)


def test_each_coefficient_weighs_its_own_term():
    """The total moves by exactly ``vf_coef`` times the value loss and ``-ent_coef`` times the
    entropy (and the clip range reaches the surrogate)."""
    dist = Categorical(jnp.log(jnp.asarray(PROBS, jnp.float32)))

    def total(**kw):
        return float(ppo.ppo_loss(dist, VALUES, jnp.asarray(ENTROPY), MB, hparams(**kw))[0])

    base = total(vf_coef=0.0, ent_coef=0.0)
    np.testing.assert_allclose(base, PG_LOSS, rtol=1e-6)
    np.testing.assert_allclose(total(vf_coef=2.0, ent_coef=0.0) - base, 2 * V_LOSS_CLIPPED, 1e-5)
    np.testing.assert_allclose(total(vf_coef=0.0, ent_coef=3.0) - base, -3 * ENTROPY.mean(), 1e-5)
    # clip_eps = 0.6: nothing is clipped (ratios 1.5, 1, 0.5 lie in [0.4, 1.6])
    np.testing.assert_allclose(
        total(vf_coef=0.0, ent_coef=0.0, clip_eps=0.6), -(1.5 + 2.0 - 0.5) / 3, rtol=1e-6
    )


def test_entropy_bonus_gradient_raises_the_entropy():
    """With zero advantages and no value loss, a gradient step on the loss makes the policy
    more uniform (the uniform row 1 stays as it is): the entropy bonus is subtracted."""
    mb = MB.replace(advantage=jnp.zeros(3))

    def loss(logits):
        dist = Categorical(logits)
        return ppo.ppo_loss(dist, VALUES, dist.entropy(), mb, hparams(0.0, 0.5))[0]

    logits = jnp.log(jnp.asarray(PROBS, jnp.float32))
    stepped = logits - 0.1 * jax.grad(loss)(logits)
    before, after = Categorical(logits).entropy(), Categorical(stepped).entropy()
    assert bool(jnp.all(after[::2] > before[::2] + 1e-3)), (before, after)
    np.testing.assert_allclose(after[1], before[1], rtol=1e-6)


# --------------------------------------------------------------------------------- learn


@pytest.mark.parametrize("clip_value", [True, False])
def test_learn_matches_a_numpy_reference(clip_value, learn_reference):
    """One epoch of one minibatch: the metrics of ``learn`` are the reference loss and its
    parts at the parameters before the update, and the update is one Adam step down the
    reference loss's gradient."""
    gamma, lam, eps, vf, ent_coef, lr = 0.9, 0.8, 0.2, 0.5, 0.1, 1e-3
    cfg = ppo.PPOConfig(
        total_steps=16 * 10,
        num_envs=2,
        num_steps=8,
        num_epochs=1,
        num_minibatches=1,
        learning_rate=lr,
        gamma=gamma,
        gae_lambda=lam,
        clip_eps=eps,
        vf_coef=vf,
        ent_coef=ent_coef,
        clip_value=clip_value,
        max_grad_norm=0.5,
    )
    env, params = jrl.envs.make("CartPole-v1")
    built = ppo.build(cfg, env, params)
    state = built.agent.init(jax.random.key(0), built.spec)
    batch = learn_reference.rollout(jax.random.key(1))
    net = built.network

    boot = np.asarray(net.apply(state.params, batch.next_observation, method=net.value))
    # learn evaluates the critic on the observations itself (the rollout's own "value" extras,
    # unlike the network's, must not be used): the old values are the critic's before the step
    old_value = np.asarray(net.apply(state.params, batch.observation, method=net.value), np.float64)
    adv, target = learn_reference.gae(
        np.asarray(batch.reward, np.float64),
        old_value,
        boot,
        np.asarray(batch.terminated, np.float64),
        np.asarray(batch.truncated, np.float64),
        gamma,
        lam,
    )
    adv = learn_reference.normalize(adv)
    flat = lambda x: jnp.asarray(np.asarray(x).reshape(-1), jnp.float32)  # noqa: E731
    obs = batch.observation.reshape(-1, 4)
    action, old_lp = np.asarray(batch.action).reshape(-1), flat(batch.extras["log_prob"])
    a, g, v_old = flat(adv), flat(target), flat(old_value)

    def reference(p):
        dist, values = net.apply(p, obs)
        log_p = jax.nn.log_softmax(dist.logits)
        lp = log_p[jnp.arange(len(action)), action]
        ratio = jnp.exp(lp - old_lp)
        pg = -jnp.mean(jnp.minimum(ratio * a, jnp.clip(ratio, 1 - eps, 1 + eps) * a))
        v_err = (values - g) ** 2
        if clip_value:
            v_err = jnp.maximum(v_err, (v_old + jnp.clip(values - v_old, -eps, eps) - g) ** 2)
        v_loss = 0.5 * jnp.mean(v_err)
        entropy = jnp.mean(-jnp.sum(jnp.exp(log_p) * log_p, axis=-1))
        parts = {
            "train/policy_loss": pg,
            "train/value_loss": v_loss,
            "train/entropy": entropy,
            "train/clip_fraction": jnp.mean(jnp.abs(ratio - 1) > eps),
            "train/approx_kl": jnp.mean(old_lp - lp),
        }
        return pg + vf * v_loss - ent_coef * entropy, parts

    (total, parts), grads = jax.value_and_grad(reference, has_aux=True)(state.params)
    learned = built.agent.learn(state, batch, jax.random.key(2))
    m = learned.metrics
    assert 0.0 < float(parts["train/clip_fraction"]) < 1.0  # the case clips some samples only
    np.testing.assert_allclose(m["train/loss"], total, rtol=1e-5, atol=1e-6)
    for name, value in parts.items():
        np.testing.assert_allclose(m[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(m["train/value_target"], target.mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m["train/learning_rate"], lr, rtol=1e-6)
    assert int(learned.agent_state.num_updates) == 1
    step = learn_reference.adam_first_step(grads, lr, 0.5)
    learn_reference.assert_step(learned.agent_state.params, state.params, step)


def test_value_clip_acts_from_the_second_gradient_step(learn_reference):
    """The old values are the critic's with the parameters ``learn`` starts from, so the
    value clip cannot bind on the first gradient step (the values are the old ones there) and
    does from the second on, once a large step has moved them past ``clip_eps``."""

    def learned(clip_value, num_epochs):
        cfg = ppo.PPOConfig(
            total_steps=16 * 10,
            num_envs=2,
            num_steps=8,
            num_epochs=num_epochs,
            num_minibatches=1,
            learning_rate=0.05,
            clip_eps=0.01,
            clip_value=clip_value,
        )
        env, params = jrl.envs.make("CartPole-v1")
        built = ppo.build(cfg, env, params)
        state = built.agent.init(jax.random.key(0), built.spec)
        batch = learn_reference.rollout(jax.random.key(1))
        return built.agent.learn(state, batch, jax.random.key(2)).agent_state.params

    def gap(a, b):
        return max(jax.tree.leaves(jax.tree.map(lambda x, y: float(jnp.abs(x - y).max()), a, b)))

    # one step: equal but for rounding (the minibatch's values and the old ones come from
    # passes of different shapes); two: the clip changes the second step's value gradient
    assert gap(learned(True, 1), learned(False, 1)) < 1e-6
    assert gap(learned(True, 2), learned(False, 2)) > 1e-3

"""Exact unroll of MuZero's model along replayed sequences (agents/search/muzero.py
``_model_unroll``) with a linear stand-in network: the latents, the outputs at every unroll
step, the targets (the value targets from the right inputs, the sign of a two-player
discount, zero past an episode's end) and the halved gradient of each dynamics step, all by
hand (tools/mutation.py's targets)."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from jrl.agents.search import muzero
from jrl.core import spaces
from conftest import gumbel_search_config

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
    config = SimpleNamespace(
        unroll_steps=K, td_steps=N, value_bootstrap=bootstrap, consistency_coef=1.0
    )
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
    # consistency: g's latent after k + 1 steps against h of the observation reached there
    unit = lambda x: x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-8)
    seen = w * obs[1 : K + 1]
    np.testing.assert_allclose(out.similarity, (unit(latents[1:]) * unit(seen)).sum(-1), rtol=1e-5)


def test_each_dynamics_step_halves_the_gradient_into_the_latent_before_it():
    """d policy_logits[k] / d w: the latent of step k is reached through k dynamics steps, the
    gradient halved by each step but the last's own output: 2 * obs[0] at k = 0 and 1, half of
    it at k = 2; the targets take no gradient."""
    config = SimpleNamespace(
        unroll_steps=K, td_steps=N, value_bootstrap="network", consistency_coef=1.0
    )
    unroll = muzero._model_unroll(LinearNet(), represent, predict, config, -1.0)
    seq = sequences()
    grad = lambda fn: float(jax.grad(lambda w: fn(unroll({"w": w}, seq)))(jnp.float32(1.5)))
    total = float(np.asarray(seq.observation[0]).sum())
    for k, scale in ((0, 1.0), (1, 1.0), (2, 0.5)):
        np.testing.assert_allclose(
            grad(lambda o: o.policy_logits[k].sum()), 2 * scale * total, rtol=1e-5
        )
    assert grad(lambda o: o.value.sum()) == 0.0
    # the consistency target h(obs_{k+1}) takes no gradient: with obs[0] = 0 and h affine the
    # unrolled latents do not depend on w, so neither does their similarity to the targets
    affine = lambda params, obs: params["w"] * obs + 1.0
    shifted = muzero._model_unroll(LinearNet(), affine, predict, config, -1.0)
    still = SimpleNamespace(**{**vars(seq), "observation": seq.observation.at[0].set(0.0)})
    sim = lambda w: shifted({"w": w}, still).similarity.sum()
    assert float(jax.grad(sim)(jnp.float32(1.5))) == 0.0
    # ... where a target left to take gradient would move it
    a = np.asarray(still.action)
    fixed = np.cumsum(np.concatenate([np.ones((1, B, D)), np.repeat(a[:K, :, None], D, -1)]), 0)
    unit = lambda x: x / (jnp.linalg.norm(x, axis=-1, keepdims=True) + 1e-8)
    target = lambda w: unit(w * still.observation[1 : K + 1] + 1.0)
    unstopped = lambda w: (unit(jnp.asarray(fixed[1:], jnp.float32)) * target(w)).sum()
    assert float(jax.grad(unstopped)(jnp.float32(1.5))) != 0.0
    np.testing.assert_allclose(sim(jnp.float32(1.5)), unstopped(jnp.float32(1.5)), rtol=1e-5)
    np.testing.assert_allclose(muzero._scale_gradient(jnp.float32(3.0), 0.25), 3.0, rtol=1e-6)
    np.testing.assert_allclose(
        jax.grad(lambda x: muzero._scale_gradient(x * x, 0.25))(jnp.float32(3.0)), 1.5
    )


S = 2  # the stand-in model's support: 2S + 1 = 5 atoms


class _DynamicsNet:
    """A stand-in for the search model: ``g(s, a) = (s + a, reward logits (s + a) * ramp)``,
    ``f(s) = (logits 2 s, value logits s * ramp)``."""

    @staticmethod
    def apply(params, *args, method):
        return method(params, *args)

    @staticmethod
    def dynamics(params, latent, action):
        new = latent + action[:, None].astype(jnp.float32)
        return new, new[:, :1] * jnp.arange(2 * S + 1, dtype=jnp.float32)

    @staticmethod
    def predict(params, latent):
        return 2.0 * latent, latent[:, :1] * jnp.arange(2 * S + 1, dtype=jnp.float32)

    @staticmethod
    def represent(params, obs):
        return obs


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_search_model_discount_is_sign_times_gamma(sign):
    """The search's recurrent function: the latent after the move, f's policy logits, g's
    reward and f's value as scalars, and the discount sign * gamma (gamma = 0.5: -0.5 in a
    two-player game, where the next node is the other player's)."""
    config = SimpleNamespace(support_size=S, gamma=0.5)
    _, _, recurrent_fn = muzero._model(_DynamicsNet(), config, sign)
    latent = jnp.array([[0.5, 1.0, -1.0], [0.0, 0.25, 2.0]])
    action = jnp.array([2, 0], jnp.int32)
    out, new = recurrent_fn(None, jax.random.key(0), action, latent)
    moved = np.asarray(latent) + np.array([[2.0], [0.0]])
    np.testing.assert_array_equal(new, moved)
    np.testing.assert_array_equal(out.discount, [sign * 0.5, sign * 0.5])
    np.testing.assert_array_equal(out.prior_logits, 2 * moved)
    ramp = np.arange(2 * S + 1, dtype=np.float32)
    scalar = muzero.two_hot_to_scalar(jnp.asarray(moved[:, :1] * ramp), S)
    np.testing.assert_array_equal(out.reward, scalar)
    np.testing.assert_array_equal(out.value, scalar)


def _win_with_move_2(params, key, action, latent):
    """Every move ends the episode (discount 0); move 2 is worth 1, the others 0."""
    out = mctx.RecurrentFnOutput(
        reward=jnp.where(action == 2, 1.0, 0.0),
        discount=jnp.zeros(action.shape),
        prior_logits=jnp.zeros((action.shape[0], 3)),
        value=jnp.zeros(action.shape),
    )
    return out, latent


def _runner(considered):
    config = gumbel_search_config(considered)

    def predict(params, latent):  # the prior ranks the moves 0, 1, 2 (logits 2, 1, 0)
        return jnp.tile(jnp.array([2.0, 1.0, 0.0]), (latent.shape[0], 1)), jnp.zeros(
            latent.shape[0]
        )

    run_search = muzero._search_runner(config, lambda p, x: x, predict, _win_with_move_2, 3)
    return jax.jit(run_search, static_argnums=3)  # one compiled search, not op by op


def test_search_from_the_observations_legal_moves_and_the_considered_cap():
    """A greedy Gumbel search of 2 roots over 3 moves ranked 0, 1, 2 by the prior, move 2
    the only one worth anything. Without an action mask every move is legal: considering
    only the prior's best move (max_num_considered_actions = 1) it plays move 0. Considering
    all 3, with a mask that forbids move 2 at root 0, root 0 plays move 0
    (its improved policy gives move 2 nothing) and root 1 finds move 2."""
    x = jnp.zeros((2, 4))
    key = jax.random.key(0)
    action, policy, _ = _runner(1)(None, x, key, True)
    np.testing.assert_array_equal(action, [0, 0])
    obs = {"observation": x, "action_mask": jnp.array([[True, True, False], [True] * 3])}
    action, policy, _ = _runner(3)(None, obs, key, True)
    np.testing.assert_array_equal(action, [0, 2])
    assert policy[0, 2] == 0.0 and policy[1, 2] > 0.5


def _linear_agent(total_steps, updates_per_iteration):
    """The agent over stand-ins: a model whose policy logits are ``w * (1, 0, 0)`` at every
    unroll step, with a policy target (1, -1, 0) that sums to 0, so that the loss is ``-w``
    plus terms free of w: its gradient is -1 at every step, Adam's step is then ``lr_t / (1 +
    eps)`` (m = g, v = g^2 after bias correction, up to ~2e-5 from float32's 1 - 0.999;
    eps = 1e-5), and the steps give the learning rates (to rtol 1e-4). The unroll records the
    sequences it is given."""
    config = muzero.MuZeroConfig(
        anneal_lr=True,
        learning_rate=0.01,
        max_grad_norm=10.0,
        num_envs=1,
        steps_per_iteration=1,
        updates_per_iteration=updates_per_iteration,
        total_steps=total_steps,
        support_size=S,
    )
    seen = []

    def unroll(params, seq):
        seen.append(seq)
        Kp1, B = 3, seq["reward"].shape[1]
        logits = params["w"] * jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0]), (Kp1, B, 3))
        zeros = jnp.zeros((Kp1, B, 2 * S + 1))
        return muzero.Unrolled(
            logits,
            zeros,
            zeros[1:],
            jnp.broadcast_to(jnp.array([1.0, -1.0, 0.0]), (Kp1, B, 3)),
            jnp.zeros((Kp1, B)),
            jnp.zeros((Kp1 - 1, B)),
            jnp.ones((Kp1, B)),
            jnp.zeros((Kp1 - 1, B)),
        )

    network = SimpleNamespace(init=lambda key, x, a: {"w": jnp.float32(0.0)})
    space = spaces.Box(-1.0, 1.0, (2,))
    agent = muzero._muzero_agent(network, config, space, None, unroll)
    return agent, config, seen


def test_learn_steps_on_time_major_sequences_with_the_annealed_learning_rate():
    """Replayed items ``[B = 2, L = 3]`` reach the model as ``[L, B]``. A run of 1 iteration
    x 2 updates: the first takes learning rate 0.01, the second 0.01 * (1 - 1 / 2); with 1
    update in the run, a second update takes 0."""
    eps = 1e-5
    reward = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    sample = SimpleNamespace(items={"reward": reward})
    agent, config, seen = _linear_agent(total_steps=1, updates_per_iteration=2)
    assert config.num_iterations == 1
    state = agent.init(jax.random.key(0), None)
    state, metrics, _ = agent.learn(state, sample, None)
    np.testing.assert_array_equal(seen[0]["reward"], np.asarray(reward).T)
    np.testing.assert_allclose(state.params["w"], 0.01 / (1 + eps), rtol=1e-4)
    np.testing.assert_allclose(metrics["train/policy_loss"], 0.0, atol=1e-7)  # -w at w = 0
    state, _, _ = agent.learn(state, sample, None)
    assert int(state.updates) == 2
    np.testing.assert_allclose(state.params["w"], 0.015 / (1 + eps), rtol=1e-4)

    agent, _, _ = _linear_agent(total_steps=1, updates_per_iteration=1)
    state, _, _ = agent.learn(agent.init(jax.random.key(0), None), sample, None)
    after, _, _ = agent.learn(state, sample, None)
    assert int(state.updates) == 1 and float(after.params["w"]) == float(state.params["w"])


def test_act_explores_and_policy_plays_the_noise_free_searchs_move():
    """``act`` searches with noise and keeps the policy and root value for the replay;
    ``policy`` searches without noise and plays its move."""
    calls = []

    def run_search(params, obs, key, greedy):
        calls.append(greedy)
        return jnp.array([1]), jnp.array([[0.25, 0.75]]), jnp.array([0.5])

    config = muzero.MuZeroConfig(support_size=S)
    agent = muzero._muzero_agent(None, config, None, run_search, None)
    action, extras = agent.act(SimpleNamespace(params=None), None, None)
    np.testing.assert_array_equal(action, [1])
    np.testing.assert_array_equal(extras["policy"], [[0.25, 0.75]])
    np.testing.assert_array_equal(extras["root_value"], [0.5])
    np.testing.assert_array_equal(agent.policy(None, None, None), [1])
    assert calls == [False, True]


def test_init_gives_the_network_a_batch_of_one_observation_and_one_action():
    """The real network is initialised on one zero observation and one action: its
    dynamics concatenates the two, so their batches must agree."""
    from jrl.parts import networks

    network = networks.MuZeroNetwork(3, (8,), 4, S, "relu", 1)
    config = muzero.MuZeroConfig(support_size=S)
    agent = muzero._muzero_agent(network, config, spaces.Box(-1.0, 1.0, (2,)), None, None)
    state = agent.init(jax.random.key(0), None)
    sizes = jax.tree.map(lambda x: x.shape, state.params)
    assert int(state.updates) == 0 and jax.tree.leaves(sizes)

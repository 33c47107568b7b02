"""Exact properties of the tree search (agents/search/mcts.py's ``search`` and
``search_from_roots``) on a bandit: every move ends the game (discount 0) with a known reward,
so each simulation's return is that reward and the root's value is the visit-weighted mean of
the root's own value and the rewards (tools/mutation.py's targets)."""

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from jrl.agents.search.mcts import search, search_from_roots
from jrl.core.types import ACTION_MASK, OBSERVATION

REWARDS = jnp.array([0.2, 1.0, 0.5, 0.9])  # action 3 is illegal below


def bandit(params, key, action, embedding):
    """Every move pays REWARDS[action] and ends the game."""
    b = action.shape[0]
    out = mctx.RecurrentFnOutput(
        reward=REWARDS[action],
        discount=jnp.zeros((b,)),
        prior_logits=jnp.zeros((b, 4)),
        value=jnp.zeros((b,)),
    )
    return out, embedding


def roots(prior, legal, value=0.3, b=2):
    """``b`` copies of one root: its prior logits, value and legal moves."""
    tile = lambda x: jnp.tile(jnp.asarray(x)[None], (b,) + (1,) * jnp.ndim(x))
    keys = jax.random.split(jax.random.key(0), b)
    return keys, tile(prior), tile(jnp.float32(value)), jnp.zeros((b, 1)), tile(legal)


LEGAL = jnp.array([True, True, True, False])


def test_puct_root_value_is_the_visit_weighted_mean_of_value_and_rewards():
    """16 simulations, root value 0.3: value = (0.3 + 16 * sum_a policy_a r_a) / 17, the
    policy being the visit counts / 16 (zero on the illegal move), and the greedy action the
    most visited move."""
    keys, prior, value, emb, legal = roots(jnp.zeros(4), LEGAL)
    action, policy, root_value = search_from_roots(
        "puct", bandit, None, keys, prior, value, emb, legal, 16, greedy=True
    )
    visits = np.asarray(policy) * 16
    np.testing.assert_allclose(visits, np.round(visits), atol=1e-4)
    assert np.all(visits[:, 3] == 0)
    want = (0.3 + (visits * np.asarray(REWARDS)).sum(-1)) / 17
    np.testing.assert_allclose(root_value, want, rtol=1e-5)
    np.testing.assert_array_equal(action, np.argmax(visits, -1))
    assert np.all(np.asarray(action) == 1)  # the best legal move (reward 1.0) is most visited


@pytest.mark.parametrize("kind", ["puct", "gumbel"])
def test_illegal_moves_get_no_weight_even_with_the_highest_prior(kind):
    """The illegal move's prior logit is the largest: it is never picked and gets policy 0;
    the legal prior (here: move 0 far above moves 1 and 2, all rewards equal in effect) is what
    the search follows."""
    keys, prior, value, emb, legal = roots(jnp.array([4.0, 0.0, 0.0, 50.0]), LEGAL)
    for greedy in (True, False):
        action, policy, _ = search_from_roots(
            kind, bandit, None, keys, prior, value, emb, legal, 8, greedy=greedy
        )
        assert np.all(np.asarray(policy)[:, 3] == 0.0)
        np.testing.assert_allclose(np.asarray(policy).sum(-1), 1.0, rtol=1e-5)
        assert np.all(np.asarray(action) != 3)


def test_puct_visits_follow_the_legal_prior():
    """Equal rewards: PUCT's visits follow the prior; move 0's logit 4 above the others draws
    most of 8 greedy simulations (a prior made uniform over the legal moves would not)."""
    global REWARDS
    saved, REWARDS = REWARDS, jnp.array([0.5, 0.5, 0.5, 0.5])
    try:
        keys, prior, value, emb, legal = roots(jnp.array([4.0, 0.0, 0.0, 50.0]), LEGAL)
        _, policy, _ = search_from_roots(
            "puct", bandit, None, keys, prior, value, emb, legal, 8, greedy=True
        )
    finally:
        REWARDS = saved
    assert np.all(np.asarray(policy)[:, 0] > 0.5), policy


@pytest.mark.parametrize("kind", ["puct", "gumbel"])
def test_a_greedy_search_draws_no_noise(kind):
    """greedy: no Dirichlet (PUCT) or Gumbel noise, so other keys give the same result."""
    keys, prior, value, emb, legal = roots(jnp.array([0.5, 0.0, 0.3, 0.0]), LEGAL, b=1)
    outs = [
        search_from_roots(kind, bandit, None, k, prior, value, emb, legal, 6, greedy=True)
        for k in (keys, jax.random.split(jax.random.key(7), 1))
    ]
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def test_search_from_a_game_state_masks_with_the_observations_action_mask():
    """``search`` takes the prior and value from ``evaluate`` and the legal moves from the
    observation's action mask; the returned root value is not exposed, but the policy is the
    visit counts (PUCT) and zero on the illegal move."""

    def evaluate(params, obs):
        return jnp.broadcast_to(jnp.array([0.0, 0.0, 0.0, 50.0]), (1, 4)), jnp.zeros((1,))

    obs = {OBSERVATION: jnp.zeros((2, 1)), ACTION_MASK: jnp.tile(LEGAL[None], (2, 1))}
    keys = jax.random.split(jax.random.key(0), 2)
    action, policy = search(
        "puct", bandit, evaluate, None, keys, jnp.zeros((2, 1)), obs, 16, greedy=True
    )
    assert action.dtype == jnp.int32
    np.testing.assert_array_equal(action, np.argmax(np.asarray(policy), -1))
    assert np.all(np.asarray(policy)[:, 3] == 0.0)
    np.testing.assert_allclose(np.asarray(policy).sum(-1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="search must be one of"):
        search("alphabeta", bandit, evaluate, None, keys, jnp.zeros((2, 1)), obs, 4)


def test_gumbel_root_value_is_the_mean_of_value_and_one_visit_per_legal_move():
    """Gumbel with 3 legal moves, 3 considered and 3 simulations: sequential halving's first
    phase visits each considered move once, so the root's value is the mean of its own value
    0.3 and the rewards 0.2, 1.0 and 0.5: (0.3 + 0.2 + 1.0 + 0.5) / 4 = 0.5 (a child's value
    is 0: every move ends the game)."""
    keys, prior, value, emb, legal = roots(jnp.array([0.5, 0.0, 0.3, 0.0]), LEGAL)
    for greedy in (True, False):
        _, _, root_value = search_from_roots(
            "gumbel",
            bandit,
            None,
            keys,
            prior,
            value,
            emb,
            legal,
            3,
            greedy=greedy,
            max_num_considered_actions=3,
        )
        np.testing.assert_allclose(root_value, [0.5, 0.5], rtol=1e-6)


def test_gumbel_noise_has_scale_one_the_gumbel_max_trick():
    """Non-greedy Gumbel, 2 legal moves with prior logits ln 3 and 0, equal rewards and 2
    simulations (each move visited once, equal Q-values): the action is the argmax of
    logit + Gumbel noise, i.e. a draw from softmax(logits) by the Gumbel-max trick, so move 0
    comes with probability 3 / (3 + 1) = 0.75 (noise of scale 2 would give softmax(logits / 2):
    sqrt 3 / (sqrt 3 + 1) = 0.634). Over 4000 roots the frequency's standard deviation is
    sqrt(0.75 * 0.25 / 4000) = 0.007: the tolerance 0.03 is over 4 of them, 0.116 is 17."""

    def zero_reward(params, key, action, embedding):
        b = action.shape[0]
        out = mctx.RecurrentFnOutput(
            reward=jnp.zeros((b,)),
            discount=jnp.zeros((b,)),
            prior_logits=jnp.zeros((b, 4)),
            value=jnp.zeros((b,)),
        )
        return out, embedding

    legal = jnp.array([True, True, False, False])
    keys, prior, value, emb, legal = roots(jnp.array([np.log(3.0), 0.0, 0.0, 0.0]), legal, b=4000)
    keys = jax.random.split(jax.random.key(11), 4000)
    action, _, _ = jax.jit(
        lambda k: search_from_roots(
            "gumbel",
            zero_reward,
            None,
            k,
            prior,
            value,
            emb,
            legal,
            2,
            max_num_considered_actions=2,
        )
    )(keys)
    action = np.asarray(action)
    assert set(action.tolist()) == {0, 1}
    assert abs((action == 0).mean() - 0.75) < 0.03, (action == 0).mean()

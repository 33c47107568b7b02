"""Checks for jrl.ops.action_distributions against hand-computed and plain-numpy formulas."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.ops.action_distributions import (
    Categorical,
    MultiCategorical,
    Normal,
    TanhNormal,
    epsilon_greedy,
)

KEY = jax.random.key(0)
LOG_2PI = math.log(2 * math.pi)  # 1.837877
identity = lambda f: f  # noqa: E731
VARIANTS = pytest.mark.parametrize("variant", [identity, jax.jit], ids=["eager", "jit"])


def _np_log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _summary(dist, x, key, n_samples=4000):
    """Everything a test reads off a distribution, in one compiled call."""
    samples, sample_log_probs = jax.vmap(dist.sample_and_log_prob)(jax.random.split(key, n_samples))
    return dict(
        log_prob=dist.log_prob(x),
        entropy=dist.entropy(),
        mode=dist.mode(),
        samples=samples,  # [n_samples, ...]
        sample_log_probs=sample_log_probs,  # [n_samples, ...] from sample_and_log_prob
    )


summary = jax.jit(_summary, static_argnames="n_samples")


# --- Categorical ------------------------------------------------------------------------


@VARIANTS
def test_categorical_log_prob_and_entropy(variant):
    # logits [1, 2, 3]: logsumexp = 3 + log(1 + e^-1 + e^-2) = 3 + log(1.503215) = 3.407606
    # log p = [-2.407606, -1.407606, -0.407606]
    dist = Categorical(jnp.array([1.0, 2.0, 3.0]))
    lp = variant(lambda d, x: d.log_prob(x))(dist, jnp.arange(3))
    np.testing.assert_allclose(lp, [-2.407606, -1.407606, -0.407606], rtol=1e-5)
    p = np.exp([-2.407606, -1.407606, -0.407606])  # [0.090031, 0.244728, 0.665241]
    ent = variant(lambda d: d.entropy())(dist)
    np.testing.assert_allclose(ent, -(p * np.log(p)).sum(), rtol=1e-5)
    assert int(dist.mode()) == 2
    # Uniform over n: entropy log(n).
    for n in (2, 5, 7):
        np.testing.assert_allclose(Categorical(jnp.zeros(n)).entropy(), math.log(n), rtol=1e-6)


def test_categorical_batched_sampling_frequencies():
    logits = jnp.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    out = summary(Categorical(logits), jnp.array([0, 1]), KEY, n_samples=20000)
    samples = np.asarray(out["samples"])
    assert samples.shape == (20000, 2) and samples.dtype == np.int32
    for row in range(2):
        freq = np.bincount(samples[:, row], minlength=3) / 20000
        np.testing.assert_allclose(freq, np.exp(_np_log_softmax(logits[row])), atol=0.015)
    x, lp = samples[:5], out["sample_log_probs"][:5]
    np.testing.assert_allclose(lp, _np_log_softmax(logits)[[0, 1], x], rtol=1e-5)


def test_categorical_mask():
    # Row 0: the masked actions have the largest logits, so a leaking mask shows up everywhere.
    # Row 1: a single valid action.
    logits = jnp.array([[0.0, 5.0, 0.0, 5.0], [1.0, 2.0, 3.0, 4.0]])
    mask = jnp.array([[True, False, True, False], [False, False, True, False]])
    dist = Categorical(logits, mask)
    out = summary(dist, jnp.array([0, 2]), KEY)
    probs = jax.jit(lambda d: d.probs)(dist)
    np.testing.assert_array_equal(probs, [[0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 1.0, 0.0]])
    np.testing.assert_allclose(out["entropy"], [math.log(2), 0.0], atol=1e-6)  # log(#valid)
    assert int(out["mode"][0]) in (0, 2) and int(out["mode"][1]) == 2
    assert set(np.unique(out["samples"][:, 0]).tolist()) == {0, 2}
    assert np.all(out["samples"][:, 1] == 2)
    np.testing.assert_allclose(out["log_prob"], [-math.log(2), 0.0], atol=1e-6)
    # Every action against both rows: x [4, 1] broadcasts with the batch [2] to [4, 2].
    lp = np.asarray(jax.jit(lambda d: d.log_prob(jnp.arange(4)[:, None]))(dist))
    assert lp.shape == (4, 2) and np.all(np.isfinite(lp)) and np.all(lp[[1, 3], 0] < -1e8)

    def loss(logits):
        d = Categorical(logits, mask)
        return jnp.sum(d.entropy() + d.log_prob(0) + d.log_prob(1))  # masked actions too

    grads = np.asarray(jax.jit(jax.grad(loss))(logits))
    assert np.all(np.isfinite(grads))
    np.testing.assert_allclose(grads[~np.asarray(mask)], 0.0)  # masked logits get no gradient


# --- MultiCategorical -------------------------------------------------------------------


def test_multi_categorical_sums():
    flat = jnp.array([[0.0, 1.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])  # nvec (2, 3), B = 2
    x = jnp.array([[1, 2], [0, 1]])
    stats = jax.jit(lambda d, x: (d.log_prob(x), d.entropy(), d.mode()))
    lp, ent, mode = stats(MultiCategorical.from_flat(flat, (2, 3)), x)
    # Reference: each dimension's log-softmax (numpy), summed.
    ref_a, ref_b = _np_log_softmax(flat[:, :2]), _np_log_softmax(flat[:, 2:])
    np.testing.assert_allclose(lp, ref_a[[0, 1], x[:, 0]] + ref_b[[0, 1], x[:, 1]], rtol=1e-5)
    # row 1 is uniform: log p = -log 2 - log 3 = -1.791759; entropy = log 2 + log 3
    np.testing.assert_allclose(lp[1], -1.791759, rtol=1e-6)
    ref_ent = -(np.exp(ref_a) * ref_a).sum(-1) - (np.exp(ref_b) * ref_b).sum(-1)
    np.testing.assert_allclose(ent, ref_ent, rtol=1e-5)
    np.testing.assert_allclose(ent[1], math.log(6), rtol=1e-6)
    np.testing.assert_array_equal(mode, [[1, 2], [0, 0]])
    # Logits as a tuple, a mask per dimension: entropy 0 + log 2, log p(x) = 0 - log 2.
    logits = (jnp.array([0.0, 3.0]), jnp.array([1.0, 1.0, 9.0]))
    mask = (jnp.array([False, True]), jnp.array([True, True, False]))
    out = summary(MultiCategorical(logits, mask), jnp.array([1, 0]), KEY, n_samples=1000)
    np.testing.assert_allclose(out["entropy"], math.log(2), rtol=1e-6)
    np.testing.assert_allclose(out["log_prob"], -math.log(2), rtol=1e-6)
    assert out["samples"].shape == (1000, 2) and out["sample_log_probs"].shape == (1000,)
    assert np.all(out["samples"][:, 0] == 1) and set(np.unique(out["samples"][:, 1])) == {0, 1}
    np.testing.assert_allclose(out["sample_log_probs"], -math.log(2), rtol=1e-6)
    with pytest.raises(ValueError):
        MultiCategorical.from_flat(flat, (2, 2))


# --- Normal -----------------------------------------------------------------------------


@VARIANTS
def test_normal_log_prob_entropy(variant):
    dist = Normal(jnp.array([0.0, 1.0]), jnp.array([0.0, math.log(2.0)]))
    # x = [1, 0]: dim 0: z = 1, -0.5 - 0 - 0.5 log 2pi
    #             dim 1: z = -0.5, -0.125 - log 2 - 0.5 log 2pi
    # total = -0.625 - log 2 - log 2pi = -0.625 - 0.693147 - 1.837877 = -3.156024
    lp = variant(lambda d, x: d.log_prob(x))(dist, jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(lp, -3.156024, rtol=1e-6)
    # entropy = 2 * (0.5 + 0.5 log 2pi) + log 1 + log 2 = 1 + 1.837877 + 0.693147 = 3.531024
    np.testing.assert_allclose(variant(lambda d: d.entropy())(dist), 3.531024, rtol=1e-6)
    np.testing.assert_allclose(dist.mode(), [0.0, 1.0])


def test_normal_batched_broadcast_and_sampling():
    mean = jnp.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])  # [B=3, A=2]
    log_std = jnp.array([0.0, math.log(0.5)])  # state-independent [A]
    out = summary(Normal(mean, log_std), jnp.ones((3, 2)), KEY, n_samples=20000)
    np.testing.assert_allclose(out["entropy"], [1 + LOG_2PI + math.log(0.5)] * 3, rtol=1e-6)
    std = np.array([1.0, 0.5])
    ref = (-0.5 * ((1 - np.asarray(mean)) / std) ** 2 - np.log(std) - 0.5 * LOG_2PI).sum(-1)
    np.testing.assert_allclose(out["log_prob"], ref, rtol=1e-5)
    samples = out["samples"]
    assert samples.shape == (20000, 3, 2)
    np.testing.assert_allclose(samples.mean(0), mean, atol=0.03)
    np.testing.assert_allclose(samples.std(0), np.broadcast_to(std, (3, 2)), rtol=0.03)
    np.testing.assert_allclose(out["mode"], mean)
    s, lp = samples[:5], out["sample_log_probs"][:5]
    ref = (-0.5 * ((s - np.asarray(mean)) / std) ** 2 - np.log(std) - 0.5 * LOG_2PI).sum(-1)
    np.testing.assert_allclose(lp, ref, rtol=1e-5)


# --- TanhNormal -------------------------------------------------------------------------


def _np_tanh_normal_density(a, mean, std, low, high):
    """Change of variables with a numerical derivative of the squash (1-D)."""
    squash = lambda u: low + (np.tanh(u) + 1) / 2 * (high - low)  # noqa: E731
    u = np.arctanh(2 * (a - low) / (high - low) - 1)
    h = 1e-5
    dadu = (squash(u + h) - squash(u - h)) / (2 * h)
    normal = np.exp(-0.5 * ((u - mean) / std) ** 2) / (std * math.sqrt(2 * math.pi))
    return normal / dadu


@jax.jit
def _grid_log_prob(dist, grid):
    return jax.vmap(lambda a: dist.log_prob(a[None]))(grid)


@pytest.mark.parametrize("mean, std, low, high", [(0.3, 0.8, -1.0, 1.0), (-0.5, 1.5, 0.0, 4.0)])
def test_tanh_normal_density(mean, std, low, high):
    dist = TanhNormal(jnp.array([mean]), jnp.array([math.log(std)]), low, high)
    grid = np.linspace(low, high, 20001)[1:-1]
    density = np.exp(np.asarray(_grid_log_prob(dist, jnp.asarray(grid, jnp.float32))))
    ref = _np_tanh_normal_density(grid, mean, std, low, high)
    inner = (grid > low + 0.01 * (high - low)) & (grid < high - 0.01 * (high - low))
    np.testing.assert_allclose(density[inner], ref[inner], rtol=2e-3)
    np.testing.assert_allclose(np.trapezoid(density, grid), 1.0, atol=2e-3)
    # Monte-Carlo: samples lie in bounds and their empirical CDF matches the integrated density.
    samples = np.asarray(summary(dist, jnp.zeros(1), KEY, n_samples=50000)["samples"])[:, 0]
    assert samples.min() >= low and samples.max() <= high
    cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(grid))])
    for x in np.linspace(low, high, 11)[1:-1]:
        np.testing.assert_allclose((samples <= x).mean(), np.interp(x, grid, cdf), atol=0.01)


def test_tanh_normal_sample_log_prob_consistency():
    mean = jnp.array([[0.2, -1.0, 0.5], [1.0, 0.0, -0.3]])  # [B=2, A=3]
    low, high = jnp.array([-1.0, 0.0, -2.0]), jnp.array([1.0, 1.0, 3.0])
    dist = TanhNormal(mean, jnp.full(3, -0.5), low, high)
    out = summary(dist, jnp.zeros((2, 3)), KEY)
    a, lp = out["samples"][:20], out["sample_log_probs"][:20]
    assert a.shape == (20, 2, 3) and lp.shape == (20, 2)
    # log_prob(a) inverts the squash; sample_and_log_prob uses the pre-squash sample.
    np.testing.assert_allclose(jax.jit(lambda d, x: d.log_prob(x))(dist, a), lp, rtol=1e-3)
    np.testing.assert_allclose(out["mode"], low + (np.tanh(mean) + 1) / 2 * (high - low), rtol=1e-6)
    assert np.all(out["samples"] >= low) and np.all(out["samples"] <= high)
    # Change of variables by hand for this sample: u = arctanh(2 (a - low) / (high - low) - 1),
    # log p(a) = log N(u) - sum log((1 - tanh(u)^2) (high - low) / 2).
    u = np.arctanh(2 * (np.asarray(a, np.float64) - low) / (high - low) - 1)
    log_n = -0.5 * ((u - mean) / np.exp(-0.5)) ** 2 + 0.5 - 0.5 * LOG_2PI
    ref = (log_n - np.log((1 - np.tanh(u) ** 2) * (high - low) / 2)).sum(-1)
    np.testing.assert_allclose(lp, ref, rtol=1e-3)


def test_tanh_normal_stable_and_entropy():
    # Far into saturation the log-det-Jacobian stays finite (naive log(1 - tanh^2) gives -inf).
    def log_prob_of_sample(mean):
        return TanhNormal(mean, jnp.full(2, -3.0)).sample_and_log_prob(KEY)[1]

    lp, grads = jax.jit(jax.value_and_grad(log_prob_of_sample))(jnp.array([20.0, -20.0]))
    assert np.isfinite(lp) and np.all(np.isfinite(grads))
    # Entropy: without a key, the pre-squash Gaussian's; with a key, -log p(a) of one sample,
    # whose average over many keys matches the numerical entropy -int p log p.
    dist = TanhNormal(jnp.array([0.3]), jnp.array([math.log(0.8)]))
    np.testing.assert_allclose(dist.entropy(), Normal(dist.mean, dist.log_std).entropy())
    grid = np.linspace(-1, 1, 20001)[1:-1]
    p = _np_tanh_normal_density(grid, 0.3, 0.8, -1.0, 1.0)
    numeric = -np.trapezoid(p * np.log(p), grid)
    mc = jax.jit(jax.vmap(dist.entropy))(jax.random.split(KEY, 20000)).mean()
    np.testing.assert_allclose(mc, numeric, atol=0.02)
    assert float(dist.entropy()) > numeric  # pre-squash entropy is an upper bound here


def test_distributions_are_pytrees_through_jit_and_vmap():
    @jax.jit
    def make(logits, mean):
        return Categorical(logits), TanhNormal(mean, jnp.zeros_like(mean))

    cat, tn = make(jnp.zeros((4, 3)), jnp.zeros((4, 2)))
    assert isinstance(cat, Categorical) and cat.logits.shape == (4, 3) and tn.mean.shape == (4, 2)

    # vmap over per-example parameters and keys.
    @jax.jit
    @jax.vmap
    def act(logits, mean, key):
        k1, k2 = jax.random.split(key)
        return Categorical(logits).sample_and_log_prob(k1), Normal(mean, jnp.zeros(2)).sample(k2)

    (a, lp), x = act(jnp.zeros((4, 3)), jnp.zeros((4, 2)), jax.random.split(KEY, 4))
    assert a.shape == (4,) and x.shape == (4, 2)
    np.testing.assert_allclose(lp, -math.log(3), rtol=1e-6)


def test_epsilon_greedy_frequencies_by_hand():
    """Rows of 3 actions, action 1 masked out in half of them, greedy action 2, epsilon 0.3.
    A row explores with probability 0.3 and then takes each *valid* action equally often, so:
    unmasked rows take 0 and 1 with 0.1 each and 2 with 0.7 + 0.1; masked rows take 0 with
    0.15, never 1, and 2 with 0.85. Checked on 40k rows, each count within 5 sigma."""
    n = 40_000
    values = jnp.tile(jnp.array([0.0, 1.0, 2.0]), (n, 1))
    mask = jnp.ones((n, 3), bool).at[n // 2 :, 1].set(False)
    keys = jax.random.split(jax.random.key(3), n)
    actions = np.asarray(jax.jit(epsilon_greedy)(keys, values, jnp.float32(0.3), mask))
    assert actions.dtype == np.int32 and actions.shape == (n,)
    for rows, probs in (
        (actions[: n // 2], [0.1, 0.1, 0.8]),
        (actions[n // 2 :], [0.15, 0.0, 0.85]),
    ):
        counts = np.bincount(rows, minlength=3)
        for count, p in zip(counts, probs):
            sigma = max(np.sqrt(len(rows) * p * (1 - p)), 1e-9)
            assert abs(count - len(rows) * p) <= 5 * sigma, (counts, probs)
    # epsilon 0: the greedy action; epsilon 1 without a mask: each action a third of the time
    np.testing.assert_array_equal(epsilon_greedy(keys, values, jnp.float32(0.0), mask), 2)
    counts = np.bincount(np.asarray(epsilon_greedy(keys, values, jnp.float32(1.0))), minlength=3)
    assert np.all(np.abs(counts - n / 3) <= 5 * np.sqrt(n * (1 / 3) * (2 / 3))), counts


def test_epsilon_greedy_rows_are_independent_of_the_batch():
    """Row i depends only on keys[i]: the same key gives the same action alone or in a batch."""
    keys = jax.random.split(jax.random.key(5), 64)
    values = jax.random.normal(jax.random.key(6), (64, 4))
    batch = epsilon_greedy(keys, values, jnp.float32(0.5))
    alone = [
        int(epsilon_greedy(keys[i : i + 1], values[i : i + 1], jnp.float32(0.5))[0])
        for i in range(0, 64, 7)
    ]
    np.testing.assert_array_equal(np.asarray(batch)[::7], alone)


def test_tanh_normal_from_noise_is_the_reparameterised_sample():
    """``from_noise(eps)`` is the sample ``sample_and_log_prob`` draws with the key ``eps``
    came from, and its log-density by the change of variables, by hand."""
    dist = TanhNormal(jnp.array([[0.3, -1.0]]), jnp.array([[-0.5, 0.2]]))
    key = jax.random.key(4)
    eps = jax.random.normal(key, (1, 2))
    action, log_prob = dist.from_noise(eps)
    a_ref, lp_ref = dist.sample_and_log_prob(key)
    np.testing.assert_allclose(action, a_ref, rtol=1e-6)
    np.testing.assert_allclose(log_prob, lp_ref, rtol=1e-5)
    u = np.array([0.3, -1.0]) + np.exp([-0.5, 0.2]) * np.asarray(eps[0], np.float64)
    by_hand = np.sum(
        -0.5 * ((u - [0.3, -1.0]) / np.exp([-0.5, 0.2])) ** 2
        - np.array([-0.5, 0.2])
        - 0.5 * np.log(2 * np.pi)
        - np.log(1 - np.tanh(u) ** 2)
    )
    np.testing.assert_allclose(np.tanh(u), action[0], rtol=1e-6)
    np.testing.assert_allclose(log_prob[0], by_hand, rtol=1e-5)


# --- masks, leading dimensions and edges ---------------------------------------------------


def test_masked_categorical_stays_finite_in_float16():
    """Invalid actions get a large negative *finite* logit in the logits' own dtype: in float16
    (largest magnitude 65504) the log-probabilities and their gradients stay finite."""
    logits = jnp.array([[0.5, 2.0, -1.0], [1.0, 1.0, 1.0]], jnp.float16)
    mask = jnp.array([[True, False, True], [False, True, True]])
    dist = Categorical(logits, mask)
    assert bool(jnp.all(jnp.isfinite(dist.log_probs)))
    np.testing.assert_array_equal(np.asarray(dist.probs)[~np.asarray(mask)], 0.0)
    np.testing.assert_allclose(np.asarray(dist.probs, np.float32)[1], [0.0, 0.5, 0.5], atol=1e-3)
    grad = jax.grad(lambda x: Categorical(x, mask).log_prob(jnp.array([0, 2])).sum())(logits)
    assert bool(jnp.all(jnp.isfinite(grad)))


def test_masked_argmax_and_max_over_leading_dims():
    """``values [T, N, A]``: the best valid action of each row, along the last axis."""
    from jrl.ops.action_distributions import masked_argmax, masked_max

    values = jnp.array([[[1.0, 5.0, 3.0], [9.0, 2.0, 4.0]], [[0.0, -1.0, 7.0], [2.0, 8.0, 6.0]]])
    mask = jnp.array(
        [[[True, False, True], [True, True, True]], [[True, True, False], [True, False, True]]]
    )
    np.testing.assert_array_equal(masked_argmax(values, mask), [[2, 0], [0, 2]])
    np.testing.assert_array_equal(masked_max(values, mask), [[3.0, 9.0], [0.0, 6.0]])
    np.testing.assert_array_equal(masked_argmax(values), [[1, 0], [2, 1]])
    np.testing.assert_array_equal(masked_max(values), [[5.0, 9.0], [7.0, 8.0]])


def test_multi_categorical_from_flat_with_leading_dims_and_a_mask():
    """Three dimensions (2, 3, 2) from flat logits ``[T, N, 7]``: log_prob and entropy are the
    sums over the dimensions of log-softmaxes of the right slices; the mask's slices go with
    them; a mask of another length is refused."""
    nvec = (2, 3, 2)
    logits = jax.random.normal(KEY, (2, 3, 7))
    mask = np.ones((2, 3, 7), bool)
    mask[..., 3] = False  # the second dimension's middle value is invalid everywhere
    dist = MultiCategorical.from_flat(logits, nvec, jnp.asarray(mask))
    x = jnp.broadcast_to(jnp.array([1, 2, 0]), (2, 3, 3))
    parts = np.split(np.where(mask, np.asarray(logits, np.float64), -np.inf), [2, 5], axis=-1)
    expected = sum(_np_log_softmax(p)[..., int(a)] for p, a in zip(parts, [1, 2, 0]))
    np.testing.assert_allclose(dist.log_prob(x), expected, rtol=1e-5)
    log_ps = [_np_log_softmax(p) for p in parts]  # -inf for the invalid value
    entropy = sum(-np.sum(np.exp(lp) * np.where(np.isfinite(lp), lp, 0.0), -1) for lp in log_ps)
    np.testing.assert_allclose(dist.entropy(), entropy, rtol=1e-5)
    assert dist.mode().shape == (2, 3, 3) and not bool(jnp.any(dist.mode()[..., 1] == 1))
    with pytest.raises(ValueError, match="logits last axis 6"):
        MultiCategorical.from_flat(logits[..., :6], nvec)
    with pytest.raises(ValueError):
        MultiCategorical(dist.logits, dist.mask[:2]).entropy()


def test_tanh_normal_log_prob_is_finite_at_the_bounds():
    """Actions exactly at ``low`` and ``high`` (what clipping or a saturated tanh gives) are
    clipped just inside before arctanh: a finite log-density."""
    dist = TanhNormal(jnp.zeros((2, 1)), jnp.zeros((2, 1)), low=-2.0, high=2.0)
    log_p = dist.log_prob(jnp.array([[2.0], [-2.0]]))
    assert bool(jnp.all(jnp.isfinite(log_p))) and float(log_p.max()) < -5.0

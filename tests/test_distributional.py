"""Hand-computed values for jrl.ops.return_distributions (C51 projection, QR-DQN loss), with and
without
jit."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.ops import return_distributions as dist

JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])


def maybe_jit(fn, jit):
    return jax.jit(fn) if jit else fn


def project(probs, reward, discount, atoms, jit=False):
    fn = maybe_jit(dist.categorical_projection, jit)
    return fn(
        jnp.asarray(probs, jnp.float32),
        jnp.asarray(reward, jnp.float32),
        jnp.asarray(discount, jnp.float32),
        atoms,
    )


def reference_projection(probs, reward, discount, atoms):
    """The textbook loop (floor/ceil per shifted atom), in float64 numpy, for comparison."""
    probs, atoms = np.asarray(probs, np.float64), np.asarray(atoms, np.float64)
    v_min, v_max, k = atoms[0], atoms[-1], len(atoms)
    dz = (v_max - v_min) / (k - 1)
    out = np.zeros_like(probs)
    for i in range(probs.shape[0]):
        for j in range(k):
            tz = min(max(reward[i] + discount[i] * atoms[j], v_min), v_max)
            b = (tz - v_min) / dz
            lo, hi = int(np.floor(b)), int(np.ceil(b))
            if lo == hi:
                out[i, lo] += probs[i, j]
            else:
                out[i, lo] += probs[i, j] * (hi - b)
                out[i, hi] += probs[i, j] * (b - lo)
    return out


def test_support_values_and_errors():
    np.testing.assert_allclose(dist.support(5, 0.0, 4.0), [0, 1, 2, 3, 4])
    atoms = dist.support(51, -10.0, 10.0)
    assert atoms.shape == (51,) and atoms.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(atoms)[[0, 25, 50]], [-10.0, 0.0, 10.0], atol=1e-6)
    np.testing.assert_allclose(np.diff(atoms), 0.4, rtol=1e-5)
    for bad in [(1, 0.0, 1.0), (0, 0.0, 1.0), (5, 1.0, 1.0), (5, 2.0, 1.0)]:
        with pytest.raises(ValueError):
            dist.support(*bad)


@JIT
def test_projection_shift_exactly_onto_atoms(jit):
    atoms = dist.support(5, 0.0, 4.0)  # [0, 1, 2, 3, 4], dz = 1
    # r = 1, discount = 1: atoms move to [1, 2, 3, 4, 5]; the mass of z=4 (zero here) would clip
    # to 4.
    # Each lands exactly on an atom: m = [0, p0, p1, p2, p3 + p4] = [0, .1, .2, .3, .4]
    out = project([[0.1, 0.2, 0.3, 0.4, 0.0]], [1.0], [1.0], atoms, jit)
    np.testing.assert_allclose(out, [[0.0, 0.1, 0.2, 0.3, 0.4]], atol=1e-6)


@JIT
def test_projection_between_atoms(jit):
    atoms = dist.support(5, 0.0, 4.0)
    # row 0: r = .25, discount = 1, mass .5 on z=0 and .5 on z=1 -> shifted atoms .25 and 1.25
    #   .25  -> atom 0 gets .75 * .5 = .375, atom 1 gets .25 * .5 = .125
    #   1.25 -> atom 1 gets .75 * .5 = .375, atom 2 gets .25 * .5 = .125
    #   m = [.375, .5, .125, 0, 0]
    # row 1: r = 1, discount = .5, uniform .2 -> shifted [1, 1.5, 2, 2.5, 3]
    #   atom 1: .2 + .5*.2 = .3 ; atom 2: .5*.2 + .2 + .5*.2 = .4 ; atom 3: .5*.2 + .2 = .3
    probs = [[0.5, 0.5, 0.0, 0.0, 0.0], [0.2] * 5]
    out = project(probs, [0.25, 1.0], [1.0, 0.5], atoms, jit)
    np.testing.assert_allclose(
        out, [[0.375, 0.5, 0.125, 0.0, 0.0], [0.0, 0.3, 0.4, 0.3, 0.0]], atol=1e-6
    )


@JIT
def test_projection_clips_at_both_edges(jit):
    atoms = dist.support(3, -1.0, 1.0)  # [-1, 0, 1]
    p = [0.2, 0.3, 0.5]
    # row 0: r = -5: every shifted atom (-6, -5, -4) clips to v_min = -1 -> [1, 0, 0]
    # row 1: r = +5: every shifted atom (4, 5, 6) clips to v_max = 1 -> [0, 0, 1]
    # row 2: r = 0, discount = 2: shifted [-2, 0, 2] -> clipped [-1, 0, 1] -> p unchanged
    # row 3: r = .5, discount = 1: shifted [-.5, .5, 1.5 -> 1]
    #   -.5 -> atoms -1 and 0 get .5 * .2 = .1 each;
    #   .5 -> atoms 0 and 1 get .5 * .3 = .15 each; 1 gets .5
    #   m = [.1, .1 + .15, .15 + .5] = [.1, .25, .65]
    out = project([p] * 4, [-5.0, 5.0, 0.0, 0.5], [1.0, 1.0, 2.0, 1.0], atoms, jit)
    np.testing.assert_allclose(out, [[1, 0, 0], [0, 0, 1], p, [0.1, 0.25, 0.65]], atol=1e-6)


@JIT
def test_projection_terminal(jit):
    atoms = dist.support(5, 0.0, 4.0)
    # discount 0: every atom maps to r. r = 2.6 -> b = 2.6: atom 2 gets 1 - .6 = .4, atom 3 gets .6
    # r = 10 -> clipped to 4 -> all on atom 4; r = 1 -> all on atom 1 (exactly on it)
    probs = [[0.1, 0.2, 0.3, 0.4, 0.0], [0.2] * 5, [0.0, 0.0, 0.0, 0.0, 1.0]]
    out = project(probs, [2.6, 10.0, 1.0], [0.0, 0.0, 0.0], atoms, jit)
    np.testing.assert_allclose(
        out, [[0, 0, 0.4, 0.6, 0], [0, 0, 0, 0, 1], [0, 1, 0, 0, 0]], atol=1e-6
    )


def _random_inputs(key, batch=64, num_atoms=51):
    k1, k2, k3 = jax.random.split(key, 3)
    probs = jax.nn.softmax(3.0 * jax.random.normal(k1, (batch, num_atoms)))
    reward = jax.random.uniform(
        k2, (batch,), minval=-20.0, maxval=20.0
    )  # some far outside the support
    discount = jnp.where(
        jnp.arange(batch) % 4 == 0, 0.0, jax.random.uniform(k3, (batch,), minval=0.0, maxval=1.2)
    )
    return probs, reward, discount


def test_projection_conserves_mass_and_matches_reference_eager_jit_vmap():
    atoms = dist.support(51, -10.0, 10.0)
    probs, reward, discount = _random_inputs(jax.random.key(0))
    eager = dist.categorical_projection(probs, reward, discount, atoms)
    jitted = jax.jit(dist.categorical_projection)(probs, reward, discount, atoms)
    vmapped = jax.jit(jax.vmap(dist.categorical_projection, in_axes=(0, 0, 0, None)))(
        probs, reward, discount, atoms
    )
    for out in (eager, jitted, vmapped):
        assert out.shape == (64, 51)
        assert bool(jnp.all(jnp.isfinite(out))) and float(out.min()) >= 0.0
        np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(
            out,
            reference_projection(probs, np.asarray(reward), np.asarray(discount), atoms),
            atol=1e-5,
        )
    np.testing.assert_allclose(jitted, eager, atol=1e-5)  # float32 rounding (fused multiply-add)
    np.testing.assert_allclose(vmapped, eager, atol=1e-5)


def test_projection_keeps_the_mean_when_nothing_clips():
    # linear interpolation between neighbouring atoms preserves the mean: E[m] = r + discount * E[Z]
    atoms = dist.support(11, -5.0, 5.0)
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(1), (8, 11)))
    probs = probs.at[:, [0, 1, 9, 10]].set(0.0)
    probs = probs / probs.sum(-1, keepdims=True)  # support within [-3, 3]
    reward = jnp.linspace(-1.5, 1.5, 8)
    discount = jnp.full((8,), 0.6)
    out = dist.categorical_projection(probs, reward, discount, atoms)
    np.testing.assert_allclose(
        dist.expected_value(out, atoms), reward + 0.6 * dist.expected_value(probs, atoms), atol=1e-5
    )


def test_projection_rows_are_independent():
    atoms = dist.support(21, -2.0, 2.0)
    probs, reward, discount = _random_inputs(jax.random.key(2), batch=4, num_atoms=21)
    out = dist.categorical_projection(probs, reward, discount, atoms)
    for i in range(4):
        alone = dist.categorical_projection(
            probs[i : i + 1], reward[i : i + 1], discount[i : i + 1], atoms
        )
        np.testing.assert_allclose(out[i : i + 1], alone, atol=1e-7)
    changed = dist.categorical_projection(
        probs.at[1].set(jnp.roll(probs[1], 3)),
        reward.at[1].add(0.7),
        discount.at[1].set(0.1),
        atoms,
    )
    np.testing.assert_array_equal(
        np.delete(np.asarray(changed), 1, axis=0), np.delete(np.asarray(out), 1, axis=0)
    )
    assert not np.allclose(changed[1], out[1])


def test_projection_rejects_mismatched_atoms():
    with pytest.raises(ValueError):
        dist.categorical_projection(
            jnp.ones((2, 5)) / 5, jnp.zeros(2), jnp.ones(2), dist.support(4, 0.0, 1.0)
        )


@JIT
def test_categorical_loss_hand_value_and_gradients(jit):
    # logits [0, ln 2, ln 3]: exp -> [1, 2, 3], sum 6 -> log_softmax = [ln 1/6, ln 2/6, ln 3/6]
    # target [.5, .5, 0]: loss = -.5 ln(1/6) - .5 ln(1/3) = .5 ln 6 + .5 ln 3 = .5 ln 18
    # row 1: target one-hot on action 2 -> loss = -ln(1/2) = ln 2
    logits = jnp.log(jnp.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]))
    target = jnp.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    loss = maybe_jit(dist.categorical_loss, jit)(logits, target)
    assert loss.shape == (2,)
    np.testing.assert_allclose(loss, [0.5 * math.log(18.0), math.log(2.0)], rtol=1e-6)
    # d loss / d logits = softmax - target (target sums to 1): [1/6 - 1/2, 1/3 - 1/2, 1/2]
    g_logits = jax.grad(lambda l: dist.categorical_loss(l, target)[0])(logits)
    np.testing.assert_allclose(g_logits[0], [1 / 6 - 0.5, 1 / 3 - 0.5, 0.5], atol=1e-6)
    g_target = jax.grad(lambda t: dist.categorical_loss(logits, t).sum())(target)
    np.testing.assert_array_equal(g_target, 0.0)


def test_quantile_midpoints_and_expected_value():
    np.testing.assert_allclose(dist.quantile_midpoints(4), [0.125, 0.375, 0.625, 0.875])
    np.testing.assert_allclose(dist.quantile_midpoints(1), [0.5])
    assert dist.quantile_midpoints(200).dtype == jnp.float32
    with pytest.raises(ValueError):
        dist.quantile_midpoints(0)
    # .2 * -1 + .3 * 0 + .5 * 1 = .3 ; leading dims [2, 1]
    probs = jnp.array([[[0.2, 0.3, 0.5]], [[1.0, 0.0, 0.0]]])
    np.testing.assert_allclose(
        dist.expected_value(probs, jnp.array([-1.0, 0.0, 1.0])), [[0.3], [-1.0]], atol=1e-7
    )


# N = 2 quantiles [0, 1] at taus [.25, .75]; M = 2 targets [.5, 3]. u_ij = target_j - quantile_i:
#   i = 0 (tau .25): u = [.5, 3]   both >= 0 -> weights |.25 - 0| = [.25, .25]
#   i = 1 (tau .75): u = [-.5, 2]  -> weights [|.75 - 1|, .75] = [.25, .75]
QUANTILES = jnp.array([[0.0, 1.0]])
TARGETS = jnp.array([[0.5, 3.0]])
TAUS = jnp.array([0.25, 0.75])


@JIT
def test_quantile_huber_loss_by_hand(jit):
    fn = maybe_jit(dist.quantile_huber_loss, jit)
    # kappa = 1: H(.5) = .125, H(3) = 3 - .5 = 2.5, H(-.5) = .125, H(2) = 2 - .5 = 1.5
    #   i=0: mean(.25 * .125, .25 * 2.5) = (.03125 + .625) / 2 = .328125
    #   i=1: mean(.25 * .125, .75 * 1.5) = (.03125 + 1.125) / 2 = .578125      sum = .90625
    np.testing.assert_allclose(fn(QUANTILES, TARGETS, TAUS, 1.0), [0.90625], rtol=1e-6)
    # kappa = 0 (pinball):
    #   i=0: (.25 * .5 + .25 * 3) / 2 = .4375 ; i=1: (.25 * .5 + .75 * 2) / 2 = .8125 ; sum 1.25
    np.testing.assert_allclose(fn(QUANTILES, TARGETS, TAUS, 0.0), [1.25], rtol=1e-6)
    # kappa = 2: H_2(u) / 2 = u^2 / 4 for |u| <= 2 else |u| - 1 -> [.0625, 2] and [.0625, 1]
    #   i=0: (.25 * .0625 + .25 * 2) / 2 = .2578125
    #   i=1: (.25 * .0625 + .75 * 1) / 2 = .3828125 ; sum .640625
    np.testing.assert_allclose(fn(QUANTILES, TARGETS, TAUS, 2.0), [0.640625], rtol=1e-6)
    # default kappa is 1; a batch of two identical rows gives two identical losses
    np.testing.assert_allclose(
        fn(jnp.tile(QUANTILES, (2, 1)), jnp.tile(TARGETS, (2, 1)), TAUS), [0.90625] * 2, rtol=1e-6
    )


def test_quantile_huber_loss_kappa_traced_under_vmap():
    kappas = jnp.array([0.0, 1.0, 2.0])
    out = jax.jit(jax.vmap(lambda k: dist.quantile_huber_loss(QUANTILES, TARGETS, TAUS, k)))(kappas)
    np.testing.assert_allclose(out[:, 0], [1.25, 0.90625, 0.640625], rtol=1e-6)


@pytest.mark.parametrize(("kappa", "expected"), [(1.0, [-0.1875, -0.3125]), (0.0, [-0.25, -0.25])])
def test_quantile_huber_loss_gradients_by_hand(kappa, expected):
    # d rho / d quantile_i = -|tau_i - 1{u<0}| * H'_kappa(u) / kappa,
    #   H'/kappa = clip(u / kappa, -1, 1) (sign(u) at 0)
    # kappa = 1: i=0: -(.25 * .5 + .25 * 1) / 2 = -.1875 ; i=1: -(.25 * -.5 + .75 * 1) / 2 = -.3125
    # kappa = 0: i=0: -(.25 + .25) / 2 = -.25 ; i=1: -(-.25 + .75) / 2 = -.25
    g_q = jax.grad(lambda q: dist.quantile_huber_loss(q, TARGETS, TAUS, kappa).sum())(QUANTILES)
    np.testing.assert_allclose(g_q[0], expected, rtol=1e-6)
    assert bool(jnp.all(jnp.isfinite(g_q)))
    g_t = jax.grad(lambda t: dist.quantile_huber_loss(QUANTILES, t, TAUS, kappa).sum())(TARGETS)
    np.testing.assert_array_equal(g_t, 0.0)


@pytest.mark.parametrize("kappa", [0.0, 0.01])
def test_quantile_loss_descent_finds_the_quantiles(kappa):
    # targets ~ Exponential(1): the tau-quantile is -ln(1 - tau)
    taus = dist.quantile_midpoints(4)
    samples = jax.random.exponential(jax.random.key(3), (1, 20000))
    grad = jax.grad(lambda q: dist.quantile_huber_loss(q, samples, taus, kappa).sum())

    def step(q, _):
        return q - 0.02 * grad(q), None

    fitted, _ = jax.jit(lambda q: jax.lax.scan(step, q, None, length=3000))(jnp.zeros((1, 4)))
    np.testing.assert_allclose(
        fitted[0], np.quantile(np.asarray(samples[0]), np.asarray(taus)), atol=0.02
    )
    np.testing.assert_allclose(fitted[0], -np.log(1.0 - np.asarray(taus)), atol=0.1)
    # the sign: a quantile below (above) its target quantile gets a negative (positive) gradient
    g = grad(fitted + jnp.array([[-0.5, 0.5, -0.5, 0.5]]))
    np.testing.assert_array_equal(np.sign(g[0]), [-1, 1, -1, 1])


def test_support_of_two_atoms_and_projection_refusals():
    np.testing.assert_allclose(dist.support(2, -1.0, 3.0), [-1.0, 3.0])  # the smallest support
    probs = jnp.ones((2, 5)) / 5
    with pytest.raises(ValueError, match="need atoms"):  # atoms must be one axis
        dist.categorical_projection(probs, jnp.zeros(2), jnp.ones(2), jnp.zeros((1, 5)))
    with pytest.raises(ValueError, match="need atoms"):  # of the probabilities' length
        dist.categorical_projection(probs, jnp.zeros(2), jnp.ones(2), dist.support(4, 0.0, 1.0))


def test_categorical_loss_over_leading_dims():
    """``[T, B, K]``: the cross-entropy of every row along the atoms axis (the hand values of
    test_categorical_loss_hand_value_and_gradients, in both rows of each leading index)."""
    logits = jnp.log(jnp.tile(jnp.array([1.0, 2.0, 3.0]), (2, 2, 1)))
    target = jnp.tile(jnp.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]), (2, 1, 1))
    expected = [[0.5 * math.log(18.0), math.log(2.0)]] * 2
    np.testing.assert_allclose(dist.categorical_loss(logits, target), expected, rtol=1e-6)


def test_quantile_huber_loss_kappa_below_one_and_leading_dims():
    # kappa = 1/2: H(u) / kappa = u^2 for |u| <= 1/2, else |u| - 1/4:
    #   i=0: u = [.5, 3] -> [.25, 2.75], weights .25 -> mean .375
    #   i=1: u = [-.5, 2] -> [.25, 1.75], weights [.25, .75] -> mean (.0625 + 1.3125) / 2 = .6875
    np.testing.assert_allclose(
        dist.quantile_huber_loss(QUANTILES, TARGETS, TAUS, 0.5), [1.0625], rtol=1e-6
    )
    # leading dims [T, B] = [2, 1]: each row as in the 2-D case (kappa = 1: 0.90625)
    out = dist.quantile_huber_loss(
        jnp.stack([QUANTILES, QUANTILES]), jnp.stack([TARGETS, TARGETS]), TAUS, 1.0
    )
    np.testing.assert_allclose(out, [[0.90625], [0.90625]], rtol=1e-6)

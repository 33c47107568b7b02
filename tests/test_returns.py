"""Hand-computed checks for jrl.ops.returns (with and without jit), plus a numpy reference."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.ops import returns as R

GAMMA, LAM = 0.9, 0.8  # gamma * lambda = 0.72

# One episode stretch, T = 4: r_t, V(o_t), and V of the true successor o_{t+1}.
REWARDS = np.array([1.0, 2.0, 3.0, 4.0])
VALUES = np.array([0.5, 1.0, 1.5, 2.0])
# boot_t = V_{t+1} where the episode goes on; at t = 1 the episode ends in the
# cases below and boot_1 = 7.0 is V(final observation) -- *not* V_2 = 1.5, the
# next episode's first value.
BOOT = np.array([1.0, 7.0, 2.0, 2.5])
BOOT_NO_END = np.array([1.0, 1.5, 2.0, 2.5])
NONE = np.zeros(4, bool)
AT_1 = np.array([False, True, False, False])

# deltas with no episode end: d_t = r_t + 0.9 * boot_t - V_t
#   d0 = 1 + 0.9*1.0 - 0.5 = 1.4;  d1 = 2 + 0.9*1.5 - 1.0 = 2.35
#   d2 = 3 + 0.9*2.0 - 1.5 = 3.3;  d3 = 4 + 0.9*2.5 - 2.0 = 4.25
# A3 = 4.25;  A2 = 3.3 + 0.72*4.25 = 6.36;  A1 = 2.35 + 0.72*6.36 = 6.9292
# A0 = 1.4 + 0.72*6.9292 = 6.389024
ADV_NO_END = [6.389024, 6.9292, 6.36, 4.25]
# terminated at t=1: d1 = 2 + 0 - 1.0 = 1.0, A1 = 1.0 (cut), A0 = 1.4 + 0.72*1.0 = 2.12
ADV_TERM = [2.12, 1.0, 6.36, 4.25]
# truncated at t=1: d1 = 2 + 0.9*7.0 - 1.0 = 7.3, A1 = 7.3 (cut), A0 = 1.4 + 0.72*7.3 = 6.656
ADV_TRUNC = [6.656, 7.3, 6.36, 4.25]

identity = lambda f: f  # noqa: E731
VARIANTS = pytest.mark.parametrize("variant", [identity, jax.jit], ids=["eager", "jit"])


def _f(x):
    return jnp.asarray(x, jnp.float32)


@VARIANTS
@pytest.mark.parametrize(
    "boot, term, trunc, expected",
    [
        (BOOT_NO_END, NONE, NONE, ADV_NO_END),
        (BOOT, AT_1, NONE, ADV_TERM),
        (BOOT, NONE, AT_1, ADV_TRUNC),
        (BOOT, AT_1, AT_1, ADV_TERM),  # terminated takes precedence
    ],
    ids=["no_end", "terminated", "truncated", "both"],
)
def test_gae_hand_computed(variant, boot, term, trunc, expected):
    gae = variant(R.gae_advantages)
    adv, ret = gae(_f(REWARDS), _f(VALUES), _f(boot), term, trunc, GAMMA, LAM)
    np.testing.assert_allclose(adv, expected, rtol=1e-5)
    np.testing.assert_allclose(ret, np.array(expected) + VALUES, rtol=1e-5)


@VARIANTS
@pytest.mark.parametrize(
    "boot, term, trunc, expected",
    [
        # G3 = 4 + 0.9*2.5 = 6.25;  G2 = 3 + 0.9*(0.2*2.0 + 0.8*6.25) = 7.86
        # G1 = 2 + 0.9*(0.2*1.5 + 0.8*7.86) = 2 + 0.9*6.588 = 7.9292
        # G0 = 1 + 0.9*(0.2*1.0 + 0.8*7.9292) = 1 + 0.9*6.54336 = 6.889024
        (BOOT_NO_END, NONE, NONE, [6.889024, 7.9292, 7.86, 6.25]),
        # G1 = 2 (terminated);  G0 = 1 + 0.9*(0.2*1.0 + 0.8*2.0) = 1 + 0.9*1.8 = 2.62
        (BOOT, AT_1, NONE, [2.62, 2.0, 7.86, 6.25]),
        # G1 = 2 + 0.9*7.0 = 8.3;  G0 = 1 + 0.9*(0.2*1.0 + 0.8*8.3) = 1 + 0.9*6.84 = 7.156
        (BOOT, NONE, AT_1, [7.156, 8.3, 7.86, 6.25]),
        (BOOT, AT_1, AT_1, [2.62, 2.0, 7.86, 6.25]),
    ],
    ids=["no_end", "terminated", "truncated", "both"],
)
def test_lambda_returns_hand_computed(variant, boot, term, trunc, expected):
    ret = variant(R.lambda_returns)(_f(REWARDS), _f(boot), term, trunc, GAMMA, LAM)
    np.testing.assert_allclose(ret, expected, rtol=1e-5)
    # Same numbers as GAE's returns (bootstrap_t = V_{t+1} inside episodes).
    _, gae_ret = R.gae_advantages(_f(REWARDS), _f(VALUES), _f(boot), term, trunc, GAMMA, LAM)
    np.testing.assert_allclose(ret, gae_ret, rtol=1e-5)


@VARIANTS
@pytest.mark.parametrize(
    "n, boot, term, trunc, expected",
    [
        # n=2: G0 = 1 + 0.9*2 + 0.81*1.5 = 4.015;  G1 = 2 + 0.9*3 + 0.81*2.0 = 6.32
        #      G2 = 3 + 0.9*4 + 0.81*2.5 = 8.625;  G3 = 4 + 0.9*2.5 = 6.25 (data end)
        (2, BOOT_NO_END, NONE, NONE, [4.015, 6.32, 8.625, 6.25]),
        # n=3: G0 = 1 + 1.8 + 0.81*3 + 0.729*2.0 = 6.688;  G1 = 2 + 2.7 + 0.81*4 + 0.729*2.5
        #      = 9.7625;  G2 = 8.625 (cut by the data end);  G3 = 6.25
        (3, BOOT_NO_END, NONE, NONE, [6.688, 9.7625, 8.625, 6.25]),
        # terminated at 1: G0 = 1 + 0.9*2 + 0 = 2.8;  G1 = 2
        (2, BOOT, AT_1, NONE, [2.8, 2.0, 8.625, 6.25]),
        # truncated at 1: G0 = 1 + 0.9*2 + 0.81*7.0 = 8.47;  G1 = 2 + 0.9*7.0 = 8.3
        (2, BOOT, NONE, AT_1, [8.47, 8.3, 8.625, 6.25]),
        (3, BOOT, NONE, AT_1, [8.47, 8.3, 8.625, 6.25]),
        (2, BOOT, AT_1, AT_1, [2.8, 2.0, 8.625, 6.25]),
        # n=1 is the one-step target: r + 0.9 * (1 - term) * boot
        (1, BOOT, AT_1, NONE, [1.9, 2.0, 4.8, 6.25]),
    ],
)
def test_n_step_hand_computed(variant, n, boot, term, trunc, expected):
    if variant is jax.jit:
        variant = functools.partial(jax.jit, static_argnames="n")
    ret = variant(R.n_step_returns)(_f(REWARDS), _f(boot), term, trunc, GAMMA, n=n)
    np.testing.assert_allclose(ret, expected, rtol=1e-5)


@VARIANTS
def test_discounted_returns_and_td_errors(variant):
    # Truncated at t=1, gamma = 0.9:
    #   G3 = 4 + 0.9*2.5 = 6.25;  G2 = 3 + 0.9*6.25 = 8.625
    #   G1 = 2 + 0.9*7.0 = 8.3 (final-observation bootstrap);  G0 = 1 + 0.9*8.3 = 8.47
    ret = variant(R.discounted_returns)(_f(REWARDS), _f(BOOT), NONE, AT_1, GAMMA)
    np.testing.assert_allclose(ret, [8.47, 8.3, 8.625, 6.25], rtol=1e-5)
    # Terminated at t=1: G1 = 2; G0 = 1 + 0.9*2 = 2.8
    ret = variant(R.discounted_returns)(_f(REWARDS), _f(BOOT), AT_1, NONE, GAMMA)
    np.testing.assert_allclose(ret, [2.8, 2.0, 8.625, 6.25], rtol=1e-5)
    # td: d1 = 2 + 0.9*7.0 - 1.0 = 7.3 (not terminated) or 2 - 1.0 = 1.0 (terminated)
    td = variant(R.td_errors)
    np.testing.assert_allclose(
        td(_f(REWARDS), _f(VALUES), _f(BOOT), NONE, GAMMA), [1.4, 7.3, 3.3, 4.25], rtol=1e-5
    )
    np.testing.assert_allclose(
        td(_f(REWARDS), _f(VALUES), _f(BOOT), AT_1, GAMMA), [1.4, 1.0, 3.3, 4.25], rtol=1e-5
    )


@VARIANTS
def test_limits(variant):
    r, v, b = _f(REWARDS), _f(VALUES), _f(BOOT)
    gae = variant(R.gae_advantages)
    # gamma = 0: A = r - V, returns = r.
    adv, ret = gae(r, v, b, AT_1, NONE, 0.0, LAM)
    np.testing.assert_allclose(adv, [0.5, 1.0, 1.5, 2.0])
    np.testing.assert_allclose(ret, REWARDS)
    # lambda = 0: A = deltas (the td errors above), lambda return = one-step target.
    adv, _ = gae(r, v, b, NONE, AT_1, GAMMA, 0.0)
    np.testing.assert_allclose(adv, [1.4, 7.3, 3.3, 4.25], rtol=1e-5)
    lam0 = variant(R.lambda_returns)(r, b, AT_1, NONE, GAMMA, 0.0)
    np.testing.assert_allclose(lam0, [1.9, 2.0, 4.8, 6.25], rtol=1e-5)  # r + 0.9*(1-term)*b
    # lambda = 1 without an episode end: G3 = 6.25, G2 = 3 + 0.9*6.25 = 8.625,
    # G1 = 2 + 0.9*8.625 = 9.7625, G0 = 1 + 0.9*9.7625 = 9.78625; A = G - V.
    mc = [9.78625, 9.7625, 8.625, 6.25]
    adv, ret = gae(r, v, _f(BOOT_NO_END), NONE, NONE, GAMMA, 1.0)
    np.testing.assert_allclose(ret, mc, rtol=1e-5)
    np.testing.assert_allclose(adv, np.array(mc) - VALUES, rtol=1e-5)
    disc = R.discounted_returns(r, _f(BOOT_NO_END), NONE, NONE, GAMMA)
    np.testing.assert_allclose(disc, mc, rtol=1e-5)
    # ... and with truncation the same identity holds.
    _, ret = gae(r, v, b, NONE, AT_1, GAMMA, 1.0)
    np.testing.assert_allclose(ret, [8.47, 8.3, 8.625, 6.25], rtol=1e-5)


@VARIANTS
def test_batch_with_different_ends(variant):
    # Columns: no end, terminated at 1, truncated at 1; each column alone is hand-computed above.
    r = _f(np.stack([REWARDS] * 3, 1))
    v = _f(np.stack([VALUES] * 3, 1))
    b = _f(np.stack([BOOT_NO_END, BOOT, BOOT], 1))
    term = np.stack([NONE, AT_1, NONE], 1)
    trunc = np.stack([NONE, NONE, AT_1], 1)
    adv, ret = variant(R.gae_advantages)(r, v, b, term, trunc, GAMMA, LAM)
    assert adv.shape == ret.shape == (4, 3)
    np.testing.assert_allclose(adv, np.stack([ADV_NO_END, ADV_TERM, ADV_TRUNC], 1), rtol=1e-5)
    lam = variant(R.lambda_returns)(r, b, term, trunc, GAMMA, LAM)
    np.testing.assert_allclose(lam, ret, rtol=1e-5)
    nstep = R.n_step_returns(r, b, term, trunc, GAMMA, 2)
    expected = np.stack(
        [[4.015, 6.32, 8.625, 6.25], [2.8, 2, 8.625, 6.25], [8.47, 8.3, 8.625, 6.25]], 1
    )
    np.testing.assert_allclose(nstep, expected, rtol=1e-5)


def test_vmapped_over_gamma():
    r, v, b = _f(REWARDS), _f(VALUES), _f(BOOT)
    gammas = jnp.array([0.0, 0.5, GAMMA])

    @jax.jit
    @functools.partial(jax.vmap, in_axes=(0, None))
    def sweep(gamma, lambda_):
        return R.gae_advantages(r, v, b, NONE, AT_1, gamma, lambda_)[0]

    adv = sweep(gammas, LAM)
    assert adv.shape == (3, 4)
    np.testing.assert_allclose(adv[0], REWARDS - VALUES)  # gamma = 0
    np.testing.assert_allclose(adv[2], ADV_TRUNC, rtol=1e-5)
    for i, g in enumerate([0.0, 0.5, GAMMA]):
        np.testing.assert_allclose(
            adv[i], R.gae_advantages(r, v, b, NONE, AT_1, g, LAM)[0], rtol=1e-6
        )
    lam_sweep = jax.vmap(lambda lam: R.lambda_returns(r, b, NONE, AT_1, GAMMA, lam))
    lam = lam_sweep(jnp.array([0.0, 1.0]))
    np.testing.assert_allclose(lam[0], [1.9, 8.3, 4.8, 6.25], rtol=1e-5)  # r + 0.9 * b
    np.testing.assert_allclose(lam[1], [8.47, 8.3, 8.625, 6.25], rtol=1e-5)


def test_vtrace():
    r, v, b = _f(REWARDS), _f(VALUES), _f(BOOT)
    # On-policy (ratios 1, clips >= 1): vs are the lambda = 1 returns.
    for term, trunc in [(NONE, NONE), (AT_1, NONE), (NONE, AT_1)]:
        boot = _f(BOOT_NO_END) if not (term.any() or trunc.any()) else b
        vs, pg = jax.jit(R.vtrace)(
            r, v, boot, term, trunc, jnp.zeros(4), GAMMA, clip=R.VTraceClip(rho=2.0)
        )
        np.testing.assert_allclose(vs, R.discounted_returns(r, boot, term, trunc, GAMMA), rtol=1e-5)
    # Off-policy, T = 2, gamma = 0.9, rho = [0.5, 2] clipped at 1 -> rho = c = [0.5, 1]:
    #   d0 = 0.5*(1 + 0.9*1.0 - 0.5) = 0.7;  d1 = 1*(2 + 0.9*2.0 - 1.0) = 2.8
    #   vs1 = 1.0 + 2.8 = 3.8;  vs0 = 0.5 + 0.7 + 0.9*0.5*2.8 = 2.46
    #   pg0 = 0.5*(1 + 0.9*3.8 - 0.5) = 1.96;  pg1 = 1*(2 + 0.9*2.0 - 1.0) = 2.8
    log_rhos = jnp.log(jnp.array([0.5, 2.0]))
    vs, pg = R.vtrace(
        _f([1.0, 2.0]), _f([0.5, 1.0]), _f([1.0, 2.0]), NONE[:2], NONE[:2], log_rhos, GAMMA
    )
    np.testing.assert_allclose(vs, [2.46, 3.8], rtol=1e-5)
    np.testing.assert_allclose(pg, [1.96, 2.8], rtol=1e-5)


def test_rejects_mismatched_shapes():
    with pytest.raises(AssertionError):
        R.gae_advantages(_f(REWARDS), _f(VALUES[:3]), _f(BOOT), NONE, NONE, GAMMA, LAM)
    with pytest.raises(ValueError):
        R.n_step_returns(_f(REWARDS), _f(BOOT), NONE, NONE, GAMMA, 0)


# --- property check against a plain numpy reference ------------------------------------


def _np_gae(r, v, b, term, trunc, gamma, lam):
    T = len(r)
    adv = np.zeros_like(r)
    for t in range(T):  # forward sum over the rest of the episode, straight from the definition
        total, weight = 0.0, 1.0
        for k in range(t, T):
            total += weight * (r[k] + gamma * (1 - term[k]) * b[k] - v[k])
            if term[k] or trunc[k]:
                break
            weight *= gamma * lam
        adv[t] = total
    return adv


def _np_n_step(r, b, term, trunc, gamma, n):
    T = len(r)
    out = np.zeros_like(r)
    for t in range(T):
        total, disc = 0.0, 1.0
        for k in range(t, min(t + n, T)):
            total += disc * r[k]
            disc *= gamma
            if term[k]:
                break
            if trunc[k] or k == min(t + n, T) - 1:
                total += disc * b[k]
                break
        out[t] = total
    return out


def _np_lambda(r, b, term, trunc, gamma, lam):
    # lambda-return as the (1 - lam)-weighted mixture of n-step returns, truncated at episode
    # ends: G = sum_{n=1}^{N-1} (1-lam) lam^{n-1} G^(n) + lam^{N-1} G^(N), N = steps to the cut.
    T = len(r)
    out = np.zeros_like(r)
    for t in range(T):
        end = next((k for k in range(t, T) if term[k] or trunc[k]), T - 1)
        N = end - t + 1
        g = [_np_n_step(r, b, term, trunc, gamma, n)[t] for n in range(1, N + 1)]
        mixture = sum((1 - lam) * lam ** (n - 1) * g[n - 1] for n in range(1, N))
        out[t] = mixture + lam ** (N - 1) * g[-1]
    return out


@pytest.mark.parametrize("seed", range(3))
def test_against_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    T, B, gamma, lam = 9, 4, 0.93, 0.7
    r, v, b = (rng.normal(size=(T, B)).astype(np.float32) for _ in range(3))
    term = rng.random((T, B)) < 0.2
    trunc = rng.random((T, B)) < 0.2
    adv, _ = jax.jit(R.gae_advantages)(r, v, b, term, trunc, gamma, lam)
    lam_ret = jax.jit(R.lambda_returns)(r, b, term, trunc, gamma, lam)
    n3 = R.n_step_returns(r, b, term, trunc, gamma, 3)
    for j in range(B):
        cols = (r[:, j], v[:, j], b[:, j], term[:, j], trunc[:, j])
        np.testing.assert_allclose(adv[:, j], _np_gae(*cols, gamma, lam), rtol=1e-4, atol=1e-5)
        no_v = (r[:, j], b[:, j], term[:, j], trunc[:, j])
        np.testing.assert_allclose(n3[:, j], _np_n_step(*no_v, gamma, 3), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(
            lam_ret[:, j], _np_lambda(*no_v, gamma, lam), rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_vtrace_at_an_episode_end(end):
    """T = 3, gamma = 0.9, lambda = 1, ratios [1, 0.5, 2] (rho = c = pg_rho = [1, 0.5, 1]),
    r = [1, 2, 3], V = [0.5, 1, 1.5], bootstrap = [4, 5, 6]; the episode ends at t = 1.
    terminated: d = [1 + 3.6 - .5, .5 (2 - 1), 3 + 5.4 - 1.5] = [4.1, .5, 6.9]; the trace stops
      at t = 1: vs = V + [4.1 + .9 * .5, .5, 6.9] = [5.05, 1.5, 8.4];
      pg = [1 + .9 * vs_1 - .5, .5 (2 - 1), 6.9] = [1.85, .5, 6.9].
    truncated: d_1 = .5 (2 + .9 * 5 - 1) = 2.75: vs = V + [4.1 + .9 * 2.75, 2.75, 6.9]
      = [7.075, 3.75, 8.4]; pg_1 bootstraps from its own final observation (5), not vs_2:
      pg = [.5 + .9 * 3.75, 2.75, 6.9] = [3.875, 2.75, 6.9]."""
    flags = jnp.array([False, True, False])
    none = jnp.zeros(3, bool)
    term, trunc = (flags, none) if end == "terminated" else (none, flags)
    vs, pg = R.vtrace(
        _f([1.0, 2.0, 3.0]),
        _f([0.5, 1.0, 1.5]),
        _f([4.0, 5.0, 6.0]),
        term,
        trunc,
        jnp.log(jnp.array([1.0, 0.5, 2.0])),
        0.9,
    )
    if end == "terminated":
        np.testing.assert_allclose(vs, [5.05, 1.5, 8.4], rtol=1e-5)
        np.testing.assert_allclose(pg, [1.85, 0.5, 6.9], rtol=1e-5)
    else:
        np.testing.assert_allclose(vs, [7.075, 3.75, 8.4], rtol=1e-5)
        np.testing.assert_allclose(pg, [3.875, 2.75, 6.9], rtol=1e-5)

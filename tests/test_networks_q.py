"""QNetwork's distributional, dueling, noisy and layer-norm options, and NoisyDense."""

from collections.abc import Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.parts import networks, torsos

OBS = jax.random.normal(jax.random.key(42), (5, 4))


class LegacyQNetwork(nn.Module):
    """QNetwork as it was before atoms/noisy/layer_norm, to check the defaults did not change."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    obs_ndim: int = 1
    dueling: bool = False

    @nn.compact
    def __call__(self, obs):
        features = torsos.MLP(self.hidden_sizes, self.activation, self.obs_ndim, orthogonal=False)(
            obs
        )
        if not self.dueling:
            return nn.Dense(self.num_actions)(features)
        value = nn.Dense(1)(features)
        advantage = nn.Dense(self.num_actions)(features)
        return value + advantage - advantage.mean(axis=-1, keepdims=True)


def _features(params, obs):
    """The one-hidden-layer relu torso computed by hand from the params."""
    layer = params["MLP_0"]["Dense_0"]
    return jax.nn.relu(obs @ layer["kernel"] + layer["bias"])


def _linear(layer, x):
    """A Dense (kernel/bias) or a NoisyDense at its mean weights (mu_w/mu_b)."""
    if "mu_w" in layer:
        return x @ layer["mu_w"] + layer["mu_b"]
    return x @ layer["kernel"] + layer["bias"]


@pytest.mark.parametrize("dueling", [False, True])
def test_defaults_unchanged(dueling):
    key = jax.random.key(0)
    new, old = (
        networks.QNetwork(3, (16, 8), "relu", 1, dueling),
        LegacyQNetwork(3, (16, 8), "relu", 1, dueling),
    )
    assert (new.num_atoms, new.noisy, new.layer_norm) == (1, False, False)
    p_new, p_old = new.init(key, OBS[:1]), old.init(key, OBS[:1])
    assert jax.tree.structure(p_new) == jax.tree.structure(p_old)  # same param names
    jax.tree.map(np.testing.assert_array_equal, p_new, p_old)  # same init from the same key
    out_new, out_old = new.apply(p_new, OBS), old.apply(p_new, OBS)
    assert out_new.shape == (5, 3)
    np.testing.assert_allclose(out_new, out_old, rtol=1e-6, atol=1e-7)
    assert set(flax.traverse_util.flatten_dict(p_new["params"], sep="/")) == (
        {
            "MLP_0/Dense_0/kernel",
            "MLP_0/Dense_0/bias",
            "MLP_0/Dense_1/kernel",
            "MLP_0/Dense_1/bias",
            "Dense_0/kernel",
            "Dense_0/bias",
        }
        | ({"Dense_1/kernel", "Dense_1/bias"} if dueling else set())
    )


@pytest.mark.parametrize("num_atoms", [1, 51])
@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("noisy", [False, True])
def test_output_shapes(num_atoms, dueling, noisy):
    net = networks.QNetwork(3, (8,), "relu", 1, dueling, num_atoms, noisy)
    params = net.init(jax.random.key(0), OBS[:1])  # no noise key needed
    tail = (3,) if num_atoms == 1 else (3, num_atoms)
    assert net.apply(params, OBS).shape == (5,) + tail
    assert net.apply(params, OBS[0]).shape == tail
    assert net.apply(params, OBS.reshape(5, 1, 4)).shape == (5, 1) + tail
    noisy_out = net.apply(params, OBS, noise=True, rngs={"noise": jax.random.key(1)})
    assert noisy_out.shape == (5,) + tail and bool(jnp.all(jnp.isfinite(noisy_out)))
    names = set(params["params"])
    assert any(n.startswith("NoisyDense") for n in names) == noisy
    if not noisy:  # noise is ignored by a network without noisy layers
        np.testing.assert_array_equal(noisy_out, net.apply(params, OBS))


@pytest.mark.parametrize("noisy", [False, True])
@pytest.mark.parametrize("num_atoms", [1, 7])
def test_dueling_with_atoms_by_hand(noisy, num_atoms):
    net = networks.QNetwork(3, (8,), "relu", 1, True, num_atoms, noisy)
    params = net.init(jax.random.key(0), OBS[:1])
    p = params["params"]
    head = "NoisyDense" if noisy else "Dense"
    feats = _features(p, OBS)
    value = _linear(p[f"{head}_0"], feats).reshape(5, 1, num_atoms)  # value stream [B, 1, K]
    advantage = _linear(p[f"{head}_1"], feats).reshape(
        5, 3, num_atoms
    )  # advantage stream [B, A, K]
    q = net.apply(params, OBS).reshape(5, 3, num_atoms)
    # the mean over actions of q is the value stream; what is left is the centred advantage
    np.testing.assert_allclose(q.mean(axis=1, keepdims=True), value, atol=1e-5)
    np.testing.assert_allclose(
        q - q.mean(axis=1, keepdims=True),
        advantage - advantage.mean(axis=1, keepdims=True),
        atol=1e-5,
    )


@pytest.mark.parametrize("noisy", [False, True])
def test_plain_head_with_atoms_by_hand(noisy):
    net = networks.QNetwork(3, (8,), "relu", 1, False, 5, noisy)
    params = net.init(jax.random.key(0), OBS[:1])
    p = params["params"]
    expected = _linear(p["NoisyDense_0" if noisy else "Dense_0"], _features(p, OBS)).reshape(
        5, 3, 5
    )  # action-major
    np.testing.assert_allclose(net.apply(params, OBS), expected, atol=1e-5)


def test_layer_norm_after_dense_before_activation():
    net = networks.QNetwork(2, (6,), "relu", 1, layer_norm=True)
    params = net.init(jax.random.key(0), OBS[:1])
    p = params["params"]
    assert set(p["MLP_0"]) == {"Dense_0", "LayerNorm_0"}
    h = OBS @ p["MLP_0"]["Dense_0"]["kernel"] + p["MLP_0"]["Dense_0"]["bias"]
    ln = p["MLP_0"]["LayerNorm_0"]  # initial scale 1, bias 0; epsilon 1e-6 (flax's default)
    h = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-6) * ln[
        "scale"
    ] + ln["bias"]
    expected = jax.nn.relu(h) @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    np.testing.assert_allclose(net.apply(params, OBS), expected, atol=1e-5)
    assert (
        "LayerNorm_0"
        not in networks.QNetwork(2, (6,)).init(jax.random.key(0), OBS[:1])["params"]["MLP_0"]
    )


def test_noisy_dense_init_statistics_and_bounds():
    p, q, sigma0 = 400, 300, 0.5
    params = networks.NoisyDense(q, sigma0).init(jax.random.key(0), jnp.zeros((1, p)))["params"]
    assert {k: v.shape for k, v in params.items()} == {
        "mu_w": (p, q),
        "mu_b": (q,),
        "sigma_w": (p, q),
        "sigma_b": (q,),
    }
    bound = 1.0 / np.sqrt(p)  # 0.05
    for name in ("mu_w", "mu_b"):
        x = np.asarray(params[name])
        assert x.dtype == np.float32 and np.abs(x).max() <= bound
        assert np.abs(x).max() > 0.9 * bound  # spans the interval
    mu_w = np.asarray(params["mu_w"])  # 120000 draws of U(-b, b): mean 0, variance b^2 / 3
    assert abs(mu_w.mean()) < 0.01 * bound
    np.testing.assert_allclose(mu_w.var(), bound**2 / 3, rtol=0.02)
    np.testing.assert_allclose(params["sigma_w"], sigma0 / np.sqrt(p))  # 0.5 / 20 = 0.025
    np.testing.assert_allclose(params["sigma_b"], sigma0 / np.sqrt(p))
    other = networks.NoisyDense(q, 0.1).init(jax.random.key(0), jnp.zeros((1, p)))["params"]
    np.testing.assert_allclose(other["sigma_w"], 0.1 / 20)
    assert not np.array_equal(
        params["mu_w"],
        networks.NoisyDense(q).init(jax.random.key(1), jnp.zeros((1, p)))["params"]["mu_w"],
    )


def test_noisy_dense_without_noise_is_the_mean_layer():
    layer = networks.NoisyDense(3)
    x = jax.random.normal(jax.random.key(1), (6, 4))
    params = layer.init(jax.random.key(0), x)
    p = params["params"]
    out = layer.apply(params, x)
    np.testing.assert_allclose(out, x @ p["mu_w"] + p["mu_b"], atol=1e-6)
    np.testing.assert_array_equal(out, layer.apply(params, x))  # deterministic
    np.testing.assert_array_equal(
        out, layer.apply(params, x, rngs={"noise": jax.random.key(5)})
    )  # key unused
    np.testing.assert_array_equal(out, jax.jit(layer.apply)(params, x))


def test_noisy_dense_keys():
    layer = networks.NoisyDense(3)
    x = jax.random.normal(jax.random.key(1), (6, 4))
    params = layer.init(jax.random.key(0), x)
    noisy = jax.jit(lambda k: layer.apply(params, x, noise=True, rngs={"noise": k}))
    a, a_again, b = noisy(jax.random.key(7)), noisy(jax.random.key(7)), noisy(jax.random.key(8))
    np.testing.assert_array_equal(a, a_again)
    assert not np.allclose(a, b)
    assert not np.allclose(a, layer.apply(params, x))
    with pytest.raises(flax.errors.InvalidRngError):  # noise needs a "noise" key
        layer.apply(params, x, noise=True)


def test_noisy_dense_factorised_noise_by_hand():
    layer = networks.NoisyDense(3, sigma0=0.5)
    x = np.asarray(jax.random.normal(jax.random.key(1), (6, 4)))
    params = layer.init(jax.random.key(0), x)
    p = jax.tree.map(np.asarray, params["params"])
    # perturb sigma so that both noise terms matter with distinct per-entry scales
    p["sigma_w"] = p["sigma_w"] * (1.0 + np.arange(12, dtype=np.float32).reshape(4, 3))
    p["sigma_b"] = p["sigma_b"] * np.array([1.0, 2.0, 3.0], np.float32)
    out, state = layer.apply(
        {"params": p}, x, noise=True, rngs={"noise": jax.random.key(3)}, mutable=["intermediates"]
    )
    eps_in = np.asarray(state["intermediates"]["eps_in"][0])  # the standard normals the layer drew
    eps_out = np.asarray(state["intermediates"]["eps_out"][0])
    assert eps_in.shape == (4,) and eps_out.shape == (3,)
    f_in = np.sign(eps_in) * np.sqrt(np.abs(eps_in))  # f(x) = sign(x) sqrt|x|
    f_out = np.sign(eps_out) * np.sqrt(np.abs(eps_out))
    w = p["mu_w"] + p["sigma_w"] * np.outer(
        f_in, f_out
    )  # w_ij = mu_ij + sigma_ij f(eps_in_i) f(eps_out_j)
    b = p["mu_b"] + p["sigma_b"] * f_out
    np.testing.assert_allclose(out, x @ w + b, atol=1e-5)
    # one noise draw shared by every row: each row alone with the same key gives the same output
    for i in range(6):
        np.testing.assert_allclose(
            layer.apply({"params": p}, x[i], noise=True, rngs={"noise": jax.random.key(3)}),
            out[i],
            atol=1e-6,
        )
    # sigma = 0 removes the noise
    zero = dict(p, sigma_w=np.zeros_like(p["sigma_w"]), sigma_b=np.zeros_like(p["sigma_b"]))
    np.testing.assert_allclose(
        layer.apply({"params": zero}, x, noise=True, rngs={"noise": jax.random.key(3)}),
        x @ p["mu_w"] + p["mu_b"],
        atol=1e-6,
    )


def test_noisy_qnetwork_noise_and_greedy():
    net = networks.QNetwork(3, (8,), "relu", 1, True, 5, True)
    params = net.init(jax.random.key(0), OBS[:1])
    greedy = net.apply(params, OBS)
    np.testing.assert_array_equal(greedy, net.apply(params, OBS, noise=False))
    noisy = jax.jit(lambda k: net.apply(params, OBS, noise=True, rngs={"noise": k}))
    a, a_again, b = noisy(jax.random.key(1)), noisy(jax.random.key(1)), noisy(jax.random.key(2))
    np.testing.assert_array_equal(a, a_again)
    assert not np.allclose(a, b) and not np.allclose(a, greedy)
    # the two dueling streams get independent noise (different keys from the one "noise" stream)
    _, state = net.apply(
        params, OBS, noise=True, rngs={"noise": jax.random.key(1)}, mutable=["intermediates"]
    )
    eps = state["intermediates"]
    assert not np.allclose(eps["NoisyDense_0"]["eps_in"][0], eps["NoisyDense_1"]["eps_in"][0])

"""Spaces: jittable/vmappable ``sample`` and ``contains``, shapes, equality, ``flat_dim``."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.core import spaces
from jrl.core.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple, flat_dim, zeros_like_space

F32_MAX = float(np.finfo(np.float32).max)
KEYS = jax.random.split(jax.random.key(0), 2000)

# Few spaces, each covering several cases (every compiled sampler costs seconds on a small CPU).
SPACES = {
    "discrete": Discrete(5),
    # three dims in [-2, 3], then per-dimension bounds
    "box_bounded": Box(
        np.array([-2.0, -2.0, -2.0, -1.0, 0.0, 10.0]), np.array([3.0, 3.0, 3.0, 1.0, 0.5, 20.0])
    ),
    # bounded, half-bounded below, half-bounded above, unbounded
    "box_mixed": Box(np.array([-1.0, 0.0, -np.inf, -np.inf]), np.array([1.0, np.inf, 5.0, np.inf])),
    "box_huge": Box(-F32_MAX, F32_MAX, (3,)),
    "box_uint8_image": Box(0, 255, (4, 4, 3), jnp.uint8),
    # integers in [-1, 1] (3 dims) and in [2, inf) (2 dims)
    "box_int": Box(
        np.array([-1, -1, -1, 2, 2]), np.array([1, 1, 1, np.inf, np.inf]), dtype=jnp.int32
    ),
    "multidiscrete": MultiDiscrete([2, 3, 7]),
    "tuple": Tuple([Discrete(3, dtype=jnp.uint8), Box(0.0, 1.0, ()), Box(-np.inf, np.inf, (2, 2))]),
    "dict": Dict(
        {"pos": Box(-1.0, 1.0, (2,)), "inner": Tuple([Discrete(4), MultiDiscrete([2, 2])])}
    ),
}


@functools.lru_cache(maxsize=None)
def _all_samples():
    """Every space in SPACES sampled with every key of KEYS, and checked, in one
    compiled program (one compilation keeps this file fast on a small CPU)."""

    @jax.jit
    def run(keys):
        out = {}
        for name, space in SPACES.items():
            xs = jax.vmap(space.sample)(keys)
            out[name] = (xs, jax.vmap(space.contains)(xs))
        return out

    return jax.device_get(run(KEYS))


def _vsample(name):
    return _all_samples()[name][0]


# ---------------------------------------------------------------------------
# sample lands in the space
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SPACES))
def test_samples_are_contained_jitted_and_vmapped(name):
    space = SPACES[name]
    xs, ok = _all_samples()[name]
    assert ok.shape == (len(KEYS),)
    assert ok.all()
    for leaf, sub in zip(jax.tree.leaves(xs), _leaf_spaces(space), strict=True):
        assert leaf.shape == (len(KEYS),) + sub.shape
        assert leaf.dtype == sub.dtype
        assert np.isfinite(leaf.astype(np.float32)).all()


@pytest.mark.parametrize("name", ["discrete", "box_int"])
def test_sample_not_jitted_matches_jitted(name):
    space = SPACES[name]
    x = space.sample(KEYS[7])
    assert bool(space.contains(x))
    jax.tree.map(np.testing.assert_array_equal, x, jax.tree.map(lambda l: l[7], _vsample(name)))


def _leaf_spaces(space):
    """Leaf spaces in JAX's pytree order (dicts sorted by key)."""
    if isinstance(space, Tuple):
        return [s for sub in space.spaces for s in _leaf_spaces(sub)]
    if isinstance(space, Dict):
        return [s for k in sorted(space.spaces) for s in _leaf_spaces(space.spaces[k])]
    return [space]


def test_sample_depends_on_key_and_is_deterministic():
    space = Box(0.0, 1.0, (8,))
    sample = jax.jit(space.sample)
    a, b = sample(jax.random.key(1)), sample(jax.random.key(2))
    np.testing.assert_array_equal(a, sample(jax.random.key(1)))
    assert not np.array_equal(a, b)


def test_discrete_sample_covers_every_value_uniformly():
    xs = np.asarray(_vsample("discrete"))
    counts = np.bincount(xs, minlength=5)
    assert counts.shape == (5,)
    # 2000 draws: each value ~400 (binomial sd ~18).
    assert counts.min() > 300 and counts.max() < 500


def test_multidiscrete_sample_covers_each_component_range():
    xs = np.asarray(_vsample("multidiscrete"))
    for i, n in enumerate([2, 3, 7]):
        assert set(np.unique(xs[:, i]).tolist()) == set(range(n))


def test_box_bounded_sample_is_uniform_over_the_interval():
    xs = np.asarray(_vsample("box_bounded"))[:, :3]
    assert xs.min() >= -2.0 and xs.max() <= 3.0
    assert xs.min() < -1.9 and xs.max() > 2.9  # reaches both ends
    np.testing.assert_allclose(xs.mean(), 0.5, atol=0.1)  # uniform mean (low + high) / 2
    np.testing.assert_allclose(
        xs.var(), 25.0 / 12.0, rtol=0.1
    )  # uniform variance (high - low)^2 / 12


def test_box_per_dimension_bounds_respected():
    xs = np.asarray(_vsample("box_bounded"))[:, 3:]
    np.testing.assert_array_less([-1.0 - 1e-6, -1e-6, 10.0 - 1e-6], xs.min(0))
    np.testing.assert_array_less(xs.max(0), [1.0 + 1e-6, 0.5 + 1e-6, 20.0 + 1e-6])
    assert xs[:, 2].min() < 10.2 and xs[:, 2].max() > 19.8


def test_box_half_and_unbounded_samples_extend_beyond_any_unit_interval():
    xs = np.asarray(_vsample("box_mixed"))
    assert xs[:, 0].min() >= -1 and xs[:, 0].max() <= 1
    assert xs[:, 0].min() < -0.99 and xs[:, 0].max() > 0.99
    assert xs[:, 1].min() >= 0 and xs[:, 1].max() > 3.0
    assert xs[:, 2].max() <= 5 and xs[:, 2].min() < 2.0
    assert (xs[:, 3] < -1.0).any() and (xs[:, 3] > 1.0).any()
    unbounded = np.asarray(_vsample("tuple")[2])
    assert unbounded.shape == (len(KEYS), 2, 2)
    assert (unbounded < -1.0).any() and (unbounded > 1.0).any()
    np.testing.assert_allclose(unbounded.mean(), 0.0, atol=0.05)  # standard normal


def test_box_with_float32_max_bounds_samples_finite_values():
    # Gymnasium-style "unbounded" Box: finite bounds at the float32 limit.
    space = SPACES["box_huge"]
    xs = np.asarray(_vsample("box_huge"))
    assert np.isfinite(xs).all()
    assert bool(jax.vmap(space.contains)(xs).all())
    assert (xs < 0).any() and (xs > 0).any()


def test_box_integer_sample_covers_both_ends_uniformly():
    xs = np.asarray(_vsample("box_int"))
    assert xs.dtype == np.int32
    bounded = xs[:, :3]
    counts = np.array([(bounded == v).sum() for v in (-1, 0, 1)])
    assert counts.sum() == bounded.size
    # 6000 draws over 3 values: ~2000 each (sd ~37).
    assert counts.min() > 1800 and counts.max() < 2200, counts
    half = xs[:, 3:]
    assert half.min() == 2 and half.max() > 4


def test_box_uint8_image_sample():
    xs = np.asarray(_vsample("box_uint8_image"))
    assert xs.shape == (len(KEYS), 4, 4, 3) and xs.dtype == np.uint8
    assert xs.min() == 0 and xs.max() == 255
    np.testing.assert_allclose(xs.mean(), 127.5, atol=2.0)


def test_tuple_and_dict_sample_structure():
    t = jax.tree.map(lambda l: l[0], _vsample("tuple"))
    assert isinstance(t, tuple) and len(t) == 3
    assert (
        t[0].shape == () and t[0].dtype == jnp.uint8 and t[1].shape == () and t[2].shape == (2, 2)
    )
    d = jax.tree.map(lambda l: l[0], _vsample("dict"))
    assert isinstance(d, dict) and set(d) == {"pos", "inner"}
    assert d["pos"].shape == (2,) and d["pos"].dtype == jnp.float32
    assert (
        isinstance(d["inner"], tuple)
        and d["inner"][0].dtype == jnp.int32
        and d["inner"][1].shape == (2,)
    )


def test_dict_sample_does_not_depend_on_key_insertion_order():
    a = Dict({"a": Box(0.0, 1.0, (2,)), "b": Box(0.0, 1.0, (2,))})
    b = Dict({"b": Box(0.0, 1.0, (2,)), "a": Box(0.0, 1.0, (2,))})
    assert a == b
    sa, sb = jax.jit(lambda k: (a.sample(k), b.sample(k)))(jax.random.key(5))
    np.testing.assert_array_equal(sa["a"], sb["a"])
    np.testing.assert_array_equal(sa["b"], sb["b"])
    assert not np.array_equal(sa["a"], sa["b"])


# ---------------------------------------------------------------------------
# contains: true and false cases
# ---------------------------------------------------------------------------

CONTAINS_CASES = [
    # (space, x, expected)
    (Discrete(3), jnp.asarray(0, jnp.int32), True),
    (Discrete(3), jnp.asarray(2, jnp.int32), True),
    (Discrete(3), 2, True),
    (Discrete(3), jnp.asarray(3, jnp.int32), False),  # n is outside
    (Discrete(3), jnp.asarray(-1, jnp.int32), False),
    (Discrete(3), jnp.asarray(1.0, jnp.float32), False),  # wrong dtype
    (Discrete(3), jnp.asarray(True), False),  # bool is not an integer
    (Discrete(3), jnp.asarray([1], jnp.int32), False),  # wrong shape
    (Discrete(3), jnp.asarray(1, jnp.uint8), True),
    (Box(-1.0, 1.0, (2,)), jnp.asarray([-1.0, 1.0]), True),  # bounds are inclusive
    (Box(-1.0, 1.0, (2,)), jnp.asarray([0.0, 1.001]), False),
    (Box(-1.0, 1.0, (2,)), jnp.asarray([-1.001, 0.0]), False),
    (Box(-1.0, 1.0, (2,)), jnp.asarray([0.0, 0.0, 0.0]), False),  # wrong shape
    (Box(-1.0, 1.0, (2,)), jnp.asarray([[0.0, 0.0]]), False),  # extra batch dim
    (Box(-1.0, 1.0, (2,)), jnp.asarray([0.0, jnp.nan]), False),
    (Box(-np.inf, np.inf, (2,)), jnp.asarray([1e30, -1e30]), True),
    (Box(0.0, np.inf, ()), jnp.asarray(-1e-3), False),
    (Box(0.0, np.inf, ()), jnp.asarray(7.0), True),
    (Box(np.array([0.0, 5.0]), np.array([1.0, 6.0])), jnp.asarray([0.5, 5.5]), True),
    (
        Box(np.array([0.0, 5.0]), np.array([1.0, 6.0])),
        jnp.asarray([5.5, 0.5]),
        False,
    ),  # per-dim bounds
    (Box(0, 255, (2, 2), jnp.uint8), jnp.full((2, 2), 255, jnp.uint8), True),
    (Box(0, 255, (2, 2), jnp.uint8), jnp.full((2, 2), 256, jnp.int32), False),
    (Box(0, 255, (2, 2), jnp.uint8), jnp.zeros((2, 3), jnp.uint8), False),
    (MultiDiscrete([2, 3]), jnp.asarray([1, 2], jnp.int32), True),
    (MultiDiscrete([2, 3]), jnp.asarray([2, 0], jnp.int32), False),
    (MultiDiscrete([2, 3]), jnp.asarray([0, -1], jnp.int32), False),
    (MultiDiscrete([2, 3]), jnp.asarray([1.0, 2.0]), False),  # wrong dtype
    (MultiDiscrete([2, 3]), jnp.asarray([1, 2, 0], jnp.int32), False),  # wrong shape
    (Tuple([Discrete(2), Box(0.0, 1.0, (1,))]), (jnp.asarray(1), jnp.asarray([0.5])), True),
    (Tuple([Discrete(2), Box(0.0, 1.0, (1,))]), [jnp.asarray(1), jnp.asarray([0.5])], True),
    (Tuple([Discrete(2), Box(0.0, 1.0, (1,))]), (jnp.asarray(2), jnp.asarray([0.5])), False),
    (Tuple([Discrete(2), Box(0.0, 1.0, (1,))]), (jnp.asarray(1), jnp.asarray([1.5])), False),
    (Tuple([Discrete(2), Box(0.0, 1.0, (1,))]), (jnp.asarray(1),), False),  # wrong length
    (
        Dict({"a": Discrete(2), "b": Box(0.0, 1.0, ())}),
        {"a": jnp.asarray(1), "b": jnp.asarray(0.5)},
        True,
    ),
    (
        Dict({"a": Discrete(2), "b": Box(0.0, 1.0, ())}),
        {"a": jnp.asarray(1), "b": jnp.asarray(2.0)},
        False,
    ),
    (Dict({"a": Discrete(2), "b": Box(0.0, 1.0, ())}), {"a": jnp.asarray(1)}, False),  # missing key
    (
        Dict({"a": Discrete(2), "b": Box(0.0, 1.0, ())}),
        {"a": jnp.asarray(1), "b": jnp.asarray(0.5), "c": jnp.asarray(0)},
        False,
    ),  # extra key
    (Dict({"a": Discrete(2)}), (jnp.asarray(1),), False),  # not a mapping
]


@functools.lru_cache(maxsize=None)
def _contains_jitted():
    """``contains`` of every case in CONTAINS_CASES, in one compiled program."""
    return jax.device_get(
        jax.jit(lambda xs: [sp.contains(x) for (sp, _, _), x in zip(CONTAINS_CASES, xs)])(
            [x for _, x, _ in CONTAINS_CASES]
        )
    )


@pytest.mark.parametrize("case", range(len(CONTAINS_CASES)))
def test_contains(case):
    space, x, expected = CONTAINS_CASES[case]
    out = space.contains(x)  # not jitted
    assert jnp.shape(out) == ()
    assert jnp.asarray(out).dtype == jnp.bool_
    assert bool(out) is expected
    out_jit = _contains_jitted()[case]
    assert out_jit.shape == () and out_jit.dtype == np.bool_
    assert bool(out_jit) is expected


def test_contains_vmapped_mixes_true_and_false():
    space = Box(0.0, 1.0, (2,))
    xs = jnp.asarray([[0.5, 0.5], [1.5, 0.5], [0.0, 1.0], [0.2, -0.1]])
    np.testing.assert_array_equal(jax.jit(jax.vmap(space.contains))(xs), [True, False, True, False])
    d = Discrete(4)
    np.testing.assert_array_equal(
        jax.vmap(d.contains)(jnp.asarray([-1, 0, 3, 4])), [False, True, True, False]
    )


def test_empty_tuple_and_dict_contain_their_only_element():
    assert bool(Tuple([]).contains(()))
    assert bool(Dict({}).contains({}))
    assert not bool(Tuple([]).contains((1,)))


# ---------------------------------------------------------------------------
# shapes, dtypes, attributes, constructor errors
# ---------------------------------------------------------------------------


def test_discrete_attributes():
    d = Discrete(4)
    assert d.n == 4 and d.shape == () and d.dtype == jnp.int32
    assert Discrete(4, dtype=jnp.uint8).dtype == jnp.uint8
    assert repr(d) == "Discrete(4)"


def test_box_attributes_and_broadcast_bounds():
    b = Box(-1.0, 2.0, (2, 3))
    assert b.shape == (2, 3) and b.dtype == jnp.float32
    assert b.low.shape == (2, 3) and b.high.shape == (2, 3)
    assert (b.low == -1.0).all() and (b.high == 2.0).all()
    assert b.bounded
    assert not Box(0.0, np.inf, (2,)).bounded
    # shape inferred from array bounds
    b2 = Box(np.zeros((3,)), np.ones((3,)))
    assert b2.shape == (3,)
    # bounds broadcast against each other
    b3 = Box(0.0, np.array([1.0, 2.0]))
    assert b3.shape == (2,) and b3.low.tolist() == [0.0, 0.0]
    img = Box(0, 255, (84, 84, 3), jnp.uint8)
    assert img.dtype == jnp.uint8 and img.shape == (84, 84, 3)


def test_multidiscrete_tuple_dict_attributes():
    m = MultiDiscrete([2, 3, 7])
    assert m.shape == (3,) and m.dtype == jnp.int32 and m.nvec.tolist() == [2, 3, 7]
    t = Tuple([Discrete(2), Box(0.0, 1.0, (3,))])
    assert len(t) == 2 and t[0] == Discrete(2) and t[1].shape == (3,)
    assert t.shape == () and t.dtype is None
    d = Dict({"b": Discrete(2), "a": Box(0.0, 1.0, (3,))})
    assert d["a"].shape == (3,) and d["b"] == Discrete(2)
    assert list(d.spaces) == ["a", "b"]  # sorted like JAX's dict flattening
    assert d.shape == () and d.dtype is None


def test_constructor_errors():
    with pytest.raises(ValueError):
        Discrete(0)
    with pytest.raises(ValueError):
        Box(1.0, 0.0, (2,))  # low > high
    with pytest.raises(ValueError):
        Box(np.zeros(3), np.ones(3), (2,))  # bounds do not fit shape
    with pytest.raises(ValueError):
        MultiDiscrete([])
    with pytest.raises(ValueError):
        MultiDiscrete([2, 0])
    with pytest.raises(ValueError):
        MultiDiscrete([[2, 2]])


def test_zeros_like_space():
    z = zeros_like_space(
        Dict({"a": Box(0, 255, (2, 2), jnp.uint8), "b": Tuple([Discrete(3), Box(-1.0, 1.0, (3,))])})
    )
    assert z["a"].shape == (2, 2) and z["a"].dtype == jnp.uint8
    assert z["b"][0].shape == () and z["b"][0].dtype == jnp.int32
    assert z["b"][1].shape == (3,) and z["b"][1].dtype == jnp.float32


# ---------------------------------------------------------------------------
# equality and hashing
# ---------------------------------------------------------------------------

EQUAL_PAIRS = [
    (Discrete(3), Discrete(3)),
    (Box(0.0, 1.0, (2,)), Box(np.zeros(2), np.ones(2))),
    (Box(0, 255, (2,), jnp.uint8), Box(0, 255, (2,), jnp.uint8)),
    (MultiDiscrete([2, 3]), MultiDiscrete(np.array([2, 3]))),
    (Tuple([Discrete(2), Box(0.0, 1.0, ())]), Tuple((Discrete(2), Box(0.0, 1.0, ())))),
    (Dict({"a": Discrete(2), "b": Discrete(3)}), Dict({"b": Discrete(3), "a": Discrete(2)})),
]

UNEQUAL_PAIRS = [
    (Discrete(3), Discrete(4)),
    (Discrete(3), Discrete(3, dtype=jnp.uint8)),
    (Discrete(2), MultiDiscrete([2])),
    (Box(0.0, 1.0, (2,)), Box(0.0, 1.0, (3,))),
    (Box(0.0, 1.0, (2,)), Box(0.0, 2.0, (2,))),
    (Box(0.0, 1.0, (2,)), Box(-1.0, 1.0, (2,))),
    (Box(0, 255, (2,), jnp.uint8), Box(0, 255, (2,), jnp.float32)),
    (MultiDiscrete([2, 3]), MultiDiscrete([3, 2])),
    (MultiDiscrete([2, 3]), MultiDiscrete([2, 3], dtype=jnp.uint8)),
    (Tuple([Discrete(2)]), Tuple([Discrete(3)])),
    (Tuple([Discrete(2)]), Tuple([Discrete(2), Discrete(2)])),
    (Dict({"a": Discrete(2)}), Dict({"b": Discrete(2)})),
    (Dict({"a": Discrete(2)}), Dict({"a": Discrete(3)})),
    (Tuple([Discrete(2)]), Dict({"0": Discrete(2)})),
]


@pytest.mark.parametrize("a,b", EQUAL_PAIRS)
def test_equal_spaces_have_equal_hashes(a, b):
    assert a == b and b == a
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


@pytest.mark.parametrize("a,b", UNEQUAL_PAIRS)
def test_unequal_spaces(a, b):
    assert a != b and b != a


# ---------------------------------------------------------------------------
# flat_dim
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "space,expected",
    [
        (Discrete(7), 1),
        (Box(0.0, 1.0, ()), 1),
        (Box(0.0, 1.0, (2, 3)), 6),
        (Box(0, 255, (84, 84, 4), jnp.uint8), 84 * 84 * 4),
        (MultiDiscrete([2, 3, 4]), 3),
        (Tuple([Discrete(3), Box(0.0, 1.0, (2, 3))]), 7),
        (Dict({"a": Box(0.0, 1.0, (5,)), "b": Tuple([Discrete(2), MultiDiscrete([2, 2])])}), 8),
    ],
)
def test_flat_dim(space, expected):
    assert flat_dim(space) == expected


def test_flat_dim_unsupported_raises():
    with pytest.raises(TypeError):
        flat_dim(spaces.Space())

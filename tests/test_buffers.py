"""Replay buffers, their sum tree, the n-step accumulator and rollout minibatches: hand-computed
contracts, with and without jit."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.core.types import Transition
from jrl.ops import returns as R
from jrl.parts import buffers as B
from jrl.parts import minibatches, nstep, sum_tree

identity = lambda f: f  # noqa: E731
VARIANTS = pytest.mark.parametrize("variant", [identity, jax.jit], ids=["eager", "jit"])

# chi-square 0.999 quantiles (scipy.stats.chi2.ppf(0.999, df)), hard-coded to avoid scipy
CHI2_999 = {4: 18.467, 5: 20.515}


def _transition(value, action):
    """A tiny Transition whose every field encodes ``value`` (float [...]) and ``action``."""
    value = jnp.asarray(value, jnp.float32)
    return Transition(
        observation=jnp.stack([value, -value], -1),
        action=jnp.asarray(action, jnp.int32),
        reward=value,
        terminated=value > 1e9,
        truncated=value < -1e9,
        next_observation=jnp.stack([value + 0.5, 0 * value], -1),
        extras={"v": value},
    )


ITEM = _transition(0.0, 0)  # one unbatched example: observation [2], action [], ...


def test_public_api():
    for module in (B, minibatches, nstep, sum_tree):
        for name in module.__all__:
            assert hasattr(module, name), name
    assert B.uniform_buffer(4).update_priorities is None
    assert B.prioritized_buffer(4).update_priorities is not None


# ----------------------------------------------------------------------------- uniform


@VARIANTS
def test_uniform_circular_wraparound(variant):
    buf = B.uniform_buffer(5)
    add = variant(buf.add)
    state = buf.init(ITEM)
    assert state.storage.observation.shape == (5, 2) and state.storage.action.dtype == jnp.int32
    assert not buf.can_sample(state, 1)
    # batches of 2 into capacity 5 (2 does not divide 5): slots 0,1 | 2,3 | 4,0 | 1,2
    for i in range(4):
        state = add(state, _transition([2.0 * i, 2.0 * i + 1], [2 * i, 2 * i + 1]))
    np.testing.assert_array_equal(state.storage.action, [5, 6, 7, 3, 4])
    np.testing.assert_array_equal(state.storage.observation[:, 0], [5, 6, 7, 3, 4])
    np.testing.assert_array_equal(state.storage.extras["v"], [5, 6, 7, 3, 4])
    assert int(state.position) == 3 and int(state.size) == 5
    assert bool(buf.can_sample(state, 5)) and not bool(buf.can_sample(state, 6))


def test_uniform_samples_filled_slots_uniformly():
    buf = B.uniform_buffer(8)
    state = buf.add(buf.init(ITEM), _transition(jnp.arange(5.0) * 10, jnp.arange(5)))  # slots 0..4
    assert int(state.size) == 5
    assert bool(buf.can_sample(state, 5)) and not bool(buf.can_sample(state, 6))
    n = 20_000
    s = jax.jit(buf.sample, static_argnums=2)(state, jax.random.key(0), n)
    idx = np.asarray(s.indices)
    assert s.indices.dtype == jnp.int32 and idx.min() >= 0 and idx.max() <= 4  # never slots 5..7
    np.testing.assert_array_equal(s.items.action, idx)  # items are the sampled slots
    np.testing.assert_array_equal(s.items.observation[:, 0], idx * 10.0)
    np.testing.assert_array_equal(s.weights, np.ones(n, np.float32))
    counts = np.bincount(idx, minlength=5)
    chi2 = ((counts - n / 5) ** 2 / (n / 5)).sum()
    assert chi2 < CHI2_999[4], counts


def test_add_rejects_bad_batches():
    buf = B.uniform_buffer(3)
    state = buf.init(ITEM)
    with pytest.raises(ValueError, match="cannot add 4 items at once to a buffer of capacity 3;"):
        buf.add(state, _transition(jnp.zeros(4), jnp.zeros(4)))
    with pytest.raises(ValueError, match="expected a leaf of shape"):
        buf.add(state, ITEM)  # no batch axis
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        B.uniform_buffer(0)
    with pytest.raises(ValueError, match="alpha"):
        B.prioritized_buffer(4, alpha=-1.0)
    with pytest.raises(ValueError, match="sequence_length 6 exceeds capacity_steps 5"):
        B.trajectory_buffer(5, 2, 6)
    with pytest.raises(ValueError, match="n must be a positive int"):
        nstep.nstep_accumulator(0, 0.9)


# ----------------------------------------------------------------------------- prioritised


K = sum_tree._ARITY  # the sum tree's children per node


def _numpy_tree(leaves, capacity):
    """The flat sum tree over ``leaves`` (``[capacity]``) built in NumPy float32, bottom-up:
    each level padded with zeros to whole rows of K siblings, every parent the pairwise sum
    of its row (``(c0 + c1) + (c2 + c3)``, ...), levels stored leaves first, the root last."""
    level = np.asarray(leaves, np.float32)
    assert level.shape == (capacity,)
    stored = []
    while True:
        if level.size == 1 and stored:
            stored.append(np.concatenate([np.zeros(K - 1, np.float32), level]))  # root's row
            break
        if level.size == 1:  # a single slot: the leaf is the root
            stored.append(level)
            break
        rows = np.concatenate([level, np.zeros(-level.size % K, np.float32)]).reshape(-1, K)
        stored.append(rows.ravel())
        while rows.shape[1] > 1:
            rows = rows[:, 0::2] + rows[:, 1::2]
        level = rows[:, 0]
    return np.concatenate(stored)


def _check_tree(tree, capacity):
    """Every internal node is the (pairwise) sum of its children, bit for bit, and every
    padding entry is zero: the tree equals the one NumPy builds from its leaves."""
    tree = np.asarray(tree)
    assert tree.shape == (sum_tree.sum_tree_size(capacity),)
    np.testing.assert_array_equal(tree, _numpy_tree(tree[:capacity], capacity))


def test_sum_tree_totals_updates_and_new_items_at_max_priority():
    # jit only: the other prioritised tests run add/update/sample eagerly
    alpha = 0.6
    buf = B.prioritized_buffer(5, alpha=alpha, eps=0.0)
    add, update = jax.jit(buf.add), jax.jit(buf.update_priorities)
    state = buf.init(jnp.float32(0))
    assert (
        state.tree.shape == (16,) == (sum_tree.sum_tree_size(5),)
    )  # the leaves' row, the root's row
    state = add(state, jnp.arange(5.0))
    np.testing.assert_allclose(state.tree[:8], [1, 1, 1, 1, 1, 0, 0, 0])  # max priority 1 initially
    assert float(state.tree[-1]) == 5.0
    state = update(state, jnp.array([2, 0]), jnp.array([3.0, 0.5]))
    leaves = [0.5**alpha, 1, 3**alpha, 1, 1, 0, 0, 0]
    np.testing.assert_allclose(state.tree[:8], leaves, rtol=1e-6)
    np.testing.assert_allclose(state.tree[-1], sum(leaves), rtol=1e-6)
    assert float(state.max_priority) == 3.0
    _check_tree(state.tree, 5)
    # the next item overwrites slot 0 (capacity 5 is full) at the max priority 3 ** alpha
    state = add(state, jnp.array([50.0]))
    leaves[0] = 3**alpha
    np.testing.assert_allclose(state.tree[:8], leaves, rtol=1e-6)
    np.testing.assert_allclose(state.tree[-1], sum(leaves), rtol=1e-6)
    _check_tree(state.tree, 5)
    assert float(state.storage[0]) == 50.0 and int(state.position) == 1 and int(state.size) == 5
    # negative priorities are taken as magnitudes (|TD error|)
    state = update(state, jnp.array([1]), jnp.array([-2.0]))
    np.testing.assert_allclose(state.tree[1], 2**alpha, rtol=1e-6)


def test_importance_weights_hand_computed_and_beta_traced_under_jit():
    # alpha = 0.5, priorities [1, 9] -> stored [1, 3], total 4, P = [1/4, 3/4], N = 2.
    # Stratified, 4 draws: one per segment [0,1), [1,2), [2,3), [3,4) -> slots [0, 1, 1, 1].
    # w_i = (N P_i)^-beta = [0.5^-beta, 1.5^-beta]; / max in batch -> [1, 3^-beta, 3^-beta, ...].
    buf = B.prioritized_buffer(2, alpha=0.5, beta=0.4, eps=0.0)
    state = buf.add(buf.init(jnp.float32(0)), jnp.array([10.0, 11.0]))
    state = buf.update_priorities(state, jnp.array([0, 1]), jnp.array([1.0, 9.0]))
    np.testing.assert_allclose(state.tree, [1, 3] + [0] * 13 + [4])  # leaves' row, root's row

    s = buf.sample(state, jax.random.key(0), 4)  # eager, default beta 0.4
    np.testing.assert_array_equal(s.indices, [0, 1, 1, 1])
    np.testing.assert_array_equal(s.items, [10, 11, 11, 11])
    np.testing.assert_allclose(s.weights, [1] + [3**-0.4] * 3, rtol=1e-5)

    traces = []

    @jax.jit
    def sample(state, key, beta):
        traces.append(None)
        return buf.sample(state, key, 4, beta=beta)

    for beta in (0.0, 0.5, 1.0):  # annealing beta: one compilation
        s = sample(state, jax.random.key(1), jnp.float32(beta))
        np.testing.assert_array_equal(s.indices, [0, 1, 1, 1])
        np.testing.assert_allclose(s.weights, [1] + [3.0**-beta] * 3, rtol=1e-5)
    assert len(traces) == 1

    # update_priorities moves the mass: now stored [3, 1] -> slots [0, 0, 0, 1]
    state = buf.update_priorities(state, jnp.array([0, 1]), jnp.array([9.0, 1.0]))
    s = sample(state, jax.random.key(2), jnp.float32(1.0))
    np.testing.assert_array_equal(s.indices, [0, 0, 0, 1])
    np.testing.assert_allclose(s.weights, [1 / 3] * 3 + [1], rtol=1e-5)


def test_prioritized_frequencies_match_priorities():
    alpha, cap, filled = 0.6, 8, 6
    priorities = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 0.5])
    buf = B.prioritized_buffer(cap, alpha=alpha, eps=1e-6)
    state = buf.add(buf.init(jnp.float32(0)), jnp.arange(filled, dtype=jnp.float32))
    state = buf.update_priorities(state, jnp.arange(filled), jnp.asarray(priorities))
    keys = jax.random.split(jax.random.key(0), 625)
    s = jax.jit(jax.vmap(lambda k: buf.sample(state, k, 32)))(keys)  # 625 x 32 = 20k samples
    idx = np.asarray(s.indices).ravel()
    assert idx.max() < filled  # empty slots are never drawn
    np.testing.assert_array_equal(np.asarray(s.items).ravel(), idx)
    n = idx.size
    expected = n * (priorities + 1e-6) ** alpha / ((priorities + 1e-6) ** alpha).sum()
    counts = np.bincount(idx, minlength=filled)
    assert ((counts - expected) ** 2 / expected).sum() < CHI2_999[5], (counts, expected)
    uniform = np.full(filled, n / filled)  # and the priorities do matter
    assert ((counts - uniform) ** 2 / uniform).sum() > 100 * CHI2_999[5]
    assert 0 < float(s.weights.min()) and float(s.weights.max()) == 1.0


def test_prioritized_sampling_is_a_log_depth_descent():
    """Structure, not timing: for 2^20 slots, sampling is a loop of 7 tree levels (8^7 >=
    2^20 > 8^6) and no intermediate array has as many elements as the buffer (the tree
    viewed as rows of 8 siblings is a reshape, which XLA makes a bitcast, not a copy)."""
    cap = 2**20
    buf = B.prioritized_buffer(cap, check_memory=False)
    state = jax.eval_shape(buf.init, jax.ShapeDtypeStruct((), jnp.float32))  # nothing allocated
    jaxpr = jax.make_jaxpr(lambda st, k: buf.sample(st, k, 32))(state, jax.random.key(0))

    loops, sizes = [], []

    def walk(jp):
        for eqn in jp.eqns:
            if eqn.primitive.name == "reshape":
                continue
            sizes.extend(
                int(np.prod(v.aval.shape)) for v in eqn.outvars if hasattr(v.aval, "shape")
            )
            if eqn.primitive.name == "scan":
                loops.append(eqn.params["length"])
            if eqn.primitive.name == "while":
                loops.append("while")
            for p in eqn.params.values():
                for sub in p if isinstance(p, (tuple, list)) else (p,):
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        walk(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        walk(sub)

    walk(jaxpr.jaxpr)
    assert K == 8 and loops == [7]  # one loop, over the depth: log_8(2^20) rounded up
    assert max(sizes) < cap

    # the update climbs the levels of more than 4096 entries (2^20, 2^17, 2^14: parents on
    # levels 6, 5 and 4) in one loop, and rebuilds the levels of 2^8 .. 1 nodes above densely
    loops.clear()
    slots = jax.ShapeDtypeStruct((32,), jnp.int32)
    walk(jax.make_jaxpr(buf.update_priorities)(state, slots, slots).jaxpr)
    assert loops == [3]


@pytest.mark.parametrize("cap", [5000, 70000])
def test_sum_tree_matches_numpy_above_the_dense_top_levels(cap):
    """Capacity 5000 (levels of 5000, 625, 79, 10, 2 and 1 nodes: one climbed level, four
    rebuilt densely) and 70000 (two climbed levels): after updates with repeated slots, the
    tree equals a float32 tree built in NumPy bottom-up, bit for bit, padding included."""
    alpha = 1.0
    buf = B.prioritized_buffer(cap, alpha=alpha, eps=0.0)
    if cap == 5000:
        assert sum_tree.sum_tree_size(cap) == 5000 + 8 * 79 + 8 * 10 + 8 * 2 + 8 + 8
    add, update = jax.jit(buf.add), jax.jit(buf.update_priorities)
    state = add(buf.init(jnp.float32(0)), jnp.arange(cap, dtype=jnp.float32))
    rng = np.random.default_rng(0)
    leaves = np.ones(cap, np.float32)
    for _ in range(3):
        slots = rng.integers(0, cap, 300)
        slots[:50] = slots[50:100]  # repeated slots, repeated priorities
        prio = rng.uniform(0.1, 3.0, 300).astype(np.float32)
        prio[:50] = prio[50:100]
        prio[100:150] = 0.0  # zero-mass leaves
        state = update(state, jnp.asarray(slots), jnp.asarray(prio))
        leaves[slots] = prio
    np.testing.assert_array_equal(np.asarray(state.tree), _numpy_tree(leaves, cap))


def _binary_descent(leaves, cuts):
    """The binary sum tree's stratified descent in NumPy float32 (node k: children 2k and
    2k + 1, ``P`` leaves from node ``P``): go right where the right child has mass and the
    mass left reaches the left child's (or the left child has none)."""
    p = 1 << (len(leaves) - 1).bit_length()
    tree = np.zeros(2 * p, np.float32)
    tree[p : p + len(leaves)] = leaves
    for k in range(p - 1, 0, -1):
        tree[k] = tree[2 * k] + tree[2 * k + 1]
    node = np.ones(len(cuts), np.int64)
    mass = np.asarray(cuts, np.float32) * np.float32(tree[1] / np.float32(len(cuts)))
    while node[0] < p:
        left, right = tree[2 * node], tree[2 * node + 1]
        go_right = (right > 0) & ((mass >= left) | (left <= 0))
        mass = np.where(go_right, mass - left, mass).astype(np.float32)
        node = 2 * node + go_right
    return node - p


def test_descent_matches_a_binary_sum_tree():
    """The K-ary descent halves each node's row of K children as a binary tree's descent
    would, over the same floats, so it draws the slots a binary sum tree draws, including
    around zero-mass leaves and at the ends of the cut points' range."""
    cap = 5000
    rng = np.random.default_rng(1)
    leaves = rng.uniform(0.0, 2.0, cap).astype(np.float32)
    leaves[rng.integers(0, cap, 1500)] = 0.0
    leaves[:40] = 0.0  # a zero-mass subtree at the start
    leaves[-40:] = 0.0  # and at the end
    tree = jnp.asarray(_numpy_tree(leaves, cap))
    batch = 512
    cuts = np.arange(batch, dtype=np.float32) + rng.uniform(0, 1, batch).astype(np.float32)
    cuts[0], cuts[-1] = 0.0, np.nextafter(np.float32(batch), np.float32(0))
    slot, leaf, total = jax.jit(sum_tree.tree_find, static_argnums=2)(tree, jnp.asarray(cuts), cap)
    want = _binary_descent(leaves, cuts)
    np.testing.assert_array_equal(slot, want)
    np.testing.assert_array_equal(leaf, leaves[want])
    assert float(total) == float(tree[-1]) and (np.asarray(leaf) > 0).all()
    assert (np.diff(np.asarray(slot)) >= 0).all()  # stratified: in slot order

    # a mass at (or, rounded, above) the total ends in the last slot with mass, never in the
    # zero-mass slots after it; an empty tree gives slot 0
    last = int(np.flatnonzero(leaves)[-1])
    ends = jnp.asarray([batch, batch * (1 + 1e-6)], jnp.float32)
    for cuts in (ends, jnp.asarray([0.0, batch / 2], jnp.float32)):
        slot, leaf, _ = sum_tree.tree_find(tree, cuts, cap)
        if cuts is ends:
            np.testing.assert_array_equal(slot, [last, last])
        assert (np.asarray(leaf) > 0).all()
    slot, leaf, total = sum_tree.tree_find(jnp.zeros_like(tree), jnp.asarray([0.0, 0.5]), cap)
    np.testing.assert_array_equal(slot, [0, 0])
    assert float(total) == 0.0


def _tree_copies(hlo: str, tree_size: int) -> list[str]:
    """The HLO ``copy`` instructions of compiled text whose result is a tree-sized float32 array."""
    return re.findall(rf"\S+ = f32\[{tree_size}\]\S* copy\(", hlo)


def test_prioritized_step_updates_the_sum_tree_in_place():
    """add + sample + update_priorities compiled in one donated scan writes the tree in place:
    no HLO copy of it, also when the importance weights feed something the update does not
    wait for (here a checksum), which used to cost two full copies of the tree per step."""
    cap = 40_000  # levels of 40000, 5000, 625, ... nodes: two of them climbed in a loop
    buf = B.prioritized_buffer(cap)

    def step(carry, _):
        state, key, checksum = carry
        key, k_sample, k_prio = jax.random.split(key, 3)
        state = buf.add(state, jnp.arange(3, dtype=jnp.float32))
        s = buf.sample(state, k_sample, 16)
        checksum = checksum + s.weights.sum() + s.items.sum()
        state = buf.update_priorities(state, s.indices, jax.random.uniform(k_prio, (16,)))
        return (state, key, checksum), None

    run = jax.jit(lambda c: jax.lax.scan(step, c, None, length=2)[0], donate_argnums=0)
    carry = (buf.init(jnp.float32(0)), jax.random.key(0), jnp.zeros(()))
    hlo = run.lower(carry).compile().as_text()
    assert " copy(" in hlo  # the pattern below matches this XLA's text (it copies scalars)
    assert _tree_copies(hlo, sum_tree.sum_tree_size(cap)) == []
    state, _, checksum = run(carry)
    _check_tree(state.tree, cap)
    assert int(state.size) == 6 and np.isfinite(float(checksum))


def test_prioritized_single_slot():
    buf = B.prioritized_buffer(1, alpha=1.0, eps=0.0)
    state = buf.add(buf.init(jnp.float32(0)), jnp.array([7.0]))
    state = buf.update_priorities(state, jnp.array([0]), jnp.array([2.5]))
    np.testing.assert_allclose(state.tree, [2.5])  # the leaf is the root
    s = jax.jit(lambda st, k: buf.sample(st, k, 3))(state, jax.random.key(0))
    np.testing.assert_array_equal(s.indices, [0, 0, 0])
    np.testing.assert_array_equal(s.items, [7, 7, 7])
    np.testing.assert_array_equal(s.weights, [1, 1, 1])


# ----------------------------------------------------------------------------- trajectory


def test_trajectory_sequences_contiguous_in_time_order():
    T, N, L = 5, 2, 3
    buf = B.trajectory_buffer(T, N, L)
    state = buf.init(jnp.float32(0))  # one env's item
    assert state.storage.shape == (T, N)
    steps = [jnp.array([10.0 * t, 10.0 * t + 1]) for t in range(7)]  # value = 10 t + env
    add = jax.jit(buf.add)
    for t in range(4):
        state = add(state, steps[t])
    assert not buf.can_sample(state, 5) and buf.can_sample(state, 4)  # 2 starts x 2 envs
    sample = jax.jit(buf.sample, static_argnums=2)

    def check(state, allowed_starts):
        s = sample(state, jax.random.key(int(state.size) + int(state.position)), 512)
        v = np.asarray(s.items)  # [512, L]
        t, env = v // 10, v % 10
        np.testing.assert_array_equal(np.diff(t, axis=1), 1)  # contiguous, in time order
        assert (env == env[:, :1]).all()  # one env per sequence
        assert set(t[:, 0]) == allowed_starts and set(env[:, 0]) == {0, 1}
        np.testing.assert_array_equal(s.indices, (t[:, 0] % T) * N + env[:, 0])
        assert s.weights.shape == (512,)

    check(state, {0, 1})  # rows 0..3 filled: starts t0, t1
    for t in range(4, 7):
        state = add(state, steps[t])
    # rows hold t5 t6 t2 t3 t4, write pointer at row 2: starts t2, t3, t4 (never t5 -> t6 -> t2)
    np.testing.assert_array_equal(state.storage[:, 0], [50, 60, 20, 30, 40])
    assert int(state.position) == 2 and int(state.size) == 5
    check(state, {2, 3, 4})
    # a [T, N] rollout writes the same rows as step-by-step adds
    rollout = add(add(buf.init(jnp.float32(0)), jnp.stack(steps[:4])), jnp.stack(steps[4:]))
    np.testing.assert_array_equal(rollout.storage, state.storage)
    assert int(rollout.position) == 2 and int(rollout.size) == 5


# ----------------------------------------------------------------------------- n-step


def _episode_data():
    """7 steps of 2 envs. r_t = t + 1. env 0 terminates at t=2 and is truncated at t=5;
    env 1 is truncated at t=3. o_t = 10 t + env; next_obs_t = o_{t+1}, or at an episode
    end the final observation 1000 + 10 t + env."""
    t = np.arange(7)[:, None]
    env = np.arange(2)[None, :]
    term = np.zeros((7, 2), bool)
    trunc = np.zeros((7, 2), bool)
    term[2, 0] = trunc[5, 0] = trunc[3, 1] = True
    done = term | trunc
    obs = (10.0 * t + env).astype(np.float32)
    next_obs = np.where(done, 1000.0 + 10 * t + env, 10.0 * (t + 1) + env).astype(np.float32)
    reward = np.broadcast_to(t + 1.0, (7, 2)).astype(np.float32)
    action = (t + 0 * env).astype(np.int32)
    return Transition(obs, action, reward, term, trunc, next_obs, {"s": obs})


# gamma = 0.5, n = 3; start steps s = 0..4 (emitted at pushes 3..7), per env.
#  env 0 (term at 2, trunc at 5):
#   s=0: r0..r2, ends at 2 (term): 1 + .5*2 + .25*3 = 2.75, discount 0, next 1020
#   s=1: r1, r2: 2 + 1.5 = 3.5, discount 0, next 1020
#   s=2: r2: 3, discount 0, next 1020
#   s=3: r3..r5, ends at 5 (trunc): 4 + 2.5 + 1.5 = 8, discount .125, next 1050
#   s=4: r4, r5: 5 + 3 = 8, discount .25, next 1050
#  env 1 (trunc at 3):
#   s=0: r0..r2: 2.75, discount .125, next o_3 = 31
#   s=1: r1..r3: 2 + 1.5 + 1 = 4.5, discount .125, next 1031
#   s=2: r2, r3: 3 + 2 = 5, discount .25, next 1031
#   s=3: r3: 4, discount .5, next 1031
#   s=4: r4..r6: 5 + 3 + 1.75 = 9.75, discount .125, next o_7 = 71
NSTEP_REWARD = [[2.75, 2.75], [3.5, 4.5], [3.0, 5.0], [8.0, 4.0], [8.0, 9.75]]
NSTEP_DISCOUNT = [[0, 0.125], [0, 0.125], [0, 0.25], [0.125, 0.5], [0.25, 0.125]]
NSTEP_NEXT = [[1020, 31], [1020, 1031], [1020, 1031], [1050, 1031], [1050, 71]]
NSTEP_STEPS = [[3, 3], [2, 3], [1, 2], [3, 1], [2, 3]]
NSTEP_TERM = [[1, 0], [1, 0], [1, 0], [0, 0], [0, 0]]
NSTEP_TRUNC = [[0, 0], [0, 1], [0, 1], [1, 1], [1, 0]]


@VARIANTS
def test_nstep_hand_computed_at_episode_ends(variant):
    data = _episode_data()
    acc = nstep.nstep_accumulator(3, 0.5)

    def run(data):
        state = acc.init(jax.tree.map(lambda x: x[0], data))
        outs = []
        for t in range(7):
            state, out, valid = acc.push(state, jax.tree.map(lambda x: x[t], data))
            outs.append((out, valid))
        return outs

    outs = variant(run)(data)
    for t, (_, valid) in enumerate(outs):
        np.testing.assert_array_equal(valid, [t >= 2, t >= 2])
    emitted = jax.tree.map(lambda *xs: np.stack(xs), *[o for o, _ in outs[2:]])  # [5, 2]
    s = np.arange(5)[:, None]
    np.testing.assert_allclose(emitted.reward, NSTEP_REWARD)
    np.testing.assert_allclose(emitted.discount, NSTEP_DISCOUNT)
    np.testing.assert_allclose(emitted.next_observation, NSTEP_NEXT)
    np.testing.assert_array_equal(emitted.steps, NSTEP_STEPS)
    np.testing.assert_array_equal(emitted.terminated, NSTEP_TERM)
    np.testing.assert_array_equal(emitted.truncated, NSTEP_TRUNC)
    np.testing.assert_allclose(emitted.observation, 10.0 * s + np.arange(2))  # o_s
    np.testing.assert_array_equal(emitted.action, np.broadcast_to(s, (5, 2)))  # a_s
    np.testing.assert_allclose(emitted.extras["s"], 10.0 * s + np.arange(2))


def test_nstep_matches_n_step_returns_with_traced_gamma():
    """reward + discount * V(next_obs) equals returns.n_step_returns for every start
    step with a full window, on random episode ends; gamma is a traced argument."""
    T, N, n = 40, 3, 4
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(T, N)).astype(np.float32)
    term = rng.random((T, N)) < 0.15
    trunc = rng.random((T, N)) < 0.15
    obs = rng.normal(size=(T, N)).astype(np.float32)
    next_obs = rng.normal(size=(T, N)).astype(np.float32)
    data = Transition(obs, np.zeros((T, N), np.int32), reward, term, trunc, next_obs)
    acc = nstep.nstep_accumulator(n, 0.99)

    @jax.jit
    def run(data, gamma):
        def body(state, x):
            state, out, valid = acc.push(state, x, gamma=gamma)
            return state, (out, valid)

        return jax.lax.scan(body, acc.init(jax.tree.map(lambda x: x[0], data)), data)[1]

    value = lambda o: 2.0 * o + 1.0  # noqa: E731  a made-up critic
    for gamma in (0.9, 0.5):
        out, valid = run(data, jnp.float32(gamma))
        assert not np.asarray(valid[: n - 1]).any() and np.asarray(valid[n - 1 :]).all()
        targets = out.reward + out.discount * value(out.next_observation)  # [T, N], start t - n + 1
        expected = R.n_step_returns(reward, value(next_obs), term, trunc, gamma, n)
        np.testing.assert_allclose(targets[n - 1 :], expected[: T - n + 1], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- vmap over seeds


def test_vmapped_buffers_are_independent_per_seed():
    seeds = jnp.arange(3)
    ubuf, pbuf = B.uniform_buffer(6), B.prioritized_buffer(6, alpha=1.0, eps=0.0)

    @jax.jit
    def run(seed, key):
        items = 100.0 * seed + jnp.arange(4.0)  # seed-specific data, [4]
        u = ubuf.add(ubuf.init(jnp.float32(0)), items)
        # seed + 1 more single-item adds: a seed-dependent number (a batched while loop)
        u = jax.lax.fori_loop(0, seed + 1, lambda i, u: ubuf.add(u, items[:1] + 10.0 + i), u)
        p = pbuf.add(pbuf.init(jnp.float32(0)), items)
        p = pbuf.update_priorities(p, jnp.arange(4), jnp.where(jnp.arange(4) == seed, 1.0, 0.0))
        k_u, k_p = jax.random.split(key)
        return u, p, ubuf.sample(u, k_u, 64), pbuf.sample(p, k_p, 64)

    u, p, su, sp = jax.vmap(run)(seeds, jax.random.split(jax.random.key(0), 3))
    np.testing.assert_array_equal(u.size, [5, 6, 6])
    np.testing.assert_array_equal(u.position, [5, 0, 1])
    np.testing.assert_array_equal(u.storage[2], [212, 201, 202, 203, 210, 211])
    for seed in range(3):
        vals = np.asarray(su.items[seed])
        assert ((vals // 100) == seed).all()  # only this seed's data
        assert set(np.asarray(su.indices[seed])) == set(range(int(u.size[seed])))
        # each seed's priorities put all mass on slot `seed`
        np.testing.assert_array_equal(sp.indices[seed], np.full(64, seed))
        np.testing.assert_array_equal(sp.items[seed], np.full(64, 101.0 * seed))
        np.testing.assert_allclose(p.tree[seed, -1], 1.0)  # the root


# ----------------------------------------------------------------------------- memory


def test_memory_check_refuses_before_allocating(monkeypatch):
    item = Transition(
        jnp.zeros((84, 84, 4), jnp.uint8),
        jnp.int32(0),
        jnp.float32(0),
        jnp.bool_(False),
        jnp.bool_(False),
        jnp.zeros((84, 84, 4), jnp.uint8),
    )
    item_bytes = 2 * 84 * 84 * 4 + 4 + 4 + 1 + 1  # 56458
    assert B.buffer_bytes(item, 10) == 10 * item_bytes
    assert B.buffer_bytes(item, 5, prioritized=True) == 5 * item_bytes + 4 * 16

    monkeypatch.setattr(B, "available_memory_bytes", lambda device=None: 2**30)
    buf = B.uniform_buffer(1_000_000)
    msg = (
        r"replay buffer needs 52\.58 GiB \(capacity 1000000 x item 56458 bytes\), "
        r"only 1\.00 GiB available"
    )
    with pytest.raises(MemoryError, match=msg):
        jax.eval_shape(buf.init, item)  # raises at trace time, nothing allocated
    with pytest.raises(MemoryError, match="sum tree"):
        jax.eval_shape(B.prioritized_buffer(1_000_000).init, item)
    with pytest.raises(MemoryError, match=r"capacity 2000000 x item"):
        jax.eval_shape(B.trajectory_buffer(250_000, 8, 10).init, item)
    shapes = jax.eval_shape(B.trajectory_buffer(250_000, 8, 10, check_memory=False).init, item)
    assert shapes.storage.observation.shape == (250_000, 8, 84, 84, 4)
    shapes = jax.eval_shape(B.uniform_buffer(1_000_000, check_memory=False).init, item)
    assert shapes.storage.observation.shape == (1_000_000, 84, 84, 4)
    # small buffers pass; copies multiply
    assert B.check_buffer_memory(item, 1000) == 1000 * item_bytes
    with pytest.raises(MemoryError, match="x 3 copies"):
        B.check_buffer_memory(item, 10_000, copies=3, available_bytes=10**9)


def test_available_memory_is_known_on_this_host():
    avail = B.available_memory_bytes()
    if jax.devices()[0].platform == "cpu":
        assert avail is not None and avail > 0


def test_uniform_stratified_by_env():
    """stratify=3: env e's items sit in slots = e mod 3; a batch of 6 takes 2 items from each env,
    in env order, each env drawing its rows with its own key (split(key, 3)[e])."""
    buf = B.uniform_buffer(12, stratify=3)
    state = buf.init(jnp.zeros((), jnp.float32))
    for t in range(5):  # 15 adds into 12 slots: rows wrap; env e always at slot e mod 3
        state = buf.add(state, jnp.array([100.0 * e + t for e in range(3)]))
    slots = np.asarray(state.storage)
    assert all(int(slots[i]) // 100 == i % 3 for i in range(12))
    key = jax.random.key(4)
    sample = jax.jit(lambda s, k: buf.sample(s, k, 6))(state, key)
    env_of_item = np.asarray(sample.items) // 100
    np.testing.assert_array_equal(env_of_item, [0, 0, 1, 1, 2, 2])
    keys = jax.random.split(key, 3)
    for e in range(3):
        rows = jax.random.randint(keys[e], (2,), 0, 4, jnp.int32)  # 12 slots / 3 envs = 4 rows
        np.testing.assert_array_equal(sample.indices[2 * e : 2 * e + 2], rows * 3 + e)
    np.testing.assert_array_equal(sample.items, slots[np.asarray(sample.indices)])


def test_uniform_stratified_bad_input():
    with pytest.raises(ValueError, match="divisible"):
        B.uniform_buffer(10, stratify=3)
    buf = B.uniform_buffer(12, stratify=3)
    state = buf.init(jnp.zeros((), jnp.float32))
    with pytest.raises(ValueError, match="one item per env"):
        buf.add(state, jnp.zeros((2,)))
    with pytest.raises(ValueError, match="same number of items"):
        buf.sample(state, jax.random.key(0), 4)


# ------------------------------------------------------------------ on-policy minibatches


@VARIANTS
def test_rollout_minibatches_cover_every_sample_once(variant):
    """``[T, N] -> [M, T/M * N]``: every (step, env) sample exactly once per call, every
    minibatch with T/M steps of each env, the leaves of a sample kept together, and another key
    another order."""
    t, n, m = 8, 3, 4
    ids = jnp.arange(t * n).reshape(t, n)  # id = step * N + env
    data = {"id": ids, "env": jnp.broadcast_to(jnp.arange(n), (t, n)), "obs": ids[..., None] * 10}
    out = variant(lambda k: minibatches.rollout_minibatches(data, k, m))(jax.random.key(0))
    assert out["id"].shape == (m, t // m * n) and out["obs"].shape == (m, t // m * n, 1)
    np.testing.assert_array_equal(np.sort(np.asarray(out["id"]).ravel()), np.arange(t * n))
    np.testing.assert_array_equal(out["env"], out["id"] % n)
    np.testing.assert_array_equal(out["obs"][..., 0], out["id"] * 10)
    for block in np.asarray(out["env"]):
        np.testing.assert_array_equal(np.bincount(block, minlength=n), [t // m] * n)
    other = minibatches.rollout_minibatches(data, jax.random.key(1), m)
    assert not np.array_equal(other["id"], out["id"])
    with pytest.raises(ValueError, match="not divisible into 3 minibatches"):
        minibatches.rollout_minibatches(data, jax.random.key(0), 3)


def test_minibatch_epochs_visit_every_sample_once_per_epoch():
    """``jrl.parts.learner.minibatch_epochs`` runs ``num_epochs x num_minibatches`` steps that
    together
    see each sample exactly ``num_epochs`` times, and averages the steps' metrics."""
    from types import SimpleNamespace

    from jrl.parts.learner import minibatch_epochs

    t, n, epochs, m = 8, 2, 3, 4
    data = {"id": jnp.arange(t * n).reshape(t, n)}

    def sgd_step(state, mb):
        counts, steps = state
        return (counts.at[mb["id"]].add(1), steps + 1), {"x": steps.astype(jnp.float32)}

    config = SimpleNamespace(num_epochs=epochs, num_minibatches=m)
    init = (jnp.zeros(t * n, jnp.int32), jnp.zeros((), jnp.int32))
    (counts, steps), metrics = jax.jit(lambda k: minibatch_epochs(sgd_step, init, data, k, config))(
        jax.random.key(0)
    )
    np.testing.assert_array_equal(counts, epochs)
    assert int(steps) == epochs * m
    np.testing.assert_allclose(metrics["x"], np.mean(np.arange(epochs * m)))


def test_trajectory_stratified_sequences_by_hand():
    """stratify=True: a batch of 6 sequences of 3 from 3 envs takes 2 from each env, in env
    order, each env drawing its starts with its own key (split(key, 3)[e]) among the starts
    whose 3 steps are all still stored (after 7 steps into 5 rows: steps 2, 3 and 4); a
    sequence is 3 consecutive steps of its env, wrapping around the array's end, and its first
    item's extras are the state stored with its first step."""
    T, N, L = 5, 3, 3
    buf = B.trajectory_buffer(T, N, L, stratify=True)
    item = {"x": jnp.zeros((), jnp.int32), "core": jnp.zeros((2,), jnp.float32)}
    state = buf.init(item)
    envs = jnp.arange(N)
    for t in range(7):
        core = jnp.stack([jnp.full((N,), float(t)), envs.astype(jnp.float32)], axis=-1)
        state = buf.add(state, {"x": 10 * t + envs, "core": core})
    seen = set()
    for seed in range(12):
        key = jax.random.key(seed)
        sample = jax.jit(lambda s, k: buf.sample(s, k, 6))(state, key)
        x = np.asarray(sample.items["x"])  # [6, 3]
        assert x.shape == (6, L)
        env, first = x % 10, x[:, 0] // 10
        np.testing.assert_array_equal(env, np.repeat(np.arange(N), 2)[:, None] * np.ones(L, int))
        np.testing.assert_array_equal(x // 10, first[:, None] + np.arange(L))
        assert set(first.tolist()) <= {2, 3, 4}
        seen |= set(first.tolist())
        keys = jax.random.split(key, N)
        for e in range(N):
            offset = np.asarray(jax.random.randint(keys[e], (2,), 0, T - L + 1, jnp.int32))
            np.testing.assert_array_equal(first[2 * e : 2 * e + 2], offset + 2)
        np.testing.assert_array_equal(sample.items["core"][:, 0, 0], first)
        np.testing.assert_array_equal(sample.items["core"][:, 0, 1], env[:, 0])
        np.testing.assert_array_equal(sample.indices, (first % T) * N + env[:, 0])
    assert seen == {2, 3, 4}
    with pytest.raises(ValueError, match="same number from each of 3 envs"):
        buf.sample(state, jax.random.key(0), 4)


@pytest.mark.parametrize("stratify", [False, True])
def test_trajectory_buffer_with_a_single_start(stratify):
    """A sequence as long as the buffer is allowed; with exactly ``sequence_length`` rows
    written there is one start per env (the oldest row), which can_sample counts and every
    sample takes."""
    T, N, L = 4, 2, 3
    B.trajectory_buffer(L, N, L, stratify=stratify)  # sequence_length == capacity_steps
    buf = B.trajectory_buffer(T, N, L, stratify=stratify)
    state = buf.init(jnp.float32(0))
    for t in range(L):
        state = buf.add(state, jnp.array([10.0 * t + 1, 10.0 * t + 2]))
    assert buf.can_sample(state, 2) and not buf.can_sample(state, 3)
    for seed in range(4):
        v = np.asarray(buf.sample(state, jax.random.key(seed), 8).items)
        np.testing.assert_array_equal(v // 10, np.broadcast_to(np.arange(L), (8, L)))

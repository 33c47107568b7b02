"""Exact boundaries of the replay buffers, their sum tree and the n-step accumulator
(jrl/parts/buffers.py, jrl/parts/sum_tree.py, jrl/parts/nstep.py): the tree's layout and a
tree built from leaf values entry by entry, a cut point exactly on the boundary between two
items, the float the descent compares, stored priorities and importance weights at their
edges, uniform draws from the filled slots only, and ``can_sample`` at exactly
``batch_size`` items, by hand (tools/mutation.py's targets)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.parts import buffers
from jrl.parts.sum_tree import sum_tree_from_leaves, sum_tree_size, tree_find


def test_tree_from_leaves_by_hand():
    """10 slots, 8 children a node: 16 leaf entries (the 10 slots, padded to 2 rows of 8),
    level 1 one row of 8 (the two nodes' sums, padded), the root's row of 8 with the root last:
    32 entries. Leaves 1, 2, 3: level 1 is [6, 0, ...], the root 6."""
    assert sum_tree_size(10) == 32
    want = np.zeros(32, np.float32)
    want[:3] = [1.0, 2.0, 3.0]
    want[16] = 6.0
    want[31] = 6.0
    got = sum_tree_from_leaves(np.array([1.0, 2.0, 3.0], np.float32), 10)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(sum_tree_from_leaves(jnp.array([1.0, 2.0, 3.0]), 10), want)
    # 9 leaves fill the first row and start the second
    got = sum_tree_from_leaves(np.arange(1.0, 10.0, dtype=np.float32), 10)
    assert got[16] == 36.0 and got[17] == 9.0 and got[31] == 45.0
    np.testing.assert_array_equal(sum_tree_from_leaves(np.zeros(0, np.float32), 10), 0.0)


def test_a_cut_point_on_a_boundary_belongs_to_the_item_to_its_right():
    """Two items of mass 1: item 0 holds cumulative mass [0, 1), item 1 [1, 2). One cut point
    at fraction 0.5 of the total (mass 1.0 exactly) is item 1's; at 0.25, item 0's."""
    tree = sum_tree_from_leaves(jnp.array([1.0, 1.0]), 2)
    slot, leaf, total = tree_find(tree, jnp.array([0.5]), 2)
    assert int(slot[0]) == 1 and float(leaf[0]) == 1.0 and float(total) == 2.0
    slot, _, _ = tree_find(tree, jnp.array([0.25]), 2)
    assert int(slot[0]) == 0
    # two cut points (fractions in units of total / 2): 1.0 is the boundary again
    slot, _, _ = tree_find(tree, jnp.array([0.5, 1.0]), 2)
    np.testing.assert_array_equal(slot, [0, 1])


def test_prioritized_can_sample_exactly_batch_size_items():
    buf = buffers.prioritized_buffer(4, check_memory=False)
    state = buf.init(jax.ShapeDtypeStruct((), jnp.float32))
    state = buf.add(state, jnp.array([1.0, 2.0]))
    assert bool(buf.can_sample(state, 2))
    assert not bool(buf.can_sample(state, 3))
    uniform = buffers.uniform_buffer(4, check_memory=False)
    state = uniform.add(uniform.init(jax.ShapeDtypeStruct((), jnp.float32)), jnp.ones(2))
    assert bool(uniform.can_sample(state, 2)) and not bool(uniform.can_sample(state, 3))


def test_tree_from_batched_leaves_builds_one_tree_a_row():
    values = np.array([[1.0, 2.0, 3.0], [4.0, 0.0, 5.0]], np.float32)
    got = sum_tree_from_leaves(values, 10)
    assert got.shape == (2, 32)
    np.testing.assert_array_equal(got[0], sum_tree_from_leaves(values[0], 10))
    np.testing.assert_array_equal(got[1], sum_tree_from_leaves(values[1], 10))
    assert got[1, 31] == 9.0


def test_importance_weights_by_hand_when_the_total_is_below_one():
    """alpha 1, eps 0, priorities 0.05, 0.1, 0.15, 0.2 (total 0.5 < 1): four stratified draws
    reach at least three different items; each weight is (N P_i)^-beta over the batch's
    largest, with P_i = p_i / 0.5."""
    buf = buffers.prioritized_buffer(4, alpha=1.0, beta=0.5, eps=0.0, check_memory=False)
    state = buf.add(buf.init(jax.ShapeDtypeStruct((), jnp.float32)), jnp.arange(4.0))
    p = np.array([0.05, 0.1, 0.15, 0.2], np.float32)
    state = buf.update_priorities(state, jnp.arange(4), jnp.asarray(p))
    sample = buf.sample(state, jax.random.key(0), 4)
    idx = np.asarray(sample.indices)
    assert len(set(idx.tolist())) >= 3
    w = (4 * p[idx] / 0.5) ** -0.5
    np.testing.assert_allclose(sample.weights, w / w.max(), rtol=1e-5)


def test_nstep_window_count_stays_below_two_n():
    """The accumulator's push count is kept in [n, 2n) once the window is full: after 2n + 1
    = 7 pushes with n = 3 it is 7 - 3 = 4 (the same row, 7 % 3 = 4 % 3, and still valid)."""
    from jrl.core.types import Transition
    from jrl.parts.nstep import nstep_accumulator

    acc = nstep_accumulator(3, 0.5)
    z = jnp.zeros((1,), jnp.float32)
    t = Transition(z, jnp.zeros((1,), jnp.int32), z + 1, z > 0, z > 0, z, {})
    state = acc.init(t)
    counts = []
    for _ in range(7):
        state, _, valid = acc.push(state, t)
        counts.append(int(state.count))
    assert counts == [1, 2, 3, 4, 5, 3, 4]
    assert bool(valid[0])


def test_tree_layout_by_hand():
    """``(depth, offsets, widths)``: 10 slots are 2 nodes under the root (depth 2), stored as 16
    leaf entries from 0, level 1's row of 8 from 16, the root's row from 24; 65 slots are 9,
    then 2 nodes, then the root (depth 3: 72 leaf entries, 16, 8, 8); 2 and 8 slots one row
    under the root; one slot is the tree."""
    from jrl.parts.sum_tree import _tree_layout

    assert _tree_layout(1) == (0, (0,), (1,))
    assert _tree_layout(2) == (1, (8, 0), (8, 8))
    assert _tree_layout(8) == (1, (8, 0), (8, 8))
    assert _tree_layout(9) == (2, (24, 16, 0), (8, 8, 16))
    assert _tree_layout(10) == (2, (24, 16, 0), (8, 8, 16))
    assert _tree_layout(65) == (3, (96, 88, 72, 0), (8, 8, 16, 72))
    assert [sum_tree_size(c) for c in (1, 2, 10, 65)] == [1, 16, 32, 104]


def test_a_single_slot_tree_is_its_leaf():
    """One slot: the tree is one entry, the leaf (0 while empty), for numpy and jax arrays and
    for a leading batch axis; the descent returns slot 0, that leaf and it as the total."""
    np.testing.assert_array_equal(sum_tree_from_leaves(np.array([2.5], np.float32), 1), [2.5])
    np.testing.assert_array_equal(sum_tree_from_leaves(jnp.array([2.5]), 1), [2.5])
    empty = sum_tree_from_leaves(np.zeros(0, np.float32), 1)
    assert empty.shape == (1,) and empty.dtype == np.float32 and empty[0] == 0.0
    batched = sum_tree_from_leaves(np.zeros((3, 0), np.float32), 1)
    assert batched.shape == (3, 1)
    slot, leaf, total = tree_find(jnp.array([2.5]), jnp.array([0.0, 1.5]), 1)
    np.testing.assert_array_equal(slot, [0, 0])
    np.testing.assert_array_equal(leaf, [2.5, 2.5])
    assert float(total) == 2.5


def test_descent_compares_the_pairwise_sum_of_the_left_half():
    """8 leaves c = [1, e, e, 0, 2e, 1, 0, 0] with e = 2^-24, one node: the left half's mass is
    (c0 + c1) + (c2 + c3) = 1 (1 + e rounds to 1, ties to even), the float a binary sum tree
    holds; (c0 + c3) + (c2 + c1) would be 1 + 2e. The total (1 + (1 + 2e) = 2 + 2e, a tie)
    is 2. A cut at mass 1 + 2e (fraction (1 + 2e) / 2) reaches the left half's 1: right,
    with 2e left; the right half's left quarter holds all of it (1 + 2e vs 0): left; there
    2e reaches c4 = 2e: right, slot 5."""
    e = np.float32(2.0**-24)
    leaves = np.array([1, e, e, 0, 2 * e, 1, 0, 0], np.float32)
    tree = sum_tree_from_leaves(jnp.asarray(leaves), 8)
    assert float(tree[-1]) == 2.0
    fraction = np.float32((1 + 2 * e) / 2)
    assert fraction * np.float32(2.0) == np.float32(1 + 2 * e)
    slot, leaf, _ = tree_find(tree, jnp.array([fraction]), 8)
    assert int(slot[0]) == 5 and float(leaf[0]) == 1.0


def test_a_nan_mass_never_enters_a_zero_mass_subtree():
    """Leaves [0, inf]: the total is inf and a cut point at fraction 0 is mass 0 * inf = NaN,
    which compares false with everything; the descent still goes right, where the mass is,
    because the left child holds none (slot 1, never the empty slot 0)."""
    tree = sum_tree_from_leaves(jnp.array([0.0, np.inf], jnp.float32), 2)
    slot, leaf, total = tree_find(tree, jnp.array([0.0]), 2)
    assert int(slot[0]) == 1 and float(leaf[0]) == np.inf and float(total) == np.inf


def test_tree_set_rebuilds_every_level_of_at_most_dense_nodes_entries():
    """4096 slots: the leaf level is exactly ``_DENSE_NODES = 4096`` entries wide, so no level
    is climbed and every level above the leaves is rebuilt from them in one pass: a write to
    slot 0 also repairs a stale level-3 node (index 4096 + 5, the parent of slots 40..47, set
    to 7 by hand), leaving the tree built from the leaves (root 1). A climb from the leaves
    would rewrite only slot 0's parent and keep the 7."""
    from jrl.parts.sum_tree import tree_set

    assert sum_tree_size(4096) == 4688
    tree = jnp.zeros(4688, jnp.float32).at[4096 + 5].set(7.0)
    tree = tree_set(tree, jnp.array([0]), jnp.array([1.0]), 4096)
    leaves = np.zeros(4096, np.float32)
    leaves[0] = 1.0
    np.testing.assert_array_equal(tree, sum_tree_from_leaves(leaves, 4096))
    assert float(tree[-1]) == 1.0


def test_update_priorities_stores_abs_plus_eps_to_the_alpha():
    """alpha 1, eps 0.5: priorities 1, 0, -2 are stored as |p| + eps = 1.5, 0.5, 2.5 (exact in
    float32), the root holds 4.5 and ``max_priority`` becomes 2.5."""
    buf = buffers.prioritized_buffer(4, alpha=1.0, eps=0.5, check_memory=False)
    state = buf.add(buf.init(jax.ShapeDtypeStruct((), jnp.float32)), jnp.zeros(3))
    state = buf.update_priorities(state, jnp.arange(3), jnp.array([1.0, 0.0, -2.0]))
    np.testing.assert_array_equal(state.tree[:4], [1.5, 0.5, 2.5, 0.0])
    assert float(state.tree[-1]) == 4.5 and float(state.max_priority) == 2.5


def test_an_empty_prioritized_buffer_samples_slot_0_with_weight_1():
    """No item, total mass 0: every draw is slot 0 and every weight exactly 1 (the weights are
    not computed from a zero total)."""
    buf = buffers.prioritized_buffer(4, check_memory=False)
    state = buf.init(jax.ShapeDtypeStruct((), jnp.float32))
    sample = buf.sample(state, jax.random.key(0), 4)
    np.testing.assert_array_equal(sample.indices, [0, 0, 0, 0])
    np.testing.assert_array_equal(sample.weights, [1.0, 1.0, 1.0, 1.0])


def test_equal_priorities_weigh_exactly_1_for_any_beta():
    """4 items at priority 1 (new items enter at ``max_priority`` 1): N P(i) = 4 * 1 / 4 = 1,
    so every weight is 1 whatever beta, even the largest float32 beta, 3e38: the log-weight
    -beta * (log N + log p_i - log total) = -beta * (log 4 + 0 - log 4) is exactly -0. A log-weight
    of -beta * (log 4 + log 4) or -beta * (0 - log 4) would overflow to -inf or inf (NaN
    weights)."""
    buf = buffers.prioritized_buffer(8, beta=3e38, check_memory=False)
    state = buf.add(buf.init(jax.ShapeDtypeStruct((), jnp.float32)), jnp.arange(4.0))
    sample = buf.sample(state, jax.random.key(0), 4)
    np.testing.assert_array_equal(np.sort(sample.indices), [0, 1, 2, 3])
    np.testing.assert_array_equal(sample.weights, [1.0, 1.0, 1.0, 1.0])


def test_sampled_slots_stay_inside_the_storage():
    """3 slots, whose leaves are padded to 8 tree entries: an ``update_priorities`` index past
    the capacity (5) gives mass to a padding leaf, the only mass in the tree; every draw
    reaches it and comes back as the last slot, 2, never as a row outside the storage."""
    buf = buffers.prioritized_buffer(3, check_memory=False)
    state = buf.init(jax.ShapeDtypeStruct((), jnp.float32))
    state = buf.update_priorities(state, jnp.array([5]), jnp.array([1.0]))
    sample = buf.sample(state, jax.random.key(0), 2)
    np.testing.assert_array_equal(sample.indices, [2, 2])


def test_uniform_draws_only_filled_slots():
    """One filled slot of 4: all 64 draws are slot 0. Stratified over 2 envs with one add
    (one row per env): env 0's 32 draws are slot 0, env 1's slot 1."""
    buf = buffers.uniform_buffer(4, check_memory=False)
    state = buf.add(buf.init(jax.ShapeDtypeStruct((), jnp.float32)), jnp.ones(1))
    np.testing.assert_array_equal(buf.sample(state, jax.random.key(0), 64).indices, 0)
    buf = buffers.uniform_buffer(8, stratify=2, check_memory=False)
    state = buf.add(buf.init(jax.ShapeDtypeStruct((), jnp.float32)), jnp.ones(2))
    idx = np.asarray(buf.sample(state, jax.random.key(0), 64).indices)
    np.testing.assert_array_equal(idx, np.repeat([0, 1], 32))


def test_stratified_rows_are_the_whole_rows_of_each_env():
    """2^25 - 1 filled slots over 2 envs: 16777215 whole rows each (integer division; the
    float32 quotient 16777215.5 rounds to 2^24). Each env's rows are ``randint(0, 16777215)``
    with its key from ``local_keys``, slot = 2 row + env."""
    from jrl.core import parallel

    key = jax.random.key(3)
    got = buffers._uniform_slots(key, jnp.int32(2**25 - 1), 8, 2)
    keys = parallel.local_keys(key, 2)
    rows = [np.asarray(jax.random.randint(k, (4,), 0, 16777215, jnp.int32)) for k in keys]
    np.testing.assert_array_equal(got, np.concatenate([2 * rows[0], 2 * rows[1] + 1]))


def test_capacities_stay_below_2_to_the_30():
    """Rows are int32: ``position + arange(B)`` and ``size + B`` (each term below the capacity)
    must not overflow, so an add to a buffer of 2^30 rows is refused when traced; 2^30 - 1
    rows trace (shapes only: nothing is allocated)."""
    for capacity, ok in ((2**30 - 1, True), (2**30, False)):
        buf = buffers.uniform_buffer(capacity, check_memory=False)
        state = jax.eval_shape(buf.init, jax.ShapeDtypeStruct((), jnp.int8))
        items = jax.ShapeDtypeStruct((2,), jnp.int8)
        if ok:
            assert jax.eval_shape(buf.add, state, items).size.dtype == jnp.int32
        else:
            with pytest.raises(ValueError, match="2\\*\\*30"):
                jax.eval_shape(buf.add, state, items)


def test_nstep_gamma_must_lie_in_0_1():
    """gamma 1 is accepted (undiscounted), 1.5 and -0.1 are refused."""
    from jrl.parts.nstep import nstep_accumulator

    nstep_accumulator(3, 1.0)
    nstep_accumulator(3, 0.0)
    for gamma in (1.5, -0.1):
        with pytest.raises(ValueError, match="gamma"):
            nstep_accumulator(3, gamma)

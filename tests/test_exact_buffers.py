"""Exact boundaries of the prioritised replay buffer and its sum tree (jrl/parts/buffers.py,
jrl/parts/sum_tree.py): a tree built from leaf values entry by entry, a cut point exactly on
the boundary between two items, and ``can_sample`` at exactly ``batch_size`` items, by hand
(tools/mutation.py's targets)."""

import jax
import jax.numpy as jnp
import numpy as np

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

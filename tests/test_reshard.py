"""Moving a checkpointed state onto another device count (jrl.app.reshard), on hand-made
leaves: the replicated and env-split rules, the axis added or removed for a one-device run,
and the refusals, each naming its leaf."""

import jax
import numpy as np
import pytest
from jrl.app import reshard
from jrl.app.checkpoint import CheckpointError
from jrl.parts.buffers import BufferState


def spec(path, a):
    return [path, list(a.shape), a.dtype.name]


def test_an_env_axis_is_joined_in_env_order_and_split_anew():
    # 4 devices, 2 envs each (axis 1 of the block, after a leading [3] axis): env e is on
    # device e // 2; the values name their env, so the order can be read off
    envs = np.arange(8, dtype=np.float32)
    saved = np.stack([np.tile(envs[2 * d : 2 * d + 2], (3, 1)) for d in range(4)])  # [4, 3, 2]
    expected = np.zeros((2, 3, 4), np.float32)
    (moved,) = reshard.reshard(
        [spec("x", saved)], [spec("x", expected)], [saved], (4, 2), where="ck"
    )
    assert moved.shape == (2, 3, 4)
    np.testing.assert_array_equal(moved[0, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(moved[1, 2], [4, 5, 6, 7])


def test_a_replicated_leaf_gives_its_one_value_to_every_new_device():
    params = np.stack([np.arange(6.0).reshape(2, 3)] * 4)  # [4, 2, 3], equal blocks
    (moved,) = reshard.reshard(
        [spec("p", params)], [spec("p", np.zeros((2, 2, 3)))], [params], (4, 2)
    )
    np.testing.assert_array_equal(moved, np.stack([params[0]] * 2))
    # onto a run without a device axis (one device), and back
    (one,) = reshard.reshard([spec("p", params)], [spec("p", params[0])], [params], (4, None))
    np.testing.assert_array_equal(one, params[0])
    (again,) = reshard.reshard([spec("p", one)], [spec("p", params[:2])], [one], (None, 2))
    np.testing.assert_array_equal(again, params[:2])


def test_leaves_that_cannot_move_are_refused_by_name():
    differs = np.stack([np.zeros(3), np.ones(3)])  # [2, 3]: not the same on both devices
    with pytest.raises(CheckpointError) as e:
        reshard.reshard([spec("a/b", differs)], [spec("a/b", np.zeros((1, 3)))], [differs], (2, 1))
    assert str(e.value) == (
        "cannot reshard the checkpoint from 2 devices onto 1 devices: a/b differs from device "
        "to device, so it has no one value to give 1 devices; resume on 2 devices"
    )
    odd = np.zeros((2, 3, 5))
    with pytest.raises(CheckpointError, match=r"c is \[3, 5\] per device there and \[2, 4\]"):
        reshard.reshard([spec("c", odd)], [spec("c", np.zeros((3, 2, 4)))], [odd], (2, 3))
    rows = np.zeros((4, 16, 2))
    with pytest.raises(CheckpointError, match="buf/obs belongs to a replay buffer"):
        reshard.reshard(
            [spec("buf/obs", rows)], [spec("buf/obs", np.zeros((2, 32, 2)))], [rows], (4, 2), {0}
        )
    with pytest.raises(CheckpointError, match="holds a different train state"):
        reshard.reshard([spec("x", rows)], [spec("y", rows)], [rows], (4, 2))


def test_the_leaves_of_a_replay_buffer_are_found_in_the_state():
    buffer = BufferState({"obs": np.zeros(2), "act": np.zeros(2)}, np.zeros(()), np.zeros(()))
    state = {"a": np.zeros(1), "buffer": buffer, "z": np.zeros(1)}  # leaves sorted by key
    assert len(jax.tree.leaves(buffer)) == 4
    assert reshard.buffer_leaves(state) == {1, 2, 3, 4}

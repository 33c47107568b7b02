"""Checkpoint loading checks (jrl/app/checkpoint.py) that the size check of the file manifest does
not reach: the array checksum (a step whose manifest was never written, as after a kill between
orbax's commit and the manifest), a changed byte of the same size, an unreadable or invalid
manifest, a missing file, unreadable arrays and an unreadable record; each refusal names the
other checkpoints to fall back to."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs
import numpy as np
import pytest

from jrl.app import api as experiment
from jrl.app import checkpoint
from jrl.run import anakin

PRNG_KEY = jax.dtypes.prng_key


@pytest.fixture(scope="module")
def run_states():
    """PPO's train state of one run after init with two different keys (same shapes)."""
    config = experiment.make_config("ppo", "CartPole-v1", total_steps=20_000)
    env, params = jrl.envs.make("CartPole-v1")
    built = jrl.agents.get("ppo").build(config, env, params)
    keys = [jax.random.split(jax.random.key(s), 1) for s in (1, 2)]
    states = [anakin.init_runs(built.algorithm, k) for k in keys]
    return anakin.abstract_states(built.algorithm, keys[0]), states


def save_two(tmp_path: Path, run_states) -> tuple[Path, object]:
    """Checkpoints 1 and 2 (different states, the same tree) of a run folder."""
    like, (first, second) = run_states
    ck = checkpoint.Checkpointer(tmp_path, keep=3)
    ck.save(1, first, {"m": np.arange(3.0)[None]}, {})
    ck.save(2, second, {"m": np.arange(3.0)[None] + 1}, {})
    ck.close()
    return tmp_path / "checkpoints" / "2", like


def data_files(step_dir: Path) -> list[Path]:
    files = sorted(p for p in (step_dir / "arrays").rglob("*") if p.is_file())
    return [p for p in files if p.parent.name == "d"]


def same_leaves(a, b) -> bool:
    """Whether two train states hold the same values (NaN equal to NaN; keys by their data)."""

    def raw(x):
        return np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, PRNG_KEY) else x)

    try:
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_array_equal(raw(x), raw(y))
    except AssertionError:
        return False
    return True


def test_a_step_without_its_manifest_still_loads(tmp_path, run_states):
    """A kill between orbax's commit and the manifest leaves a step without one: it loads, and
    the arrays are the ones saved."""
    step, like = save_two(tmp_path, run_states)
    (step / checkpoint.MANIFEST).unlink()
    loaded = checkpoint.load(tmp_path, like)
    assert loaded.step == 2 and same_leaves(loaded.state, run_states[1][1])
    np.testing.assert_array_equal(loaded.history["m"], np.arange(3.0)[None] + 1)


def test_the_array_checksum_refuses_other_arrays_when_the_manifest_is_missing(tmp_path, run_states):
    """Step 2's arrays replaced by step 1's (well-formed data of the right shapes, so only the
    checksum written with step 2's record can tell) and no manifest: refused, not loaded."""
    step, like = save_two(tmp_path, run_states)
    assert not same_leaves(*run_states[1])  # the two steps hold different values
    (step / checkpoint.MANIFEST).unlink()
    shutil.rmtree(step / "arrays")
    shutil.copytree(tmp_path / "checkpoints" / "1" / "arrays", step / "arrays")
    with pytest.raises(checkpoint.CheckpointError, match=r"checksum.*other checkpoints: \[1\]"):
        checkpoint.load(tmp_path, like)
    assert same_leaves(checkpoint.load(tmp_path, like, step=1).state, run_states[1][0])


def test_a_changed_byte_of_the_same_size_is_refused_by_the_manifest(tmp_path, run_states):
    step, like = save_two(tmp_path, run_states)
    f = data_files(step)[0]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(
        checkpoint.CheckpointError, match=r"corrupt: .* differs from what was written.*\[1\]"
    ):
        checkpoint.load(tmp_path, like)


def test_unreadable_arrays_without_a_manifest_are_refused(tmp_path, run_states):
    step, like = save_two(tmp_path, run_states)
    (step / checkpoint.MANIFEST).unlink()
    for f in data_files(step):
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(checkpoint.CheckpointError, match=r"unreadable.*other checkpoints: \[1\]"):
        checkpoint.load(tmp_path, like)


def test_a_bad_or_incomplete_manifest_is_refused(tmp_path, run_states):
    step, like = save_two(tmp_path, run_states)
    manifest = step / checkpoint.MANIFEST
    record = json.loads(manifest.read_text())
    manifest.write_text("{not json")
    with pytest.raises(checkpoint.CheckpointError, match=r"not valid JSON.*\[1\]"):
        checkpoint.load(tmp_path, like)
    manifest.write_text(json.dumps(record))
    name = next(n for n in record if n.startswith("arrays/"))
    (step / name).unlink()
    with pytest.raises(checkpoint.CheckpointError, match=rf"incomplete: {name} is missing.*\[1\]"):
        checkpoint.load(tmp_path, like)


def test_an_unreadable_record_is_refused(tmp_path, run_states):
    step, like = save_two(tmp_path, run_states)
    (step / "meta" / "metadata").write_text("{")
    with pytest.raises(checkpoint.CheckpointError, match=r"unreadable: its record.*\[1\]"):
        checkpoint.load(tmp_path, like)


def test_arrays_of_size_zero_round_trip(tmp_path):
    """orbax refuses arrays of size 0 (brax's MJX states hold some): they are left out of the
    arrays, recorded by shape and dtype, and loaded back as such; the checksum covers them."""
    state = {
        "w": jnp.arange(6.0).reshape(2, 3),
        "contacts": jnp.zeros((2, 0, 3), jnp.float32),
        "ids": jnp.zeros((0,), jnp.int32),
        "key": jax.random.split(jax.random.key(0), 2),
    }
    ck = checkpoint.Checkpointer(tmp_path, keep=2)
    ck.save(1, state, {"m": np.zeros((2, 0))}, {})
    ck.close()
    like = jax.eval_shape(lambda: state)
    loaded = checkpoint.load(tmp_path, like)
    assert same_leaves(loaded.state, state)
    assert loaded.state["contacts"].shape == (2, 0, 3) and loaded.state["ids"].dtype == np.int32
    assert loaded.history["m"].shape == (2, 0)
    assert sorted(loaded.meta["empty"]) == ["h00000", "s00000", "s00001"]  # flattened: sorted keys
    meta_file = tmp_path / "checkpoints" / "1" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    meta["empty"]["s00001"] = [[0], "float32"]  # recorded with another dtype: the checksum sees it
    meta_file.write_text(json.dumps(meta))
    (tmp_path / "checkpoints" / "1" / checkpoint.MANIFEST).unlink()
    with pytest.raises(checkpoint.CheckpointError, match="corrupt"):
        checkpoint.load(tmp_path, like)


def test_a_save_holds_the_state_once(tmp_path):
    """Saving does not copy the state on the host: orbax's numpy handler deep-copies every
    array by default, which doubled the peak memory of runs with large replay buffers. A
    subprocess saves a 256 MiB array; its peak resident memory may grow by far less than that."""
    code = f"""
import resource, jax.numpy as jnp
from jrl.app import checkpoint
ck = checkpoint.Checkpointer({str(tmp_path)!r})
ck.save(1, {{"x": jnp.ones(3)}}, {{}}, {{}})  # orbax and tensorstore set up
x = jnp.ones((64, 1024, 1024), jnp.float32)
x.block_until_ready()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ck.save(2, {{"x": x}}, {{}}, {{}})
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = (int(v) for v in done.stdout.split()[-2:])  # KiB
    assert after - before < 96 * 1024, (before, after)  # a copy would add 256 MiB


def _binary_sum_tree(leaves: np.ndarray, capacity: int) -> np.ndarray:
    """The binary sum tree formats 1-2 stored: ``[..., 2 P]``, node k = 2k + 2k+1, slot i's
    leaf at P + i (P the power of two >= capacity), unused leaves 0."""
    p = 1 << max(int(capacity) - 1, 0).bit_length()
    tree = np.zeros(leaves.shape[:-1] + (2 * p,), np.float32)
    tree[..., p : p + leaves.shape[-1]] = leaves
    for k in range(p - 1, 0, -1):
        tree[..., k] = tree[..., 2 * k] + tree[..., 2 * k + 1]
    return tree


@pytest.mark.parametrize("capacity", [1, 3, 1000])
def test_a_format_2_prioritised_buffer_loads_with_its_tree_rebuilt(tmp_path, monkeypatch, capacity):
    """A checkpoint of format 2 holds a prioritised buffer's binary sum tree; loading it rebuilds
    the 8-ary tree of today's buffer from its leaves, bit for bit the tree the buffer would
    hold, and the other leaves as they were. A tree of another length in a current checkpoint
    is still refused."""
    from jrl.parts import buffers

    buf = buffers.prioritized_buffer(capacity, check_memory=False)

    def one(seed):
        state = buf.init({"obs": jnp.zeros(3)})
        n = min(capacity, 700)
        state = buf.add(state, {"obs": jnp.full((n, 3), float(seed))})
        idx = jax.random.randint(jax.random.key(seed), (min(n, 50),), 0, n)
        return buf.update_priorities(
            state, idx, jax.random.uniform(jax.random.key(seed), idx.shape)
        )

    now = jax.tree.map(lambda *x: jnp.stack(x), one(1), one(2))  # [R = 2, ...]
    leaves = np.asarray(now.tree)[:, :capacity]  # slot i's leaf at i
    old = now.replace(tree=jnp.asarray(_binary_sum_tree(leaves, capacity)))
    monkeypatch.setattr(checkpoint, "FORMAT_VERSION", 2)
    ck = checkpoint.Checkpointer(tmp_path / "old", keep=1)
    ck.save(1, {"buffer": old}, {"m": np.zeros((1, 2))}, {})
    ck.close()
    monkeypatch.undo()
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), {"buffer": now})
    loaded = checkpoint.load(tmp_path / "old", like)
    assert loaded.meta["format_version"] == 2
    assert same_leaves(loaded.state, {"buffer": now})

    ck = checkpoint.Checkpointer(tmp_path / "new", keep=1)  # format 3 with a binary tree
    ck.save(1, {"buffer": old}, {"m": np.zeros((1, 2))}, {})
    ck.close()
    if old.tree.shape != now.tree.shape:
        with pytest.raises(checkpoint.CheckpointError, match="different train state"):
            checkpoint.load(tmp_path / "new", like)


def test_the_blocks_of_a_multi_process_checkpoint_are_checked_one_by_one():
    """A leaf written block by block (by the processes holding them, format 5) is checked by
    each block's digest when read whole: a changed value, or a part no block covers, is
    refused."""
    a = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    blocks = {}
    for d in range(4):  # one block per device along the leading axis, as an Anakin run's
        index = (slice(d, d + 1), slice(None), slice(None))
        key = checkpoint._block_key(index, a.shape)
        blocks[key] = checkpoint._digest([a[index]])
    assert sorted(blocks) == [f"{d}:{d + 1},0:3,0:2" for d in range(4)]
    assert checkpoint._block_index("1:2,0:3,0:2") == (slice(1, 2), slice(0, 3), slice(0, 2))
    assert checkpoint._check_blocks(a, blocks)
    changed = a.copy()
    changed[2, 1, 0] += 1
    assert not checkpoint._check_blocks(changed, blocks)
    assert not checkpoint._check_blocks(a, {k: v for k, v in blocks.items() if k[0] != "3"})

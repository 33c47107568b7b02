"""Checkpoints of whole training runs, written with orbax.

A checkpoint holds everything a run carries from one chunk to the next, for
every run of a vmapped (and possibly sharded) training program: the stacked
train state (agent parameters, optimiser state, target networks, hparams,
env states with their wrapper and normaliser statistics, replay buffers and
priorities, n-step windows, PRNG keys, counters), the per-iteration metric
histories so far, and a JSON record of the run (agent, env, config, seeds,
sweep, progress) with a format version.

Layout under a run folder::

    RUN/checkpoints/<iteration>/arrays/   orbax PyTree checkpoint: a flat dict of numpy leaves
    RUN/checkpoints/<iteration>/meta/     orbax JSON item: format version, run record, leaf
                                          paths/shapes/dtypes, sha256 of the arrays
    RUN/checkpoints/<iteration>/files.sha256.json   size and sha256 of every file, written
                                          after the commit and checked before reading

Writes are atomic: orbax writes a step into a temporary folder and renames
it when complete, so a crash or a kill mid-save leaves the previous good
checkpoint as the latest (a leftover temporary folder is never taken for a
step). The last ``keep`` checkpoints are kept. Typed PRNG keys are stored as
their raw key data and re-wrapped on load.

Loading checks, before anything is returned: the format version (a newer one
is refused), the tree of leaves (paths, shapes, dtypes; a checkpoint of a
different agent, env or config shows up here with the leaves that differ),
and a sha256 of every array against the one written at save time (a corrupt
or truncated file is refused). Every refusal is a :class:`CheckpointError`
with a message naming what differs. The file-level pieces (the manifest, the bound on a
save, the capture of a failed save's output) are in :mod:`jrl.app.checkpoint_io`.

In a multi-process run (:mod:`jrl.app.distributed`) every process takes part in
each save and load. A leaf spread over the processes' devices (an Anakin run's
``[D, R, ...]`` state) is written by orbax's multi-host checkpointing: each
process writes the blocks its own devices hold, and process 0 commits the step
once all have written. Each block gets its own sha256 (the record's ``blocks``,
gathered from every process through :mod:`jrl.app.peers`); the other leaves (the
same in every process) and the histories are written by process 0 and covered by
``sha256`` as before. A run resuming on its own layout reads only its own blocks
(``load``'s ``sharding``); any other reader (``jrl eval``, one process) reads
whole arrays and checks every block. The run folder must be on a filesystem that
every process sees.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl import __version__
from jrl.app import checkpoint_formats as formats
from jrl.app import reshard as resharding
from jrl.app.checkpoint_io import (
    MANIFEST,
    SAVE_LOG,
    CheckpointError,
    check_files,
    check_writable,
    file_digest,
    quiet_orbax,
    quiet_stderr,
    save_timeout,
)
from jrl.core.types import PyTree, is_key
from jrl.util import files

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "Checkpoint",
    "Checkpointer",
    "check_writable",
    "save_timeout",
    "steps",
    "load",
    "leaf_specs",
    "record",
]

FORMAT_VERSION = 5
"""Bumped whenever the layout or the meaning of a checkpoint changes. Format 2: the
agent-contract names (``num_updates`` for every agent's update counter; an agent's
hyperparameters only its own) and a run fingerprint in the record. Format 3: an 8-ary
sum tree in the prioritised buffers. Formats 1-2 are read through
:mod:`jrl.app.checkpoint_formats`. Format 4: a leaf split along its leading axis over
several devices (a run spread over the CPU cores) may be written in pieces, one per
device, that loading joins (the record's ``pieces``). Format 5: the record's ``processes``;
in a multi-process run the leaves spread over the processes are written block by block by
the processes that hold them, each block with its own digest (the record's ``blocks``)."""

CHECKPOINT_DIR = "checkpoints"


def _key_impl(x):
    """The PRNG implementation of a typed key array or of its ``ShapeDtypeStruct``."""
    return jax.random.key_impl(x) if isinstance(x, jax.Array) else x.dtype._impl


def _path_str(path) -> str:
    return jax.tree_util.keystr(path, simple=True, separator="/")


def to_host(tree: PyTree) -> list[np.ndarray]:
    """The leaves of ``tree`` as host numpy arrays (typed PRNG keys as their key data)."""
    return [np.asarray(x) for x in jax.device_get(_stored_leaves(tree))]


def _stored_leaves(tree: PyTree) -> list:
    """The leaves of ``tree`` as a checkpoint stores them (typed PRNG keys as their key data)."""
    return [jax.random.key_data(x) if is_key(x) else x for x in jax.tree.leaves(tree)]


def _spread(x) -> bool:
    """A leaf whose blocks live on several processes (a multi-process run's sharded state)."""
    return isinstance(x, jax.Array) and not x.is_fully_addressable


def _block_key(index: tuple, shape: tuple) -> str:
    """A block's place in its array, ``"0:2,0:3"`` (start:stop per axis), from a shard's
    index (a tuple of slices)."""
    return ",".join("%d:%d" % sl.indices(n)[:2] for sl, n in zip(index, shape))


def _block_index(key: str) -> tuple:
    """The inverse of :func:`_block_key`: the slices of a block."""
    if not key:
        return ()
    return tuple(slice(*map(int, part.split(":"))) for part in key.split(","))


def _block_digests(x: jax.Array) -> dict[str, str]:
    """sha256 of each block of ``x`` that this process holds (replicas hashed once)."""
    out = {}
    for shard in x.addressable_shards:
        key = _block_key(shard.index, x.shape)
        if key not in out:
            out[key] = _digest([np.asarray(shard.data)])
    return out


def _gather_blocks(spread: dict[str, jax.Array], step: int) -> dict[str, dict[str, str]]:
    """Leaf name -> block -> sha256 of the spread leaves, over the blocks of every process
    (each process hashes its own; :mod:`jrl.app.peers` gathers them)."""
    if not spread:
        return {}
    from jrl.app import peers  # multi-process runs only

    group = peers.group()
    mine = {name: _block_digests(x) for name, x in spread.items()}
    blocks: dict[str, dict[str, str]] = {name: {} for name in spread}
    for posted in group.gather(f"the digests of checkpoint {step}", mine):
        for name, digests in posted.items():
            blocks[name].update(digests)
    return blocks


def leaf_specs(tree: PyTree) -> list[list]:
    """``[[path, shape, dtype], ...]`` of the stored leaves of ``tree`` (arrays or
    ``ShapeDtypeStruct``s; typed keys described by their key data)."""
    out = []
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if is_key(x):
            x = jax.eval_shape(jax.random.key_data, x)
        out.append([_path_str(path), list(x.shape), np.dtype(x.dtype).name])
    return out


def _digest(arrays: list[np.ndarray | list[np.ndarray]]) -> str:
    """sha256 over each array's dtype, shape and bytes; an array given as its pieces along
    the leading axis (a list) hashes as the array they join into."""
    h = hashlib.sha256()
    for a in arrays:
        pieces = [np.ascontiguousarray(p) for p in (a if isinstance(a, list) else [a])]
        first = pieces[0]
        shape = (sum(p.shape[0] for p in pieces),) + first.shape[1:] if first.ndim else first.shape
        h.update(f"{first.dtype.name}{shape}".encode())
        for p in pieces:
            h.update(p.view(np.uint8).reshape(-1).data if p.size else b"")
    return h.hexdigest()


def _host_pieces(x) -> list[np.ndarray] | np.ndarray:
    """A state leaf on the host: for an array split along its leading axis over several
    devices (a run spread over the CPU cores), the host views of its blocks in order, so
    that saving it makes no whole copy; otherwise the host array."""
    if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1 and x.ndim and x.size:
        blocks = {}
        for shard in x.addressable_shards:
            first, *rest = shard.index
            if any(r != slice(None) for r in rest):  # split along another axis too
                return np.asarray(jax.device_get(x))
            blocks.setdefault(first.start or 0, shard.data)  # replicas hold the same block
        starts = sorted(blocks)
        ends = np.cumsum([blocks[s].shape[0] for s in starts]).tolist()
        if starts == [0] + ends[:-1] and ends[-1] == x.shape[0]:
            return [np.asarray(blocks[s]) for s in starts]
    return np.asarray(jax.device_get(x))


def _describe_differences(saved: list[list], expected: list[list], limit: int = 4) -> str:
    saved_map, expected_map = {s[0]: s[1:] for s in saved}, {e[0]: e[1:] for e in expected}
    diffs = []
    for path in expected_map:
        if path not in saved_map:
            diffs.append(f"{path} is missing from the checkpoint")
        elif saved_map[path] != expected_map[path]:
            (s_shape, s_dtype), (e_shape, e_dtype) = saved_map[path], expected_map[path]
            diffs.append(f"{path} is {s_dtype}{s_shape} in the checkpoint, {e_dtype}{e_shape} here")
    diffs += [f"{path} is in the checkpoint only" for path in saved_map if path not in expected_map]
    more = f" (and {len(diffs) - limit} more)" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more


class Checkpoint:
    """A loaded checkpoint: ``state`` (the train state tree), ``history``
    (metric name -> ``[R, iterations]``), ``meta`` (the JSON record) and ``step``."""

    def __init__(
        self,
        state: PyTree,
        history: dict[str, np.ndarray],
        meta: dict[str, Any],
        step: int,
        path: Path,
    ):
        self.state, self.history, self.meta, self.step, self.path = state, history, meta, step, path


class Checkpointer:
    """Writes checkpoints of one run into ``run_dir/checkpoints``, keeping the last ``keep``."""

    def __init__(self, run_dir: str | Path, keep: int = 3):
        if int(keep) < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = Path(run_dir).absolute() / CHECKPOINT_DIR
        self.directory.mkdir(parents=True, exist_ok=True)
        check_writable(self.directory)  # an unwritable folder fails now, before any training
        self._keep = int(keep)
        self._manager_ = None

    @property
    def _manager(self):
        """orbax's manager, made at the first use: importing orbax takes about 0.2 s, which a
        run that checkpoints only at its end need not spend before its first progress line."""
        if self._manager_ is None:
            import orbax.checkpoint as ocp  # made at the first use: see above

            quiet_orbax()
            # orbax's default numpy handler deep-copies every array before writing it (a guard
            # against the caller changing it during an asynchronous save). ``save`` waits until
            # the write is committed and its arrays are views of immutable jax buffers, so that
            # copy would only double the peak memory of a run with large replay buffers.
            registry = ocp.type_handlers.create_type_handler_registry(
                (np.ndarray, ocp.type_handlers.NumpyHandler(deepcopy_host_arrays=False)),
                (jax.Array, ocp.type_handlers.ArrayHandler()),  # unused; orbax warns without one
            )
            # the step's folders are made synchronously: made by orbax's threads, a failure
            # there (an unwritable folder) left threads waiting for signals that never came,
            # and the process could not exit; every wait of a save is bounded by save_timeout()
            asynchronous = ocp.AsyncOptions(
                timeout_secs=save_timeout(), create_directories_asynchronously=False
            )
            self._manager_ = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=self._keep, create=True, async_options=asynchronous
                ),
                item_handlers={
                    "arrays": ocp.PyTreeCheckpointHandler(type_handler_registry=registry),
                    "meta": ocp.JsonCheckpointHandler(),
                },
            )
        return self._manager_

    def save(
        self, step: int, state: PyTree, history: dict[str, np.ndarray], meta: dict[str, Any]
    ) -> Path:
        """Saves ``state`` and ``history`` at ``step`` (iterations done) and waits until the
        step is committed. ``meta`` is the JSON-serialisable run record."""
        import orbax.checkpoint as ocp  # imported by the manager, made on first use

        manager = self._manager
        leaves = _stored_leaves(state)
        spread = {f"s{i:05d}": x for i, x in enumerate(leaves) if _spread(x)}
        arrays = [x if _spread(x) else _host_pieces(x) for x in leaves]
        names = sorted(history)
        hist = [np.asarray(history[n]) for n in names]
        record = dict(
            meta,
            format_version=FORMAT_VERSION,
            jrl_version=__version__,
            step=int(step),
            processes=jax.process_count(),
            leaves=leaf_specs(state),
            history_names=names,
            sha256=_digest([a for a in arrays if not _spread(a)] + hist),
            blocks=_gather_blocks(spread, step),
        )
        flat, record["pieces"] = {}, {}
        for i, a in enumerate(arrays):
            if _spread(a):  # written by the processes that hold its blocks (orbax multi-host)
                flat[f"s{i:05d}"] = a
            elif isinstance(a, list):  # blocks along the leading axis (format 4)
                record["pieces"][f"s{i:05d}"] = len(a)
                flat.update({f"s{i:05d}p{j}": p for j, p in enumerate(a)})
            else:
                flat[f"s{i:05d}"] = a
        flat.update({f"h{i:05d}": a for i, a in enumerate(hist)})
        # orbax refuses arrays of size 0 (e.g. MJX's empty contact arrays); they hold no data,
        # so the record keeps their shape and dtype and loading makes them again
        empty = {k: [list(a.shape), a.dtype.name] for k, a in flat.items() if a.size == 0}
        flat = {k: a for k, a in flat.items() if k not in empty}
        record["empty"] = empty
        if int(step) in manager.all_steps():  # e.g. a resumed run stopping where it started
            manager.delete(int(step))
        args = ocp.args.Composite(arrays=ocp.args.PyTreeSave(flat), meta=ocp.args.JsonSave(record))
        with quiet_stderr(self.directory / SAVE_LOG):
            manager.save(int(step), args=args, force=True)
            manager.wait_until_finished()
        path = self.directory / str(int(step))
        if jax.process_index() != 0:  # one writer of the manifest: process 0, which committed
            return path
        manifest = {
            str(f.relative_to(path)): file_digest(f) for f in sorted(path.rglob("*")) if f.is_file()
        }
        files.write_atomic(path / MANIFEST, json.dumps(manifest, indent=0))
        return path

    def delete(self, steps: list[int]) -> None:
        """Deletes these committed steps."""
        for step in steps:
            self._manager.delete(int(step))

    def close(self) -> None:
        if self._manager_ is None:  # never used
            return
        with quiet_stderr(self.directory / SAVE_LOG):  # a failed save's threads report here too
            self._manager.wait_until_finished()
            self._manager.close()


def steps(run_dir: str | Path) -> list[int]:
    """Committed checkpoint steps of a run folder, ascending (temporary folders of
    an interrupted save are not steps)."""
    d = Path(run_dir) / CHECKPOINT_DIR
    if not d.is_dir():
        return []
    return sorted(
        int(p.name)
        for p in d.iterdir()
        if p.is_dir() and p.name.isdigit() and (p / "meta").is_dir() and (p / "arrays").is_dir()
    )


def record(run_dir: str | Path, step: int | None = None) -> dict[str, Any] | None:
    """The JSON record of the checkpoint at ``step`` (default: the latest) of ``run_dir``, read
    without its arrays; None when there is none or it is unreadable (:func:`load` says why)."""
    try:
        _, path, _ = _chosen_step(Path(run_dir), step, "")
        return _read_meta(path, "")
    except CheckpointError:
        return None


def load(
    run_dir: str | Path,
    like: PyTree,
    step: int | None = None,
    step_flag: str = "--resume-step",
    sharding: jax.sharding.Sharding | None = None,
    devices: tuple[int | None, set[int]] | None = None,
) -> Checkpoint:
    """Loads the checkpoint at ``step`` (default: the latest) of ``run_dir``.

    ``like`` is the expected train state (arrays or ``ShapeDtypeStruct``s,
    e.g. from ``jax.eval_shape``): its tree structure is rebuilt, typed keys
    re-wrapped, and its leaf shapes and dtypes must match the checkpoint's.
    ``sharding``: a multi-process run resuming on the processes and devices
    that wrote the checkpoint reads the leaves written block by block as
    global arrays with this sharding, each process only its own blocks;
    without it every leaf is read whole, as numpy. ``devices``: ``(D, buffer
    leaves)`` of an Anakin run's ``like``; a checkpoint written on another
    device count is moved onto D (:mod:`jrl.app.reshard`; the record's
    ``run.devices`` says which it was written on). Raises
    :class:`CheckpointError` (see the module docstring); its message names
    the other checkpoints and ``step_flag``, the option that picks one.
    """

    quiet_orbax()
    step, path, fallback = _chosen_step(Path(run_dir), step, step_flag)
    meta = _read_meta(path, fallback)
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {version}, newer than this jrl "
            f"({__version__}) reads (up to {FORMAT_VERSION}); upgrade jrl to load it"
        )
    check_files(path, fallback)
    saved, expected = meta.get("leaves", []), leaf_specs(like)
    before = (meta.get("run") or {}).get("devices")
    if devices is not None and before != devices[0] and saved != expected and version >= 3:
        arrays, hist = _read_arrays(path, meta, saved, fallback)  # whole, to split anew
        move = (before, devices[0])
        arrays = resharding.reshard(saved, expected, arrays, move, devices[1], where=path)
    else:
        order, trees = _saved_order(path, version, saved, expected)
        arrays, hist = _read_arrays(path, meta, saved, fallback, sharding)
        for i, size in trees.items():
            try:
                arrays[i] = formats.rebuild_sum_tree(arrays[i], size)
            except ValueError as e:  # no buffer has such a tree
                raise CheckpointError(str(e)) from None
        arrays = [arrays[i] for i in order]
    like_leaves, treedef = jax.tree.flatten(like)
    leaves = [
        jax.random.wrap_key_data(a if _spread(a) else jnp.asarray(a), impl=_key_impl(x))
        if is_key(x)
        else a
        for a, x in zip(arrays, like_leaves)
    ]
    return Checkpoint(jax.tree.unflatten(treedef, leaves), hist, meta, int(step), path)


def _chosen_step(run_dir: Path, step: int | None, step_flag: str) -> tuple[int, Path, str]:
    """``(step, its folder, the note on the other checkpoints for error messages)``: ``step``
    or the latest one; :class:`CheckpointError` when there is none, or not that one."""
    available = steps(run_dir)
    if not available:
        raise CheckpointError(f"{run_dir} has no checkpoint (looked in {run_dir / CHECKPOINT_DIR})")
    if step is None:
        step = available[-1]
    elif int(step) not in available:
        raise CheckpointError(
            f"{run_dir} has no checkpoint at iteration {step}; it has {available}"
        )
    path = run_dir.absolute() / CHECKPOINT_DIR / str(int(step))
    others = [s for s in available if s != step]
    fallback = f"; other checkpoints: {others} (choose one with {step_flag})" if others else ""
    return int(step), path, fallback


def _saved_order(
    path: Path, version: int, saved: list[list], expected: list[list]
) -> tuple[list[int], dict[int, int]]:
    """For each expected leaf, the index of the saved leaf that holds it, and the format-2
    sum trees to rebuild (leaf index -> size); :class:`CheckpointError` naming the leaves that
    differ when the checkpoint holds another train state."""
    as_now, trees = saved, {}
    if version <= 2:
        as_now, trees = formats.binary_sum_trees(saved, expected)
    order = list(range(len(expected))) if as_now == expected else None
    if order is None and version == 1:
        order = formats.format1_order(as_now, expected)
    if order is None:
        raise CheckpointError(
            f"checkpoint {path} holds a different train state (another agent, env or "
            f"config?): {_describe_differences(as_now, expected)}"
        )
    return order, trees


def _restore_args(meta: dict[str, Any], saved: list[list], sharding) -> dict[str, Any]:
    """orbax's restore arguments for every array the checkpoint wrote: numpy, except the
    blocks-written leaves with ``sharding`` (global arrays, each process its own blocks)."""
    import orbax.checkpoint as ocp  # as in _read_arrays: only when a checkpoint is read

    empty, pieces, blocks = meta.get("empty", {}), meta.get("pieces", {}), meta.get("blocks", {})
    as_numpy = ocp.RestoreArgs(restore_type=np.ndarray)
    out = {}
    for i, (_, shape, dtype) in enumerate(saved):
        name = f"s{i:05d}"
        if name in empty:
            continue
        if name in blocks and sharding is not None:
            out[name] = ocp.ArrayRestoreArgs(
                sharding=sharding, global_shape=tuple(shape), dtype=np.dtype(dtype)
            )
        elif name in pieces:
            out.update({f"{name}p{j}": as_numpy for j in range(pieces[name])})
        else:
            out[name] = as_numpy
    histories = (f"h{i:05d}" for i in range(len(meta["history_names"])))
    out.update({name: as_numpy for name in histories if name not in empty})
    return out


def _check_blocks(a, digests: dict[str, str]) -> bool:
    """Whether the blocks of leaf ``a`` that this process holds (all of them for a numpy
    array) match their digests."""
    if isinstance(a, jax.Array):
        held = {_block_key(s.index, a.shape): s.data for s in a.addressable_shards}
        if not set(held) <= set(digests):
            return False
        return all(_digest([np.asarray(x)]) == digests[k] for k, x in held.items())
    covered = np.zeros(a.shape, bool)
    for key, digest in digests.items():
        index = _block_index(key)
        if _digest([np.asarray(a[index])]) != digest:
            return False
        covered[index] = True
    return bool(covered.all())


def _read_arrays(path: Path, meta: dict[str, Any], saved: list[list], fallback: str, sharding=None):
    """The state leaves (in the saved order) and metric histories of the checkpoint at
    ``path``, checked against the shapes, dtypes and checksums of its record."""
    # orbax takes about 0.2 s to import: only when a checkpoint is read (not by `jrl --help`)
    import orbax.checkpoint as ocp

    names = meta["history_names"]
    n_state = len(saved)
    try:
        reader = ocp.PyTreeCheckpointer()
        try:
            args = ocp.args.PyTreeRestore(restore_args=_restore_args(meta, saved, sharding))
            restored = reader.restore(path / "arrays", args=args)
        finally:
            reader.close()
    except Exception as e:  # orbax/tensorstore raise many types for unreadable data
        raise CheckpointError(
            f"checkpoint {path} is unreadable ({type(e).__name__}: {str(e)[:200]}){fallback}"
        ) from None
    empty, pieces = meta.get("empty", {}), meta.get("pieces", {})

    def read(name):
        if name in empty:  # not written: an array of size 0 (see Checkpointer.save)
            shape, dtype = empty[name]
            return np.zeros(shape, np.dtype(dtype))
        if name in pieces:  # written in blocks along the leading axis (format 4)
            return np.concatenate(
                [np.asarray(restored[f"{name}p{j}"]) for j in range(pieces[name])]
            )
        x = restored[name]
        return x if isinstance(x, jax.Array) and not x.is_fully_addressable else np.asarray(x)

    try:
        arrays = [read(f"s{i:05d}") for i in range(n_state)]
        hist = [read(f"h{i:05d}") for i in range(len(names))]
    except KeyError as e:
        raise CheckpointError(
            f"checkpoint {path} is incomplete: array {e} is missing{fallback}"
        ) from None
    for a, (p, shape, dtype) in zip(arrays, saved):
        if list(a.shape) != shape or np.dtype(a.dtype).name != dtype:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {p} reads as {np.dtype(a.dtype).name}"
                f"{list(a.shape)}, written as {dtype}{shape}{fallback}"
            )
    blocks = meta.get("blocks", {})
    for i, (a, (p, _, _)) in enumerate(zip(arrays, saved)):
        if f"s{i:05d}" in blocks and not _check_blocks(a, blocks[f"s{i:05d}"]):
            raise CheckpointError(
                f"checkpoint {path} is corrupt: the blocks of {p} do not match the checksums "
                f"written with them{fallback}"
            )
    whole = [a for i, a in enumerate(arrays) if f"s{i:05d}" not in blocks]
    if _digest(whole + hist) != meta.get("sha256"):
        raise CheckpointError(
            f"checkpoint {path} is corrupt: its arrays do not match the checksum written "
            f"with them{fallback}"
        )
    return arrays, dict(zip(names, hist))


def _read_meta(path: Path, fallback: str) -> dict[str, Any]:
    meta_file = path / "meta" / "metadata"
    try:
        return json.loads(meta_file.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint {path} is unreadable: its record {meta_file.name} "
            f"({type(e).__name__}: {e}){fallback}"
        ) from None

"""The run folder: what a run writes where, and the checks before it writes.

::

    DIR/config.json          the run record (:class:`jrl.app.run_options.RunSpec`)
    DIR/metrics.csv          one row per logged iteration and run (``log_every``)
    DIR/learning_curve.png   mean and spread over seeds vs env steps
    DIR/params.msgpack       final parameters of every run (flax serialisation)
    DIR/summary.json         final returns and timings
    DIR/checkpoints/N/       the whole train state after N iterations (:mod:`jrl.app.checkpoint`)
    DIR/metrics.jsonl, DIR/tb/   with ``log=["jsonl", "tensorboard"]`` (:mod:`jrl.app.sinks`)
    DIR/eval.json            written by ``jrl eval``

Every file is written atomically (:mod:`jrl.util.files`). A folder is only
written into when it is empty of run outputs, or holds a jrl run and
``overwrite`` is given (then only that run's outputs are deleted), and only
by the process that holds its :class:`RunLock` (``DIR/.jrl.lock``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from jrl.app import checkpoint
from jrl.app.checkpoint import CheckpointError
from jrl.app.run_options import LAYOUT, RunSpec
from jrl.run import plugins
from jrl.util import files

__all__ = [
    "FINAL_FILES",
    "OUTPUTS",
    "RUN_FILES",
    "RunFolderError",
    "RunLock",
    "RunLockedError",
    "check_checkpoint_run",
    "check_out_dir",
    "clear_run",
    "read_spec",
    "resume_command",
    "write_record",
]

RUN_FILES = ("config.json", "metrics.csv", "learning_curve.png", "params.msgpack", "summary.json")
"""The files every finished run folder holds."""
OUTPUTS = RUN_FILES + ("metrics.jsonl", "eval.json", "checkpoints", "tb")
OUTPUTS += ("pbt_lineage.json", "pbt_lineage.png")  # PBT runs (jrl.run.pbt)
OUTPUTS += ("videos",)  # --video-every (jrl.app.videos)
"""Everything a run may write (what ``overwrite`` deletes)."""
FINAL_FILES = ("params.msgpack", "summary.json", "learning_curve.png")
"""What a run writes after its last checkpoint; a resume completes them when missing."""
LOCK_FILE = ".jrl.lock"


class RunFolderError(OSError):
    """The run folder cannot be created or written (exit code 1 on the command line)."""


class RunLockedError(FileExistsError):
    """Another live process owns the run folder."""


class RunLock:
    """Exclusive ownership of a run folder by this process, for as long as the ``with`` block.

    An OS-level lock (``flock``) on ``DIR/.jrl.lock``, which also records the owner (pid,
    host, start time, command line). The OS releases the lock when its process dies, so the
    lock of a killed run is never in the way: it is taken over, with a note naming the dead
    owner. A live owner makes :class:`RunLockedError`. The folder is created if needed
    (:class:`RunFolderError` when it cannot be). The lock file stays, empty, when released.
    """

    def __init__(self, out: str | os.PathLike, quiet: bool = False):
        self.out, self.quiet, self._fd = Path(out), quiet, None

    def __enter__(self) -> "RunLock":
        if self.out.exists() and not self.out.is_dir():
            raise FileExistsError(f"output path {self.out} exists and is not a folder")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RunFolderError(f"cannot create run folder {self.out}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(fd)
            os.close(fd)
            raise RunLockedError(
                f"run folder {self.out} is in use by {_describe(owner)}; wait for that run to "
                "end (or stop it) before training, resuming or overwriting here"
            ) from None
        previous = _read_owner(fd)
        if previous and not self.quiet:
            print(
                f"jrl: note: {self.out} was last locked by {_describe(previous)}, which ended "
                "without releasing it (killed?); taking it over",
                file=sys.stderr,
            )
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv)[:500],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> bool:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # released cleanly: no owner to report
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        return False


def _read_owner(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data else {}
    except (OSError, ValueError):
        return {"pid": "?", "host": "?"}


def _describe(owner: dict[str, Any]) -> str:
    text = f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}"
    if owner.get("started"):
        text += f" (since {owner['started']})"
    if owner.get("command"):
        text += f": {owner['command']}"
    return text


ON_EVERY_PROCESS = (
    "on every process (with the same --coordinator, --num-processes and --process-id, or "
    "--multihost)"
)
"""How a multi-process run is resumed: :func:`resume_command`'s command, in every process."""


def resume_command(out: str | os.PathLike) -> str:
    """``jrl train --resume OUT``, with ``OUT`` quoted for a POSIX shell where it needs to be
    (a path with spaces or quotes)."""
    return f"jrl train --resume {shlex.quote(str(out))}"


def clear_run(out: Path) -> None:
    """Removes the files of a previous run (``overwrite``); other files stay."""
    for name in OUTPUTS:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def is_run_record(path: Path) -> bool:
    """Whether ``path`` is a JSON file that looks like a jrl run record."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and {"agent", "env_id", "config"} <= set(record)


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuses an output folder that holds a run (unless ``overwrite``), and one whose
    outputs do not belong to a jrl run even with ``overwrite`` (nothing of it is deleted)."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output path {out} exists and is not a folder")
    if not out.is_dir() or not any((out / f).exists() for f in OUTPUTS):
        return
    if not is_run_record(out / "config.json"):
        raise FileExistsError(
            f"output folder {out} holds files named like a run's ({', '.join(OUTPUTS)}) but "
            "no jrl config.json; refusing to write or delete there: choose another --out"
        )
    if overwrite:
        return
    hint = f"continue it with `{resume_command(out)}`, " if checkpoint.steps(out) else ""
    raise FileExistsError(
        f"output folder {out} already holds a run; {hint}choose another --out, or pass "
        "--overwrite to replace it"
    )


def write_record(out: Path, spec: RunSpec) -> None:
    """Writes ``config.json`` (the run record) atomically."""
    files.write_atomic(out / "config.json", json.dumps(spec.record(), indent=2))


def check_checkpoint_run(meta: dict[str, Any], spec: RunSpec, path: Path) -> None:
    """Refuses a checkpoint (its record ``meta``) written by another run than ``spec`` (the
    folder's ``config.json``): :class:`CheckpointError` naming the first fields that differ.
    A checkpoint's fingerprint equal to the spec's passes at once; otherwise (an older format,
    or a record written before a config field was retired) the records are compared field by
    field after parsing."""
    if meta.get("fingerprint") == spec.fingerprint():
        return
    try:
        saved = RunSpec.from_record(
            {k: meta.get(k) for k in ("agent", "env_id", "config", "run")}, path
        )
    except (CheckpointError, TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"checkpoint {path} has an unreadable run record ({e})") from None
    diffs = saved.differences(spec, ignore=LAYOUT)  # a resharded run's checkpoints differ there
    if diffs:
        shown = "; ".join(diffs[:4]) + (f" (and {len(diffs) - 4} more)" if len(diffs) > 4 else "")
        raise CheckpointError(
            f"checkpoint {path} belongs to another run than {spec_path(path)} describes: {shown}"
        )


def spec_path(checkpoint_path: Path) -> Path:
    """The ``config.json`` of the run folder that holds ``checkpoint_path``."""
    return checkpoint_path.parent.parent / "config.json"


def read_spec(run_dir: str | os.PathLike) -> RunSpec:
    """The :class:`~jrl.app.run_options.RunSpec` of a run folder (its ``config.json``)."""
    run_dir = Path(run_dir)
    cfg = run_dir / "config.json"
    if run_dir.exists() and not run_dir.is_dir():
        raise CheckpointError(f"{run_dir} is a file, not a run folder")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    if not cfg.is_file() and (run_dir / "search" / "study.json").is_file():  # jrl.app.search
        raise CheckpointError(
            f"{run_dir} holds a hyperparameter search, not one run: each batch's run is in "
            f"{run_dir}/batch-NNN; resume the search with `{resume_command(run_dir)}`"
        )
    if not cfg.is_file():
        raise CheckpointError(f"{run_dir} is not a jrl run folder (it has no config.json)")
    try:
        record = json.loads(cfg.read_text())
    except ValueError as e:
        raise CheckpointError(f"{cfg} is not valid JSON ({e})") from None
    run = record.get("run") if isinstance(record, dict) else None
    recorded = run.get("plugins", ()) if isinstance(run, dict) else ()
    try:  # the run's own envs and agents
        plugins.load([*recorded, *plugins.from_environment()])
    except plugins.PluginError as e:
        raise plugins.PluginError(
            f"{run_dir} was trained with the plugin(s) {', '.join(map(repr, recorded))}: {e}"
        ) from e
    return RunSpec.from_record(record, cfg)

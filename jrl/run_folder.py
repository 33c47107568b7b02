"""The run folder (layer 8): what a run writes where, and the checks before it writes.

::

    DIR/config.json          the run record (:class:`jrl.options.RunSpec`)
    DIR/metrics.csv          one row per report and run
    DIR/learning_curve.png   mean and spread over seeds vs env steps
    DIR/params.msgpack       final parameters of every run (flax serialisation)
    DIR/summary.json         final returns and timings
    DIR/checkpoints/N/       the whole train state after N iterations (:mod:`jrl.checkpoint`)
    DIR/metrics.jsonl, DIR/tb/   with ``log=["jsonl", "tensorboard"]`` (:mod:`jrl.sinks`)
    DIR/eval.json            written by ``jrl eval``

Every file is written atomically (:mod:`jrl.files`). A folder is only
written into when it is empty of run outputs, or holds a jrl run and
``overwrite`` is given (then only that run's outputs are deleted).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from jrl import checkpoint, files
from jrl.checkpoint import CheckpointError
from jrl.options import RunSpec

__all__ = ["OUTPUTS", "RUN_FILES", "check_out_dir", "clear_run", "read_spec", "write_record"]

RUN_FILES = ("config.json", "metrics.csv", "learning_curve.png", "params.msgpack", "summary.json")
"""The files every finished run folder holds."""
OUTPUTS = RUN_FILES + ("metrics.jsonl", "eval.json", "checkpoints", "tb")
"""Everything a run may write (what ``overwrite`` deletes)."""


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
    hint = f"continue it with `jrl train --resume {out}`, " if checkpoint.steps(out) else ""
    raise FileExistsError(
        f"output folder {out} already holds a run; {hint}choose another --out, or pass "
        "--overwrite to replace it"
    )


def write_record(out: Path, spec: RunSpec) -> None:
    """Writes ``config.json`` (the run record) atomically."""
    files.write_atomic(out / "config.json", json.dumps(spec.record(), indent=2))


def read_spec(run_dir: str | os.PathLike) -> RunSpec:
    """The :class:`~jrl.options.RunSpec` of a run folder (its ``config.json``)."""
    run_dir = Path(run_dir)
    cfg = run_dir / "config.json"
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    if not cfg.is_file():
        raise CheckpointError(f"{run_dir} is not a jrl run folder (it has no config.json)")
    try:
        record = json.loads(cfg.read_text())
    except ValueError as e:
        raise CheckpointError(f"{cfg} is not valid JSON ({e})") from None
    return RunSpec.from_record(record, cfg)

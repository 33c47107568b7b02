"""The sinks that write a file of the run folder: ``metrics.csv`` (:class:`CSVSink`) and
``metrics.jsonl`` (:class:`JSONLSink`), each resumable from a checkpoint's iteration (see
:mod:`jrl.app.sinks`)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jrl.app.sinks.record import ENV_STEPS, ITERATION, METRICS, Record
from jrl.util import files

__all__ = ["CSVSink", "JSONLSink"]


def _texts(values: np.ndarray) -> list[str]:
    """Each value as the shortest text that reads back to the same value in its own dtype (the
    ``str`` of a numpy scalar; float64 through Python floats, whose ``repr`` is the same text,
    without a numpy scalar per value); NaN as ``nan``."""
    values = np.asarray(values)
    if values.dtype == np.float64:
        return [repr(v) for v in values.tolist()]
    return [str(v) for v in values]


def _json_values(values: np.ndarray) -> list[Any]:
    """:func:`_json_value` of each element; float64 through Python floats (the same numbers)."""
    values = np.asarray(values)
    if values.dtype == np.float64:
        return [v if math.isfinite(v) else None for v in values.tolist()]
    return [_json_value(v) for v in values]


def _json_value(value: Any) -> Any:
    """``value`` as a JSON-able Python scalar; non-finite floats become None (``null``)."""
    if isinstance(value, np.generic):
        value = float(str(value)) if isinstance(value, np.floating) else value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _check_run_keys(record: Record, reserved: Iterable[str]) -> None:
    keys = list(record.runs[0]) if record.runs else []
    clash = sorted(set(keys) & set(reserved))
    if clash:
        raise ValueError(f"run identity keys {clash} clash with the columns the sink writes itself")
    for r, run in enumerate(record.runs):
        if set(run) != set(keys):
            raise ValueError(
                f"runs[{r}] has keys {sorted(run)}, runs[0] has {sorted(keys)}; "
                "every run must have the same identity keys"
            )


def _keep_lines(path: Path, keep: Callable[[str], bool], header_lines: int = 0) -> list[str]:
    """Rewrites ``path`` atomically with its first ``header_lines`` lines and the later lines that
    ``keep`` accepts. A last line without its newline (a write cut short) is dropped. Returns the
    header lines (without newlines)."""
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    lines.pop()  # "" after the final newline, or an unterminated (cut short) line
    header, body = lines[:header_lines], lines[header_lines:]
    kept = header + [line for line in body if keep(line)]
    with files.replacing(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.writelines(line + "\n" for line in kept)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
    return header


class CSVSink:
    """``metrics.csv``: a row per run per record; columns ``<runs[0] keys>, iteration, env_steps,
    <metric names sorted>``, fixed by the first record (or by the header of the file resumed).

    ``path`` is the file. ``resume_from_iteration=k`` keeps the existing header and the rows with
    ``iteration <= k``, then appends. Each ``write`` is flushed to the OS.
    """

    def __init__(self, path: str | os.PathLike, resume_from_iteration: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._columns: list[str] | None = None
        if resume_from_iteration is not None and self.path.exists():
            self._columns = self._truncate(resume_from_iteration)
        self._file = open(
            self.path,
            "a" if self._columns else "w",
            encoding="utf-8",  # noqa: SIM115
            newline="",
        )  # held open until close()

    def _truncate(self, last_iteration: int) -> list[str] | None:
        with open(self.path, encoding="utf-8", newline="") as f:
            header = next(csv.reader(f), None)
        if not header:
            return None
        if ITERATION not in header:
            raise ValueError(
                f"{self.path}: no {ITERATION!r} column in the header {header}; cannot resume"
            )
        at, width = header.index(ITERATION), len(header)

        def keep(line: str) -> bool:
            row = next(csv.reader([line]), [])
            try:
                return len(row) == width and int(row[at]) <= last_iteration
            except ValueError:
                return False

        _keep_lines(self.path, keep, header_lines=1)
        return header

    def write(self, record: Record) -> None:
        """Appends R rows (one per run) and flushes."""
        self.write_many([record])

    def write_many(self, records: Sequence[Record]) -> None:
        """Appends R rows per record, in order, and flushes once. A record that does not fit
        the columns raises before any of the rows is written."""
        buffer = io.StringIO()  # every row first, so that a failure writes none of them
        columns = self._columns
        for record in records:
            columns = self._rows(record, columns, buffer)
        self._file.write(buffer.getvalue())
        self._file.flush()
        self._columns = columns

    def _rows(self, record: Record, columns: list[str] | None, buffer: io.StringIO) -> list[str]:
        """Writes the record's R rows (and the header, if ``columns`` is None) into ``buffer``;
        returns the columns."""
        _check_run_keys(record, (ITERATION, ENV_STEPS, *record.metrics))
        run_keys = list(record.runs[0]) if record.runs else []
        header = None
        if columns is None:
            header = [*run_keys, ITERATION, ENV_STEPS, *sorted(record.metrics)]
        columns = header or columns
        new = [name for name in [*run_keys, *record.metrics] if name not in columns]
        if new:
            raise ValueError(
                f"{self.path}: columns {new} are not in the header {columns} (fixed by the "
                "first record or the file resumed; an algorithm's metric names are fixed)"
            )
        texts = {name: _texts(v) for name, v in record.metrics.items()}
        at = {name: i for i, name in enumerate(columns)}
        writer = csv.writer(buffer, lineterminator="\n")
        if header:
            writer.writerow(header)
        step = (str(int(record.iteration)), str(int(record.env_steps)))
        for r, run in enumerate(record.runs):
            row = [""] * len(columns)  # a metric this record lacks stays blank
            for key, value in run.items():
                row[at[key]] = str(value)
            row[at[ITERATION]], row[at[ENV_STEPS]] = step
            for name, text in texts.items():
                row[at[name]] = text[r]
            writer.writerow(row)
        return columns

    def close(self) -> None:
        self._file.close()


class JSONLSink:
    """``metrics.jsonl``: a JSON object per run per record,
    ``{"iteration", "env_steps", **runs[r], "metrics": {name: value}}``, non-finite values as null.

    ``path`` is the file. ``resume_from_iteration=k`` keeps the lines with ``iteration <= k``, then
    appends. Each ``write`` is flushed to the OS.
    """

    def __init__(self, path: str | os.PathLike, resume_from_iteration: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        resume = resume_from_iteration is not None and self.path.exists()
        if resume:

            def keep(line: str) -> bool:
                try:
                    return int(json.loads(line)[ITERATION]) <= resume_from_iteration
                except (ValueError, KeyError, TypeError):
                    return False

            _keep_lines(self.path, keep)
        self._file = open(self.path, "a" if resume else "w", encoding="utf-8")  # noqa: SIM115

    def write(self, record: Record) -> None:
        """Appends R lines (one per run) and flushes."""
        self.write_many([record])

    def write_many(self, records: Sequence[Record]) -> None:
        """Appends R lines per record, in order, and flushes once."""
        lines = []
        for record in records:
            _check_run_keys(record, (ITERATION, ENV_STEPS, METRICS))
            values = {name: _json_values(v) for name, v in record.metrics.items()}
            for r, run in enumerate(record.runs):
                obj = {
                    ITERATION: int(record.iteration),
                    ENV_STEPS: int(record.env_steps),
                    **{key: _json_value(value) for key, value in run.items()},
                    METRICS: {name: v[r] for name, v in values.items()},
                }
                lines.append(json.dumps(obj, allow_nan=False) + "\n")
        self._file.write("".join(lines))
        self._file.flush()

    def close(self) -> None:
        self._file.close()

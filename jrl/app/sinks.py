"""Metric sinks: where the host writes the metrics of R runs after every chunk of iterations.

Training runs R runs at once (seeds x swept values). After each chunk the host
holds one :class:`Record` per logged iteration of the chunk (every iteration, or
those ``log_every`` picks): the iteration and env-step counters (the same for
every run) and, for each metric name, a ``[R]`` host array with one value per
run. It hands them to a :class:`Sink` (``write(record)``, ``close()``; the
sinks below also take a chunk's records at once, ``write_many(records)``, and
:func:`write_records` uses that where a sink has it); :func:`make_sinks` builds
them by name.

What each sink writes:

- ``csv`` (:class:`CSVSink`), ``metrics.csv``: one row per run per record.
  Columns: the keys of ``runs[0]`` in order (``run, seed, <sweep keys...>``),
  then ``iteration, env_steps``, then the metric names sorted. The first record
  fixes the columns; a later record lacking a metric leaves its cell blank, one
  with a name not in the header raises ``ValueError``. Numbers are written as the
  shortest text that reads back to the same value in the metric's own dtype
  (float64 ``1/3`` -> ``0.3333333333333333``, float32 ``0.1`` -> ``0.1``); NaN
  as ``nan``.
- ``jsonl`` (:class:`JSONLSink`), ``metrics.jsonl``: one JSON object per run per
  record, ``{"iteration", "env_steps", **runs[r], "metrics": {name: value}}``,
  with NaN and infinities written as ``null`` so every line is valid JSON.
- ``tensorboard`` (:class:`TensorBoardSink`): one TensorBoard run per run, as
  CleanRL has one per seed: ``<out_dir>/tb/<run name>/`` (:func:`run_name`:
  ``seed0``, ``seed1-learning_rate=0.001``...), each metric a scalar under its
  own name at global step ``env_steps`` (NaN values, e.g. an episode return
  before the first episode ends, are not written). TensorBoard overlays the
  runs of a folder, so ``tensorboard --logdir OUT/tb`` shows every seed.
- ``wandb`` (:class:`WandbSink`, needs ``pip install jrl-jax[wandb]``): one
  wandb run; at step ``env_steps`` the mean/min/max over the runs
  (:func:`summarize`) and each run's values as ``<run name>/<metric>``.

Resuming from a checkpoint at iteration ``k`` (``env_steps`` ``S``): the CSV and
JSONL files keep their header and the rows with ``iteration <= k`` (rewritten
atomically: a temporary file in the same directory, then ``os.replace``; a last
line cut short by a crash is dropped) and new rows are appended. A file that
does not exist yet is started afresh. TensorBoard opens a new event file in
each run's folder whose first events are a ``file_version`` event and a
``SessionLog.START`` at step ``S + 1`` (tensorboardX's ``purge_step``):
TensorBoard then hides the earlier files' events at steps ``> S``, i.e. keeps
exactly what the checkpoint had logged. wandb starts a new wandb run (pass
``id=...``/``resume=...`` through ``init_kwargs`` to continue an old one).
Without ``resume_*`` the CSV and JSONL files are overwritten.

Cost: the host calls sinks between chunks, so writing must be cheap and must
never wait on the device: records hold host numpy arrays (``jax.device_get``
them first). Training hands each sink a chunk's records in one ``write_many``
(one flush per chunk). Measured on this project's 2-core CPU, records of 10
metrics and 8 runs, per record (three repeats of 1000): ``CSVSink`` 0.06-0.07
ms, ``JSONLSink`` 0.07 ms, ``TensorBoardSink`` 0.20-0.23 ms in a
``write_many`` (1.5-1.7 ms one ``write`` at a time: each flush fsyncs 8
files; most of the rest is tensorboardX's pure-Python CRC of each event),
behind a ``ThreadedSink`` 0.006-0.012 ms. DQN on CartPole, 10,000 iterations
of 4 seeds, writes 40,000 rows per sink. A chunk takes far longer than its
records, so :func:`make_sinks` keeps CSV and JSONL synchronous (their rows are
in the file when ``write`` returns, and a failure is raised where it
happened) and puts TensorBoard and wandb (network I/O) behind a
:class:`ThreadedSink`.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from jrl.util import files
from jrl.util.names import did_you_mean

__all__ = [
    "SINK_NAMES",
    "CSVSink",
    "JSONLSink",
    "MultiSink",
    "Record",
    "Sink",
    "TensorBoardSink",
    "ThreadedSink",
    "WandbSink",
    "check_available",
    "check_names",
    "make_sinks",
    "run_name",
    "summarize",
    "write_records",
]

SINK_NAMES = ("csv", "jsonl", "tensorboard", "wandb")
"""The names :func:`make_sinks` accepts."""

ITERATION = "iteration"
ENV_STEPS = "env_steps"
METRICS = "metrics"  # the JSONL key that holds a row's metrics


@dataclasses.dataclass(frozen=True)
class Record:
    """The metrics of R runs at one report.

    ``metrics`` maps a metric name to a ``[R]`` host array (numpy, not a device
    array: sinks must not wait on the device), ``runs[r]`` identifies run ``r``
    (e.g. ``{"run": 0, "seed": 0, "learning_rate": 3e-4}``; the same dict for
    every record of that run, the same keys for every run).
    """

    iteration: int  # iterations done per run
    env_steps: int  # env steps per run
    metrics: dict[str, np.ndarray]  # name -> [R]
    runs: Sequence[dict[str, Any]]  # [R]

    def __post_init__(self):
        num_runs = len(self.runs)
        wrong = {
            name: np.shape(v) for name, v in self.metrics.items() if np.shape(v) != (num_runs,)
        }
        if wrong:
            raise ValueError(
                f"Record: every metric must have shape [R] = ({num_runs},) (one value per run), "
                f"got {wrong}"
            )


@runtime_checkable
class Sink(Protocol):
    """Where records go: ``write`` once per report, ``close`` once at the end (idempotent)."""

    def write(self, record: Record) -> None: ...

    def close(self) -> None: ...


def summarize(record: Record) -> dict[str, float]:
    """``{"<name>/mean", "<name>/min", "<name>/max": float}`` over the R runs of each metric.

    NaN values (runs with no data yet) are skipped; a metric that is NaN in
    every run is left out.
    """
    if not record.metrics:
        return {}
    names = list(record.metrics)
    values = np.stack(
        [np.asarray(record.metrics[name], dtype=np.float64) for name in names]
    )  # [M, R]
    missing = np.isnan(values)
    count = (~missing).sum(axis=1)  # [M]
    mean = np.where(missing, 0.0, values).sum(axis=1) / np.maximum(count, 1)
    low = np.where(missing, np.inf, values).min(axis=1)
    high = np.where(missing, -np.inf, values).max(axis=1)
    out = {}
    for m, name in enumerate(names):
        if count[m]:
            out[f"{name}/mean"] = float(mean[m])
            out[f"{name}/min"] = float(low[m])
            out[f"{name}/max"] = float(high[m])
    return out


def run_name(run: Mapping[str, Any]) -> str:
    """A run's short name, for a TensorBoard folder or a wandb key: ``seed3``, with each other
    identity key but ``run`` appended as ``-key=value`` (``seed3-learning_rate=0.001``); a run
    without a seed is named ``run<index>``."""
    head = f"seed{run['seed']}" if "seed" in run else f"run{run.get('run', 0)}"
    rest = [
        f"{key}={value:g}" if isinstance(value, float | np.floating) else f"{key}={value}"
        for key, value in run.items()
        if key not in ("run", "seed")
    ]
    return "-".join([head, *rest])


def write_records(sink: Sink, records: Sequence[Record]) -> None:
    """Hands ``records`` (in iteration order) to ``sink``: in one call where it has
    ``write_many`` (one flush, one queue item), else one ``write`` each."""
    write_many = getattr(sink, "write_many", None)
    if write_many is not None:
        write_many(records)
    else:
        for record in records:
            sink.write(record)


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


class TensorBoardSink:
    """TensorBoard event files under ``logdir``, one folder per run (:func:`run_name`), each
    metric a scalar under its own name at global step ``env_steps``; NaN values are skipped.

    ``resume_from_step=S`` (the ``env_steps`` of the checkpoint resumed) makes TensorBoard discard
    the events of a run's earlier files at steps ``> S`` (the new file starts with tensorboardX's
    ``purge_step = S + 1`` events). ``runs`` (the ``[R]`` run identities) opens their files at
    once, so a resume's purge is on disk before the first record; other runs' files open at
    their first record. Events are written synchronously (put the sink behind a
    :class:`ThreadedSink` to keep the file I/O off the training loop) and flushed after every
    ``write``/``write_many``.
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        resume_from_step: int | None = None,
        runs: Sequence[Mapping[str, Any]] = (),
    ):
        from tensorboardX.proto.summary_pb2 import (
            Summary,  # lazily: keeps `import jrl.app.sinks` light
        )

        self.logdir = Path(logdir)
        self._summary = Summary
        self._purge_step = None if resume_from_step is None else int(resume_from_step) + 1
        self._writers: dict[str, Any] = {}  # run name -> tensorboardX EventsWriter
        self._closed = False
        for run in runs:
            self._writer(run_name(run)).flush()

    def _writer(self, name: str):
        writer = self._writers.get(name)
        if writer is None:
            from tensorboardX.event_file_writer import EventsWriter
            from tensorboardX.proto.event_pb2 import Event, SessionLog

            folder = self.logdir / name
            folder.mkdir(parents=True, exist_ok=True)
            # tensorboardX names files by the second and host and opens them with "wb": a second
            # writer (a resume) in the same second would overwrite the first; nanoseconds keep
            # names apart and in time order
            suffix = f".{time.time_ns() % 1_000_000_000:09d}"
            writer = EventsWriter(str(folder / "events"), suffix)
            if self._purge_step is not None:  # as tensorboardX's SummaryWriter(purge_step=...)
                writer.write_event(Event(step=self._purge_step, file_version="brain.Event:2"))
                start = SessionLog(status=SessionLog.START)
                writer.write_event(Event(step=self._purge_step, session_log=start))
            self._writers[name] = writer
        return writer

    def write(self, record: Record) -> None:
        """Writes one event per run at step ``record.env_steps`` holding its scalars."""
        self.write_many([record])

    def write_many(self, records: Sequence[Record]) -> None:
        """Writes each record's events, then flushes every run's file once."""
        from tensorboardX.proto.event_pb2 import Event

        if self._closed:
            raise RuntimeError(f"write to a closed TensorBoardSink({self.logdir})")
        touched = {}
        for record in records:
            names = [run_name(run) for run in record.runs]
            if len(set(names)) != len(names):
                raise ValueError(f"TensorBoardSink: runs with the same name in {names}")
            values = {name: np.asarray(v, np.float64) for name, v in record.metrics.items()}
            now = time.time()
            for r, name in enumerate(names):
                scalars = [
                    self._summary.Value(tag=tag, simple_value=float(v[r]))
                    for tag, v in values.items()
                    if not math.isnan(v[r])
                ]
                if scalars:
                    writer = touched[name] = self._writer(name)
                    summary = self._summary(value=scalars)
                    writer.write_event(
                        Event(wall_time=now, step=int(record.env_steps), summary=summary)
                    )
        for writer in touched.values():
            writer.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for writer in self._writers.values():
                writer.close()


class WandbSink:
    """One wandb run: at step ``env_steps``, the mean/min/max dict of :func:`summarize` and each
    run's values as ``<run name>/<metric>`` (:func:`run_name`; NaN values left out).

    The arguments go to ``wandb.init`` (``run_name`` as ``name``). Needs
    ``pip install jrl-jax[wandb]``.
    """

    def __init__(
        self,
        project: str | None = None,
        run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
        **init_kwargs: Any,
    ):
        try:
            import wandb
        except ImportError as err:
            raise ImportError("the wandb sink needs `pip install jrl-jax[wandb]`") from err
        self._run = wandb.init(
            project=project,
            name=run_name,
            config=None if config is None else dict(config),
            **init_kwargs,
        )
        self._closed = False

    def write(self, record: Record) -> None:
        """Logs the record at step ``record.env_steps`` (increasing within a wandb run)."""
        data = summarize(record)
        for r, run in enumerate(record.runs):
            name = run_name(run)
            for metric, values in record.metrics.items():
                value = float(np.asarray(values[r], np.float64))
                if not math.isnan(value):
                    data[f"{name}/{metric}"] = value
        self._run.log(data, step=int(record.env_steps))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._run.finish()


def _call_all(calls: Iterable[Callable[[], None]]) -> None:
    """Makes every call, then raises the first error (later ones are added to it as notes)."""
    errors: list[BaseException] = []
    for call in calls:
        try:
            call()
        except BaseException as err:  # noqa: BLE001 -- re-raised below
            errors.append(err)
    if errors:
        for other in errors[1:]:
            errors[0].add_note(f"another sink also failed: {type(other).__name__}: {other}")
        raise errors[0]


class MultiSink:
    """Writes every record to each of ``sinks`` in order. A sink that raises does not stop the
    others; the first error is raised once all were called (``write`` and ``close`` alike)."""

    def __init__(self, sinks: Sequence[Sink]):
        self.sinks = tuple(sinks)

    def write(self, record: Record) -> None:
        _call_all(lambda sink=sink: sink.write(record) for sink in self.sinks)

    def write_many(self, records: Sequence[Record]) -> None:
        """Hands the records to each sink (:func:`write_records`)."""
        _call_all(lambda sink=sink: write_records(sink, records) for sink in self.sinks)

    def close(self) -> None:
        _call_all(lambda sink=sink: sink.close() for sink in self.sinks)


_STOP = object()


class ThreadedSink:
    """Runs ``sink.write`` on a background thread so that slow I/O never stalls the training loop.

    ``write`` (one record) and ``write_many`` (a chunk's records, one queue item) copy the arrays
    and queue them (they wait only when ``max_queue`` items are pending). Records reach ``sink``
    in order (:func:`write_records`). If the sink raises, later records are dropped
    and the error is raised by the next ``write``, ``flush`` or ``close``, whichever comes first.
    ``close`` writes what is queued, closes ``sink`` and raises the worker's error, if any was not
    raised yet; ``write`` after ``close`` raises ``RuntimeError``.
    """

    def __init__(self, sink: Sink, max_queue: int = 1024):
        self.sink = sink
        self._queue: queue.Queue = queue.Queue(max_queue)
        self._error: BaseException | None = None
        self._error_raised = False
        self._closed = False
        self._thread = threading.Thread(
            target=self._work, name=f"jrl-{type(sink).__name__}", daemon=True
        )
        self._thread.start()

    def _work(self) -> None:
        while True:
            record = self._queue.get()
            try:
                if record is _STOP:
                    return
                if self._error is None:
                    write_records(self.sink, record)  # a chunk's records
            except BaseException as err:  # noqa: BLE001 -- handed to the caller's thread
                self._error = err
            finally:
                self._queue.task_done()

    def _raise_error(self) -> None:
        if self._error is not None and not self._error_raised:
            self._error_raised = True
            raise self._error

    def write(self, record: Record) -> None:
        self.write_many([record])

    def write_many(self, records: Sequence[Record]) -> None:
        """Queues the records as one item (the worker hands them to ``sink`` together)."""
        if self._closed:
            raise RuntimeError(f"write to a closed ThreadedSink({type(self.sink).__name__})")
        self._raise_error()
        # copies: the caller may reuse its buffers while the records wait in the queue
        self._queue.put(
            [
                dataclasses.replace(r, metrics={k: np.array(v) for k, v in r.metrics.items()})
                for r in records
            ]
        )

    def flush(self) -> None:
        """Waits until every queued record has reached ``sink`` (or was dropped after an error),
        then raises the worker's error if it was not raised yet. Does not flush ``sink`` itself."""
        self._queue.join()
        self._raise_error()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        try:
            self.sink.close()
        finally:
            self._raise_error()


def check_names(names: Sequence[str]) -> None:
    """``ValueError`` for an unknown sink name (with a close match) or a repeated one."""
    unknown = [name for name in names if name not in SINK_NAMES]
    if unknown:
        hint = did_you_mean(unknown[0], SINK_NAMES, n=1)
        raise ValueError(
            f"unknown sink {unknown[0]!r}; valid sinks: {', '.join(SINK_NAMES)}.{hint}"
        )
    repeated = sorted({name for name in names if list(names).count(name) > 1})
    if repeated:
        raise ValueError(f"sinks {repeated} are named more than once")


def check_available(names: Sequence[str]) -> None:
    """Checks the names (:func:`check_names`) and that the optional packages the sinks
    need import (``ImportError`` naming the extra), before anything is opened."""
    check_names(names)
    if "tensorboard" in names:
        import tensorboardX  # noqa: F401  (a core dependency; checked for broken installs)
    if "wandb" in names:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ImportError("the wandb sink needs `pip install jrl-jax[wandb]`") from None


def make_sinks(
    names: Sequence[str],
    out_dir: str | os.PathLike,
    *,
    runs: Sequence[dict[str, Any]],
    config: Mapping[str, Any],
    resume_from_iteration: int | None = None,
    resume_from_step: int | None = None,
) -> MultiSink:
    """The sinks ``names`` (from :data:`SINK_NAMES`) writing under ``out_dir``, as one MultiSink.

    ``csv`` -> ``out_dir/metrics.csv``, ``jsonl`` -> ``out_dir/metrics.jsonl`` (both synchronous),
    ``tensorboard`` -> ``out_dir/tb/<run name>``, ``wandb`` -> a wandb run named after
    ``out_dir`` with ``{**config, "runs": runs}`` as its config (``runs``: the ``[R]`` run
    identities); these two behind a :class:`ThreadedSink`. ``resume_from_iteration`` and
    ``resume_from_step`` are the iteration and ``env_steps`` of the checkpoint resumed (see the
    module docstring); resuming TensorBoard needs ``resume_from_step``.
    """
    check_names(names)
    if "tensorboard" in names and resume_from_iteration is not None and resume_from_step is None:
        raise ValueError(
            "resuming the tensorboard sink needs resume_from_step (the env_steps resumed)"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    factories: dict[str, Callable[[], Sink]] = {
        "csv": lambda: CSVSink(out_dir / "metrics.csv", resume_from_iteration),
        "jsonl": lambda: JSONLSink(out_dir / "metrics.jsonl", resume_from_iteration),
        "tensorboard": lambda: ThreadedSink(
            TensorBoardSink(out_dir / "tb", resume_from_step, runs=runs)
        ),
        "wandb": lambda: ThreadedSink(
            WandbSink(
                run_name=out_dir.name,
                dir=str(out_dir),
                config={**config, "runs": [dict(run) for run in runs]},
            )
        ),
    }
    sinks: list[Sink] = []
    try:
        for name in names:
            sinks.append(factories[name]())
    except BaseException:
        with contextlib.suppress(
            Exception
        ):  # close the sinks already opened; raise the first error
            MultiSink(sinks).close()
        raise
    return MultiSink(sinks)

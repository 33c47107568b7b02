"""Metric sinks: where the host writes the metrics of R runs after every chunk of iterations.

Training runs R runs at once (seeds x swept values). After each chunk the host
holds a :class:`Record`: the iteration and env-step counters (the same for every
run) and, for each metric name, a ``[R]`` host array with one value per run. It
hands the record to a :class:`Sink` (``write(record)``, ``close()``); every sink
below implements that interface, and :func:`make_sinks` builds them by name.

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
- ``tensorboard`` (:class:`TensorBoardSink`), event files in ``<out_dir>/tb``:
  for each metric the mean, min and max over the R runs as scalars
  ``<name>/mean``, ``<name>/min``, ``<name>/max`` at global step ``env_steps``
  (NaN runs skipped; a metric NaN in every run is not written). Per-run curves
  are in the CSV/JSONL files.
- ``wandb`` (:class:`WandbSink`, needs ``pip install jrl-jax[wandb]``): the same
  mean/min/max dict logged at step ``env_steps`` to one wandb run.

Resuming from a checkpoint at iteration ``k`` (``env_steps`` ``S``): the CSV and
JSONL files keep their header and the rows with ``iteration <= k`` (rewritten
atomically: a temporary file in the same directory, then ``os.replace``; a last
line cut short by a crash is dropped) and new rows are appended. A file that
does not exist yet is started afresh. TensorBoard opens a new event file whose
first events are a ``file_version`` event and a ``SessionLog.START`` at step
``S + 1`` (tensorboardX's ``purge_step``): TensorBoard then hides the earlier
files' events at steps ``> S``, i.e. keeps exactly what the checkpoint had
logged. wandb starts a new wandb run (pass ``id=...``/``resume=...`` through
``init_kwargs`` to continue an old one). Without ``resume_*`` the CSV and JSONL
files are overwritten.

Cost: the host calls sinks between chunks, so ``write`` must be cheap and must
never wait on the device: records hold host numpy arrays (``jax.device_get``
them first). :class:`ThreadedSink` moves a sink's writes to a background
thread. Measured on this project's 2-core CPU, 1000 writes of a record with 10
metrics and 8 runs, per write (range over four repeats): ``CSVSink`` 0.15-0.28
ms, ``JSONLSink`` 0.2-0.4 ms, ``TensorBoardSink`` 0.3-0.5 ms (30 scalars in one
event; tensorboardX writes the file on its own thread; one ``add_scalar`` per
scalar took 2.4-4.3 ms, most of it waiting on tensorboardX's queue), any of
them behind a ``ThreadedSink`` 0.02-0.07 ms (its worker then needs ~0.4 ms a
TensorBoard record, so ``close`` after 1000 queued records waits ~0.4 s). A
chunk takes far longer than a millisecond, so :func:`make_sinks` keeps CSV and
JSONL synchronous (their rows are in the file when ``write`` returns, and a
failure is raised where it happened) and puts TensorBoard and wandb (network
I/O) behind a :class:`ThreadedSink`.
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

from jrl import files
from jrl.names import did_you_mean

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
    "summarize",
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
        _check_run_keys(record, (ITERATION, ENV_STEPS, *record.metrics))
        run_keys = list(record.runs[0]) if record.runs else []
        header = None
        if self._columns is None:
            header = [*run_keys, ITERATION, ENV_STEPS, *sorted(record.metrics)]
        columns = header or self._columns
        new = [name for name in [*run_keys, *record.metrics] if name not in columns]
        if new:
            raise ValueError(
                f"{self.path}: columns {new} are not in the header {columns} (fixed by the "
                "first record or the file resumed; an algorithm's metric names are fixed)"
            )
        values = {name: np.asarray(v) for name, v in record.metrics.items()}
        buffer = io.StringIO()  # all R rows first, so that a failure writes none of them
        writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
        if header:
            writer.writeheader()
        for r, run in enumerate(record.runs):
            # str of a numpy scalar (repr of a Python float): the shortest text that reads back to
            # the same value in its own dtype; NaN as nan
            row = {key: str(value) for key, value in run.items()}
            row[ITERATION] = str(int(record.iteration))
            row[ENV_STEPS] = str(int(record.env_steps))
            row.update((name, str(v[r])) for name, v in values.items())
            writer.writerow(row)
        self._file.write(buffer.getvalue())
        self._file.flush()
        self._columns = columns

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
        _check_run_keys(record, (ITERATION, ENV_STEPS, METRICS))
        values = {name: np.asarray(v) for name, v in record.metrics.items()}
        lines = []
        for r, run in enumerate(record.runs):
            obj = {
                ITERATION: int(record.iteration),
                ENV_STEPS: int(record.env_steps),
                **{key: _json_value(value) for key, value in run.items()},
                METRICS: {name: _json_value(v[r]) for name, v in values.items()},
            }
            lines.append(json.dumps(obj, allow_nan=False) + "\n")
        self._file.write("".join(lines))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """TensorBoard event files in ``logdir``: ``<name>/mean``, ``<name>/min``, ``<name>/max`` over
    the runs (see :func:`summarize`) at global step ``env_steps``.

    ``resume_from_step=S`` (the ``env_steps`` of the checkpoint resumed) makes TensorBoard discard
    the events of earlier files at steps ``> S`` (tensorboardX's ``purge_step = S + 1``).
    tensorboardX writes the file on its own thread, flushing every ``flush_secs``; ``max_queue``
    bounds its queue of pending events (a full queue makes ``write`` wait).
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        resume_from_step: int | None = None,
        *,
        flush_secs: float = 10,
        max_queue: int = 100,
    ):
        from tensorboardX import SummaryWriter  # lazily: keeps `import jrl.sinks` light
        from tensorboardX.proto.summary_pb2 import Summary

        self.logdir = Path(logdir)
        self._summary = Summary
        # tensorboardX names files by the second and host and opens them with "wb": a second writer
        # (a resume) in the same second would overwrite the first; nanoseconds keep names apart and
        # in time order.
        suffix = f".{time.time_ns() % 1_000_000_000:09d}"
        purge_step = None if resume_from_step is None else int(resume_from_step) + 1
        self._writer = SummaryWriter(
            logdir=str(self.logdir),
            purge_step=purge_step,
            max_queue=max_queue,
            flush_secs=flush_secs,
            filename_suffix=suffix,
        )

    def write(self, record: Record) -> None:
        """Queues one event at step ``record.env_steps`` holding every scalar of the record."""
        if self._writer.file_writer is None:
            raise RuntimeError(f"write to a closed TensorBoardSink({self.logdir})")
        values = [
            self._summary.Value(tag=tag, simple_value=value)
            for tag, value in summarize(record).items()
        ]
        if values:
            # one event, not one per scalar (add_scalar): each event is a put on tensorboardX's
            # multiprocessing queue, which waits for its writer thread once the queue is full
            self._writer.file_writer.add_summary(
                self._summary(value=values), int(record.env_steps), time.time()
            )

    def close(self) -> None:
        self._writer.close()  # writes what is queued; a second close does nothing


class WandbSink:
    """One wandb run: the mean/min/max dict of :func:`summarize` logged at step ``env_steps``.

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
        """Logs the summary at step ``record.env_steps`` (increasing within a wandb run)."""
        self._run.log(summarize(record), step=int(record.env_steps))

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

    def close(self) -> None:
        _call_all(lambda sink=sink: sink.close() for sink in self.sinks)


_STOP = object()


class ThreadedSink:
    """Runs ``sink.write`` on a background thread so that slow I/O never stalls the training loop.

    ``write`` copies the record's arrays and queues it (it waits only when ``max_queue`` records are
    pending). Records reach ``sink`` in order. If ``sink.write`` raises, later records are dropped
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
                    self.sink.write(record)
            except BaseException as err:  # noqa: BLE001 -- handed to the caller's thread
                self._error = err
            finally:
                self._queue.task_done()

    def _raise_error(self) -> None:
        if self._error is not None and not self._error_raised:
            self._error_raised = True
            raise self._error

    def write(self, record: Record) -> None:
        if self._closed:
            raise RuntimeError(f"write to a closed ThreadedSink({type(self.sink).__name__})")
        self._raise_error()
        # a copy: the caller may reuse its buffers while the record waits in the queue
        record = dataclasses.replace(
            record, metrics={k: np.array(v) for k, v in record.metrics.items()}
        )
        self._queue.put(record)

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
    ``tensorboard`` -> ``out_dir/tb``, ``wandb`` -> a wandb run named after ``out_dir`` with
    ``{**config, "runs": runs}`` as its config (``runs``: the ``[R]`` run identities); these two
    behind a :class:`ThreadedSink`. ``resume_from_iteration``/``resume_from_step`` are the iteration
    and ``env_steps`` of the checkpoint resumed (see the module docstring); resuming TensorBoard
    needs ``resume_from_step``.
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
        "tensorboard": lambda: ThreadedSink(TensorBoardSink(out_dir / "tb", resume_from_step)),
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

"""What a metric sink takes: :class:`Record` (the metrics of R runs at one iteration),
:class:`Video` (one run's episodes drawn at one iteration) and the :class:`Sink` protocol, with
the helpers every sink shares (:func:`run_name`, :func:`summarize`, :func:`write_records`,
:func:`write_video`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ENV_STEPS",
    "ITERATION",
    "METRICS",
    "Record",
    "Sink",
    "Video",
    "run_name",
    "summarize",
    "write_records",
    "write_video",
]

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


@dataclasses.dataclass(frozen=True)
class Video:
    """Episodes of one run drawn at one report (``--video-every``).

    ``frames`` is a host ``uint8[T, H, W, 3]`` array (the episodes one after another: each
    episode's reset frame, then one per step); ``name`` is the run's :func:`run_name`
    (``seed0``), ``run`` its identity as in :attr:`Record.runs`, ``returns`` each episode's
    return.
    """

    iteration: int  # iterations done per run
    env_steps: int  # env steps per run
    name: str
    frames: np.ndarray  # uint8 [T, H, W, 3]
    fps: float
    run: Mapping[str, Any]
    returns: tuple[float, ...] = ()

    def __post_init__(self):
        shape, dtype = np.shape(self.frames), np.asarray(self.frames).dtype
        if len(shape) != 4 or shape[-1] != 3 or dtype != np.uint8 or 0 in shape:
            raise ValueError(
                f"Video: frames must be uint8[T, H, W, 3] with T, H, W >= 1, got "
                f"{dtype}{list(shape)}"
            )


@runtime_checkable
class Sink(Protocol):
    """Where records go: ``write`` once per report, ``close`` once at the end (idempotent).

    A sink may also take videos: a method ``write_video(video: Video) -> None``, called after
    the records of the video's iteration were written. It is optional (not part of the
    protocol's checked methods): :func:`write_video` passes videos over sinks without it.
    """

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


def write_video(sink: Sink, video: Video) -> None:
    """Hands ``video`` to ``sink``'s ``write_video``; a sink without one ignores videos."""
    method = getattr(sink, "write_video", None)
    if method is not None:
        method(video)


def write_records(sink: Sink, records: Sequence[Record]) -> None:
    """Hands ``records`` (in iteration order) to ``sink``: in one call where it has
    ``write_many`` (one flush, one queue item), else one ``write`` each."""
    write_many = getattr(sink, "write_many", None)
    if write_many is not None:
        write_many(records)
    else:
        for record in records:
            sink.write(record)

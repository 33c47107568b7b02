"""What a metric sink takes: :class:`Record` (the metrics of R runs at one iteration) and
the :class:`Sink` protocol, with the helpers every sink shares (:func:`run_name`,
:func:`summarize`, :func:`write_records`)."""

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
    "run_name",
    "summarize",
    "write_records",
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

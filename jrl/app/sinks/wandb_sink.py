"""The wandb sink (``pip install jrl-jax[wandb]``): one wandb run, the summary over the runs
and each run's values at step ``env_steps`` (see :mod:`jrl.app.sinks`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from jrl.app.sinks.record import Record, run_name, summarize

__all__ = ["WandbSink"]


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
            import wandb  # an optional extra, maybe absent
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

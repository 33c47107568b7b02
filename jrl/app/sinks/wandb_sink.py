"""The wandb sink (``pip install jrl-jax[wandb]``): one wandb run, the summary over the runs
and each run's values at step ``env_steps`` (see :mod:`jrl.app.sinks`)."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jrl.app.sinks.record import Record, Video, run_name, summarize

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

    def write_video(self, video: Video) -> None:
        """Logs ``video`` as ``<run name>/eval/video`` at step ``env_steps``: a ``wandb.Video``
        of a GIF file (wandb encodes raw frames only with moviepy, not a dependency) captioned
        with the episodes' returns. The file is a temporary one, which ``log`` copies into the
        wandb run."""
        import wandb  # the optional extra, present: __init__ imported it

        from jrl.app import render  # the GIF encoder (imageio): only in runs that draw videos

        with tempfile.TemporaryDirectory(prefix="jrl-video-") as folder:
            path = render.write_video(video.frames, Path(folder) / f"{video.name}.gif", video.fps)
            caption = "returns " + ", ".join(f"{r:g}" for r in video.returns)
            clip = wandb.Video(str(path), caption=caption, format="gif")  # fps: the GIF's delays
            self._run.log({f"{video.name}/eval/video": clip}, step=int(video.env_steps))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._run.finish()

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

Videos (``--video-every``): a :class:`Video` (one run's episodes drawn at one iteration,
``uint8[T, H, W, 3]`` frames) goes to every sink with a ``write_video`` method
(:func:`write_video`; the others ignore it): :class:`VideoFileSink` writes
``videos/<run name>_iter<NNNNNN>.gif`` (or ``.mp4``) in the run folder, TensorBoard an image
summary holding the GIF (tag ``eval/video``, shown in its Images tab), wandb a
``wandb.Video``. :func:`make_sinks` adds the file sink when given ``videos`` (the format), behind a
:class:`ThreadedSink` like TensorBoard and wandb, so no video is encoded on the training thread.

Resuming from a checkpoint at iteration ``k`` (``env_steps`` ``S``): the CSV and
JSONL files keep their header and the rows with ``iteration <= k`` (rewritten
atomically: a temporary file in the same directory, then ``os.replace``; a last
line cut short by a crash is dropped) and new rows are appended; the videos of iterations
after ``k`` are deleted (the resumed run draws them again). A file that
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
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jrl.app.sinks.composite import MultiSink, ThreadedSink
from jrl.app.sinks.file_sinks import CSVSink, JSONLSink
from jrl.app.sinks.record import (
    Record,
    Sink,
    Video,
    run_name,
    summarize,
    write_records,
    write_video,
)
from jrl.app.sinks.tensorboard_sink import VIDEO_TAG, TensorBoardSink
from jrl.app.sinks.video_files import VIDEO_FORMATS, VideoFileSink, video_file_name
from jrl.app.sinks.wandb_sink import WandbSink
from jrl.util.names import did_you_mean

__all__ = [
    "SINK_NAMES",
    "VIDEO_DIR",
    "VIDEO_FORMATS",
    "VIDEO_TAG",
    "CSVSink",
    "JSONLSink",
    "MultiSink",
    "Record",
    "Sink",
    "TensorBoardSink",
    "ThreadedSink",
    "Video",
    "VideoFileSink",
    "WandbSink",
    "check_available",
    "check_names",
    "make_sinks",
    "run_name",
    "summarize",
    "video_file_name",
    "write_records",
    "write_video",
]

SINK_NAMES = ("csv", "jsonl", "tensorboard", "wandb")
"""The names :func:`make_sinks` accepts."""
VIDEO_DIR = "videos"
"""The run folder's folder of ``--video-every`` videos (:class:`VideoFileSink`)."""


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
    if "tensorboard" in names:  # imported only where asked for, as TensorBoardSink does
        import tensorboardX  # noqa: F401  (a core dependency; checked for broken installs)
    if "wandb" in names:
        try:
            import wandb  # noqa: F401  (an optional extra, maybe absent)
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
    videos: str | None = None,
) -> MultiSink:
    """The sinks ``names`` (from :data:`SINK_NAMES`) writing under ``out_dir``, as one MultiSink.

    ``csv`` -> ``out_dir/metrics.csv``, ``jsonl`` -> ``out_dir/metrics.jsonl`` (both synchronous),
    ``tensorboard`` -> ``out_dir/tb/<run name>``, ``wandb`` -> a wandb run named after
    ``out_dir`` with ``{**config, "runs": runs}`` as its config (``runs``: the ``[R]`` run
    identities); these two behind a :class:`ThreadedSink`. ``resume_from_iteration`` and
    ``resume_from_step`` are the iteration and ``env_steps`` of the checkpoint resumed (see the
    module docstring); resuming TensorBoard needs ``resume_from_step``. ``videos`` (a format of
    :data:`VIDEO_FORMATS`) adds a :class:`VideoFileSink` writing ``out_dir/videos``, threaded.
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
        if videos is not None:
            files = VideoFileSink(out_dir / VIDEO_DIR, videos, resume_from_iteration)
            sinks.append(ThreadedSink(files))
    except BaseException:
        with contextlib.suppress(
            Exception
        ):  # close the sinks already opened; raise the first error
            MultiSink(sinks).close()
        raise
    return MultiSink(sinks)

"""The TensorBoard sink: an event file per run, each metric a scalar at step ``env_steps``
(see :mod:`jrl.app.sinks`)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jrl.app.sinks.record import Record, Video, run_name

__all__ = ["VIDEO_TAG", "TensorBoardSink"]

VIDEO_TAG = "eval/video"
"""The tag of a run's ``--video-every`` videos in its TensorBoard folder."""


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
        # tensorboardX (with protobuf) only for a run that logs to TensorBoard: not before
        # the first progress line of every run (benchmarks/startup.py)
        from tensorboardX.proto.summary_pb2 import Summary

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
            from tensorboardX.event_file_writer import EventsWriter  # lazily, as in __init__
            from tensorboardX.proto.event_pb2 import Event, SessionLog  # as EventsWriter

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
        from tensorboardX.proto.event_pb2 import Event  # lazily, as in __init__

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

    def write_video(self, video: Video) -> None:
        """Writes ``video`` into its run's file (``video.name``) at step ``env_steps`` as an
        image summary holding an animated GIF (tag :data:`VIDEO_TAG`), which TensorBoard's
        Images tab plays: what tensorboardX's ``add_video`` writes, encoded by Pillow rather
        than moviepy (not a dependency), every frame kept."""
        from tensorboardX.proto.event_pb2 import Event  # lazily, as in __init__

        from jrl.app import render  # the GIF encoder (imageio): only in runs that draw videos

        if self._closed:
            raise RuntimeError(f"write to a closed TensorBoardSink({self.logdir})")
        _, height, width, _ = np.shape(video.frames)
        image = self._summary.Image(
            height=height,
            width=width,
            colorspace=3,
            encoded_image_string=render.encode_gif(video.frames, video.fps),
        )
        summary = self._summary(value=[self._summary.Value(tag=VIDEO_TAG, image=image)])
        writer = self._writer(video.name)
        writer.write_event(Event(wall_time=time.time(), step=int(video.env_steps), summary=summary))
        writer.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for writer in self._writers.values():
                writer.close()

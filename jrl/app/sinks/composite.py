"""Sinks made of other sinks: :class:`MultiSink` (every record to each of several sinks)
and :class:`ThreadedSink` (another sink's writes on a background thread)."""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from jrl.app.sinks.record import Record, Sink, Video, write_records, write_video

__all__ = ["MultiSink", "ThreadedSink"]


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

    def write_video(self, video: Video) -> None:
        """Hands the video to each sink that takes videos (:func:`write_video`)."""
        _call_all(lambda sink=sink: write_video(sink, video) for sink in self.sinks)

    def close(self) -> None:
        _call_all(lambda sink=sink: sink.close() for sink in self.sinks)


_STOP = object()
PENDING_VIDEOS = 2
"""Videos a :class:`ThreadedSink` holds at most (queued or being written): a video's frames
can take hundreds of megabytes, so ``write_video`` waits for a slot rather than piling
them up when encoding is slower than training."""


class ThreadedSink:
    """Runs ``sink.write`` (and ``sink.write_video``) on a background thread so that slow I/O
    never stalls the training loop.

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
        self._video_slots = threading.Semaphore(PENDING_VIDEOS)
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
                if self._error is None and isinstance(record, Video):
                    write_video(self.sink, record)
                elif self._error is None:
                    write_records(self.sink, record)  # a chunk's records
            except BaseException as err:  # noqa: BLE001 -- handed to the caller's thread
                self._error = err
            finally:
                if isinstance(record, Video):
                    self._video_slots.release()
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

    def write_video(self, video: Video) -> None:
        """Queues the video, its frames as they are (not copied, unlike records' arrays: the
        caller hands them over and must not change them); ``sink`` encodes and writes it on
        the worker thread. Waits while :data:`PENDING_VIDEOS` videos are pending. Ignored when
        ``sink`` takes no videos."""
        if self._closed:
            raise RuntimeError(f"write to a closed ThreadedSink({type(self.sink).__name__})")
        self._raise_error()
        if getattr(self.sink, "write_video", None) is not None:
            self._video_slots.acquire()
            self._queue.put(video)

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

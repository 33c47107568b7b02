"""The sink that writes the run folder's videos (``--video-every``): one file per run per
drawn iteration, ``videos/<run name>_iter<NNNNNN>.gif`` (or ``.mp4``), resumable from a
checkpoint's iteration (see :mod:`jrl.app.sinks`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from jrl.app.sinks.record import Record, Video

__all__ = ["VIDEO_FORMATS", "VideoFileSink", "video_file_name"]

VIDEO_FORMATS = ("gif", "mp4")
"""The file formats :class:`VideoFileSink` writes (``mp4``: ``pip install jrl-jax[video]``)."""
_NAME = re.compile(r"^(?P<run>.+)_iter(?P<iteration>\d+)\.(?:gif|mp4)$")


def video_file_name(name: str, iteration: int, fmt: str = "gif") -> str:
    """``<name>_iter<NNNNNN>.<fmt>``: the file of run ``name``'s video at ``iteration`` (six
    digits at least, so the files of a run sort by iteration)."""
    return f"{name}_iter{int(iteration):06d}.{fmt}"


class VideoFileSink:
    """Writes each :class:`Video` to ``folder/<name>_iter<NNNNNN>.<fmt>``
    (:func:`video_file_name`), atomically (:func:`jrl.app.render.write_video`: a temporary
    file renamed over the target); ignores metric records.

    ``resume_from_iteration=k`` (the checkpoint resumed) deletes the videos of iterations
    after ``k``, which the resumed run draws again, as the CSV sink drops the rows after ``k``.
    GIFs are written with Pillow; MP4s (H.264) need imageio-ffmpeg (``ImportError`` here,
    before any video is drawn, when it is missing).
    """

    def __init__(
        self, folder: str | os.PathLike, fmt: str = "gif", resume_from_iteration: int | None = None
    ):
        if fmt not in VIDEO_FORMATS:
            raise ValueError(f"video format must be one of {', '.join(VIDEO_FORMATS)}, got {fmt!r}")
        # imageio (the encoders) only for a run that draws videos: not in every run's start-up
        from jrl.app import render

        if fmt == "mp4":  # the missing extra is reported now, not after the first chunk
            render.check_writer(".mp4")
        self.folder, self.fmt, self._render = Path(folder), fmt, render
        self._closed = False
        if resume_from_iteration is not None and self.folder.is_dir():
            for path in self.written():
                match = _NAME.match(path.name)
                if match is not None and int(match["iteration"]) > resume_from_iteration:
                    path.unlink()

    def written(self) -> list[Path]:
        """The video files in the folder, sorted by name (by run, then iteration)."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if _NAME.match(p.name))

    def write(self, record: Record) -> None:
        """Metric records are not this sink's."""

    def write_many(self, records: Sequence[Record]) -> None:
        """Metric records are not this sink's."""

    def write_video(self, video: Video) -> None:
        """Writes ``video`` as ``folder/<name>_iter<NNNNNN>.<fmt>`` (replacing one there)."""
        if self._closed:
            raise RuntimeError(f"write to a closed VideoFileSink({self.folder})")
        path = self.folder / video_file_name(video.name, video.iteration, self.fmt)
        self._render.write_video(video.frames, path, fps=video.fps)

    def close(self) -> None:
        self._closed = True

"""The file-level side of checkpoints: the manifest of a committed step, the bound on a
save, the write probe of a run folder, and the capture of what a failed save prints.

:mod:`jrl.app.checkpoint` builds on these; they know nothing of train states or orbax's
items, only of files, descriptors and seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from jrl.util.bounds import seconds_from_env

__all__ = [
    "MANIFEST",
    "SAVE_LOG",
    "SAVE_TIMEOUT",
    "SAVE_TIMEOUT_ENV",
    "CheckpointError",
    "check_files",
    "check_writable",
    "file_digest",
    "quiet_orbax",
    "quiet_stderr",
    "save_timeout",
    "until_quiet",
]


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, newer format, different run, or corrupt."""


MANIFEST = (
    "files.sha256.json"  # size and sha256 of every file of a committed step, checked before reading
)


def file_digest(path: Path) -> list:
    return [path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()]


def check_files(path: Path, fallback: str) -> None:
    """Compares the files of a step with its manifest (when it has one: a kill between the
    commit and the manifest leaves none, and the array checksum still guards the data)."""
    manifest_file = path / MANIFEST
    if not manifest_file.is_file():
        return
    try:
        manifest = json.loads(manifest_file.read_text())
    except ValueError:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: {MANIFEST} is not valid JSON{fallback}"
        ) from None
    for name, (size, digest) in manifest.items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} is missing{fallback}")
        if f.stat().st_size != size:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {name} has {f.stat().st_size} bytes, "
                f"{size} were written{fallback}"
            )
        if file_digest(f)[1] != digest:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {name} differs from what was written{fallback}"
            )


SAVE_LOG = "save-errors.log"
"""Where the stderr of a failed save goes (orbax and tensorstore print hundreds of lines of
tracebacks from their threads for one I/O error)."""


@contextlib.contextmanager
def quiet_stderr(log: Path):
    """Captures what is written to file descriptor 2 (threads and C++ included) during the
    block: replayed on stderr when the block succeeds, written to ``log`` (best effort: the
    disk may be full) when it raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        except BaseException:
            until_quiet(capture)  # the failed writes' threads go on reporting for a while
            sys.stderr.flush()
            os.dup2(saved, 2)
            capture.seek(0)
            try:
                log.write_bytes(capture.read())
            except OSError:
                pass
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read()
        if text:
            os.write(2, text)


def until_quiet(capture, quiet_for: float = 0.5, at_most: float = 10.0) -> None:
    """Waits until nothing was written to ``capture`` for ``quiet_for`` seconds (``at_most``
    in all)."""
    start, size, since = time.monotonic(), -1, time.monotonic()
    while time.monotonic() - start < at_most:
        now = os.fstat(capture.fileno()).st_size
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_for:
            return
        time.sleep(0.05)


def quiet_orbax():
    logging.getLogger("absl").setLevel(logging.WARNING)


SAVE_TIMEOUT_ENV = "JRL_CHECKPOINT_TIMEOUT"
"""Environment variable: seconds a checkpoint's save may take before it counts as failed
(default :data:`SAVE_TIMEOUT`)."""
SAVE_TIMEOUT = 600
"""Default bound, in seconds, on one checkpoint save (orbax's waits for its writer threads)."""


def save_timeout() -> int:
    """Whole seconds one save may take: ``$JRL_CHECKPOINT_TIMEOUT``, else :data:`SAVE_TIMEOUT`."""
    return max(1, math.ceil(seconds_from_env(SAVE_TIMEOUT_ENV, SAVE_TIMEOUT)))


def check_writable(directory: Path) -> None:
    """Raises ``OSError`` (e.g. ``PermissionError``) when no file can be created in
    ``directory``: a folder that exists but refuses writes (permissions, ``chattr +i``, a
    read-only mount) is found before a run trains, not at its first checkpoint."""
    fd, probe = tempfile.mkstemp(prefix=".jrl-write-probe-", dir=directory)
    os.close(fd)
    os.unlink(probe)

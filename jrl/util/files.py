"""Atomic file writes: a file is either its old version or its complete new one.

:func:`replacing` yields a temporary path next to the target (same folder, so
the final rename stays on one filesystem; a dot-name, ending in the target's
suffix for writers that pick a format from it) and renames it over the
target when the block ends cleanly, or deletes it when the block raises.
:func:`write_atomic` writes text or bytes through it. Every file jrl writes
into a run folder (``config.json``, ``summary.json``, plots, videos,
``eval.json``, rewritten logs) goes through here; checkpoints are committed by
orbax's own rename.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Iterator

__all__ = ["replacing", "write_atomic"]


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary path to write instead of ``path``; renames it over ``path`` on a
    clean exit, deletes it (and leaves ``path`` alone) when the block raises."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Writes ``data`` (text as UTF-8) to ``path`` atomically; returns the path."""
    with replacing(path) as tmp:
        tmp.write_bytes(data if isinstance(data, bytes) else data.encode())
    return Path(path)

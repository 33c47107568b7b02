"""Writing benchmark results into BENCHMARKS.md (shared by the benchmark scripts).

The scripts run as ``python benchmarks/NAME.py``, so this module is importable
as ``report`` from the script's own folder.
"""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


def write_section(path: Path, heading: str, text: str) -> None:
    """Replaces the section that starts with the line ``heading`` in ``path`` (up to the
    next ``## `` heading) by ``text``, or appends ``text``; the other sections are kept."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.DOTALL | re.MULTILINE)
    if pattern.search(old):
        new = pattern.sub(lambda _: text.rstrip("\n") + "\n\n", old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    path.write_text(new.rstrip("\n") + "\n")

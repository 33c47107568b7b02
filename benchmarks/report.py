"""Writing benchmark results into BENCHMARKS.md (shared by the benchmark scripts).

The scripts run as ``python benchmarks/NAME.py``, so this module is importable
as ``report`` from the script's own folder.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
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


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measured_on() -> str:
    """The 'Measured <date> on <cpu>, <n> cores, Python, jax; load' line of a section."""
    import jax

    return (f"Measured {datetime.date.today().isoformat()} on {cpu_model()}, {os.cpu_count()} cores,\n"
            f"Python {platform.python_version()}, jax {jax.__version__}; 1-minute load average "
            f"{os.getloadavg()[0]:.1f} at the end.")


def publish(heading: str, text: str, write: bool) -> None:
    """Prints a section and, with ``write``, puts it in BENCHMARKS.md."""
    print(text)
    if write:
        write_section(BENCHMARKS_MD, heading, text)
        print(f"wrote {BENCHMARKS_MD}")


def run_json_worker(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path) -> dict | str:
    """Runs ``cmd`` (a worker printing one JSON line) in a fresh interpreter; returns the last
    JSON line it printed, or an error string (timeout, or the exit code and its last lines)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, check=False)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return f"exit {proc.returncode}: " + " | ".join(tail)

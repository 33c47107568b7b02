"""Executes the notebooks and stores them with their outputs (plots, printed results).

The notebooks under ``notebooks/`` are kept in the repository *with* their outputs, so a reader
sees the curves and numbers without running anything. This script is the only writer of those
outputs: it runs every notebook (or the ones named) top to bottom in a fresh kernel of this
interpreter, at the notebooks' full budgets unless ``--smoke``, and rewrites each file with the
outputs. It records in the notebook's metadata (``jrl``) a hash of the code cells it ran, so
``tests/test_notebooks.py`` can tell when a notebook's code changed without its outputs being
written again.

Usage::

    python tools/execute_notebooks.py                      # every notebook, full budgets
    python tools/execute_notebooks.py notebooks/03_alphazero.ipynb
    python tools/execute_notebooks.py --smoke              # the small budgets CI executes

A notebook whose cell raises is left unchanged on disk; the script names the cell and exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
KERNEL_NAME = "jrl-notebooks-python"
CELL_TIMEOUT_S = 1800


def code_hash(nb: dict) -> str:
    """sha256 of the notebook's code cells' sources, in order (what the outputs came from)."""
    digest = hashlib.sha256()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"]
            digest.update(("".join(source) if isinstance(source, list) else source).encode())
            digest.update(b"\0")
    return digest.hexdigest()


def _kernelspec(folder: Path) -> None:
    """A kernelspec named KERNEL_NAME that starts this very interpreter."""
    spec_dir = folder / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


def execute(path: Path, smoke: bool) -> float:
    """Runs ``path`` and rewrites it with its outputs; returns the seconds it took."""
    import nbclient  # the test extra's notebook runner, needed only by this tool
    import nbformat  # nbclient's dependency

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    nb.metadata["jrl"] = {"code_sha256": code_hash(nb), "budgets": "smoke" if smoke else "full"}
    tmp = path.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--smoke", action="store_true", help="the small budgets CI uses")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"execute_notebooks: no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2
    import nbclient.exceptions  # the test extra's notebook runner, needed only by this tool

    with tempfile.TemporaryDirectory() as jupyter:
        _kernelspec(Path(jupyter))
        os.environ["JUPYTER_PATH"] = jupyter + os.pathsep + os.environ.get("JUPYTER_PATH", "")
        if args.smoke:
            os.environ["JRL_NOTEBOOK_SMOKE"] = "1"
        for i, path in enumerate(paths, 1):
            print(f"[{i}/{len(paths)}] {path.name} ...", flush=True)
            try:
                seconds = execute(path, args.smoke)
            except nbclient.exceptions.CellExecutionError as err:
                print(
                    f"execute_notebooks: {path.name} failed; left unchanged\n{err}", file=sys.stderr
                )
                return 1
            print(f"[{i}/{len(paths)}] {path.name} written in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

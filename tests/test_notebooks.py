"""Executes every ``notebooks/*.ipynb`` and fails on any cell error.

The kernel runs this interpreter with ``JRL_NOTEBOOK_SMOKE=1`` (the notebooks
shrink their training budgets) and the non-interactive ``Agg`` matplotlib
backend. Notebooks are executed in memory; the files are not rewritten.
"""

import json
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 600
KERNEL_NAME = "jrl-test-python"


@pytest.fixture
def kernel_env(monkeypatch, tmp_path):
    """A kernelspec for this very interpreter, and the kernel's environment
    (nbclient starts the kernel as a subprocess, which inherits ``os.environ``)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "jrl tests",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv(
        "JUPYTER_PATH", str(tmp_path / "jupyter") + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    )
    monkeypatch.setenv("JRL_NOTEBOOK_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    cache = os.environ.get(
        "JRL_TEST_COMPILE_CACHE"
    )  # share the suite's compilation cache (conftest.py)
    if cache:
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", cache)
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def test_notebooks_exist():
    assert NOTEBOOKS, "no notebooks found under notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, kernel_env):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:  # names the cell and shows its traceback
        pytest.fail(f"{path.name}: a cell raised\n{err}", pytrace=False)
    for i, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, (
            f"{path.name} cell {i}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
        )


def stored_code_hash(nb: dict) -> str:
    """sha256 of the code cells' sources, as tools/execute_notebooks.py records it."""
    import hashlib

    digest = hashlib.sha256()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"]
            digest.update(("".join(source) if isinstance(source, list) else source).encode())
            digest.update(b"\0")
    return digest.hexdigest()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_with_the_outputs_of_its_code(path):
    """Every notebook is stored executed (each code cell ran, and there is output to read),
    by tools/execute_notebooks.py at full budgets, from the code it holds now: a notebook
    edited after its outputs were written fails here until the script runs again."""
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), f"{path.name}: a code cell never ran"
    assert any(c.get("outputs") for c in code), f"{path.name}: stored without outputs"
    meta = nb["metadata"].get("jrl", {})
    assert meta.get("budgets") == "full", f"{path.name}: run tools/execute_notebooks.py on it"
    assert meta.get("code_sha256") == stored_code_hash(nb), (
        f"{path.name}: its code changed after its outputs were written; run "
        f"`python tools/execute_notebooks.py {path.relative_to(path.parent.parent)}`"
    )

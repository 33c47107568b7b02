"""Executes every ``notebooks/*.ipynb`` and fails on any cell error.

The kernel runs with ``JRL_NOTEBOOK_SMOKE=1`` (the notebooks shrink their
training budgets) and the non-interactive ``Agg`` matplotlib backend. The
notebooks are executed in memory; the files are not rewritten.
"""

import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 600


@pytest.fixture
def kernel_env(monkeypatch):
    """The kernel inherits this process's environment (nbclient starts it as a subprocess)."""
    monkeypatch.setenv("JRL_NOTEBOOK_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    cache = os.environ.get("JRL_TEST_COMPILE_CACHE")  # share the suite's compilation cache (conftest.py)
    if cache:
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", cache)
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    # the 'python3' kernel is started with this interpreter (jupyter_client maps 'python' to sys.executable)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


def test_notebooks_exist():
    assert NOTEBOOKS, "no notebooks found under notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, kernel_env):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:  # names the cell and shows its traceback
        pytest.fail(f"{path.name}: a cell raised\n{err}", pytrace=False)
    for i, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{path.name} cell {i}: {errors[0].get('ename')}: {errors[0].get('evalue')}"

"""A skip for a missing package is refused where it would hide a broken install (conftest.py's
``pytest_runtest_makereport`` / ``pytest_make_collect_report`` hooks).

Each case runs pytest in a subprocess on a small test file beside a copy of this suite's
conftest.py (and tests/timeouts.py, which it imports), and reads the outcome from its
summary line.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CASES = {
    # an unrelated package nobody installs: a fair skip, with or without JRL_REQUIRE_EXTRAS
    "absent": "import pytest\n\ndef test_it():\n    pytest.importorskip('zz_jrl_no_such_module')\n",
    # an installed distribution whose import fails: a broken install, always a failure
    "broken": (
        "import sys, pytest\n"
        "sys.modules['envpool'] = None  # the import now raises ModuleNotFoundError\n\n"
        "def test_it():\n    pytest.importorskip('envpool')\n"
    ),
    # a test-extra package that is not installed: fails only under JRL_REQUIRE_EXTRAS=1
    "extra_missing": (
        "import importlib.metadata, sys, pytest\n"
        "sys.modules['envpool'] = None\n"
        "_real = importlib.metadata.distribution\n\n"
        "def _distribution(name):\n"
        "    if name == 'envpool':\n"
        "        raise importlib.metadata.PackageNotFoundError(name)\n"
        "    return _real(name)\n\n"
        "importlib.metadata.distribution = _distribution\n\n"
        "def test_it():\n    pytest.importorskip('envpool')\n"
    ),
    # the same at collection time (a module-level importorskip)
    "broken_at_collection": (
        "import sys, pytest\nsys.modules['envpool'] = None\npytest.importorskip('envpool')\n\n"
        "def test_it():\n    pass\n"
    ),
}


def _outcome(tmp_path: Path, case: str, require: bool) -> str:
    for helper in ("conftest.py", "timeouts.py"):  # the suite's conftest and what it imports
        shutil.copy(Path(__file__).with_name(helper), tmp_path / helper)
    (tmp_path / f"test_{case}.py").write_text(CASES[case])
    env = {k: v for k, v in os.environ.items() if k != "JRL_REQUIRE_EXTRAS"}
    if require:
        env["JRL_REQUIRE_EXTRAS"] = "1"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        + ["-o", "addopts=", "-rfEs", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = out.stdout.strip().splitlines()[-1]
    for word in ("failed", "error", "skipped", "passed"):
        if f" {word}" in last:
            return word if word != "error" else "failed"
    raise AssertionError(out.stdout[-2000:] + out.stderr[-2000:])


@pytest.mark.parametrize(
    "case,require,expected",
    [
        ("absent", False, "skipped"),
        ("absent", True, "skipped"),
        ("broken", False, "failed"),
        ("extra_missing", False, "skipped"),
        ("extra_missing", True, "failed"),
        ("broken_at_collection", False, "failed"),
    ],
)
def test_skip_for_a_missing_package(tmp_path, case, require, expected):
    assert _outcome(tmp_path, case, require) == expected

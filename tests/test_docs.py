"""The documentation site (docs/, mkdocs.yml): it builds with ``mkdocs build --strict`` (broken
links, anchors and API references fail), the complete examples of the extending guides run as
written (an on-policy agent, a replay agent and an env, each a plugin: extracted from the
pages' ``title="NAME.py"`` code blocks into a temporary folder and trained for a tiny budget
in a subprocess), and every dotted ``jrl.`` name the pages give in backticks exists."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TITLED_BLOCK = re.compile(r'^```python title="([\w.]+\.py)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def titled_blocks(page: str) -> dict[str, str]:
    """``{file name: code}`` of a page's ``python title="NAME.py"`` code blocks."""
    return dict(TITLED_BLOCK.findall((DOCS / page).read_text()))


def run_python(code: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml"]
        + ["-d", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    for page in ("index.html", "extending/replay-agent/index.html", "api/registries/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    registries = (tmp_path / "site" / "api/registries/index.html").read_text()
    assert "jrl.agents" in registries and "register" in registries  # docstrings were collected


# The guides' training scripts run as written, with jrl.train's budget cut to a few iterations.
DRIVER = """
import json, math, runpy
import numpy as np
import jrl

real_train, results = jrl.train, []

def small_train(*args, **kwargs):
    kwargs.update({budget})
    kwargs.setdefault("progress", False)
    results.append(real_train(*args, **kwargs))
    return results[-1]

jrl.train = small_train
runpy.run_path({script!r}, run_name="__main__")
(result,) = results
last = {{k: float(v[:, -1].mean()) for k, v in result.metrics.items()}}
print("RESULT " + json.dumps({{
    "agent": result.agent,
    "final_returns": result.final_returns().tolist(),
    "finite": bool(all(math.isfinite(x) for x in last.values())
                   and np.isfinite(result.final_returns()).all()),
    "last": last,
}}))
"""

GUIDES = {
    # page: (the training script, jrl.train's budget, the agent it trains)
    "extending/writing-an-agent.md": (
        "train_my_reinforce.py",
        {"total_steps": 4096},
        "my_reinforce",
    ),
    "extending/replay-agent.md": (
        "train_mini_dqn.py",
        {"total_steps": 2400, "learning_starts": 800},
        "mini_dqn",
    ),
    "extending/writing-an-env.md": ("train_corridor.py", {"total_steps": 2048}, "ppo"),
}


@pytest.mark.parametrize("page", sorted(GUIDES))
def test_the_guides_complete_example_trains(page, tmp_path):
    """The page's files, written out as a reader would save them, and its training script
    run in a fresh process: it trains (finite metrics and returns; the replay agent made
    updates)."""
    script, budget, agent = GUIDES[page]
    blocks = titled_blocks(page)
    assert script in blocks and len(blocks) >= 2, sorted(blocks)
    for name, code in blocks.items():
        (tmp_path / name).write_text(code)
    out = run_python(DRIVER.format(budget=budget, script=script), tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["agent"] == agent
    assert result["finite"], result
    if agent == "mini_dqn":
        assert result["last"]["train/updates"] > 0, result


def test_the_replay_plugin_trains_from_the_command_line(tmp_path):
    """The replay guide's command (``PYTHONPATH=. jrl train mini_dqn --import mini_dqn ...``),
    with a small budget: the plugin is found, the run folder written and the plugin recorded."""
    blocks = titled_blocks("extending/replay-agent.md")
    (tmp_path / "mini_dqn.py").write_text(blocks["mini_dqn.py"])
    page = (DOCS / "extending/replay-agent.md").read_text()
    assert "PYTHONPATH=. jrl train mini_dqn --import mini_dqn --env CartPole-v1" in page
    args = ["train", "mini_dqn", "--import", "mini_dqn", "--env", "CartPole-v1"]
    args += ["--total-steps", "2400", "--learning-starts", "800", "--quiet", "--out", "run"]
    out = subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-6000:]
    assert (tmp_path / "run" / "params.msgpack").is_file()
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert record["agent"] == "mini_dqn" and record["run"]["plugins"] == ["mini_dqn"]


def test_the_examples_use_no_private_names():
    """The guides' files import only public names (no ``_name``) of jrl's public modules."""
    for page in GUIDES:
        for name, code in titled_blocks(page).items():
            for line in code.splitlines():
                if re.match(r"\s*(from|import)\s+jrl", line):
                    assert not re.search(r"\b_\w", line.split("#")[0]), (page, name, line)


DOTTED = re.compile(r"`[^`\n]*?(?<![\w./-])(jrl(?:\.[A-Za-z_]\w*)+)")


def dotted_names() -> list[str]:
    """Every ``jrl.x.y`` name that a docs page writes inside backticks."""
    names = set()
    for page in DOCS.rglob("*.md"):
        names.update(DOTTED.findall(page.read_text()))
    return sorted(names)


def test_every_dotted_name_in_the_docs_exists():
    """``jrl.app.api.load_run``, ``jrl.parts.buffers.uniform_buffer``...: each name resolves
    to a module or to an attribute of its longest importable module prefix."""
    missing = []
    for name in dotted_names():
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
                break
            except ModuleNotFoundError:
                continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            missing.append(name)
    assert not missing, missing

"""The layering rule of ARCHITECTURE.md, checked on the source.

ARCHITECTURE.md's layout table places every module of ``jrl/`` in a layer
(1 = the base). A module may import from its own layer and from the layers
above it (smaller numbers), never from below; ``jrl.agents`` and
``jrl.envs`` are imported only by the top layer (8). ``envs/`` uses layers
1-2, ``agents/`` layers 1-6 and ``jrl.envs``. ``names.py`` (close-match
suggestions), ``files.py`` (atomic writes) and ``bounds.py`` (bounds on waits) may be used
from anywhere. Imports inside
functions count too.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
ANY_LAYER = {"names", "files", "bounds"}
TOP = 8
PACKAGES = {"run"}  # sub-packages of jrl/ whose modules have layers of their own


def layer_table(text: str) -> dict[str, int]:
    """``{"loops": 6, "run.anakin": 7, ...}`` from the layout block of ARCHITECTURE.md."""
    table = {}
    for line in text.splitlines():
        m = re.match(r"^  ((?:[\w/]+\.py\s+)+)layer (\d)\b", line)
        if m:
            for name in m.group(1).split():
                table[name[:-3].replace("/", ".")] = int(m.group(2))
    return table


def jrl_imports(path: pathlib.Path) -> set[str]:
    """Every ``jrl`` module ``path`` imports, as ``"loops"``, ``"run.anakin"``, ``"agents"``..."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "jrl":
                found |= {alias.name for alias in node.names if not alias.name.startswith("__")}
            elif node.module.startswith("jrl."):
                package = node.module[len("jrl.") :]
                found.add(package)  # and `from jrl.run import anakin` also names "run.anakin"
                found |= {f"{package}.{alias.name}" for alias in node.names if package in PACKAGES}
        elif isinstance(node, ast.Import):
            found |= {
                alias.name[len("jrl.") :] for alias in node.names if alias.name.startswith("jrl.")
            }
    return found


def layer_of(module: str, table: dict[str, int]) -> int | None:
    """The layer of an imported name: a module in the table (or a name in one), the
    top layer for ``jrl.agents`` / ``jrl.envs``, None for a bare package (``run``)."""
    if module in table:
        return table[module]
    top = module.split(".")[0]
    if top in ("agents", "envs"):
        return TOP
    return table.get(top)


@pytest.fixture(scope="module")
def table():
    return layer_table((ROOT / "ARCHITECTURE.md").read_text())


def test_table_parses_known_rows():
    text = (
        "```\n  types.py spaces.py        layer 1 (x)\n  run/anakin.py   layer 7\n"
        "  names.py  any layer\n```"
    )
    assert layer_table(text) == {"types": 1, "spaces": 1, "run.anakin": 7}


def test_imports_are_collected_at_any_depth(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "from jrl import loops, spaces as sp\nimport jrl.buffers\n"
        "def f():\n    from jrl.run import anakin\n    from jrl.envs import registry\n"
        "from . import local\nimport numpy\n"
    )
    assert jrl_imports(src) == {"loops", "spaces", "buffers", "run", "run.anakin", "envs"}


def test_every_core_module_is_placed(table):
    modules = {
        ".".join(p.relative_to(ROOT / "jrl").with_suffix("").parts)
        for p in (ROOT / "jrl").rglob("*.py")
        if p.name != "__init__.py"
    }
    unplaced = sorted(modules - set(table) - ANY_LAYER)
    assert not unplaced, f"place these modules in ARCHITECTURE.md's layout table: {unplaced}"


def test_core_imports_only_its_own_layer_or_above(table):
    bad = []
    for path in sorted((ROOT / "jrl").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        module = ".".join(path.relative_to(ROOT / "jrl").with_suffix("").parts)
        if module in ANY_LAYER:
            continue
        mine = table[module]
        for dep in sorted(jrl_imports(path)):
            theirs = layer_of(dep, table)
            if dep.split(".")[0] in ANY_LAYER or theirs is None:
                continue
            if theirs > mine:
                bad.append(
                    f"jrl/{path.relative_to(ROOT / 'jrl')} (layer {mine}) imports jrl.{dep} "
                    f"(layer {theirs})"
                )
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("folder, highest", [("envs", 2), ("agents", 6)])
def test_envs_and_agents_stay_in_their_layers(table, folder, highest):
    allowed_packages = {"envs"} | ({"agents"} if folder == "agents" else set())
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for dep in sorted(jrl_imports(path)):
            top = dep.split(".")[0]
            if top in allowed_packages or top in ANY_LAYER:
                continue
            theirs = layer_of(dep, table)
            if theirs is None or theirs > highest:
                bad.append(
                    f"{folder}/{path.relative_to(ROOT / folder)} imports jrl.{dep} (layer {theirs})"
                )
    assert not bad, "\n".join(bad)

"""The layering rule of ARCHITECTURE.md, checked on the source tree.

A layer is a folder. ``jrl/`` holds the layer packages, from the base up::

    util (any layer) < core < ops < parts < run < agents < app

``agents/`` (installed as ``jrl.agents``) holds one package per family; its
modules may import the layers below it, ``jrl.envs`` and other families.
``envs/`` (``jrl.envs``) uses ``core`` and ``util`` only. Only ``app``
imports ``jrl.agents`` and ``jrl.envs``. Imports inside functions count too.

Besides the order this checks: no import cycle among the modules of a layer
(or a family), no module importing another's private names, no library file
over 600 lines, no library function over 60 lines, and no import inside a
function without a comment saying why it is deferred.
"""

from __future__ import annotations

import ast
import pathlib
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = {"util": 0, "core": 1, "ops": 2, "parts": 3, "run": 4, "agents": 5, "app": 6, "envs": 1}
"""Layer of each top-level package; util (0) may be imported from anywhere. envs sits beside
core: it may use core (and util) and nothing above."""
SOURCES = {"jrl": ROOT / "jrl", "jrl.agents": ROOT / "agents", "jrl.envs": ROOT / "envs"}
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60


def module_files() -> dict[str, pathlib.Path]:
    """Every library module, ``{"jrl.run.loops": path, "jrl.agents.value.dqn": path, ...}``."""
    found = {}
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def layer_name(module: str) -> str | None:
    """The layer package of a module name: ``"run"`` for ``jrl.run.loops``, ``"agents"`` for
    ``jrl.agents.value.dqn``; None for the top-level ``jrl`` package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "jrl" else None


def group_of(module: str) -> str:
    """The unit inside which imports must not form a cycle: a layer, or one agent family."""
    parts = module.split(".")
    if parts[1] == "agents" and len(parts) > 3:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def imports_of(path: pathlib.Path, module: str, known: set[str]) -> list[tuple[str, int, bool]]:
    """``(imported module, line, inside a function)`` for every jrl import in ``path``
    (``from jrl.run import loops`` names ``jrl.run.loops``; relative imports resolved)."""
    tree = ast.parse(path.read_text())
    out = []
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if base == "jrl" or base.startswith("jrl."):
                    for alias in child.names:
                        full = f"{base}.{alias.name}"
                        out.append((full if full in known else base, child.lineno, in_function))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name == "jrl" or alias.name.startswith("jrl."):
                        out.append((alias.name, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return out


@pytest.fixture(scope="module")
def modules():
    return module_files()


def test_every_module_sits_in_a_layer_folder(modules):
    loose = [m for m in modules if m != "jrl" and layer_name(m) not in LAYERS]
    assert not loose, f"modules outside the layer folders of jrl/: {loose}"


def test_no_module_imports_a_layer_above_its_own(modules):
    bad = []
    for module, path in modules.items():
        mine = layer_name(module)
        if mine is None or mine == "util":
            continue
        for dep, line, _ in imports_of(path, module, set(modules)):
            theirs = layer_name(dep)
            if theirs is None or theirs == "util" or theirs == mine:
                continue
            if theirs in ("agents", "envs") and mine != "app" and mine != "agents":
                bad.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {dep}")
            elif LAYERS[theirs] > LAYERS[mine] or (mine == "envs" and theirs != "core"):
                bad.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {dep} ({theirs})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_cycle_finder_finds_a_cycle_and_nothing_else():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_a_layer_or_family(modules):
    graph = {}
    for module, path in modules.items():
        if path.name == "__init__.py":
            continue  # a package's __init__ re-exports; its members are the units
        graph[module] = {
            dep
            for dep, _, _ in imports_of(path, module, set(modules))
            if dep in modules
            and dep != module
            and modules[dep].name != "__init__.py"
            and group_of(dep) == group_of(module)
        }
    assert not _cycles(graph), f"import cycles: {_cycles(graph)}"


def test_no_module_imports_private_names(modules):
    bad = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jrl"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}")
    assert not bad, "imports of another module's private names:\n" + "\n".join(bad)


def test_files_and_functions_stay_short(modules):
    long_files, long_functions = [], []
    for path in modules.values():
        text = path.read_text()
        if text.count("\n") > MAX_FILE_LINES:
            long_files.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long_files, f"files over {MAX_FILE_LINES} lines: {long_files}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


def test_imports_inside_functions_say_why(modules):
    bad = []
    for module, path in modules.items():
        rows = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for child in ast.walk(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    here = rows[child.lineno - 1]
                    above = rows[child.lineno - 2].strip() if child.lineno > 1 else ""
                    if "#" not in here and not above.startswith("#"):
                        bad.append(f"{path.relative_to(ROOT)}:{child.lineno}")
    assert not bad, "imports inside functions without a comment saying why:\n" + "\n".join(
        sorted(set(bad))
    )


def test_pyproject_lists_every_package(modules):
    """A package folder missing from pyproject.toml's ``packages`` would be left out of a
    wheel (the editable install used in development finds it anyway)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    folders = {m for m, path in modules.items() if path.name == "__init__.py"}
    assert folders == listed, (
        f"missing: {sorted(folders - listed)}, stale: {sorted(listed - folders)}"
    )

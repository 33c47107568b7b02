"""The benchmark scripts (``benchmarks/*.py``) keep working as jrl's modules move.

- every script answers ``--help`` (exit 0, and a usage line where it has a ``__main__``),
  run as BENCHMARKS.md runs it (``python benchmarks/NAME.py``) from another folder: an
  import that a move broke fails here, without running a benchmark (a script whose peers,
  brax, SBX, a PureJaxRL checkout, are absent still answers);
- no script uses a private name of jrl (a ``_name`` attribute of a jrl module or object, or
  ``from jrl... import _name``): benchmarks use the public API, as users do;
- every jrl import of a script, also those inside its functions that ``--help`` does not
  reach, names a module or attribute that exists, and every ``module.name`` it reads from
  a jrl module it imported exists.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def has_main(tree: ast.Module) -> bool:
    """Whether the module has an ``if __name__ == "__main__":`` block (a script, not a
    helper module such as ``common.py``)."""
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        for node in tree.body
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help(script: pathlib.Path, tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"{script.name} --help: exit {proc.returncode}\n{proc.stderr}"
    if has_main(ast.parse(script.read_text())):
        assert proc.stdout.startswith("usage:"), f"{script.name} --help printed no usage"
    assert not list(tmp_path.iterdir()), f"{script.name} --help wrote files"


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def jrl_imports(tree: ast.Module) -> tuple[dict[str, str], list[tuple[int, str]]]:
    """``({local name: what it is bound to, "jrl.x.y" or "jrl.x.y:name"}, [(line, private
    name imported)])`` of every jrl import of a module, at any depth."""
    bound: dict[str, str] = {}
    private: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "jrl":
                    continue
                if any(is_private(part) for part in alias.name.split(".")):
                    private.append((node.lineno, alias.name))
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = "jrl"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "jrl":
            if node.level == 0:
                if any(is_private(part) for part in node.module.split(".")):
                    private.append((node.lineno, node.module))
                for alias in node.names:
                    if is_private(alias.name):
                        private.append((node.lineno, f"{node.module}.{alias.name}"))
                    bound[alias.asname or alias.name] = f"{node.module}:{alias.name}"
    return bound, private


def root_name(node: ast.expr) -> str | None:
    """The name an attribute chain starts from, through calls and subscripts
    (``jrl.agents.get("ppo").build`` -> ``jrl``)."""
    while True:
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return node.id if isinstance(node, ast.Name) else None


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_private_jrl_names(script: pathlib.Path) -> None:
    tree = ast.parse(script.read_text())
    bound, found = jrl_imports(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            if root_name(node.value) in bound:
                found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
            and root_name(node.args[0]) in bound
        ):
            found.append((node.lineno, ast.unparse(node)))
    assert not found, (
        "private jrl names in benchmarks/"
        + script.name
        + ": "
        + ", ".join(f"line {line}: {text}" for line, text in sorted(found))
    )


def resolve(target: str):
    """The object a jrl import binds (``"jrl.x.y"`` or ``"jrl.x.y:name"``); a missing
    optional peer (an import error from outside jrl) skips the test."""
    module, _, name = target.partition(":")
    try:
        obj = importlib.import_module(module)
        if not name:
            return obj
        if hasattr(obj, name):
            return getattr(obj, name)
        return importlib.import_module(f"{module}.{name}")
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] != "jrl":
            pytest.skip(f"{target} needs {e.name}, not installed")
        raise


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_jrl_names_exist(script: pathlib.Path) -> None:
    tree = ast.parse(script.read_text())
    bound, _ = jrl_imports(tree)
    for node in ast.walk(tree):  # `import jrl.a.b` binds jrl, with jrl.a.b imported
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "jrl":
                    resolve(alias.name)
    objects = {local: resolve(target) for local, target in sorted(bound.items())}
    missing = []
    for node in ast.walk(tree):
        # module.name chains read from an imported jrl module (jrl.agents.get, anakin.run)
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        chain, base = [], node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in objects:
            continue
        obj = objects[base.id]
        for attr in reversed(chain):
            if not isinstance(obj, type(ast)):  # only modules' attributes are checked
                break
            if not hasattr(obj, attr):
                missing.append(f"line {node.lineno}: {ast.unparse(node)} ({obj.__name__})")
                break
            obj = getattr(obj, attr)
    assert not missing, f"benchmarks/{script.name} reads names jrl lacks: " + ", ".join(
        sorted(set(missing))
    )

"""Mutation check of jrl's numerical core: do the fast tests notice a wrong operator, sign or
constant?

Each *mutant* is one small change to the code of a target function: an arithmetic operator
swapped (``+``/``-``, ``*``/``/``, ``**`` -> ``*``), a sign dropped (``-x`` -> ``x``), a
comparison moved across its boundary (``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``is``/``is
not``), a logical operator swapped (``&``/``|``, ``and``/``or``, ``~x``/``not x`` -> ``x``),
the condition of an ``if`` or of ``a if c else b`` negated, a number increased by one, a
boolean flipped, a reduction or selection swapped (``minimum``/``maximum``, ``min``/``max``,
``argmax``/``argmin``, ``mean``/``sum``), the branches of a ``where`` swapped, or a
``stop_gradient`` dropped. The mutant is applied in memory only: the function's ``__code__``
is replaced by the mutated compilation, so every reference to the function sees it (``from
... import`` copies included) and no file is written. Then the target's fast tests run
in-process (``pytest -x``, the tests that name the mutated function first).

**A private copy.** A run (anything but ``--list``) first copies the working tree (``git
ls-files -co --exclude-standard``: tracked and untracked files that git does not ignore) to a
temporary folder and runs itself, its workers and their tests there, with ``PYTHONPATH`` set
so that ``jrl`` is imported from the copy (a worker refuses to start otherwise). Nothing of
the checked-out tree is ever written or mutated, so people and processes using it while the
check runs see no mutant, and their edits do not reach the check half-way. The copy is
removed at the end.

**Results.** A mutant is *killed* when a test fails, *survives* when they all pass, and *times
out* when its tests run past ``--timeout`` seconds. A timeout is no kill: the mutant may only
have made the code slower (a bigger program to compile, a loop run longer) without any test
noticing a wrong value, or the machine was busy. Every timed-out mutant is therefore run once
more, alone, with five times the limit; its second result stands (killed or survived), and a
mutant that times out again is reported as a *timeout*, apart from kills and survivors. The
check fails on a survivor that is not listed in ``tools/mutation_equivalents.txt``, on a
repeated timeout (a hang or a large slow-down that the tests notice only by hanging: give
them an assertion, or look at the machine), on an error (a mutant that did not compile, a
worker that died or held more than 6 GiB, :data:`MEMORY_LIMIT`, a killing test that fails
without any mutant too), on a listed mutant that no longer exists (a stale entry), and when
a target's tests fail without any mutant.
Listed mutants are not run. An entry of the equivalents file says why the mutant cannot
change behaviour, for every input the code accepts and on every backend: a mutant that is
equivalent only in distribution, only on one backend, or only because JAX clamps an
out-of-range index is not equivalent and needs a test instead (where no test can tell, e.g.
an index into a length-1 axis that JAX clamps, the code changes so that it does not read past
the end).

**Rotation.** The candidates (every mutant not listed as equivalent) are split into K =
ceil(candidates / ``--sample``) slices of equal size, each holding every target file's share
(stratified). A default run checks one slice: slice ``n mod K`` where ``n`` is the number of
commits up to ``HEAD`` (``git rev-list --count HEAD``), so successive commits run successive
slices and any K successive commits together run every mutant of the rotation. Functions
listed in ``AWAITING_FULL_RUN`` (new targets whose mutants have not all been run) are
left out of the rotation, and named by every default run, until a ``--target`` run of
their file passes; ``--all`` and ``--target`` include them. Outside a git checkout slice 0
is run (with a note). ``--slice I`` picks a slice; ``--all`` runs every candidate (the full
run: about 1.5 CPU seconds a mutant, see ``--all --list``'s count).

Targets: see ``tools/mutation_targets.py`` (the files, the functions mutated in each, and the
tests run against each file's mutants).

Usage::

    python tools/mutation.py                  # the CI check: this commit's slice, 2 workers
    python tools/mutation.py --all            # the full run: every mutant (all slices)
    python tools/mutation.py --list           # every mutant id, with its line
    python tools/mutation.py --only ID ...    # run these mutants (e.g. to confirm a kill)
    python tools/mutation.py --target PATH... # every mutant of these target files
    python tools/mutation.py --slice 3        # slice 3 of the rotation
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mutation_targets import AWAITING_FULL_RUN, FAST, SAMPLE, Target, targets

REPO = Path(__file__).resolve().parent.parent
EQUIVALENTS = Path(__file__).with_name("mutation_equivalents.txt")
SNAPSHOT_ENV = "JRL_MUTATION_SNAPSHOT"
"""Set (to the copy's root) in the run that works in a private copy of the tree, and in its
workers."""
COMMIT_ENV = "JRL_MUTATION_COMMIT"
"""``count head`` of the checkout's commit, given by the parent to the run in its copy (which
has no .git) to choose the rotation's slice."""
RETRY_FACTOR = 5
"""A timed-out mutant is run once more with this many times the limit."""
MEMORY_LIMIT = 6 * 2**30
"""Bytes a worker may hold resident: a mutant that makes a loop run without end while it
appends (e.g. ``j += 1`` -> ``j -= 1``) is stopped before it exhausts a shared machine's memory
(an error, not a kill, not retried: the tests should bound it themselves)."""

# --------------------------------------------------------------------------------- mutants


@dataclasses.dataclass
class Mutant:
    id: str
    target: str  # Target.path
    qualname: str  # the top-level function (or Class.method) whose code is replaced
    line: int  # absolute line, for display
    original: str  # the source line
    mutated: str  # the mutated node, unparsed
    node: int  # the node's index in ast.walk(module), to mutate it again in a worker
    desc: str  # the mutation


SWAP_BINOP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.Pow: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
}
SWAP_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
SWAP_NAMES = {
    "minimum": "maximum",
    "maximum": "minimum",
    "min": "max",
    "max": "min",
    "argmax": "argmin",
    "argmin": "argmax",
    "mean": "sum",
    "sum": "mean",
}


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _skipped_ids(func: ast.AST) -> set[int]:
    """Nodes never mutated: docstrings, defaults, annotations, decorators, strings."""
    skip: set[int] = set()

    def drop(node):
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for d in [*args.defaults, *args.kw_defaults]:
                drop(d)
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None:
                    drop(a.annotation)
            if not isinstance(node, ast.Lambda):
                drop(node.returns)
                for d in node.decorator_list:
                    drop(d)
                body = node.body
                if (
                    body
                    and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                ):
                    drop(body[0])
        elif isinstance(node, ast.AnnAssign):
            drop(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            drop(node)
        elif isinstance(node, ast.Raise):  # the message of an error, not its condition
            drop(node)
    return skip


def _edits(node: ast.AST):
    """``(description, apply(node_copy))`` for each mutation of ``node``."""
    if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BINOP:
        new = SWAP_BINOP[type(node.op)]
        yield f"{type(node.op).__name__}-to-{new.__name__}", lambda n: setattr(n, "op", new())
    elif isinstance(node, ast.AugAssign) and type(node.op) in SWAP_BINOP:
        new = SWAP_BINOP[type(node.op)]
        yield f"{type(node.op).__name__}=-to-{new.__name__}=", lambda n: setattr(n, "op", new())
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Invert, ast.Not)):
        yield f"drop-{type(node.op).__name__}", None  # replaced by its operand (see _mutate)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP_CMP:
        new = SWAP_CMP[type(node.ops[0])]
        yield (
            f"{type(node.ops[0]).__name__}-to-{new.__name__}",
            lambda n: setattr(n, "ops", [new()]),
        )
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield f"{type(node.op).__name__}-to-{new.__name__}", lambda n: setattr(n, "op", new())
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = node.value + 1
        yield f"{node.value!r}-to-{value!r}", lambda n: setattr(n, "value", value)
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield f"{node.value}-to-{not node.value}", lambda n: setattr(n, "value", not n.value)
    elif isinstance(node, (ast.If, ast.IfExp)):

        def negate(n):
            n.test = ast.UnaryOp(ast.Not(), n.test)

        yield "negate-condition", negate
    elif isinstance(node, ast.Call):
        name = _call_name(node)
        if name in SWAP_NAMES:
            new_name = SWAP_NAMES[name]

            def rename(n, new_name=new_name):
                if isinstance(n.func, ast.Attribute):
                    n.func.attr = new_name
                else:
                    n.func.id = new_name

            yield f"{name}-to-{new_name}", rename
        elif name == "where" and len(node.args) == 3:

            def swap(n):
                n.args[1], n.args[2] = n.args[2], n.args[1]

            yield "where-swap", swap
        elif name == "stop_gradient" and len(node.args) == 1:
            yield "drop-stop_gradient", None


def _replace_child(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return
    raise RuntimeError("node not found in its parent")


def _functions(tree: ast.Module, target: Target):
    """``(qualname, node)`` of the top-level functions and methods to mutate."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            if target.functions is None or node.name in target.functions:
                yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                name = f"{node.name}.{item.name}" if isinstance(item, ast.FunctionDef) else None
                if name and (target.functions is None or name in target.functions):
                    yield name, item


def _regions(func: ast.FunctionDef, target: Target) -> list[tuple[str, ast.AST]]:
    """``(name, node)`` of the parts of ``func`` to mutate: the whole function, or in a
    ``make_*`` function of an agent only its nested loss/update functions."""
    if target.nested is None or not func.name.startswith("make_"):
        return [(func.name, func)]
    defs = [n for n in ast.walk(func) if isinstance(n, ast.FunctionDef)]
    return [(n.name, n) for n in defs if n.name in target.nested]


def _innermost(region: ast.AST, node: ast.AST, prefix: str) -> tuple[str, int]:
    """The dotted name and first line of the innermost def of ``region`` holding ``node``."""
    best, best_line, best_depth = prefix, region.lineno, 0

    def visit(n, name, depth):
        nonlocal best, best_line, best_depth
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.FunctionDef):
                inner = f"{name}.{child.name}"
                if any(x is node for x in ast.walk(child)) and depth + 1 > best_depth:
                    best, best_line, best_depth = inner, child.lineno, depth + 1
                visit(child, inner, depth + 1)
            else:
                visit(child, name, depth)

    visit(region, prefix, 0)
    return best, best_line


def enumerate_mutants(target: Target) -> list[Mutant]:
    source = (REPO / target.path).read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    index = {id(n): i for i, n in enumerate(ast.walk(tree))}
    out: list[Mutant] = []
    for qualname, func in _functions(tree, target):
        skip = _skipped_ids(func)
        for region_name, region in _regions(func, target):
            prefix = qualname if region is func else f"{qualname}.{region_name}"
            for node in ast.walk(region):
                if id(node) in skip or not hasattr(node, "lineno"):
                    continue
                for desc, _ in _edits(node):
                    where, first = _innermost(region, node, prefix)
                    span = (
                        f"+{node.lineno - first}:{node.col_offset}"
                        f"..{node.end_lineno - first}:{node.end_col_offset}"
                    )
                    ident = f"{target.path}:{where}:{span}:{desc}"
                    mutated = _mutate(tree, node, desc)
                    out.append(
                        Mutant(
                            ident,
                            target.path,
                            qualname,
                            node.lineno,
                            lines[node.lineno - 1].strip(),
                            ast.unparse(mutated[1]),
                            index[id(node)],
                            desc,
                        )
                    )
    ids = [m.id for m in out]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise RuntimeError(f"duplicate mutant ids: {sorted(dupes)[:3]}")
    return out


def _mutate(tree: ast.Module, node: ast.AST, desc: str) -> tuple[ast.Module, ast.AST]:
    """A copy of ``tree`` with ``node`` mutated as ``desc`` says; and the new node."""
    memo: dict[int, ast.AST] = {}
    new_tree = copy.deepcopy(tree, memo)
    new_node = memo[id(node)]
    apply = dict(_edits(new_node))[desc]
    if apply is not None:
        apply(new_node)
        return new_tree, new_node
    replacement = new_node.operand if isinstance(new_node, ast.UnaryOp) else new_node.args[0]
    for parent in ast.walk(new_tree):
        if any(child is new_node for child in ast.iter_child_nodes(parent)):
            _replace_child(parent, new_node, replacement)
            return new_tree, replacement
    raise RuntimeError(f"cannot mutate {desc}")


def mutated_code(target: Target, mutant: Mutant):
    """The code object of ``mutant.qualname`` compiled from the mutated module."""
    tree = ast.parse((REPO / target.path).read_text())
    node = list(ast.walk(tree))[mutant.node]
    new_tree, _ = _mutate(tree, node, mutant.desc)
    ast.fix_missing_locations(new_tree)
    code = compile(new_tree, str(REPO / target.path), "exec", dont_inherit=True)

    def find(c):
        for const in c.co_consts:
            if hasattr(const, "co_qualname"):
                if const.co_qualname == mutant.qualname:
                    return const
                found = find(const)
                if found is not None:
                    return found
        return None

    found = find(code)
    if found is None:
        raise RuntimeError(f"{mutant.id}: no code object {mutant.qualname}")
    return found


def function_object(module, qualname: str):
    """The function object whose ``__code__`` holds ``qualname`` (methods and properties too)."""
    obj = module
    parts = qualname.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part)
    attr = obj.__dict__[parts[-1]] if isinstance(obj, type) else getattr(obj, parts[-1])
    if isinstance(attr, property):
        attr = attr.fget
    elif isinstance(attr, (classmethod, staticmethod)):
        attr = attr.__func__
    return getattr(attr, "__wrapped__", attr)


# --------------------------------------------------------------------------------- worker


def test_functions(entry: str) -> list[tuple[str, str]]:
    """``(node id, source)`` of the tests an entry of :data:`TESTS` names: every ``test_*``
    function of a file, or the one ``file::test`` given."""
    path, _, name = entry.partition("::")
    source = (REPO / path).read_text()
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            if not name or node.name == name:
                out.append((f"{path}::{node.name}", ast.get_source_segment(source, node)))
    if name and not out:
        raise SystemExit(f"mutation: no test {entry}")
    return out


def ordered_tests(target: Target, qualname: str) -> list[str]:
    """The target's tests, those whose source names the mutated function (or its class) first:
    with ``-x`` a killed mutant then usually stops at its first test."""
    words = set(qualname.split("."))
    tests = [t for entry in target.tests for t in test_functions(entry)]
    named = [i for i, s in tests if any(re.search(rf"\b{re.escape(w)}\b", s) for w in words)]
    return named + [i for i, _ in tests if i not in named]


class _Plugin:
    """The worker's pytest plugin: after the test suite's conftest has set up JAX's persistent
    compilation cache, every program is written to it (not only slow ones), so a program that a
    mutant leaves unchanged is loaded after ``jax.clear_caches()`` instead of compiled again;
    and the tests that fail are recorded."""

    def __init__(self):
        self.failed: list[str] = []

    @staticmethod
    def pytest_configure(config):
        import jax

        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.append(report.nodeid)


def forget_test_modules() -> None:
    """Drops the test modules (not conftest.py) from ``sys.modules``, so that each pytest run
    imports them afresh: a test module that memoises results at module level (e.g. a rollout
    computed once for several tests) must not hand one mutant's results to the next mutant, or
    to the check of the killing tests without any mutant."""
    tests = REPO / "tests"
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and Path(path).parent == tests and Path(path).name != "conftest.py":
            del sys.modules[name]


def worker(job_file: str) -> None:
    """Runs the mutants of ``job_file`` (JSON) in this process; one JSON line per event on the
    protocol stream (the original stdout), pytest's own output to /dev/null (or, with
    ``MUTATION_DEBUG`` set, its errors to stderr). At the end the tests that killed a mutant run
    once more without any: a test that fails there did not kill its mutants (``verify``)."""
    import importlib

    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    if not os.environ.get("MUTATION_DEBUG"):
        os.dup2(devnull, 2)
    os.chdir(REPO)
    import jax
    import pytest

    import jrl

    if os.environ.get(SNAPSHOT_ENV) != str(REPO) or REPO not in Path(jrl.__file__).parents:
        raise SystemExit(f"mutation: a worker runs in a private copy only, not in {REPO}")

    job = json.loads(Path(job_file).read_text())
    by_path = {t.path: t for t in targets()}

    def run_tests(tests, stop_early=True) -> tuple[int, list[str]]:
        forget_test_modules()
        plugin = _Plugin()
        first = ["-x"] if stop_early else []
        args = [*first, "-q", "-p", "no:cacheprovider", "-o", "addopts=", *FAST, *tests]
        return int(pytest.main(args, plugins=[plugin])), plugin.failed

    def say(**event):
        protocol.write(json.dumps(event) + "\n")

    killers: set[str] = set()
    for m in job["mutants"]:
        mutant = Mutant(**m)
        t = by_path[mutant.target]
        say(start=mutant.id)
        start = time.perf_counter()
        module = importlib.import_module(t.module)
        fn = function_object(module, mutant.qualname)
        original = fn.__code__
        try:
            fn.__code__ = mutated_code(t, mutant)
        except Exception as e:  # noqa: BLE001 - reported, the check fails
            say(done=mutant.id, result=f"error: {e}")
            continue
        jax.clear_caches()
        try:
            rc, failed = run_tests(ordered_tests(t, mutant.qualname))
        finally:
            fn.__code__ = original
            jax.clear_caches()
        if rc == 1 and failed:
            result = f"killed by {failed[0]}"
            killers.add(failed[0])
        else:
            result = "survived" if rc == 0 else f"error: pytest exit code {rc}"
        say(done=mutant.id, result=result, seconds=time.perf_counter() - start)
    if killers:
        start = time.perf_counter()
        _, failed = run_tests(sorted(killers), stop_early=False)
        say(verify=sorted(killers), failed=failed, seconds=time.perf_counter() - start)


# --------------------------------------------------------------------------------- driver


def read_equivalents() -> dict[str, str]:
    """The listed mutants and their reasons."""
    out = {}
    for n, line in enumerate(EQUIVALENTS.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        ident, sep, reason = line.partition("  # ")
        if not sep or not reason.strip():
            raise SystemExit(f"{EQUIVALENTS.name}:{n}: 'MUTANT_ID  # one-line reason' expected")
        out[ident.strip()] = reason.strip()
    return out


def _git(*args: str) -> str | None:
    """``git args`` in the repository: its stdout, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.decode()


def slices(mutants: list[Mutant], size: int) -> list[list[Mutant]]:
    """The rotation: K = ceil(len / size) slices whose sizes differ by at most one, each
    holding every target file's share. Within a file the mutants are ordered by a hash of their
    id (so the split does not follow the source order, and a new mutant moves few others) and
    dealt out in turn, the turn carried on from file to file."""
    k = max(1, math.ceil(len(mutants) / size))
    out: list[list[Mutant]] = [[] for _ in range(k)]
    by_target: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_target.setdefault(m.target, []).append(m)
    turn = 0
    for group in by_target.values():
        for m in sorted(group, key=lambda m: hashlib.sha256(m.id.encode()).hexdigest()):
            out[turn % k].append(m)
            turn += 1
    return [sorted(s, key=lambda m: m.id) for s in out]


def this_commits_slice(k: int) -> tuple[int, str]:
    """The slice a default run checks, ``n mod k`` for the ``n``-th commit, and a note."""
    # the run in the private copy (no .git there) is told the checkout's commit by its parent
    count, head = (os.environ.get(COMMIT_ENV, "").split() or [None, None])[:2]
    if count is None:
        count, head = _git("rev-list", "--count", "HEAD"), _git("rev-parse", "--short", "HEAD")
    if count is None or head is None:
        return 0, "not a git checkout: slice 0 (a fixed choice; --slice picks another)"
    n = int(count)
    return n % k, f"commit {head.strip()} is commit {n}: slice {n % k} of {k}"


def snapshot(dest: Path) -> Path:
    """A copy of the working tree under ``dest``: git's tracked and untracked, not ignored
    files (outside git: every file but .git, virtual environments and caches); symbolic links
    stay links."""
    listed = _git("ls-files", "-co", "--exclude-standard", "-z")
    if listed is not None:
        files = [f for f in listed.split("\0") if f]
    else:
        skip = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", "build", "dist", "site"}
        files = []
        for root, dirs, names in os.walk(REPO):
            rel = Path(root).relative_to(REPO)
            links = [d for d in dirs if (Path(root) / d).is_symlink()]
            dirs[:] = [d for d in dirs if d not in skip and d not in links]
            files += [str(rel / n) for n in [*names, *links]]
    tree = dest / "tree"
    for rel in files:
        src, dst = REPO / rel, tree / rel
        if not src.is_symlink() and not src.is_file():  # deleted but still tracked
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return tree


def in_a_copy(argv: list[str]) -> int:
    """Runs this command again in a private copy of the working tree (see the docstring); its
    exit code."""
    tmp = Path(tempfile.mkdtemp(prefix="jrl-mutation-"))
    try:
        tree = snapshot(tmp)
        path = os.environ.get("PYTHONPATH")
        env = {
            **os.environ,
            SNAPSHOT_ENV: str(tree),
            "PYTHONPATH": str(tree) + (os.pathsep + path if path else ""),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        count, head = _git("rev-list", "--count", "HEAD"), _git("rev-parse", "--short", "HEAD")
        if count is not None and head is not None:
            env[COMMIT_ENV] = f"{count.strip()} {head.strip()}"
        print(f"mutation: working in a copy of the tree, {tree}", flush=True)
        cmd = [sys.executable, str(tree / "tools" / "mutation.py"), *argv]
        return subprocess.run(cmd, env=env).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_workers(mutants: list[Mutant], workers: int, timeout: float, tmp: Path):
    """Runs the mutants over ``workers`` processes: ``(results, seconds, broken)``, ``broken``
    the killing tests that also failed without a mutant. A mutant that runs past ``timeout``
    seconds gets the result ``timeout`` (its worker is replaced)."""
    import queue
    import threading

    events: queue.Queue = queue.Queue()
    results: dict[str, str] = {}
    seconds: dict[str, float] = {}
    broken: set[str] = set()
    launched = 0

    def launch(todo: list[Mutant]) -> dict:
        nonlocal launched
        launched += 1
        job = tmp / f"job{launched}.json"
        job.write_text(json.dumps({"mutants": [dataclasses.asdict(m) for m in todo]}))
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "PYTHONDONTWRITEBYTECODE": "1",
            # the tests' compilation cache (tests/conftest.py), fresh for this check: mutants'
            # programs stay out of the suite's cache
            "JRL_TEST_COMPILE_CACHE": str(tmp / "jax-cache"),
        }
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(job)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        w = {"id": launched, "proc": proc, "todo": list(todo), "current": None, "since": 0.0}

        def read():
            for line in proc.stdout:
                events.put((w["id"], line))
            events.put((w["id"], None))  # end of stream

        threading.Thread(target=read, daemon=True).start()
        return w

    running = {}
    for i in range(workers):
        if mutants[i::workers]:
            w = launch(mutants[i::workers])
            running[w["id"]] = w
    while running:
        try:
            wid, line = events.get(timeout=0.5)
        except queue.Empty:
            wid, line = None, None
        if wid in running:
            w = running[wid]
            if line is None:  # the worker ended
                code = w["proc"].wait()
                for m in w["todo"]:
                    results.setdefault(m.id, f"error: worker exited with {code}")
                del running[wid]
            else:
                event = json.loads(line)
                if "verify" in event:
                    broken.update(event["failed"])
                elif "start" in event:
                    w["current"], w["since"] = event["start"], time.monotonic()
                else:
                    results[event["done"]] = event["result"]
                    seconds[event["done"]] = event.get("seconds", 0.0)
                    if len(results) % 25 == 0 or len(results) == len(mutants):
                        print(f"mutation: {len(results)}/{len(mutants)} mutants run", flush=True)
                    w["todo"] = [m for m in w["todo"] if m.id != event["done"]]
                    w["current"] = None
        for wid, w in list(running.items()):
            if w["current"] is None:
                continue
            over_time = time.monotonic() - w["since"] > timeout
            over_memory = resident_bytes(w["proc"].pid) > MEMORY_LIMIT
            if over_time or over_memory:
                w["proc"].kill()
                w["proc"].wait()
                results[w["current"]] = "timeout" if over_time else "error: over the memory limit"
                seconds[w["current"]] = time.monotonic() - w["since"]
                todo = [m for m in w["todo"] if m.id != w["current"]]
                del running[wid]
                if todo:
                    new = launch(todo)
                    running[new["id"]] = new
    return results, seconds, broken


def resident_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (0 where /proc cannot tell)."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def run_with_retry(mutants: list[Mutant], workers: int, timeout: float):
    """:func:`run_workers`, then the timed-out mutants once more with ``RETRY_FACTOR`` times the
    limit: their second result stands, ``timeout twice`` if it is a timeout again."""
    tmp = Path(tempfile.mkdtemp(prefix="jrl-mutation-run-"))
    try:
        results, seconds, broken = run_workers(mutants, workers, timeout, tmp)
        again = [m for m in mutants if results.get(m.id) == "timeout"]
        if again:
            print(
                f"mutation: {len(again)} mutants timed out after {timeout:.0f} s; running them "
                f"again with {RETRY_FACTOR * timeout:.0f} s",
                flush=True,
            )
            r2, s2, b2 = run_workers(again, workers, RETRY_FACTOR * timeout, tmp)
            for m in again:
                r = r2.get(m.id, "error: no result")
                results[m.id] = "timeout twice" if r == "timeout" else r
                seconds[m.id] = timeout + s2.get(m.id, 0.0)
            broken |= b2
        return results, seconds, broken
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


KINDS = ("killed", "survived", "timeout", "error", "equivalent")


def kind_of(result: str, listed: bool) -> str:
    if result.startswith("killed"):
        return "killed"
    if result == "survived":
        return "equivalent" if listed else "survived"
    return "timeout" if result.startswith("timeout") else "error"


def report(chosen, results, seconds, broken, equivalents) -> tuple[list[dict], dict, bool]:
    """Prints each failing mutant and a table per file: ``(rows, counts, failed)``."""
    if broken:
        print(f"mutation: these tests fail without any mutant, so they kill nothing: {broken}")
    rows = []
    counts = dict.fromkeys(KINDS, 0)
    per_file: dict[str, dict] = {}
    failed = False
    for m in chosen:
        r = results.get(m.id, "error: no result")
        if r.startswith("killed by ") and r.removeprefix("killed by ") in broken:
            r = f"error: {r}, which fails without the mutant too"  # no kill
        kind = kind_of(r, m.id in equivalents)
        counts[kind] += 1
        per_file.setdefault(m.target, dict.fromkeys(KINDS, 0))[kind] += 1
        rows.append(
            {**dataclasses.asdict(m), "result": r, "kind": kind, "seconds": seconds.get(m.id)}
        )
        if kind in ("survived", "timeout", "error"):
            failed = True
            print(f"{kind.upper()}: {m.id}\n    {m.line}: {m.original}\n    -> {m.mutated}  ({r})")
    for path, c in per_file.items():
        print(
            f"  {path:36s} {sum(c.values()):4d} mutants: {c['killed']} killed, "
            f"{c['survived']} survived, {c['timeout']} timed out twice, {c['error']} errors, "
            f"{c['equivalent']} equivalent"
        )
    return rows, counts, failed


def parse(argv):
    p = argparse.ArgumentParser(
        description="Mutation check of jrl's numerical core (see the module docstring).",
        epilog="The full run, every mutant: python tools/mutation.py --all",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--list", action="store_true", help="list every mutant and exit")
    p.add_argument("--only", nargs="+", default=None, help="run only these mutant ids")
    p.add_argument("--target", nargs="+", default=None, help="every mutant of these files")
    p.add_argument("--all", action="store_true", help="every mutant: the full run")
    p.add_argument("--sample", type=int, default=SAMPLE, help="the size of a slice")
    p.add_argument("--slice", type=int, default=None, help="run this slice (default: commit's)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant")
    p.add_argument("--json", default=None, help="write the results to this file")
    return p.parse_args(argv)


def awaits_full_run(m: Mutant) -> bool:
    """Whether ``m``'s function is listed in AWAITING_FULL_RUN (itself or an enclosing one)."""
    function = m.id.split(":")[1]
    return any(
        function == name or function.startswith(name + ".")
        for name in AWAITING_FULL_RUN.get(m.target, ())
    )


def choose(a, mutants: list[Mutant], equivalents: dict[str, str]) -> list[Mutant]:
    """The mutants this run checks (see Usage)."""
    known = {m.id for m in mutants}
    if a.only:
        unknown = sorted(set(a.only) - known)
        if unknown:
            raise SystemExit(f"unknown mutant ids: {unknown}")
        return [m for m in mutants if m.id in set(a.only)]
    # the listed equivalents are known to survive: not run again
    candidates = [m for m in mutants if m.id not in equivalents]
    if a.target:
        unknown = sorted(set(a.target) - {m.target for m in mutants})
        if unknown:
            raise SystemExit(f"no mutants in {unknown}")
        return [m for m in candidates if m.target in set(a.target)]
    if a.all:
        return candidates
    waiting = [m for m in candidates if awaits_full_run(m)]
    if waiting:
        files = sorted({m.target for m in waiting})
        print(
            f"mutation: {len(waiting)} mutants of functions new in the check await their full "
            f"run and are not in the rotation (AWAITING_FULL_RUN in mutation_targets.py): "
            f"python tools/mutation.py --target {' '.join(files)}",
            flush=True,
        )
    parts = slices([m for m in candidates if not awaits_full_run(m)], a.sample)
    if a.slice is None:
        index, note = this_commits_slice(len(parts))
    else:
        index, note = a.slice % len(parts), f"slice {a.slice % len(parts)} of {len(parts)}"
    print(f"mutation: {note} (--all runs every slice)", flush=True)
    return parts[index]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse(argv)
    if a.worker:
        worker(a.worker)
        return 0
    if not a.list and os.environ.get(SNAPSHOT_ENV) != str(REPO):
        return in_a_copy(argv)
    start = time.perf_counter()
    all_targets = targets()
    wanted = set(a.target or ()) | {i.split(":")[0] for i in a.only or ()}
    if wanted:  # enumerate only the files named (the stale check needs all: not run then)
        unknown = sorted(wanted - {t.path for t in all_targets})
        if unknown:
            raise SystemExit(f"mutation: not a target file: {unknown}")
        all_targets = [t for t in all_targets if t.path in wanted]
    mutants = [m for t in all_targets for m in enumerate_mutants(t)]
    if a.list:
        for m in mutants:
            print(f"{m.id}\n    {m.line}: {m.original}\n    -> {m.mutated}")
        print(f"{len(mutants)} mutants")
        return 0
    equivalents = read_equivalents()
    stale = sorted(set(equivalents) - {m.id for m in mutants})
    chosen = choose(a, mutants, equivalents)
    listed = len(set(equivalents) & {m.id for m in mutants})
    print(
        f"mutation: {len(mutants)} mutants in {len(all_targets)} files, {listed} listed "
        f"as equivalent; running {len(chosen)} with {a.workers} workers",
        flush=True,
    )
    results, seconds, broken = run_with_retry(chosen, a.workers, a.timeout)
    rows, counts, failed = report(chosen, results, seconds, broken, equivalents)
    elapsed = time.perf_counter() - start
    print(
        f"mutation: {len(chosen)} mutants run: {counts['killed']} killed, {counts['survived']} "
        f"survived, {counts['timeout']} timed out twice, {counts['error']} errors, "
        f"{counts['equivalent']} listed as equivalent; {listed} of the {len(mutants)} mutants "
        f"{'of these files ' if wanted else ''}are listed as equivalent; {elapsed:.0f} s"
    )
    if stale and not (a.only or a.target):
        print(f"mutation: {EQUIVALENTS.name} lists mutants that no longer exist: {stale}")
        failed = True
    if a.json:
        Path(a.json).write_text(
            json.dumps({"rows": rows, "broken": sorted(broken), "seconds": elapsed}, indent=1)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

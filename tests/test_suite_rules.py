"""The test suite's own rules (issue 43): no test can hang or flake on a loaded machine.

An AST check over ``tests/*.py`` (code inside string literals, a child process's script, is
not test code) that names ``file:line`` for:

- a ``subprocess.run`` / ``check_output`` / ``check_call`` / ``call`` without ``timeout=``;
- a ``.communicate()``, ``.wait()`` or ``.join()`` without a timeout (a child, an event, a
  thread that never ends would hold the test until pytest-timeout ends the whole worker);
- a blocking read of a child's pipe: any ``.readline()`` / ``.readlines()``, a loop over
  ``proc.stdout`` / ``proc.stderr`` or a ``.read()`` of one (read them through
  ``tests/conftest.py``'s :class:`PipeLines`, whose every wait has a deadline);
- ``time.sleep`` outside the allow-list below (a sleep that stands for "long enough for the
  other side to get there" fails under load: wait on the condition itself, an Event, a file,
  a line, with a generous deadline, e.g. ``conftest.wait_until``);
- an ``assert`` on the wall clock: one whose expression calls ``time.monotonic``,
  ``perf_counter`` or ``time.time``, or uses a name computed from them (also through a helper
  of the module that returns such a value). A hang is caught by a bounded wait whose expiry
  fails the test, not by an asserted duration; durations belong in benchmarks/.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SUBPROCESS_CALLS = {"run", "check_output", "check_call", "call"}
CLOCKS = {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"}
PIPES = {"stdout", "stderr"}

SLEEP_ALLOWED = {
    ("conftest.py", "wait_until"): "the poll interval of a wait for a condition, with a deadline",
    ("test_faults_run.py", "test_stall_watch_leaves_a_busy_process_alone"): (
        "the idle wait inside watch.paused() is what is tested (the watch must ignore it); "
        "nothing waits on it"
    ),
}
"""(file, innermost function) -> why its ``time.sleep`` is not synchronisation."""

PENDING: dict = {}
"""(file, function) -> rule breaks not fixed yet, and by whom; an entry whose function keeps
no break fails :func:`test_pending_breaks_are_still_there` (it is dropped, not kept)."""


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _has_timeout(call: ast.Call, positional: int) -> bool:
    """Whether ``call`` passes a timeout other than None: ``timeout=`` or at least
    ``positional`` positional arguments (its place in the signature)."""
    given = [k.value for k in call.keywords if k.arg == "timeout"]
    if len(call.args) >= positional:
        given.append(call.args[positional - 1])
    return any(not (isinstance(v, ast.Constant) and v.value is None) for v in given)


class _Checker(ast.NodeVisitor):
    def __init__(self, name: str, tree: ast.Module):
        self.name, self.found = name, set()  # (line, function, what)
        self.functions: list[str] = []
        self.aliases = self._aliases(tree)  # local name -> "subprocess.run", "time.sleep", ...
        self.reads_clock = any(self.is_clock(n) for n in ast.walk(tree))
        self.clock_functions = self._clock_functions(tree) if self.reads_clock else {}

    @staticmethod
    def _aliases(tree: ast.Module) -> dict[str, str]:
        names = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("subprocess", "time"):
                for a in node.names:
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in ("subprocess", "time") and a.asname:
                        names[a.asname] = a.name
        return names

    def qualified(self, func: ast.AST) -> str:
        """The called name with import aliases resolved (``sleep`` -> ``time.sleep``)."""
        dotted = _dotted(func)
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            return self.aliases[head] + ("." + rest if rest else "")
        return dotted

    def is_clock(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and self.qualified(node.func) in {
            f"time.{c}" for c in CLOCKS
        }

    def _clock_functions(self, tree: ast.Module) -> dict[str, frozenset[int] | None]:
        """The module's functions that return a value computed from the clock: name -> the
        positions of the timed items of the tuple they return (None: the whole value)."""
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        found: dict[str, frozenset[int] | None] = {}
        changed = True
        while changed:
            changed = False
            for f in functions:
                if f.name in found:
                    continue
                timed = self._timed_names(f, found)
                for node in ast.walk(f):
                    if not isinstance(node, ast.Return) or node.value is None:
                        continue
                    value = node.value
                    if isinstance(value, ast.Tuple):
                        at = [i for i, e in enumerate(value.elts) if self._uses(e, timed, found)]
                        if at:
                            found[f.name], changed = frozenset(at), True
                            break
                    elif self._uses(value, timed, found):
                        found[f.name], changed = None, True
                        break
        return found

    def _uses(self, expr: ast.AST, timed: set[str], clock_functions: dict) -> bool:
        """Whether ``expr`` reads the clock, a timed name, or the whole value of a function
        that returns one (a timed item of a returned tuple counts where it is unpacked)."""
        for node in ast.walk(expr):
            if self.is_clock(node):
                return True
            if isinstance(node, ast.Name) and node.id in timed:
                return True
            if isinstance(node, ast.Call) and _dotted(node.func) in clock_functions:
                return True
        return False

    def _timed_names(self, scope: ast.AST, clock_functions: dict) -> set[str]:
        """Names in ``scope`` assigned (directly or through other such names) from the clock;
        ``a, took = helper()`` makes only ``took`` timed where ``helper`` returns a tuple whose
        second item is."""
        timed: set[str] = set()

        def mark(target: ast.AST) -> bool:
            new = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} - timed
            timed.update(new)
            return bool(new)

        changed = True
        while changed:
            changed = False
            for node in ast.walk(scope):
                if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    continue
                if node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
                called = _dotted(value.func) if isinstance(value, ast.Call) else ""
                positions = clock_functions.get(called)
                for t in targets:
                    if positions is not None and isinstance(t, ast.Tuple):
                        for i in positions:
                            if i < len(t.elts):
                                changed |= mark(t.elts[i])
                    elif self._uses(value, timed, clock_functions):
                        changed |= mark(t)
        return timed

    def report(self, node: ast.AST, what: str) -> None:
        self.found.add((node.lineno, self.functions[-1] if self.functions else "", what))

    # --- visitors --------------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node.name)
        timed = self._timed_names(node, self.clock_functions) if self.reads_clock else set()
        for n in ast.walk(node) if self.reads_clock else ():
            if isinstance(n, ast.Assert) and self._uses(n.test, timed, self.clock_functions):
                self.report(n, "an assert on the wall clock (bound the wait instead)")
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        name = self.qualified(node.func)
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if name in {f"subprocess.{c}" for c in SUBPROCESS_CALLS}:
            if not _has_timeout(node, 99):  # timeout is keyword-only there
                self.report(node, f"{name}(...) without timeout=")
        elif name == "time.sleep":
            where = (self.name, self.functions[-1] if self.functions else "")
            if where not in SLEEP_ALLOWED:
                self.report(
                    node, "time.sleep (wait for a condition instead, or allow-list it with why)"
                )
        elif attr == "communicate" and not _has_timeout(node, 2):
            self.report(node, ".communicate() without a timeout")
        elif attr in ("wait", "join") and not _has_timeout(node, 1):
            self.report(node, f".{attr}() without a timeout")
        elif attr == "wait_for" and not _has_timeout(node, 2):  # Condition.wait_for
            self.report(node, ".wait_for() without a timeout")
        elif attr == "get" and not node.args and not node.keywords:  # a queue's get
            self.report(node, ".get() without a timeout")
        elif attr in ("readline", "readlines"):
            self.report(node, f".{attr}() of a pipe (read it through conftest.PipeLines)")
        elif attr == "read" and _dotted(node.func.value).rpartition(".")[2] in PIPES:
            self.report(node, "a blocking .read() of a pipe (read it through conftest.PipeLines)")
        self.generic_visit(node)

    def _iterates_pipe(self, it: ast.AST, node: ast.AST) -> None:
        if isinstance(it, ast.Attribute) and it.attr in PIPES:
            self.report(node, f"a loop over a pipe (.{it.attr}) without a deadline")

    def visit_For(self, node: ast.For) -> None:
        self._iterates_pipe(node.iter, node)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._iterates_pipe(node.iter, node.iter)
        self.generic_visit(node)


def violations(source: str, name: str = "snippet.py", pending=()) -> list[str]:
    """``file:line: rule`` for every break of the suite's rules in ``source``, but those in
    the functions ``pending`` names."""
    tree = ast.parse(source)
    checker = _Checker(name, tree)
    checker.visit(tree)
    return [
        f"{name}:{line}: {what}"
        for line, function, what in sorted(checker.found)
        if (name, function) not in pending
    ]


def test_the_suite_keeps_its_rules():
    found = []
    for path in sorted(TESTS.glob("*.py")):
        found += violations(path.read_text(), path.name, PENDING)
    assert not found, "\n".join(found)


def test_pending_breaks_are_still_there():
    for file, function in PENDING:
        found = violations((TESTS / file).read_text(), file)
        tree = ast.parse((TESTS / file).read_text())
        lines = {
            n.lineno: n.end_lineno for n in ast.walk(tree) if getattr(n, "name", "") == function
        }
        inside = [f for f in found if any(a <= int(f.split(":")[1]) <= b for a, b in lines.items())]
        assert inside, f"{file}::{function} keeps the rules now: drop its PENDING entry"


def test_the_sleep_allow_list_names_functions_that_exist():
    """An allow-list entry whose function is gone (renamed, removed) is dropped, not kept."""
    for file, function in SLEEP_ALLOWED:
        tree = ast.parse((TESTS / file).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert function in names, (file, function)


def test_ray_tests_are_grouped_on_one_xdist_worker(tmp_path):
    """Under ``-n 2`` (``--dist loadgroup`` from pyproject) the tests that take a Ray fixture
    carry xdist's ``@ray`` group suffix, the others none: one Ray at a time (a pytest or
    pytest-xdist upgrade once dropped the suffix silently, pytest-xdist#1386)."""
    pytest.importorskip("xdist")
    pick = "cli_trains or synchronous_ray or bad_actors or stuck_actor"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--setup-plan"]
        + ["-v", "-k", pick, "tests/test_ray_actors.py", "tests/test_faults_sebulba.py"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=TESTS.parent,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ids = {line.split()[0] for line in out.stdout.splitlines() if line.startswith("tests/")}
    for ray_test in ("cli_trains", "synchronous_ray", "[ray:2]"):  # Ray in the test or a child
        assert [i for i in ids if ray_test in i and i.endswith("@ray")], (ray_test, ids)
    others = [i for i in ids if "bad_actors" in i or "[threads]" in i]
    assert len(others) == 6 and not any("@" in i for i in others), ids


# --- the rules themselves, on small snippets ----------------------------------------------------

BAD = {
    "run without timeout": ("import subprocess\nsubprocess.run(['x'])\n", "without timeout="),
    "check_output without timeout": (
        "import subprocess as sp\nsp.check_output(['x'])\n",
        "without timeout=",
    ),
    "imported call without timeout": (
        "from subprocess import check_call\ncheck_call(['x'])\n",
        "without timeout=",
    ),
    "communicate without timeout": (
        "def test_x(p):\n    out, err = p.communicate()\n",
        ".communicate() without a timeout",
    ),
    "communicate with input only": (
        "def test_x(p):\n    p.communicate('in')\n",
        ".communicate() without a timeout",
    ),
    "wait without timeout": ("def test_x(p):\n    p.wait()\n", ".wait() without a timeout"),
    "join without timeout": ("def test_x(t):\n    t.join()\n", ".join() without a timeout"),
    "wait with timeout None": (
        "def test_x(p):\n    p.wait(timeout=None)\n",
        ".wait() without a timeout",
    ),
    "run with timeout None": (
        "import subprocess\nsubprocess.run(['x'], timeout=None)\n",
        "without timeout=",
    ),
    "condition wait_for without timeout": (
        "def test_x(c):\n    c.wait_for(lambda: True)\n",
        ".wait_for() without a timeout",
    ),
    "queue get without timeout": ("def test_x(q):\n    q.get()\n", ".get() without a timeout"),
    "readline": ("def test_x(p):\n    p.stdout.readline()\n", ".readline()"),
    "loop over a pipe": (
        "def test_x(p):\n    for line in p.stderr: pass\n",
        "a loop over a pipe",
    ),
    "comprehension over a pipe": (
        "def test_x(p):\n    return [x for x in p.stdout]\n",
        "a loop over a pipe",
    ),
    "read of a pipe": ("def test_x(p):\n    p.stderr.read()\n", "a blocking .read() of a pipe"),
    "sleep": ("import time\ndef test_x():\n    time.sleep(0.3)\n", "time.sleep"),
    "imported sleep": ("from time import sleep\ndef test_x():\n    sleep(1)\n", "time.sleep"),
    "assert on a clock call": (
        "import time\ndef test_x(t0):\n    assert time.monotonic() - t0 < 30\n",
        "an assert on the wall clock",
    ),
    "assert on an elapsed name": (
        "import time\n"
        "def test_x():\n"
        "    t0 = time.perf_counter()\n"
        "    took = time.perf_counter() - t0\n"
        "    assert took < 30\n",
        "an assert on the wall clock",
    ),
    "assert on a helper's elapsed time": (
        "import time\n"
        "def finish():\n"
        "    t0 = time.time()\n"
        "    return 0, time.time() - t0\n"
        "def test_x():\n"
        "    code, took = finish()\n"
        "    assert took < 45\n",
        "an assert on the wall clock",
    ),
}


@pytest.mark.parametrize("snippet, rule", BAD.values(), ids=list(BAD))
def test_each_rule_names_the_line_that_breaks_it(snippet, rule):
    found = violations(snippet, "bad.py")
    last = len(snippet.rstrip("\n").splitlines())
    assert len(found) == 1 and rule in found[0], found
    assert found[0].startswith(f"bad.py:{last}: "), found


GOOD = {
    "bounded subprocess calls": """
        import subprocess
        subprocess.run(['x'], timeout=600)
        subprocess.check_output(['x'], timeout=60)
    """,
    "bounded waits": """
        def test_x(p, event, thread, condition, q):
            p.communicate(timeout=60)
            p.communicate(None, 60)
            p.wait(timeout=60)
            assert event.wait(60)
            thread.join(timeout=10)
            condition.wait_for(lambda: True, 60)
            q.get(timeout=5)
            {}.get('key')
            ', '.join(['a', 'b'])
    """,
    "a child's script in a string": """
        import subprocess, sys
        CHILD = '''
        import time
        for line in sys.stdin:
            time.sleep(1)
        sys.stdin.readline()
        '''
        def test_x():
            subprocess.run([sys.executable, '-c', CHILD], timeout=60)
    """,
    "a completed process's output": """
        def test_x(out):
            for line in out.stdout.splitlines():
                assert line
            assert out.stderr.count('x') == 0
    """,
    "a deadline that is not asserted": """
        import time
        def test_x(done):
            deadline = time.monotonic() + 60
            while not done() and time.monotonic() < deadline:
                pass
            assert done()
    """,
    "the untimed items of a helper's tuple": """
        import time
        def finish():
            t0 = time.time()
            return 0, time.time() - t0
        def test_x():
            code, took = finish()
            assert code == 0
    """,
    "an allow-listed sleep": """
        import time
        def wait_until(condition, timeout):
            time.sleep(0.05)
    """,
}


@pytest.mark.parametrize("snippet", GOOD.values(), ids=list(GOOD))
def test_what_the_rules_allow(snippet):
    assert violations(textwrap.dedent(snippet), "conftest.py") == []


HANGING = """
import threading

def test_passes():
    assert threading.current_thread() is threading.main_thread()  # xdist runs tests there

def test_hangs():
    threading.Event().wait()  # forever: only the timeout ends it
"""


def test_a_timed_out_test_in_an_xdist_worker_leaves_its_stack_in_the_output(tmp_path):
    """The suite's timeout (tests/timeouts.py, pytest-timeout's thread method through
    faulthandler) ends a hung test's xdist worker and writes the word Timeout and the hung
    test's stack where the run's output shows it (pytest-timeout's own dump went to the
    worker's terminal writer, which xdist does not show: a worker just went "node down")."""
    (tmp_path / "test_child.py").write_text(HANGING)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}  # the plugin module, for the child only
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "-p", "timeouts", "-p", "no:cacheprovider",
         "-o", "timeout=3", "-o", "timeout_method=thread", "test_child.py"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Timeout (0:00:03)!" in out, out[-3000:]
    assert 'test_child.py", line 8 in test_hangs' in out, out[-3000:]
    assert "1 failed, 1 passed" in out, out[-3000:]


TERMINATED = """
import os, signal, sys
import timeouts

def test_terminated(request):
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as ray.init's
    timeouts.loud_sigterm(request.config)
    os.kill(os.getpid(), signal.SIGTERM)
"""


def test_a_sigterm_to_a_worker_holding_ray_leaves_its_stack_in_the_output(tmp_path):
    """A worker with Ray's quiet SIGTERM handler (sys.exit), wrapped by tests/timeouts.py's
    loud_sigterm as conftest wraps it after ray.init: a SIGTERM writes a line and the stacks
    where the run's output shows them, then Ray's handler still ends the worker."""
    (tmp_path / "test_child.py").write_text(TERMINATED)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}  # the plugin module, for the child only
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "-p", "timeouts", "-p", "no:cacheprovider",
         "test_child.py"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "SIGTERM to pid" in out and "a test worker holding Ray" in out, out[-3000:]
    assert 'test_child.py", line 8 in test_terminated' in out, out[-3000:]


def test_learning_tests_are_bounded_by_the_longer_timeout(request):
    """Every selected learning test without a timeout mark of its own gets conftest's
    LEARNING_TIMEOUT; other tests keep the ini's bound (no mark)."""
    from conftest import LEARNING_TIMEOUT

    assert request.node.get_closest_marker("timeout") is None
    learning = [i for i in request.session.items if i.get_closest_marker("learning")]
    for item in learning:
        assert item.get_closest_marker("timeout").args == (LEARNING_TIMEOUT,), item.nodeid
    if not learning:
        pytest.skip("no learning test is selected in this run (-m 'not learning')")

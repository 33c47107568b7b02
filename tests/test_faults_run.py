"""Faults of a run's life that must end in bounded time with one line (issue 41): an
unwritable checkpoint folder, a failed final checkpoint, a program stuck in compiled code,
signals, missing optional packages and plugins, and the advice printed on the way out.

The CLI runs in subprocesses, each in a temporary folder, every one with a timeout.
"""

import errno
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import jrl
from conftest import PipeLines, wait_until
from jrl.app import checkpoint, stopping
from jrl.app import chunk_work as training

JRL = [sys.executable, "-m", "jrl.app.cli"]
TINY = ["--total-steps", "4000", "--quiet"]
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

# a torso whose forward pass blocks in a host callback: the compiled program waits with the
# process idle, as a deadlocked XLA program does. The callback first creates the file
# $JRL_TEST_BLOCKED: the test knows the program is inside its wait, without a timing guess.
SLEEPING_TORSO = """
import os
import time
import flax.linen as nn
import jax
from jrl.parts import torsos


def _block(x):
    open(os.environ["JRL_TEST_BLOCKED"], "a").close()
    time.sleep(3600)
    return x


class Sleeping(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = jax.pure_callback(
            _block, jax.ShapeDtypeStruct(x.shape, x.dtype), x, vmap_method="broadcast_all"
        )
        return nn.tanh(nn.Dense(8)(x.reshape(x.shape[:-1] + (-1,))))


torsos.register_torso("sleeping", lambda **kw: Sleeping(), overwrite=True)
"""

# the reproducer: a torso that vmaps an orthogonally initialised MLP
VMAPPED_ORTHOGONAL_TORSO = """
import flax.linen as nn
import jax.numpy as jnp
from jrl.parts import torsos


class _MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        for h in (64, 64):
            x = nn.tanh(nn.Dense(h, kernel_init=nn.initializers.orthogonal(jnp.sqrt(2)))(x))
        return x


class Ensemble(nn.Module):
    @nn.compact
    def __call__(self, x):
        mlps = nn.vmap(
            _MLP, variable_axes={"params": 0}, split_rngs={"params": True},
            in_axes=None, out_axes=0, axis_size=2,
        )
        return mlps()(x).mean(0)


torsos.register_torso("vmap_ortho", lambda **kw: Ensemble(), overwrite=True)
"""

ENV_PLUGIN = """
import jrl.envs

jrl.envs.register("PluginCart-v0", "jrl.envs.cartpole:CartPole", max_episode_steps=500)
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "MPLBACKEND": "Agg",
        "PYTHONPATH": str(tmp_path / "plugins"),
        **extra,
    }


def _plugin(tmp_path: Path, name: str, source: str) -> None:
    (tmp_path / "plugins").mkdir(exist_ok=True)
    (tmp_path / "plugins" / f"{name}.py").write_text(textwrap.dedent(source))


def run(*args, cwd, timeout=300, env=None):
    return subprocess.run(
        JRL + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env or _env(cwd),
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


# --- checkpoints that cannot be written ----------------------------------------------------


def _chattr(path: Path, flag: str) -> bool:
    try:
        done = subprocess.run(["chattr", flag, str(path)], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_resume_into_an_unwritable_checkpoint_folder_ends_at_once(tmp_path):
    """A checkpoint folder that refuses writes (``chattr +i``, as root) is found before
    training: one line naming the folder and the cause, exit 1, in seconds (it used to print
    the error and then never exit, orbax's threads waiting for signals)."""
    stopped = run("train", "ppo", *TINY, "--stop-at-steps", "2000", "--out", "r", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    before = checkpoint.steps(tmp_path / "r")
    if not _chattr(tmp_path / "r" / "checkpoints", "+i"):
        pytest.skip("chattr +i is not available here (needs root and a filesystem with it)")
    try:  # bounded: the subprocess timeout's expiry fails the test
        res = run("train", "--resume", "r", "--quiet", cwd=tmp_path, timeout=300)
    finally:
        _chattr(tmp_path / "r" / "checkpoints", "-i")
    assert res.returncode == 1, res.stderr
    lines = _error_lines(res.stderr)
    assert len(lines) == 1, res.stderr
    assert "cannot write checkpoints in" in lines[0] and "nothing was trained" in lines[0]
    assert "writable" in lines[0] and "jrl train --resume r" in lines[0]
    assert checkpoint.steps(tmp_path / "r") == before


def test_a_failed_save_leaves_no_thread_behind(tmp_path):
    """A save whose folder cannot be made fails at once and leaves no non-daemon thread
    waiting (the process can exit)."""
    ck = checkpoint.Checkpointer(tmp_path / "run", keep=2)
    state = {"w": np.ones(3, np.float32)}
    ck.save(1, state, {}, {"x": 1})
    before = {t for t in threading.enumerate() if not t.daemon}
    # the checkpoints folder turns into a file: every step folder fails to be made
    import shutil

    shutil.rmtree(ck.directory)
    ck.directory.write_text("not a folder")
    with pytest.raises(Exception):
        ck.save(2, state, {}, {"x": 2})
    ck.close()
    left = lambda: {t for t in threading.enumerate() if not t.daemon and t.is_alive()} - before
    wait_until(lambda: not left(), 60, lambda: f"threads left by the save {left()} ended")


def test_checkpointer_refuses_an_unwritable_folder_before_training(tmp_path, monkeypatch):
    """The Checkpointer probes its folder when made; the run reports it as a checkpoint write
    error naming the cause and a remedy that keeps the folder's files."""

    def refuse(directory):
        raise PermissionError(errno.EACCES, "Permission denied", str(directory))

    monkeypatch.setattr(checkpoint, "check_writable", refuse)
    with pytest.raises(training.CheckpointWriteError) as e:
        jrl.train("ppo", total_steps=2048, out=tmp_path / "r", progress=False)
    text = str(e.value)
    assert "cannot write checkpoints in" in text and "Permission denied" in text
    assert "writable" in text and "--overwrite" not in text


def test_a_failed_final_checkpoint_advises_keeping_the_params(tmp_path, monkeypatch):
    """Only the final checkpoint fails (a full disk): the final outputs are written, and the
    advice keeps them (another --out), never ``--overwrite``, which would delete them."""

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.Checkpointer, "save", full_disk)
    out = tmp_path / "run"
    with pytest.raises(training.CheckpointWriteError) as e:
        jrl.train("ppo", total_steps=2048, out=out, progress=False)
    text = str(e.value)
    assert "--overwrite" not in text
    assert "free some space" in text and "another --out" in text and str(out) in text
    assert (out / "params.msgpack").is_file() and (out / "summary.json").is_file()


def test_remedy_names_the_cause():
    """The advice after a failed write follows its cause."""
    assert training._remedy(OSError(errno.ENOSPC, "full")) == "free some space"
    assert training._remedy(PermissionError(errno.EPERM, "no"), Path("d")) == "make d writable"
    assert "free some space" == training._remedy(
        ValueError("write failed: No space left on device [os_error_code=28]")
    )
    assert training._remedy(ValueError("something else")) == "fix the cause"


def test_the_reason_for_a_failed_write_is_one_line_with_the_os_error():
    """orbax can wrap several tensorstore errors, tracebacks and specs (full of colons) into one
    message: the reason is the OS error's text and number, on one line (ci of c1aa133)."""
    spec = '[tensorstore_spec=\'{"driver":"zarr","kvstore":{"path":"/x/"}}\']'
    wrapped = ValueError(
        f"OUT_OF_RANGE: Error writing in OCDBT database: Failed to write 144054 bytes: "
        f"File too large {spec} [os_error_code='27']')>\n"
        '  Traceback (most recent call last):\n    File "type_handlers.py", line 118\n'
        f"ValueError: OUT_OF_RANGE: Failed writing: File too large {spec} [os_error_code='27']"
    )
    assert training._io_reason(wrapped) == "File too large (errno 27)"
    assert training._io_reason(OSError(errno.ENOSPC, "No space left on device")) == (
        "No space left on device (errno 28)"
    )
    assert training._io_reason(ValueError("first line\nsecond")) == "ValueError: first line"
    assert training._remedy(wrapped) == "fix the cause"
    assert training._remedy(ValueError("x [os_error_code=13] y"), Path("d")) == "make d writable"


def test_resume_hint_is_quoted_for_a_path_with_spaces(tmp_path):
    """The printed resume command works when pasted into a shell, for a path with spaces."""
    res = run(
        "train", "ppo", *TINY, "--stop-at-steps", "2000", "--out", "my runs/a b", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    hint = res.stderr.split("Resume with: ")[1].strip()
    assert hint == "jrl train --resume 'my runs/a b'"
    resumed = run(*shlex.split(hint)[1:], "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "my runs" / "a b" / "params.msgpack").is_file()


# --- signals and stalls ----------------------------------------------------------------------


def test_a_signal_during_a_save_reaches_the_terminal_not_the_save_log(tmp_path):
    """A signal's message is written to the stderr the run started with: while a checkpoint
    save captures file descriptor 2 (and writes it to save-errors.log when the save fails),
    the message still reaches the terminal and is not in the log."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from jrl.app import checkpoint_io, stopping

        log = Path({str(tmp_path / "save-errors.log")!r})
        with stopping.StopRequest(quiet=False) as stop:
            try:
                with checkpoint_io.quiet_stderr(log):
                    os.kill(os.getpid(), signal.SIGINT)
                    for _ in range(1000):  # the handler runs between bytecodes
                        if stop.reason:
                            break
                    raise OSError("the save failed")
            except OSError:
                pass
        print("reason", stop.reason)
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert "reason SIGINT" in res.stdout
    assert "SIGINT received" in res.stderr
    assert "SIGINT received" not in (tmp_path / "save-errors.log").read_text()


def test_stall_watch_ends_an_idle_process_with_one_line(tmp_path):
    """A process that uses no CPU inside a StallWatch block ends with exit 1 and one line."""
    code = (
        "import time\nfrom jrl.app import stopping\n"
        "with stopping.StallWatch(seconds=1.5, advice=' (advice)', what='the test program'):\n"
        "    time.sleep(120)\n"
    )
    res = subprocess.run(  # bounded below the child's sleep: a watch that misses it fails here
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=100, cwd=tmp_path
    )
    assert res.returncode == 1
    lines = _error_lines(res.stderr)
    assert len(lines) == 1 and "the test program made no progress" in lines[0], res.stderr
    assert "(advice)" in lines[0] and "JRL_STALL_SECONDS" in lines[0]


def test_stall_watch_leaves_a_busy_process_alone():
    """Work that uses the CPU is never taken for a stall, however long the block runs."""
    with stopping.StallWatch(seconds=0.5) as watch:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            sum(range(1000))
        with watch.paused():
            time.sleep(1.0)  # an expected idle wait (a checkpoint on a slow disk)
    # still alive: the watch did not end the process


def test_bounds_from_the_environment_are_checked(monkeypatch):
    monkeypatch.setenv("JRL_STOP_GRACE", "soon")
    with pytest.raises(ValueError, match="JRL_STOP_GRACE"):
        stopping.bound_from_env("JRL_STOP_GRACE", 1)
    monkeypatch.setenv("JRL_STOP_GRACE", "-1")
    with pytest.raises(ValueError, match=">= 0"):
        stopping.bound_from_env("JRL_STOP_GRACE", 1)
    monkeypatch.setenv("JRL_STOP_GRACE", "2.5")
    assert stopping.bound_from_env("JRL_STOP_GRACE", 1) == 2.5


@pytest.fixture
def stuck_run(tmp_path: Path):
    """``start(**env)``: ``jrl train`` with the sleeping torso, as ``(process, its stderr's
    PipeLines)``; the process is killed when the test ends."""
    started = []

    def start(**env: str) -> tuple[subprocess.Popen, PipeLines]:
        _plugin(tmp_path, "sleeping_torso", SLEEPING_TORSO)
        blocked = str(tmp_path / "blocked")
        proc = subprocess.Popen(
            JRL
            + ["train", "ppo", "--import", "sleeping_torso", "--torso", "sleeping"]
            + ["--total-steps", "4000", "--out", "stuck"],
            cwd=tmp_path,
            env=_env(tmp_path, JRL_TEST_BLOCKED=blocked, **env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc, PipeLines(proc.stderr)

    yield start
    for proc in started:
        proc.kill()
        proc.wait(timeout=60)


def _finish(proc: subprocess.Popen, stderr: PipeLines, timeout: float) -> tuple[int, str]:
    """The exit code and stderr of a run that must end within ``timeout`` seconds (the test
    fails otherwise: the bound is the wait's, no elapsed time is asserted)."""
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=60)
        pytest.fail(f"the run did not end within {timeout} s:\n{stderr.rest(timeout=60)}")
    return code, stderr.rest(timeout=60)


def _wait_for_program(tmp_path: Path, proc: subprocess.Popen, stderr: PipeLines) -> None:
    """Waits until the stuck run is inside its compiled program: the sleeping callback has
    started (it creates ``blocked``) and the process idles."""
    started = lambda: (tmp_path / "blocked").exists() or proc.poll() is not None
    wait_until(started, 600, "the run's compiled program started")
    if not (tmp_path / "blocked").exists():
        pytest.fail(f"the run ended before its program started:\n{stderr.rest(timeout=60)}")


def test_a_run_stuck_in_compiled_code_ends_with_one_line(stuck_run):
    """A compiled program that waits forever (the process idle) ends within the stall bound:
    exit 1 and a line naming what it waited for."""
    proc, stderr = stuck_run(JRL_STALL_SECONDS="4")
    code, err = _finish(proc, stderr, timeout=600)
    assert code == 1, err
    line = next(line for line in err.splitlines() if "made no progress" in line)
    assert "the compiled training program" in line and "deadlocked" in line


def test_sigterm_stops_a_run_stuck_in_compiled_code(tmp_path, stuck_run):
    """SIGTERM always stops a run: the chunk it waits for never ends, so after the grace
    bound the process exits 143 without a checkpoint, saying so (bounded: it would wait
    for the callback's hour otherwise)."""
    proc, stderr = stuck_run(JRL_STALL_SECONDS="0", JRL_STOP_GRACE="3")
    _wait_for_program(tmp_path, proc, stderr)
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc, stderr, timeout=120)
    assert code == 143, err
    assert "SIGTERM received" in err and "did not end within 3 s" in err


def test_a_second_sigterm_aborts_at_once(tmp_path, stuck_run):
    """A second SIGTERM ends the process within seconds, whatever the first one waits for
    (bounded well below the first one's grace of 600 s)."""
    proc, stderr = stuck_run(JRL_STALL_SECONDS="0", JRL_STOP_GRACE="600")
    _wait_for_program(tmp_path, proc, stderr)
    proc.send_signal(signal.SIGTERM)
    stderr.wait_for("SIGTERM received", timeout=120)  # the first one is taken: send the second
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc, stderr, timeout=120)
    assert code == 143, err
    assert "second SIGTERM: aborted without a checkpoint" in err


def test_vmapped_orthogonal_torso_spread_over_cores_cannot_hang(tmp_path):
    """The issue's reproducer: a torso vmapping an orthogonally initialised MLP, two runs
    spread over two CPU devices. XLA's CPU runtime deadlocked on it (jax 0.10); the run
    now either trains or, deadlocked, ends within the stall bound with one line that names
    the way out (one CPU device). It never hangs."""
    _plugin(tmp_path, "vmap_ortho_torso", VMAPPED_ORTHOGONAL_TORSO)
    args = ["train", "ppo", "--import", "vmap_ortho_torso", "--torso", "vmap_ortho"]
    args += ["--seeds", "2", "--total-steps", "4096", "--out", "r", "--quiet"]
    env = _env(tmp_path, JAX_NUM_CPU_DEVICES="2", JRL_STALL_SECONDS="20")
    res = run(*args, cwd=tmp_path, env=env, timeout=400)
    if res.returncode == 0:
        assert (tmp_path / "r" / "params.msgpack").is_file()
        return
    assert res.returncode == 1, res.stderr
    line = next(line for line in res.stderr.splitlines() if "made no progress" in line)
    assert "spread over 2 CPU devices" in line and "JAX_NUM_CPU_DEVICES=1" in line


# --- missing packages and plugins -----------------------------------------------------------


def test_a_missing_optional_package_is_one_line(tmp_path):
    """envpool:<id> without EnvPool installed (a stand-in package that fails to import):
    one line naming what to install, exit 2, no run folder."""
    fake = tmp_path / "plugins" / "envpool"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'envpool'\", name='envpool')\n"
    )
    res = run(
        "train", "ppo", "--env", "envpool:CartPole-v1", "--runner", "sebulba", *TINY,
        "--out", "r", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    lines = _error_lines(res.stderr)
    assert len(lines) == 1 and "pip install 'jrl-jax[envpool]'" in lines[0], res.stderr
    assert not (tmp_path / "r").exists()


def test_a_gymnasium_env_missing_its_dependency_is_one_line(tmp_path):
    """gymnasium:CarRacing-v3 without Box2D: one line naming the package, exit 2."""
    pytest.importorskip("gymnasium")
    try:
        import Box2D  # noqa: F401

        pytest.skip("Box2D is installed here")
    except ImportError:
        pass
    res = run(
        "train", "ppo", "--env", "gymnasium:CarRacing-v3", "--runner", "sebulba", *TINY,
        "--out", "r", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    lines = _error_lines(res.stderr)
    assert len(lines) == 1 and "Box2D" in lines[0] and "not installed" in lines[0], res.stderr
    assert not (tmp_path / "r").exists()


def test_a_recorded_plugin_missing_in_a_new_shell_is_one_line(tmp_path):
    """A run trained with a plugin, then evaluated, rendered, exported or resumed where the
    plugin cannot be imported: one line naming the run, the plugin and what to set, exit 2."""
    _plugin(tmp_path, "cart_plugin", ENV_PLUGIN)
    res = run(
        "train", "ppo", "--env", "PluginCart-v0", "--import", "cart_plugin", *TINY,
        "--stop-at-steps", "2000", "--out", "r", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    bare = {k: v for k, v in _env(tmp_path).items() if k != "PYTHONPATH"}
    for args in (
        ["eval", "r", "--episodes", "2"],
        ["render", "r"],
        ["export", "r", "--out", "exported"],
        ["train", "--resume", "r"],
    ):
        res = run(*args, cwd=tmp_path, env=bare)
        assert res.returncode == 2, (args, res.stderr)
        lines = _error_lines(res.stderr)
        assert len(lines) == 1, (args, res.stderr)
        assert "'cart_plugin'" in lines[0] and "PYTHONPATH" in lines[0], lines[0]
    assert not (tmp_path / "exported").exists()


def test_submodules_are_attributes_of_jrl(tmp_path):
    """The packages the docs name are reachable after a bare ``import jrl``."""
    code = (
        "import jrl\n"
        "for m in ('agents', 'app', 'core', 'envs', 'ops', 'parts', 'run', 'util'):\n"
        "    assert getattr(jrl, m).__name__ == 'jrl.' + m\n"
        "assert jrl.app.distributed.__name__ == 'jrl.app.distributed'\n"
        "assert jrl.run.ray_actors.__name__ == 'jrl.run.ray_actors'\n"
        "assert jrl.parts.networks.__name__ == 'jrl.parts.networks'\n"
        "assert jrl.core.wrappers.__name__ == 'jrl.core.wrappers'\n"
        "try:\n    jrl.no_such_module\nexcept AttributeError:\n    print('ok')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr

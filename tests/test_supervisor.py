"""The parent of a multi-process ``jrl train`` (jrl.app.supervisor), with small scripts as its
child: a peer's death notice (the runtime's native log and abort) becomes one line and exit
code 75; any other log or crash passes through as it was; signals to the parent reach the
child as requests on a pipe, which StopRequest counts apart from its own signals. The real
thing is exercised by tests/test_pod.py's killed-process test."""

import os
import signal
import subprocess
import sys
import textwrap

from conftest import PipeLines

NATIVE_DEATH = """
E1205 09:17:30.923379   23691 coordination_service.cc:1549] Use error polling to propagate the following error to all tasks: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):
1
The tasks have crashed.
F1205 09:17:30.924074   23702 client.h:80] Terminating process because the JAX distributed service detected fatal errors.
*** Check failure stack trace: ***
    @     0x7fa566cecd5b  std::_Function_handler<>::_M_invoke()
""".lstrip()  # noqa: E501  (jax 0.10's text, line for line)


def _supervise(tmp_path, child: str, hold=None, **popen):
    """Runs ``supervise`` of a run into ``run`` in a subprocess, with ``child`` (Python
    source) as the child."""
    child_file = tmp_path / "child.py"
    child_file.write_text(textwrap.dedent(child))
    code = textwrap.dedent(
        f"""
        import sys
        from jrl.app import supervisor
        hold = {hold!r}
        if hold is not None:
            supervisor.HOLD_SECONDS = hold
        sys.exit(supervisor.supervise(["train"], "run", [sys.executable, {str(child_file)!r}]))
        """
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, text=True, stderr=subprocess.PIPE, **popen
    )


def _finish(proc, timeout=120):
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def test_a_peers_death_notice_becomes_one_line_and_exit_75(tmp_path):
    child = f"""
        import os, sys
        sys.stderr.write("[ppo] 10% ")  # an unfinished progress line passes at once
        sys.stderr.flush()
        sys.stderr.write("\\rjrl: a line of its own\\n[ppo] 20% ")
        sys.stderr.flush()
        sys.stderr.write("\\r" + {NATIVE_DEATH!r})  # the runtime's log after a progress line
        sys.stderr.flush()
        os.abort()
    """
    code, err = _finish(_supervise(tmp_path, child))
    assert code == 75, err
    lines = err.strip().splitlines()  # text mode: the \r reads as a line break
    assert lines[:3] == ["[ppo] 10% ", "jrl: a line of its own", "[ppo] 20% "]
    assert lines[3:] == [
        "jrl: error: process 1 of this run stopped sending heartbeats, so this process ends "
        "too; it had written no checkpoint: train again with --overwrite, or into another "
        "--out (--checkpoint-every writes checkpoints as it goes)"
    ]


def test_the_death_of_process_0_and_a_run_with_checkpoints(tmp_path):
    (tmp_path / "run" / "checkpoints" / "7" / "meta").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "7" / "arrays").mkdir()
    child = """
        import os, sys
        sys.stderr.write("E1205 09:17:30.923845   23702 coordination_service_agent.cc:289] "
                         "Polled an error: UNAVAILABLE: Socket closed\\n"
                         "RPC: /xla.coordination.CoordinationService/PollForError\\n")
        sys.stderr.flush()
        os.abort()
    """
    code, err = _finish(_supervise(tmp_path, child))
    assert code == 75, err
    assert err.strip() == (
        "jrl: error: the connection to process 0 of this run (which coordinates it) closed, so "
        "this process ends too; resume from its last complete checkpoint (iteration 7) with "
        "`jrl train --resume run` on every process (with the same --coordinator, "
        "--num-processes and --process-id, or --multihost)"
    )


def test_a_crash_that_is_no_peer_loss_keeps_its_log_and_its_code(tmp_path):
    child = """
        import os, sys
        sys.stderr.write("F1205 09:17:30.1   1 x.cc:1] Check failed: something else\\n")
        sys.stderr.flush()
        os.abort()
    """
    code, err = _finish(_supervise(tmp_path, child))
    assert code == 128 + signal.SIGABRT
    assert "Check failed: something else" in err and "jrl: error" not in err


def test_an_error_log_of_a_child_that_goes_on_is_passed_through(tmp_path):
    child = """
        import sys, time
        sys.stderr.write("E1205 09:17:30.1   1 x.cc:1] a harmless error\\n")
        sys.stderr.flush()
        time.sleep(3)  # longer than the hold (0.2 s here): no death notice
        sys.stderr.write("after\\n")
        sys.exit(3)
    """
    code, err = _finish(_supervise(tmp_path, child, hold=0.2))
    assert code == 3
    assert err.splitlines() == ["E1205 09:17:30.1   1 x.cc:1] a harmless error", "after"]


def test_signals_to_the_parent_reach_the_child_as_requests_on_its_pipe(tmp_path):
    child = """
        import os, sys
        fd = int(os.environ["JRL_CONTROL_FD"])
        print("ready", flush=True)
        got = os.read(fd, 1)
        print("got", got[0], flush=True)
        sys.exit(7)
    """
    proc = _supervise(tmp_path, child, stdout=subprocess.PIPE)
    lines = PipeLines(proc.stdout)
    try:
        assert lines.next_line(60).strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert lines.next_line(60).strip() == f"got {int(signal.SIGTERM)}"
    finally:
        code = proc.wait(timeout=60)
    assert code == 7  # the parent lives on and passes the child's code


def test_a_signal_that_reaches_both_asks_once_and_a_second_forwarded_one_aborts(tmp_path):
    """StopRequest with a parent's pipe: the same SIGTERM arriving as a signal and as a
    forwarded request is one request (the run goes on to its checkpoint); a second forwarded
    one aborts, as a second signal does."""
    code = textwrap.dedent(
        """
        import os, signal, sys, time
        from jrl.app import stopping

        with stopping.StopRequest(quiet=True) as stop:
            os.write(int(sys.argv[1]), bytes([signal.SIGTERM]))  # forwarded by the parent
            os.kill(os.getpid(), signal.SIGTERM)  # and received directly
            time.sleep(2)
            print("one request:", stop.reason, flush=True)
            os.write(int(sys.argv[1]), bytes([signal.SIGTERM]))  # a second one
            time.sleep(60)
        print("not aborted", flush=True)
        """
    )
    read_end, write_end = os.pipe()
    try:
        res = subprocess.run(
            [sys.executable, "-c", code, str(write_end)],
            capture_output=True,
            text=True,
            timeout=50,  # the abort comes within stopping.SECOND_SIGNAL_GRACE (5 s)
            env={**os.environ, "JRL_CONTROL_FD": str(read_end)},
            pass_fds=(read_end, write_end),
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert res.stdout.splitlines() == ["one request: SIGTERM"], res.stderr
    assert res.returncode == 128 + signal.SIGTERM
    assert "second SIGTERM: aborted without a checkpoint" in res.stderr

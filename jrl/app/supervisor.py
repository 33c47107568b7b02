"""The parent of a multi-process ``jrl train``: one line, not a crash report, when a peer dies.

When a process of a multi-process run dies (``kill -9``, a lost host), jax's coordination
service ends the others: a missed heartbeat (or, for the death of process 0, which hosts the
service, the closed connection) makes the runtime log the error and abort the process, from
one of its own threads, with some forty lines of C++ log and stack trace. jax 0.10 offers no
Python hook there (a Python ``missed_heartbeat_callback`` aborts on a failed cast). So
``jrl train`` with ``--coordinator``/``--num-processes``/``--multihost`` trains in a child
process and stays as its parent:

- the child's stdout is this process's; its stderr passes through this process as it comes,
  except the runtime's native log from its first error line on (absl's ``E``/``F`` lines,
  what follows them, the stack trace), which is held back;
- when the child ends by abort and the held log says a peer was lost, this process prints
  one line naming the lost process and how to resume, and exits with
  :data:`EXIT_PEER_LOST` (75, ``EX_TEMPFAIL``: the run can go on from its last checkpoint);
  otherwise the held log is printed as it was and the child's exit code passed on
  (``128 + N`` for a signal N). A held log whose child goes on for :data:`HOLD_SECONDS`
  was no death notice: it is printed and passing through resumes;
- SIGINT and SIGTERM sent to this process reach the child as a request on a pipe
  (``$JRL_CONTROL_FD``, which :class:`jrl.app.stopping.StopRequest` reads beside its
  signals), not as a signal: a signal that reaches both processes (a terminal's Ctrl-C, a
  scheduler signalling every process of a job) then asks the child once, and a second one
  aborts, as without a parent. From the second signal on, the child also gets the signal
  itself (it may be starting or ending, outside the block that reads the pipe);
- the child gets SIGKILL when this process dies (Linux ``PR_SET_PDEATHSIG``), so a
  ``kill -9`` of the process the user started ends the training too.
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import signal
import subprocess
import sys
import time
from typing import BinaryIO, Sequence

__all__ = [
    "CONTROL_FD_ENV",
    "EXIT_PEER_LOST",
    "HOLD_SECONDS",
    "STDERR_TTY_ENV",
    "SUPERVISED_ENV",
    "supervise",
    "supervised",
]

SUPERVISED_ENV = "JRL_SUPERVISED"
"""Set to 1 in the child: it trains itself rather than starting another child."""
CONTROL_FD_ENV = "JRL_CONTROL_FD"
"""The child's end of the pipe on which this process forwards SIGINT and SIGTERM."""
STDERR_TTY_ENV = "JRL_STDERR_TTY"
"""Set to 1 in the child when this process's stderr is a terminal (the child's is a pipe):
the progress line then redraws in place as it would."""
EXIT_PEER_LOST = 75
"""Exit code of a process whose peer died (``EX_TEMPFAIL``)."""
HOLD_SECONDS = 5.0
"""Seconds a native error log is held while the child goes on (a dying child ends within
milliseconds of its log)."""

_ERROR_LINE = re.compile(rb"[EF]\d{4} \d\d:\d\d:\d\d")  # absl: severity, date, time
_NATIVE_START = re.compile(rb"[IWEF]\d{0,4}")
_PEER = re.compile(r"Task (\d+) heartbeat timeout|stopped sending heartbeats\):\s*(\d+)")
_LOST_COORDINATOR = ("PollForError", "Socket closed", "Connection reset", "Failed to connect")


def supervised() -> bool:
    """True in the child of :func:`supervise`."""
    return os.environ.get(SUPERVISED_ENV) == "1"


def _die_with_parent() -> None:  # in the child, between fork and exec
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def supervise(
    argv: Sequence[str], folder: str | None = None, command: Sequence[str] | None = None
) -> int:
    """Runs ``jrl ARGV`` (or ``command``, for tests) as a child (see the module docstring)
    and returns the exit code this process should end with. ``folder``: the run folder it
    trains into (``--out``, ``--resume``), named in the line on a lost peer; None when
    process 0 chooses it."""
    read_end, write_end = os.pipe()
    env = {**os.environ, SUPERVISED_ENV: "1", CONTROL_FD_ENV: str(read_end)}
    if sys.stderr.isatty():
        env[STDERR_TTY_ENV] = "1"
    child = subprocess.Popen(
        list(command) if command is not None else [sys.executable, "-m", "jrl.app.cli", *argv],
        stderr=subprocess.PIPE,
        env=env,
        pass_fds=(read_end,),
        preexec_fn=_die_with_parent,
    )
    os.close(read_end)

    received = []

    def forward(signum, frame):
        received.append(signum)
        try:
            os.write(write_end, bytes([signum]))
            if len(received) > 1:  # the child may not be reading the pipe (starting, ending)
                os.kill(child.pid, signum)
        except OSError:  # the child has gone
            pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        held = _Relay(sys.stderr.buffer).run(child.stderr, child)
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(write_end)
    return _outcome(code, held, folder)


class _Relay:
    """Copies the child's stderr to ``out`` as it comes, holding back its native error log."""

    def __init__(self, out: BinaryIO):
        self.out, self.held, self.holding_since = out, [], None
        self.line, self.shown = b"", 0  # the unfinished line, and how much of it was shown

    def run(self, stream: BinaryIO, child: subprocess.Popen) -> bytes:
        """Until the child's stderr closes, or the child has ended and nothing more comes (a
        process it started may hold its stderr open); returns what is still held then."""
        fd = stream.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                data = os.read(fd, 1 << 16)
                if not data:
                    break
                self._take(data)
            elif child.poll() is not None:
                break
            waited = self.holding_since is not None and time.monotonic() - self.holding_since
            if waited and waited > HOLD_SECONDS and child.poll() is None:
                self._release()  # no death notice: the child goes on
        if self.line:
            self._finish_line(self.line)
        self.out.flush()
        return b"".join(self.held)

    def _take(self, data: bytes) -> None:
        self.line += data
        while b"\n" in self.line:
            full, self.line = self.line.split(b"\n", 1)
            self._finish_line(full + b"\n")
        if self.holding_since is None and self.line and not self._may_be_native(self._tail()):
            self.out.write(self.line[self.shown :])  # e.g. a progress line redrawn with \r
            self.shown = len(self.line)
            cut = self.line.rfind(b"\r") + 1  # what a redraw left behind is shown: dropped
            self.line, self.shown = self.line[cut:], self.shown - cut
        self.out.flush()

    def _tail(self) -> bytes:
        """The unfinished line after its last carriage return (what a native log line would
        start, after a progress line that a \r ended)."""
        return self.line[self.line.rfind(b"\r") + 1 :]

    @staticmethod
    def _may_be_native(start: bytes) -> bool:
        """Whether an unfinished line may still turn out to be a native log line."""
        match = _NATIVE_START.match(start[:5])
        return match is not None and match.end() == min(len(start), 5)

    def _finish_line(self, full: bytes) -> None:
        start = full.rfind(b"\r", 0, len(full) - 1) + 1  # a native line after a progress line
        if self.holding_since is None and start >= self.shown and _ERROR_LINE.match(full, start):
            self.out.write(full[self.shown : start])
            self.holding_since, self.shown = time.monotonic(), start
        if self.holding_since is not None:
            self.held.append(full[self.shown :])
        else:
            self.out.write(full[self.shown :])
        self.shown = 0

    def _release(self) -> None:
        self.out.write(b"".join(self.held))
        self.held, self.holding_since = [], None


def _lost(log: str) -> str | None:
    """What the held log says was lost, or None when it is no peer's death."""
    peer = _PEER.search(log)
    if peer:
        return f"process {peer.group(1) or peer.group(2)} of this run stopped sending heartbeats"
    if any(sign in log for sign in _LOST_COORDINATOR):
        return "the connection to process 0 of this run (which coordinates it) closed"
    if "heartbeat" in log:
        return "a process of this run stopped sending heartbeats"
    return None


def _outcome(code: int, held: bytes, folder: str | None) -> int:
    lost = _lost(held.decode(errors="replace")) if code in (-signal.SIGABRT, 134) else None
    if lost is None:
        sys.stderr.buffer.write(held)
        sys.stderr.flush()
        return code if code >= 0 else 128 - code
    # jax, orbax: only on this failure path
    from jrl.app import checkpoint, run_folder

    steps = checkpoint.steps(folder) if folder is not None else []
    if steps or folder is None:
        at = f" (iteration {steps[-1]})" if steps else ""
        resume = run_folder.resume_command(folder or "RUN")
        how = (
            f"resume from its last complete checkpoint{at} with `{resume}` "
            f"{run_folder.ON_EVERY_PROCESS}"
        )
    else:
        how = (
            "it had written no checkpoint: train again with --overwrite, or into another "
            "--out (--checkpoint-every writes checkpoints as it goes)"
        )
    print(f"jrl: error: {lost}, so this process ends too; {how}", file=sys.stderr, flush=True)
    return EXIT_PEER_LOST

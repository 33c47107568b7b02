"""Stopping a run: signals, and bounds on how long a run may wait.

:class:`StopRequest` turns SIGINT and SIGTERM into a request that the training loop
honours after the current chunk (it then writes a checkpoint). A signal's number is also
written to a wakeup file descriptor, so a watcher thread sees it while the main thread is
inside a compiled chunk, where Python signal handlers cannot run. That thread makes every
signal end the process in bounded time:

* the first signal: if the loop has not stopped within ``$JRL_STOP_GRACE`` seconds
  (default :data:`STOP_GRACE`), the process exits with ``128 + signal`` without a
  checkpoint (the last complete one is kept);
* a second signal: the process exits within a few seconds, without a checkpoint.

A process started by :mod:`jrl.app.supervisor` (a multi-process ``jrl train``) also gets the
signals sent to its parent, forwarded as bytes on a pipe (``$JRL_CONTROL_FD``). The watcher
counts the two sources apart: a signal that reached both processes asks once, and a second
one from the same source aborts (the parent also sends the signal itself from its second
one on, so two signals to the parent abort too).

:class:`StallWatch` ends a run whose process uses no CPU for ``$JRL_STALL_SECONDS``
(default :data:`STALL_SECONDS`) while a program runs on the CPU backend: on the CPU,
compiling, stepping and the host's work all use it, so a process that sits idle is
deadlocked (XLA's CPU runtime can deadlock on some programs spread over several CPU
devices). The run ends with one line naming what it waited for and exit code 1.

Messages go to the stderr the process had when the block was entered: a checkpoint save
captures file descriptor 2 (:mod:`jrl.app.checkpoint`), and a signal's message must not end up
in its error log.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import threading
import time
from typing import Any, Callable

from jrl.util.bounds import seconds_from_env

__all__ = [
    "STALL_SECONDS",
    "STOP_GRACE",
    "StallWatch",
    "StopRequest",
    "bound_from_env",
]

STOP_GRACE = 300.0
"""Default seconds between a first SIGINT/SIGTERM and the end of the chunk it waits for;
past it the process exits without a checkpoint (``$JRL_STOP_GRACE``)."""
SECOND_SIGNAL_GRACE = 5.0
"""Seconds the main thread has, after a second signal, to unwind before the process exits."""
STALL_SECONDS = 300.0
"""Default seconds without CPU use after which a run on the CPU backend counts as deadlocked
(``$JRL_STALL_SECONDS``; 0 turns the check off)."""


def bound_from_env(name: str, default: float) -> float:
    """Seconds from the environment variable ``name`` (``default`` when unset; 0: no bound)."""
    return seconds_from_env(name, default, zero_turns_off=True)


def _exit_now(err_fd: int, message: str, code: int) -> None:
    """Writes ``message`` to ``err_fd`` and ends the process at once (no Python cleanup: the
    main thread is stuck in compiled code; the OS releases the run folder's lock)."""
    try:
        os.write(err_fd, f"\njrl: {message}\n".encode())
    except OSError:
        pass
    os._exit(code)


def _control_fd() -> int | None:
    """The pipe on which a parent forwards its signals (``$JRL_CONTROL_FD``), when open."""
    text = os.environ.get("JRL_CONTROL_FD", "")
    if not text.isdigit():
        return None
    try:
        os.fstat(int(text))
    except OSError:
        return None
    return int(text)


class StopRequest:
    """SIGINT/SIGTERM handlers (main thread only) that ask the loop to stop after the
    current chunk; see the module docstring for the bounds. ``reason`` is the first signal's
    name, or None. The loop calls :meth:`acknowledge` when it has stopped running chunks."""

    def __init__(self, quiet: bool, grace: float | None = None):
        self.reason: str | None = None
        self.quiet = quiet
        self.grace = bound_from_env("JRL_STOP_GRACE", STOP_GRACE) if grace is None else grace
        self._previous: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()  # the loop saw the request, or the block ended
        self._exited = threading.Event()
        self._err = 2
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._old_wakeup = -1
        self._control = _control_fd()  # signals forwarded by a parent (jrl.app.supervisor)

    def _note(self, signum: int) -> bool:
        """Records the stop request of a signal; True for the first one (whose message it
        prints). Called by the Python handler and by the watcher; either may come first."""
        with self._lock:
            if self.reason is not None:
                return False
            self.reason = signal.Signals(signum).name
        if not self.quiet:
            os.write(
                self._err,
                f"\njrl: {self.reason} received: stopping after the current chunk and writing "
                "a checkpoint (a second Ctrl-C or SIGTERM aborts without one)\n".encode(),
            )
        return True

    def _handle(self, signum, frame):
        self._note(signum)
        # the next Ctrl-C raises KeyboardInterrupt where the main thread is (after this one,
        # even when the same request came first from a parent's pipe)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def acknowledge(self) -> None:
        """The loop has stopped running chunks: the grace bound no longer applies."""
        self._stopped.set()

    def _watch(self, reader: socket.socket) -> None:
        """The watcher thread: bounds the time from each signal to the end of the process.
        It sees every signal (the wakeup descriptor) and every forwarded one (the control
        pipe), so it alone counts them, each source apart."""
        sources = selectors.DefaultSelector()  # any descriptor number (select() stops at 1024)
        try:
            sources.register(reader.fileno(), selectors.EVENT_READ)
            if self._control is not None:
                sources.register(self._control, selectors.EVENT_READ)
            self._watch_sources(sources)
        finally:
            sources.close()

    def _watch_sources(self, sources: selectors.BaseSelector) -> None:
        first_at, counts = None, {}
        while not self._exited.is_set():
            try:
                got = [(k.fd, os.read(k.fd, 64)) for k, _ in sources.select(0.5)]
            except (OSError, ValueError):  # closed by __exit__
                return
            for fd, data in got:
                if not data:  # closed: nothing more comes from it (the parent has gone)
                    sources.unregister(fd)
                for signum in data:
                    if signum not in (signal.SIGINT, signal.SIGTERM):
                        continue
                    counts[fd] = counts.get(fd, 0) + 1
                    self._note(signum)
                    if first_at is None:
                        first_at = time.monotonic()
                    if counts[fd] == 2:
                        self._second(signum)
                        return
            if first_at is not None and not self._stopped.is_set():
                if self.grace > 0 and time.monotonic() - first_at > self.grace:
                    _exit_now(
                        self._err,
                        f"{self.reason}: the current chunk did not end within {self.grace:g} s "
                        "of the signal; exiting without a checkpoint (the last complete "
                        "checkpoint, if any, is kept; $JRL_STOP_GRACE sets this bound)",
                        128 + signal.Signals[self.reason],
                    )

    def _second(self, signum: int) -> None:
        """A second signal: the main thread has a few seconds to unwind, then the process
        ends."""
        if self._exited.wait(SECOND_SIGNAL_GRACE):
            return
        _exit_now(
            self._err,
            f"second {signal.Signals(signum).name}: aborted without a checkpoint (the last "
            "complete checkpoint, if any, is kept)",
            128 + signum,
        )

    def __enter__(self):
        self._err = os.dup(2)
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        reader.settimeout(0.5)
        self._wakeup = (reader, writer)
        self._old_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        threading.Thread(
            target=self._watch, args=(reader,), name="jrl-stop-watch", daemon=True
        ).start()
        return self

    def __exit__(self, *exc):
        self._stopped.set()
        self._exited.set()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            for s in self._wakeup:
                s.close()
            self._wakeup = None
        if self._err != 2:
            os.close(self._err)
            self._err = 2
        return False


class StallWatch:
    """Ends the process when it uses (almost) no CPU for ``seconds`` while the block runs
    (see the module docstring); ``seconds`` 0 turns it off. ``advice`` is appended to the
    message. :meth:`paused` excludes waits that may rightly be idle (a checkpoint written to
    a slow disk)."""

    IDLE_FRACTION = 0.01
    """CPU seconds per wall second below which the process counts as idle."""

    def __init__(self, seconds: float | None = None, advice: str = "", what: str = ""):
        self.seconds = (
            bound_from_env("JRL_STALL_SECONDS", STALL_SECONDS) if seconds is None else seconds
        )
        self.advice, self.what = advice, what or "the compiled program"
        self._done = threading.Event()
        self._pauses = 0
        self._err = 2

    @contextlib.contextmanager
    def paused(self):
        """A block during which idleness is expected (the clock restarts after it)."""
        self._pauses += 1
        try:
            yield
        finally:
            self._pauses -= 1

    def _watch(self, clock: Callable[[], float] = time.process_time) -> None:
        step = min(1.0, self.seconds / 10)
        since, cpu_since = time.monotonic(), clock()
        while not self._done.wait(step):
            now, cpu = time.monotonic(), clock()
            if self._pauses or cpu - cpu_since > self.IDLE_FRACTION * (now - since):
                since, cpu_since = now, cpu  # busy (or paused): the idle window restarts
                continue
            if now - since >= self.seconds:
                _exit_now(
                    self._err,
                    f"error: {self.what} made no progress for {now - since:.0f} s (the process "
                    f"used {cpu - cpu_since:.2f} s of CPU): it is deadlocked{self.advice}; "
                    "the last complete checkpoint, if any, is kept ($JRL_STALL_SECONDS sets "
                    "this bound)",
                    1,
                )

    def __enter__(self):
        if self.seconds > 0:
            self._err = os.dup(2)
            threading.Thread(target=self._watch, name="jrl-stall-watch", daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        if self._err != 2:
            os.close(self._err)
            self._err = 2
        return False

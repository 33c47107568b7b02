"""The Ray a run of Sebulba's Ray actors (:mod:`jrl.run.ray_actors`) works in.

- **Joining or starting.** With an address the run joins that cluster
  (``ray.init(address=...)``; its machines need jrl installed); otherwise it starts a small
  local Ray (one CPU per actor, at least 2; no dashboard; an object store of
  :data:`OBJECT_STORE_BYTES`) and shuts it down at the end. Joining or starting Ray that
  takes over :data:`INIT_TIMEOUT_S` fails (a port that answers but is no Ray head's GCS, ...).
- **A local Ray ends with its learner.** The processes of a local Ray this module started
  (GCS, raylet, the agents the raylet starts, the actor workers) are watched by a small
  watchdog process (:data:`WATCHDOG`): when the learner's process ends, even by ``kill -9``,
  it ends exactly those processes (terminate, then kill after :data:`WATCHDOG_GRACE_S`).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
import warnings
from typing import Any

from jrl.run.sebulba.waits import ActorError, ActorTimeout, seconds

__all__ = ["INIT_TIMEOUT_S", "RaySession", "last_line"]

OBJECT_STORE_BYTES = 256 * 2**20
"""A local Ray's object store: trajectories and parameters of small envs need little."""

INIT_TIMEOUT_S = 120.0
"""Seconds ``ray.init`` may take to join a cluster or start a local Ray before the run stops
(Ray itself retries an address that answers but is no GCS without end)."""

WATCHDOG_INTERVAL_S = 0.5
"""How often the watchdog of a local Ray looks for new processes of that Ray."""

WATCHDOG_GRACE_S = 3.0
"""Seconds the watchdog gives a local Ray's processes to end after SIGTERM, before SIGKILL."""


class RaySession:
    """A Ray this process joined (``address``) or started (``""``: a local Ray for ``count``
    actors), and :meth:`close` to shut it down.

    ``ray.init`` runs in a helper thread (:meth:`start` gives up after :data:`INIT_TIMEOUT_S`
    seconds) that lives until :meth:`close`: Ray ties its local processes to the thread that
    started them (``PR_SET_PDEATHSIG``), and in a helper thread Ray installs no SIGTERM
    handler of its own, so SIGTERM still stops the run with a checkpoint. A local Ray also has
    a watchdog (:data:`WATCHDOG`) that ends its processes with this one."""

    def __init__(self, address: str, count: int):
        self.address, self.count = address, count
        self.ready, self.release = threading.Event(), threading.Event()
        self.failed: BaseException | None = None
        self.watchdog: subprocess.Popen | None = None

    @classmethod
    def start(cls, address: str, count: int) -> "RaySession":
        """Joins or starts Ray: ``ConnectionError`` for a user's address where no Ray answers
        in time, :class:`~jrl.run.sebulba.ActorError` for other failures. The address itself
        was checked by :func:`jrl.run.sebulba.options.check_options` before the run started."""
        session = cls(address, count)
        before = _children()
        # Ray warns that a helper thread sets no SIGTERM handler: that is the point
        worker_log = logging.getLogger("ray._private.worker")
        level = worker_log.level
        worker_log.setLevel(logging.ERROR)
        try:
            thread = threading.Thread(target=session._run, name="jrl-ray", daemon=True)
            thread.start()
            answered = session.ready.wait(INIT_TIMEOUT_S)
        finally:
            worker_log.setLevel(level)
        if not answered:
            if address:
                raise ConnectionError(
                    f"--ray-address {address}: no Ray answered there within "
                    f"{seconds(INIT_TIMEOUT_S)}; is it the GCS port of a Ray head "
                    "(ray start --head --port PORT)?"
                )
            raise ActorTimeout(f"a local Ray did not start within {seconds(INIT_TIMEOUT_S)}")
        if session.failed is not None:
            e, where = session.failed, address or "a local Ray"
            raise ActorError(f"could not start Ray actors on {where}: {last_line(e)}") from e
        if not address:
            session.watchdog = _start_watchdog([p for p in _children() if p not in before])
        return session

    def _run(self) -> None:
        """The helper thread: ``ray.init``, then wait for :meth:`close`."""
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors

        if self.address:
            kwargs: dict[str, Any] = {"address": self.address}
        else:
            kwargs = {
                "address": "local",  # a new Ray of its own, even beside a running one
                "num_cpus": max(2, self.count),
                "include_dashboard": False,
                "object_store_memory": OBJECT_STORE_BYTES,
            }
        try:
            ray.init(**kwargs, log_to_driver=False, logging_level="ERROR")
        except BaseException as e:  # reported by start()
            self.failed = e
            self.ready.set()
            return
        self.ready.set()
        self.release.wait()

    def close(self) -> None:
        """Shuts Ray down, lets the helper thread end, and has the watchdog end what is left
        of a local Ray (waiting for it a bounded time)."""
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors

        try:
            ray.shutdown()
        finally:
            self.release.set()
            if self.watchdog is not None:
                with contextlib.suppress(OSError):
                    self.watchdog.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.watchdog.wait(timeout=2 * WATCHDOG_GRACE_S + 5)


def _children() -> set[int]:
    """The process ids of this process's children."""
    import psutil  # Ray's dependency (importing ray puts its own copy on the path)

    return {child.pid for child in psutil.Process().children()}


WATCHDOG = r'''
"""jrl's watchdog of a local Ray. argv: interval, grace, the process ids the learner started
for its Ray. It follows their descendants (the raylet's agents and workers) until its stdin,
a pipe from the learner, closes (the learner shut Ray down, exited, or was killed), then ends
every one of them still running: SIGTERM, SIGKILL after `grace` seconds."""
import os
import select
import sys

try:
    import psutil
except ImportError:  # Ray's own copy, which importing ray puts on the path
    import ray  # noqa: F401
    import psutil

interval, grace = float(sys.argv[1]), float(sys.argv[2])
tracked = {}
for pid in sys.argv[3:]:
    try:
        tracked[int(pid)] = psutil.Process(int(pid))
    except psutil.Error:  # already gone
        pass


def follow():
    for proc in list(tracked.values()):
        try:
            children = proc.children(recursive=True)
        except psutil.Error:  # it ended
            continue
        for child in children:
            known = tracked.get(child.pid)
            if known is None or not known.is_running():  # new, or a reused process id
                tracked[child.pid] = child


while True:
    follow()
    ready, _, _ = select.select([0], [], [], interval)
    if ready and not os.read(0, 1):  # end of file: the learner's end of the pipe closed
        break
follow()
alive = [proc for proc in tracked.values() if proc.is_running()]
for proc in alive:
    try:
        proc.terminate()
    except psutil.Error:
        pass
_, alive = psutil.wait_procs(alive, timeout=grace)
for proc in alive:
    try:
        proc.kill()
    except psutil.Error:
        pass
'''
"""The watchdog's program (``python -c``: no jrl or JAX to import). It runs in a session of
its own, so a Ctrl-C for the learner's terminal does not end it first."""


def _start_watchdog(pids: list[int]) -> subprocess.Popen:
    """The watchdog (:data:`WATCHDOG`) of the local Ray processes ``pids``: this process holds
    the write end of its stdin, which closes however this process ends."""
    command = [sys.executable, "-c", WATCHDOG, str(WATCHDOG_INTERVAL_S), str(WATCHDOG_GRACE_S)]
    with warnings.catch_warnings():  # JAX warns on any fork; this one execs at once
        warnings.simplefilter("ignore", RuntimeWarning)
        return subprocess.Popen(
            command + [str(pid) for pid in pids],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


def last_line(e: BaseException) -> str:
    """The last line of an error's text (Ray's errors carry the remote traceback)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__

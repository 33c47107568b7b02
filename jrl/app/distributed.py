"""Multi-host setup: several processes, one data-parallel learner.

Call :func:`initialize` in every process before anything else touches jax;
then ``jax.devices()`` lists the devices of all processes, and the Anakin
runner's mesh (``jrl.run.anakin.make_mesh()``) spans them. Each process
steps the envs of its own devices; metrics are all-reduced on device, so
every process holds them, and only process 0 writes the run folder's files
(:func:`is_main_process`). Every process writes its own devices' blocks of
each checkpoint (:mod:`jrl.app.checkpoint`) into the same run folder, which
must be on a filesystem they share.

On CPU the cross-process collectives use gloo. On TPU pods and SLURM/Open
MPI clusters jax detects the coordinator itself: call ``initialize()``
without arguments.

A process that dies (``kill -9``, a lost machine) is found by the heartbeat of
jax's coordination service: the others end within :data:`PEER_TIMEOUT`
seconds (``$JRL_PEER_TIMEOUT``) of its last heartbeat, none waits in a
collective for it. When the dead process is process 0, which hosts the
service, the others end at once.
"""

from __future__ import annotations

import math
import os
import socket
import time

import jax

from jrl.util.bounds import seconds_from_env

__all__ = [
    "PEER_TIMEOUT",
    "await_peer_verdict",
    "initialize",
    "is_main_process",
    "process_count",
    "process_index",
]

ENV_COORDINATOR = "JRL_COORDINATOR"
ENV_NUM_PROCESSES = "JRL_NUM_PROCESSES"
ENV_PROCESS_ID = "JRL_PROCESS_ID"
PEER_TIMEOUT_ENV = "JRL_PEER_TIMEOUT"
"""Environment variable: seconds without a heartbeat after which a process counts as dead."""
PEER_TIMEOUT = 100.0
"""Default of :data:`PEER_TIMEOUT_ENV` (jax's own default heartbeat timeout)."""


def _check_reachable(address: str, process_id: int, timeout: float) -> None:
    """Process 0 hosts the coordinator; the others check they can reach it."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"coordinator address must be HOST:PORT, got {address!r}")
    if process_id == 0:
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as e:
            if time.monotonic() > deadline:
                raise ConnectionError(
                    f"coordinator {address} unreachable after {timeout:.0f}s ({e}); "
                    "is process 0 running with the same --coordinator?"
                ) from None
            time.sleep(0.2)


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    timeout: float = 60.0,
    cpu_collectives: str = "gloo",
    peer_timeout: float | None = None,
) -> None:
    """Joins this process to a multi-process jax run.

    Arguments default to the environment variables ``JRL_COORDINATOR``
    (``host:port`` of process 0), ``JRL_NUM_PROCESSES`` and
    ``JRL_PROCESS_ID``; with none of them set, jax's own cluster detection
    is used (TPU pods, SLURM, Open MPI). ``peer_timeout``: seconds without
    a heartbeat after which a peer counts as dead and this process ends
    (default ``$JRL_PEER_TIMEOUT``, else :data:`PEER_TIMEOUT`). Raises
    ``ValueError`` for inconsistent arguments and ``ConnectionError`` when
    the coordinator cannot be reached within ``timeout`` seconds.
    """
    if peer_timeout is None:  # bad input is refused before any wait
        peer_timeout = seconds_from_env(PEER_TIMEOUT_ENV, PEER_TIMEOUT)
    if not peer_timeout > 0:
        raise ValueError(f"peer_timeout must be positive seconds, got {peer_timeout}")
    coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR)
    if num_processes is None and os.environ.get(ENV_NUM_PROCESSES):
        num_processes = int(os.environ[ENV_NUM_PROCESSES])
    if process_id is None and os.environ.get(ENV_PROCESS_ID):
        process_id = int(os.environ[ENV_PROCESS_ID])
    explicit = [coordinator_address, num_processes, process_id]
    if any(v is not None for v in explicit) and not all(v is not None for v in explicit):
        raise ValueError(
            "multi-host needs all of coordinator address, number of processes and process id "
            f"(got {coordinator_address!r}, {num_processes!r}, {process_id!r})"
        )
    if num_processes is not None:
        if num_processes < 1:
            raise ValueError(f"num_processes must be >= 1, got {num_processes}")
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process id must lie in [0, {num_processes}), got {process_id}")
        _check_reachable(coordinator_address, process_id, timeout)
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=int(max(timeout, 1)),
        heartbeat_timeout_seconds=max(1, math.ceil(peer_timeout)),
    )


def await_peer_verdict() -> None:
    """Waits, bounded, for the coordination service to end this process after a collective
    failed (a peer that died breaks the collectives before its missed heartbeats are
    judged): jax's runtime then aborts this process, and a multi-process ``jrl train``
    reports the lost peer in one line (:mod:`jrl.app.supervisor`) rather than the
    collective's traceback. Returns when no verdict came within the heartbeat bound (plus
    a margin): the failure was something else, and the caller raises it. jax offers no
    event to wait on, so this sleeps."""
    time.sleep(seconds_from_env(PEER_TIMEOUT_ENV, PEER_TIMEOUT) + 5.0)


def process_index() -> int:
    """This process's index (0 when single-process)."""
    return jax.process_index()


def process_count() -> int:
    """Number of processes (1 when single-process)."""
    return jax.process_count()


def is_main_process() -> bool:
    """True in the process that writes files (process 0)."""
    return jax.process_index() == 0

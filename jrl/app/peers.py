"""Agreement between the processes of a multi-process run (:mod:`jrl.app.distributed`).

The processes of one run step the same chunks in lock step: each chunk ends in collectives
that every process must enter. A decision that one process takes alone between two chunks
(a SIGTERM sent to it, say, which asks it to stop) would leave the others waiting in the
next chunk's collective for a peer that never comes. :class:`StopVote` makes such a decision
common: before each chunk every process posts its own wish to stop, if it has one, to the
key-value store of jax's coordination service, all of them meet at a barrier, and then each
reads every post. Posts come before the barrier and reads after it, so every process reads
the same posts and decides alike: all stop after the same chunk, or none does. A signal that
arrives after a process posted counts at the next boundary.

:class:`Peers` is the same store put to the other uses of a run: every process's value of
something (:meth:`Peers.gather`: the digests of the blocks each process wrote into a
checkpoint, its actors' host envs), and one outcome for a step each process takes on its own
(:meth:`Peers.agreement`: process 0 prepares the run folder and the others check that they see
it; when any process fails, every process stops with that failure, rather than the others
training on and waiting in the first chunk's collective for a process that left).

The barrier's wait is bounded (:data:`BOUNDARY_TIMEOUT`, ``$JRL_BOUNDARY_TIMEOUT``): a peer
that is alive but does not reach the boundary in that time ends the run with an error that
names the boundary. (A peer that died is found by jax's own heartbeat, which ends the other
processes within its timeout, ``heartbeat_timeout_seconds`` of :func:`jax.distributed.initialize`.)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, Protocol

import jax

from jrl.util.bounds import seconds_from_env

__all__ = [
    "BOUNDARY_TIMEOUT",
    "BOUNDARY_TIMEOUT_ENV",
    "PeerError",
    "Peers",
    "StopVote",
    "coordination",
    "group",
]

BOUNDARY_TIMEOUT_ENV = "JRL_BOUNDARY_TIMEOUT"
"""Environment variable: seconds a process waits at a chunk boundary for the others."""
BOUNDARY_TIMEOUT = 1800.0
"""Default of :data:`BOUNDARY_TIMEOUT_ENV`. Generous: before the first chunk the processes
compile (each at its own pace on a loaded machine) and process 0 also writes the run
folder's outputs after each chunk."""


class PeerError(RuntimeError):
    """The processes of a run could not agree: a peer did not reach a chunk boundary in time,
    the coordination service failed, or another process failed a step of
    :meth:`Peers.agreement` (``process`` then names it)."""

    def __init__(self, message: str, process: int | None = None):
        super().__init__(message)
        self.process = process


class KeyValueClient(Protocol):
    """The part of jax's distributed runtime client a vote uses (a dict-backed fake in the
    tests)."""

    def key_value_set(self, key: str, value: str) -> None: ...

    def key_value_dir_get(self, key: str) -> list[tuple[str, str]]: ...

    def wait_at_barrier(self, barrier_id: str, timeout_in_ms: int) -> None: ...


def coordination() -> Any:
    """The coordination service's client of this process (jax keeps it in a private module:
    ``jax._src.distributed.global_state.client``); ``PeerError`` when jax.distributed was not
    initialised."""
    from jax._src import distributed  # jax exposes no public handle on its client

    client = getattr(distributed.global_state, "client", None)
    if client is None:
        raise PeerError("jax.distributed is not initialised: no other processes to agree with")
    return client


class StopVote:
    """The processes' common decision, before each chunk, whether to stop (see the module
    docstring), made through the run's :class:`Peers`."""

    def __init__(self, peers: "Peers"):
        self.peers = peers
        self.boundaries = 0  # boundaries passed: each process passes the same ones in order

    def decide(self, local_reason: str | None) -> tuple[str, int] | None:
        """This boundary's decision: ``(reason, process)`` to stop, with the reason posted by
        the lowest-numbered process that posted one (e.g. ``("SIGTERM", 1)``), or ``None`` to
        go on. ``local_reason`` is this process's own wish (``None``: none). Raises
        :class:`PeerError` when the others do not reach the boundary within the timeout."""
        k, self.boundaries = self.boundaries, self.boundaries + 1
        wishes = self.peers.exchange(f"chunk boundary {k}", local_reason)
        if not wishes:
            return None
        process = min(wishes)
        return wishes[process], process


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class Peers:
    """This process and the others of its run, through the coordination service's key-value
    store (see the module docstring). Every process must make the same calls in the same
    order: each call is numbered, and the numbers name its keys and barrier.

    Args:
      client: the coordination service's client (:func:`coordination`).
      process_id, count: this process's index and the number of processes.
      timeout: seconds a call waits for the others (``None``: ``$JRL_BOUNDARY_TIMEOUT``, else
        :data:`BOUNDARY_TIMEOUT`).
      prefix: the keys' namespace in the store.
    """

    def __init__(
        self,
        client: KeyValueClient,
        process_id: int,
        count: int,
        timeout: float | None = None,
        prefix: str = "jrl/peers",
    ):
        if timeout is None:
            timeout = seconds_from_env(BOUNDARY_TIMEOUT_ENV, BOUNDARY_TIMEOUT)
        self.client, self.process_id, self.count = client, int(process_id), int(count)
        self.timeout_ms, self.prefix, self.calls = max(1, int(timeout * 1000)), prefix, 0
        self._previous: str | None = None  # the keys of the last call, deleted at the next

    def exchange(self, what: str, value: str | None) -> dict[int, str]:
        """Posts ``value`` (unless None), meets the others, and returns every post of this call
        by process index. The call's number and ``what`` name its keys and barrier, so calls
        made in another order by another process wait for each other in vain, naming what."""
        n, self.calls = self.calls, self.calls + 1
        name = f"{n}-{'_'.join(what.split())}"
        posts = f"{self.prefix}/{name}/"
        try:
            if value is not None:
                self.client.key_value_set(posts + str(self.process_id), value)
            self.client.wait_at_barrier(f"{self.prefix}/barrier/{name}", self.timeout_ms)
            got = self.client.key_value_dir_get(posts)
            # every process has read the previous call's posts before it came to this
            # barrier: process 0 deletes them (the store would grow by a call per chunk)
            if self.process_id == 0 and self._previous is not None:
                delete = getattr(self.client, "key_value_delete", None)
                if delete is not None:
                    delete(self._previous.rstrip("/"))
            self._previous = posts
        except Exception as e:  # jax raises its runtime's error type; the text says what
            raise PeerError(
                f"the processes did not all reach {what} within {self.timeout_ms / 1000:g} s "
                f"(${BOUNDARY_TIMEOUT_ENV}): {_first_line(e)}"
            ) from e
        return {int(key.rstrip("/").rsplit("/", 1)[-1]): v for key, v in got}

    def gather(self, what: str, value: Any) -> list[Any]:
        """Every process's ``value`` (anything JSON holds), in process order (the same list in
        every process). ``what`` names the exchange in the error when a process does not
        come."""
        got = self.exchange(what, json.dumps(value))
        missing = [p for p in range(self.count) if p not in got]
        if missing:
            raise PeerError(f"process {missing[0]} posted nothing for {what}")
        return [json.loads(got[p]) for p in range(self.count)]

    @contextlib.contextmanager
    def agreement(self, what: str) -> Iterator[None]:
        """A step every process takes on its own, with one outcome for all: when the block
        raises in any process, every process raises at its end. The failing process re-raises
        its own exception; the others raise :class:`PeerError` with the first line of the
        lowest-numbered failing process's error (``"process 0 could not start the run: ..."``,
        ``what`` = ``"start the run"``)."""
        try:
            yield
        except BaseException as e:  # Ctrl-C too: the others must not wait for this process
            self.exchange(what, _first_line(e))
            raise
        failed = self.exchange(what, None)
        if failed:
            process = min(failed)
            raise PeerError(f"process {process} could not {what}: {failed[process]}", process)


_GROUP: Peers | None = None


def group() -> Peers | None:
    """This process's :class:`Peers` in a multi-process run (made at the first call, so the
    calls of every process are numbered alike), ``None`` in a single-process one."""
    global _GROUP
    if jax.process_count() == 1:
        return None
    if _GROUP is None:
        _GROUP = Peers(coordination(), jax.process_index(), jax.process_count())
    return _GROUP


@contextlib.contextmanager
def agreement(what: str) -> Iterator[None]:
    """:meth:`Peers.agreement` of this process's :func:`group`; in a single-process run the
    block runs as it is."""
    peers = group()
    if peers is None:
        yield
        return
    with peers.agreement(what):
        yield

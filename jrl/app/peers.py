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

The barrier's wait is bounded (:data:`BOUNDARY_TIMEOUT`, ``$JRL_BOUNDARY_TIMEOUT``): a peer
that is alive but does not reach the boundary in that time ends the run with an error that
names the boundary. (A peer that died is found by jax's own heartbeat, which ends the other
processes within its timeout, ``heartbeat_timeout_seconds`` of :func:`jax.distributed.initialize`.)
"""

from __future__ import annotations

from typing import Any, Protocol

from jrl.util.bounds import seconds_from_env

__all__ = ["BOUNDARY_TIMEOUT", "BOUNDARY_TIMEOUT_ENV", "PeerError", "StopVote", "coordination"]

BOUNDARY_TIMEOUT_ENV = "JRL_BOUNDARY_TIMEOUT"
"""Environment variable: seconds a process waits at a chunk boundary for the others."""
BOUNDARY_TIMEOUT = 1800.0
"""Default of :data:`BOUNDARY_TIMEOUT_ENV`. Generous: before the first chunk the processes
compile (each at its own pace on a loaded machine) and process 0 also writes the run
folder's outputs after each chunk."""


class PeerError(RuntimeError):
    """The processes of a run could not agree: a peer did not reach a chunk boundary in time,
    or the coordination service failed."""


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
    docstring).

    Args:
      client: the coordination service's client (:func:`coordination`).
      process_id: this process's index.
      timeout: seconds to wait at a boundary for the others (``None``: ``$JRL_BOUNDARY_TIMEOUT``,
        else :data:`BOUNDARY_TIMEOUT`).
      prefix: the keys' and barriers' namespace in the store.
    """

    def __init__(
        self,
        client: KeyValueClient,
        process_id: int,
        timeout: float | None = None,
        prefix: str = "jrl",
    ):
        if timeout is None:
            timeout = seconds_from_env(BOUNDARY_TIMEOUT_ENV, BOUNDARY_TIMEOUT)
        self.client, self.process_id, self.prefix = client, int(process_id), prefix
        self.timeout_ms = max(1, int(timeout * 1000))
        self.boundaries = 0  # boundaries passed: each process passes the same ones in order

    def decide(self, local_reason: str | None) -> tuple[str, int] | None:
        """This boundary's decision: ``(reason, process)`` to stop, with the reason posted by
        the lowest-numbered process that posted one (e.g. ``("SIGTERM", 1)``), or ``None`` to
        go on. ``local_reason`` is this process's own wish (``None``: none). Raises
        :class:`PeerError` when the others do not reach the boundary within the timeout."""
        k, self.boundaries = self.boundaries, self.boundaries + 1
        posts = f"{self.prefix}/stop/{k}/"
        try:
            if local_reason is not None:
                self.client.key_value_set(posts + str(self.process_id), str(local_reason))
            self.client.wait_at_barrier(f"{self.prefix}/boundary/{k}", self.timeout_ms)
            votes = self.client.key_value_dir_get(posts)
        except Exception as e:  # jax raises its runtime's error type; the text says what
            raise PeerError(
                f"the processes did not all reach chunk boundary {k} within "
                f"{self.timeout_ms / 1000:g} s (${BOUNDARY_TIMEOUT_ENV}): "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
            ) from e
        if not votes:
            return None
        process, reason = min((int(key.rstrip("/").rsplit("/", 1)[-1]), v) for key, v in votes)
        return reason, process

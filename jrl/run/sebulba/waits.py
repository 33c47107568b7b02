"""Sebulba's bounded waits and the errors that stop a run.

Every wait between actors and learner (a trajectory, a parameter version, room in a queue, a
Ray actor's result, a thread ending) gives up after :func:`wait_limit` seconds; the run then
stops with an :class:`ActorTimeout` naming what was waited for. Shared by the actor threads,
the learner and the Ray actors (:mod:`jrl.run.ray_actors`).
"""

from __future__ import annotations

from jrl.util.bounds import seconds_from_env

__all__ = [
    "ActorError",
    "ActorTimeout",
    "JOIN_S",
    "Stopping",
    "WAIT_ENV",
    "WAIT_S",
    "seconds",
    "wait_limit",
]

WAIT_S = 600.0
"""Seconds any wait between actors and learner may last before the run stops (generous: the
first trajectory and the first update include compiling ``act`` and ``learn``, minutes for a
large network on a slow CPU). ``$JRL_SEBULBA_WAIT_S`` overrides it (:func:`wait_limit`)."""
WAIT_ENV = "JRL_SEBULBA_WAIT_S"
JOIN_S = 60.0
"""Seconds the end of a run waits for each actor thread to stop (at most :func:`wait_limit`):
a stopped thread ends within a step of its envs."""


class ActorError(RuntimeError):
    """An actor thread failed (its environment raised, ...); every thread was stopped."""


class ActorTimeout(ActorError):
    """A wait between actors and learner exceeded :func:`wait_limit` (the message says what
    was waited for); every thread was stopped."""


class Stopping(Exception):
    """Raised in an actor waiting on central inference when the run stops: the actor ends
    without an error of its own."""


def wait_limit() -> float:
    """The bound of every wait between actors and learner, in seconds: ``$JRL_SEBULBA_WAIT_S``
    when set (``ValueError`` unless a positive number), else :data:`WAIT_S`."""
    return seconds_from_env(WAIT_ENV, WAIT_S)


def seconds(limit: float) -> str:
    """``limit`` for a message: ``600 s``, ``0.5 s``."""
    return f"{limit:g} s"

"""Ray env workers for central inference (:mod:`jrl.run.sebulba.inference`):
``--inference learner --actors ray:N``.

Each of the N Ray processes holds one actor's share of every run's host envs
(:class:`~jrl.run.sebulba.acting.LocalEnvs`, seeded as actor ``a``'s) and does nothing but
step them: ``reset``, ``step(actions [R, n]) -> HostStep per run`` and ``snapshots``. A thread
of the learner's process drives each one through :class:`RayEnvs`, one round trip per step,
and keeps the trajectory; the learner's device acts for all of them. The Ray itself is the
one actor-side Ray actors use (:class:`jrl.run.ray_session.RaySession`: joined with
``ray_address``, else a local one that ends with the learner), and every worker imports the
run's plugins first.

A worker that dies or whose env raises ends the run with
:class:`~jrl.run.sebulba.ActorError` naming it (resume from the last checkpoint); a step that
does not come back within :func:`~jrl.run.sebulba.wait_limit` seconds ends it with
:class:`~jrl.run.sebulba.ActorTimeout`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from typing import Any

from jrl.run import plugins as jrl_plugins
from jrl.run import ray_session
from jrl.run.sebulba.acting import LocalEnvs
from jrl.run.sebulba.transfers import nbytes
from jrl.run.sebulba.waits import (
    WAIT_ENV,
    ActorError,
    ActorTimeout,
    Stopping,
    seconds,
    wait_limit,
)

__all__ = ["NAME_PREFIX", "RayEnvs", "env_workers"]

NAME_PREFIX = "jrl-envs-"
"""Ray env workers' names: ``jrl-envs-<run>-<index>``
(:func:`jrl.run.ray_actors.pids` with this prefix finds them)."""
CLOSE_TIMEOUT_S = 10.0
"""Seconds the end of a run waits for an env worker to close its envs before killing it."""


class _EnvWorker:
    """One env worker process (wrapped by ``ray.remote`` in :func:`env_workers`)."""

    def __init__(self, host_env, index: int, seeds: list[int], per_worker: int, plugins=()):
        jrl_plugins.load(plugins)  # the run's envs, registered as in the learner
        self.envs = LocalEnvs.make(host_env, seeds, per_worker, index)

    def pid(self) -> int:
        return os.getpid()

    def reset(self, snapshots):
        return self.envs.reset(snapshots)

    def step(self, actions):
        return self.envs.step(actions)

    def snapshots(self):
        return self.envs.snapshots()

    def close(self) -> None:
        self.envs.close()


class RayEnvs:
    """An env worker's envs as its driving thread sees them (the interface of
    :class:`~jrl.run.sebulba.acting.LocalEnvs`), counting what crosses between the processes:
    ``wire`` is ``(bytes, env steps of every run)`` so far. A call waits at most
    :func:`~jrl.run.sebulba.wait_limit` seconds and gives up (``Stopping``) when ``stop`` is
    set."""

    def __init__(self, handle, index: int, stop: threading.Event):
        self.handle, self.index, self.stop = handle, index, stop
        self.wire = (0, 0)
        self.closing = None  # the reference of the close request, once sent

    def _call(self, what: str, method: str, *args):
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray workers
        from ray.exceptions import RayActorError, RayTaskError  # (jrl[ray])

        limit = wait_limit()
        deadline = time.monotonic() + limit
        ref = getattr(self.handle, method).remote(*args)
        try:
            while not ray.wait([ref], timeout=0.1)[0]:
                if self.stop.is_set():
                    raise Stopping()
                if time.monotonic() > deadline:
                    raise ActorTimeout(
                        f"ray env worker {self.index} did not answer {what} within "
                        f"{seconds(limit)} (stuck in its env, or no CPU for it in the cluster?; "
                        f"${WAIT_ENV} sets the bound)"
                    )
            return ray.get(ref, timeout=limit)
        except RayTaskError as e:  # its env raised
            cause = getattr(e, "cause", None) or e
            raise ActorError(
                f"ray env worker {self.index} failed: {type(cause).__name__}: {cause}"
            ) from cause
        except RayActorError as e:
            if getattr(e, "actor_init_failed", False):  # its envs or plugins could not be made
                raise ActorError(
                    f"ray env worker {self.index} could not start: {ray_session.last_line(e)}"
                ) from e
            raise ActorError(
                f"ray env worker {self.index} died ({ray_session.last_line(e)}); with "
                "--inference learner a lost env worker ends the run: resume it from its last "
                "checkpoint"
            ) from e

    def reset(self, snapshots: list | None = None):
        obs = self._call("reset", "reset", snapshots)
        sent = sum(len(s or b"") for s in snapshots or [])
        self.wire = (self.wire[0] + nbytes(obs) + sent, self.wire[1])
        return obs

    def step(self, actions) -> list:
        steps = self._call("a step", "step", actions)
        n = int(steps[0].reward.shape[0]) * len(steps)
        moved = nbytes(actions) + sum(nbytes(vars(s)) for s in steps)
        self.wire = (self.wire[0] + moved, self.wire[1] + n)
        return steps

    def snapshots(self) -> list:
        snaps = self._call("a snapshot", "snapshots")
        self.wire = (self.wire[0] + sum(len(s or b"") for s in snaps), self.wire[1])
        return snaps

    def close(self) -> None:
        """Asks the worker to close its envs; :func:`env_workers` waits for every worker's
        answer together (a bounded time) and then kills them."""
        with contextlib.suppress(Exception):
            self.closing = self.handle.close.remote()


@contextlib.contextmanager
def env_workers(options, host_env: Any, seeds: list[int], per_worker: int, stop: threading.Event):
    """``make_envs(index) -> RayEnvs``: a new env worker process for actor ``index`` with
    ``per_worker`` envs of every run (Ray started or joined for ``options.ray_actors`` of
    them; ``stop`` ends their waits). On exit the workers, asked to close their envs, get
    :data:`CLOSE_TIMEOUT_S` seconds together to answer and are killed, and a Ray this call
    started is shut down."""
    import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray workers

    session = (
        None
        if ray.is_initialized()
        else ray_session.RaySession.start(options.ray_address, options.ray_actors)
    )
    remote = ray.remote(num_cpus=1)(_EnvWorker)
    run_id = uuid.uuid4().hex[:8]
    modules = tuple(dict.fromkeys([*options.plugins, *jrl_plugins.from_environment()]))
    made: list[RayEnvs] = []

    def make_envs(index: int) -> RayEnvs:
        handle = remote.options(
            name=f"{NAME_PREFIX}{run_id}-{index}",
            runtime_env={"env_vars": {"JAX_PLATFORMS": "cpu"}},
        ).remote(host_env, index, seeds, per_worker, modules)
        made.append(RayEnvs(handle, index, stop))
        return made[-1]

    try:
        yield make_envs
    finally:
        try:
            closing = [e.closing for e in made if e.closing is not None]
            with contextlib.suppress(Exception):
                ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)
            for envs in made:
                with contextlib.suppress(Exception):
                    ray.kill(envs.handle, no_restart=True)
        finally:
            if session is not None:
                session.close()

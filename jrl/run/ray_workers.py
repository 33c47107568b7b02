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
import uuid
from typing import Any

from jrl.run import plugins as jrl_plugins
from jrl.run import ray_session
from jrl.run.sebulba.acting import LocalEnvs
from jrl.run.sebulba.transfers import nbytes
from jrl.run.sebulba.waits import WAIT_ENV, ActorError, ActorTimeout, seconds, wait_limit

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
    ``wire`` is ``(bytes, env steps of every run)`` so far."""

    def __init__(self, handle, index: int):
        self.handle, self.index = handle, index
        self.wire = (0, 0)

    def _call(self, what: str, method: str, *args):
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray workers
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError  # (jrl[ray])

        limit = wait_limit()
        try:
            return ray.get(getattr(self.handle, method).remote(*args), timeout=limit)
        except GetTimeoutError:
            raise ActorTimeout(
                f"ray env worker {self.index} did not answer {what} within {seconds(limit)} "
                f"(stuck in its env, or no CPU for it in the cluster?; ${WAIT_ENV} sets the bound)"
            ) from None
        except RayTaskError as e:  # its env raised
            cause = getattr(e, "cause", None) or e
            raise ActorError(
                f"ray env worker {self.index} failed: {type(cause).__name__}: {cause}"
            ) from cause
        except RayActorError as e:
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
        """Asks the worker to close its envs (at most :data:`CLOSE_TIMEOUT_S` seconds) and
        kills it."""
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray workers

        with contextlib.suppress(Exception):
            ray.wait([self.handle.close.remote()], timeout=CLOSE_TIMEOUT_S)
        with contextlib.suppress(Exception):
            ray.kill(self.handle, no_restart=True)


@contextlib.contextmanager
def env_workers(options, host_env: Any, seeds: list[int], per_worker: int):
    """``make_envs(index) -> RayEnvs``: a new env worker process for actor ``index`` with
    ``per_worker`` envs of every run (Ray started or joined for ``options.ray_actors`` of
    them); on exit a Ray this call started is shut down (the workers themselves are closed by
    their :class:`RayEnvs`)."""
    import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray workers

    session = (
        None
        if ray.is_initialized()
        else ray_session.RaySession.start(options.ray_address, options.ray_actors)
    )
    remote = ray.remote(num_cpus=1)(_EnvWorker)
    run_id = uuid.uuid4().hex[:8]
    modules = tuple(dict.fromkeys([*options.plugins, *jrl_plugins.from_environment()]))

    def make_envs(index: int) -> RayEnvs:
        handle = remote.options(
            name=f"{NAME_PREFIX}{run_id}-{index}",
            runtime_env={"env_vars": {"JAX_PLATFORMS": "cpu"}},
        ).remote(host_env, index, seeds, per_worker, modules)
        return RayEnvs(handle, index)

    try:
        yield make_envs
    finally:
        if session is not None:
            session.close()

"""Ray actors for the Sebulba runner: the actor loop in N processes, possibly on other machines.

``--actors ray:N`` (``SebulbaOptions(actors="ray:N")``; Python: ``actors=RayActors(N)``) keeps
Sebulba's learner (:func:`jrl.run.sebulba.run`) and moves its actors from threads into N Ray
actor processes (``jrl[ray]``):

- **Actors.** Actor ``a`` is a Ray actor process that builds its own host envs (env ``i`` of
  run ``r`` seeded ``seed_r + a * n + i``, as thread ``a`` would) and acts on its own CPU with
  the jitted ``act`` (:class:`jrl.run.sebulba.PushActing`, the acting half the threads run
  too, with the same keys: a synchronous Ray run equals a synchronous threaded run with as
  many threads). Each :meth:`_EnvActor.rollout` call is one trajectory ``[R, T, n]``; Ray
  runs an actor's calls in order, and its return value travels through the object store.
- **Parameters.** The learner puts each published version into the object store once
  (``ray.put``) and passes the reference with every request; an actor fetches it when its
  version changes (bfloat16 on the wire with ``transfer="bfloat16"``, widened on the actor).
- **Staleness.** The learner at version ``v`` has requested trajectories up to
  ``v + min(max_staleness, queue_size)`` from every actor: 0 is synchronous, as for threads.
- **Restarts.** An actor process that dies (killed, out of memory, its machine lost) is
  replaced by a new one with fresh envs (seeds moved past every other actor's), its pending
  requests sent again with the latest parameters; the runner prints a line and counts
  restarts (``ray/actor_restarts``). After :data:`MAX_RESTARTS` deaths of one actor, or when
  an env raises inside an actor, or an actor cannot be built (errors a restart would
  repeat), the run stops with
  :class:`~jrl.run.sebulba.ActorError`, as a failing thread does; so does losing Ray itself.
  A learner that dies takes its actors with it (Ray ends the actors a driver owns). When
  Ray's head goes away (its GCS killed), Ray ends the learner's process itself after about a
  minute without it; the last checkpoint is what remains.
- **Ray itself.** With ``ray_address`` the run joins that cluster (``ray.init(address=...)``;
  the machines need jrl installed); otherwise it starts a small local Ray (one CPU per actor,
  no dashboard) and shuts it down at the end. A Ray already initialised in the process (a
  test's, a notebook's) is used and left running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import uuid
from typing import Any

import jax

from jrl.run.sebulba import ActorError, PushActing, _act_fn, _expand, _Item, _prepare_fn

__all__ = ["MAX_RESTARTS", "RayActors", "RayPool", "pids", "ray_pool"]

MAX_RESTARTS = 5
"""Deaths of one actor the runner replaces before it stops the run."""
NAME_PREFIX = "jrl-actor-"
"""Ray actor names: ``jrl-actor-<run>-<index>``, ``-restart<k>`` appended for the k-th
replacement (``ray.util.list_named_actors`` finds them)."""
OBJECT_STORE_BYTES = 256 * 2**20
"""A local Ray's object store: trajectories and parameters of small envs need little."""


@dataclasses.dataclass(frozen=True)
class RayActors:
    """``actors=RayActors(n)``: the Sebulba actor loop in ``n`` Ray actor processes."""

    n: int

    def __str__(self) -> str:
        return f"ray:{self.n}"


class _EnvActor:
    """One actor process (wrapped by ``ray.remote`` in :func:`ray_pool`): its host envs, its
    jitted ``act`` and the latest parameters it fetched."""

    def __init__(
        self,
        agent,
        host_env,
        index,
        seeds,
        per_actor,
        num_steps,
        transfer,
        template,
        snapshots,
        replay=None,
    ):
        batches = [host_env.make_batch(per_actor, seed + index * per_actor) for seed in seeds]
        act, prepare = _act_fn(agent, replay), _prepare_fn(replay)
        self.acting = PushActing(batches, index, act, num_steps, transfer, prepare)
        self.acting.reset(snapshots)
        self.expand = None
        if transfer != "float32":
            self.expand = jax.jit(lambda s: _expand(s, template))
        self.version, self.params = -1, None

    def pid(self) -> int:
        return os.getpid()

    def rollout(self, j: int, version: int, box: list, snapshot: bool) -> _Item:
        """Trajectory ``j`` acted with version ``version`` (``box``: ``[ref]`` of the
        published ``(agent_state, act_keys)``, fetched only when the version changed); with
        ``snapshot`` the host envs' saved state after it."""
        import ray

        if version != self.version:
            agent_state, act_keys = ray.get(box[0])
            if self.expand is not None:
                agent_state = self.expand(agent_state)
            self.version, self.params = version, (agent_state, act_keys)
        item = self.acting.rollout(j, version, *self.params, stopping=lambda: False)
        if snapshot:
            item.snapshots = self.acting.snapshots()
        return item

    def close(self) -> None:
        self.acting.close()


class RayPool:
    """The Ray actors as the learner drives them (the interface of
    :class:`jrl.run.sebulba.ThreadActors`)."""

    def __init__(self, runner, make_actor, count: int):
        self.runner, self.make_actor, self.count = runner, make_actor, count
        self.handles = [make_actor(a, 0) for a in range(count)]
        self.deaths = [0] * count
        self.pending: list[list[tuple[int, Any]]] = [[] for _ in range(count)]  # (j, ref)
        self.next_j = runner.start
        self.version, self.ref = -1, None
        self._error: ActorError | None = None

    @property
    def restarts(self) -> int:
        return sum(self.deaths)

    def publish(self, version: int, published) -> None:
        """Puts version ``version`` into the object store and requests the trajectories it
        allows."""
        import ray

        self.version, self.ref = version, ray.put(published)
        opts = self.runner.options
        ahead = min(opts.max_staleness, opts.queue_size)
        while self.next_j < self.runner.num_iterations and self.next_j <= version + ahead:
            for a in range(self.count):
                self.pending[a].append((self.next_j, self._request(a, self.next_j)))
            self.next_j += 1

    def _request(self, a: int, j: int):
        snapshot = bool(self.runner.snapshot_due(j + 1))
        return self.handles[a].rollout.remote(j, self.version, [self.ref], snapshot)

    def start(self) -> None:  # requests went out with the first publish
        pass

    def take(self) -> tuple[list[_Item] | None, float]:
        import time

        import ray
        from ray.exceptions import RayActorError, RayTaskError

        t0, items = time.perf_counter(), []
        for a in range(self.count):
            while True:
                j, ref = self.pending[a][0]
                try:
                    while not ray.wait([ref], timeout=0.2)[0]:
                        pass
                    items.append(ray.get(ref))
                    self.pending[a].pop(0)
                    break
                except RayActorError as e:
                    if getattr(e, "actor_init_failed", False):  # a restart would fail again
                        self._fail(f"ray actor {a} could not start: {_last_line(e)}", e)
                        return None, 0.0
                    if not self._restart(a, e):  # the process died: replace it, ask again
                        return None, 0.0
                except RayTaskError as e:  # the actor's code raised (its env): stop
                    cause = getattr(e, "cause", None) or e
                    self._fail(f"ray actor {a} failed: {type(cause).__name__}: {cause}", cause)
                    return None, 0.0
                except Exception as e:  # Ray itself failed (its processes gone, ...)
                    self._fail(f"lost Ray while waiting for actor {a}: {type(e).__name__}: {e}", e)
                    return None, 0.0
        return items, time.perf_counter() - t0

    def _restart(self, a: int, e: Exception) -> bool:
        self.deaths[a] += 1
        if self.deaths[a] > MAX_RESTARTS:
            self._fail(f"ray actor {a} died {self.deaths[a]} times; the last: {e}", e)
            return False
        with contextlib.suppress(Exception):
            import ray

            ray.kill(self.handles[a], no_restart=True)
        try:
            self.handles[a] = self.make_actor(a, self.deaths[a])
        except Exception as e2:  # Ray could not place a new actor
            self._fail(f"ray actor {a} died and could not be replaced: {e2}", e2)
            return False
        self.pending[a] = [(j, self._request(a, j)) for j, _ in self.pending[a]]
        print(
            f"jrl: ray actor {a} died; restarted it with fresh envs "
            f"({self.restarts} restart{'s' if self.restarts != 1 else ''} in this run)",
            file=sys.stderr,
            flush=True,
        )
        return True

    def _fail(self, message: str, cause: BaseException) -> None:
        err = ActorError(message)
        err.__cause__ = cause
        self._error = err

    def error(self) -> ActorError:
        return self._error or ActorError("a ray actor stopped without a result")

    def metrics(self) -> dict[str, float]:
        return {"ray/actor_restarts": float(self.restarts)}

    def close(self) -> None:
        import ray

        for handle in self.handles:
            with contextlib.suppress(Exception):
                ray.get(handle.close.remote(), timeout=10)
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)


@contextlib.contextmanager
def ray_pool(
    runner,
    agent,
    host_env,
    seeds: list[int],
    num_envs: int,
    template,
    first: int = 0,
    total_envs: int | None = None,
    replay=None,
):
    """The :class:`RayPool` of ``runner.options`` (actors created, Ray started or joined), its
    actors sharing ``num_envs`` envs of every run; on exit the actors are closed and killed,
    and a Ray this call started is shut down. In a multi-process run each process's pool acts
    as actors ``first ..`` of all the processes' ``total_envs`` envs (seeds and act keys as
    those actors of a one-process run). With ``replay`` (an agent's
    :class:`~jrl.builders.ActorReplay`) the actors push replay items with priorities (Ape-X)."""
    import ray

    opts = runner.options
    count = opts.ray_actors
    started = False
    if not ray.is_initialized():
        try:
            if opts.ray_address:
                ray.init(address=opts.ray_address, log_to_driver=False, logging_level="ERROR")
            else:
                ray.init(
                    address="local",  # a new Ray of its own, even beside a running one
                    num_cpus=max(2, count),
                    include_dashboard=False,
                    object_store_memory=OBJECT_STORE_BYTES,
                    log_to_driver=False,
                    logging_level="ERROR",
                )
        except Exception as e:  # no cluster at that address, ...
            where = opts.ray_address or "a local Ray"
            raise ActorError(f"could not start Ray actors on {where}: {e}") from e
        started = True
    per_actor = num_envs // count
    remote = ray.remote(num_cpus=1)(_EnvActor)
    run_id = uuid.uuid4().hex[:8]
    snapshots = runner.env_snapshots

    def make_actor(a: int, deaths: int):
        # a replacement's envs are seeded past every env of every actor before it
        moved = [s + deaths * (total_envs or num_envs) for s in seeds]
        return remote.options(
            name=f"{NAME_PREFIX}{run_id}-{a}" + (f"-restart{deaths}" if deaths else ""),
            runtime_env={"env_vars": {"JAX_PLATFORMS": "cpu"}},
        ).remote(
            agent,
            host_env,
            first + a,
            moved,
            per_actor,
            runner.num_steps,
            opts.transfer,
            template,
            snapshots[a] if snapshots is not None and deaths == 0 else None,
            replay,
        )

    pool = None
    try:
        pool = RayPool(runner, make_actor, count)
        yield pool
    finally:
        if pool is not None:
            pool.close()
        if started:
            ray.shutdown()


def _last_line(e: BaseException) -> str:
    """The last line of an error's text (Ray's errors carry the remote traceback)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__


def pids(prefix: str = NAME_PREFIX) -> dict[str, int]:
    """Name -> process id of the live jrl Ray actors of the connected Ray (for tests and
    operators: ``kill -9`` one to see it replaced)."""
    import ray

    out = {}
    for name in ray.util.list_named_actors():
        if str(name).startswith(prefix):
            with contextlib.suppress(Exception):
                out[name] = ray.get(ray.get_actor(name).pid.remote(), timeout=30)
    return out

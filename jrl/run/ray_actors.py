"""Ray actors for the Sebulba runner: the actor loop in N processes, possibly on other machines.

``--actors ray:N`` (``SebulbaOptions(actors="ray:N")``; Python: ``actors=RayActors(N)``) keeps
Sebulba's learner (:func:`jrl.run.sebulba.run`) and moves its actors from threads into N Ray
actor processes (``jrl[ray]``):

- **Actors.** Actor ``a`` is a Ray actor process that builds its own host envs (env ``i`` of
  run ``r`` seeded ``seed_r + a * n + i``, as thread ``a`` would) and acts on its own CPU with
  the jitted ``act`` (:class:`jrl.run.sebulba.acting.PushActing`, the acting half the threads run
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
- **Ray itself.** With ``ray_address`` the run joins that cluster, otherwise it starts a small
  local Ray that ends with the learner, even when the learner is killed
  (:mod:`jrl.run.ray_session`). A Ray already initialised in the process (a test's, a
  notebook's) is used and left running; an address is checked first (:func:`check_address`:
  its form, its host name, a TCP connect within :data:`CONNECT_TIMEOUT_S`).
- **Plugins.** Each actor process imports the run's plugins (``--import``,
  ``$JRL_PLUGINS``: :mod:`jrl.run.plugins`) before it builds its envs, as the learner's process
  did, so envs and agents registered by a plugin work in Ray actors too.
- **Bounded waits.** A trajectory the learner waits for longer than
  :func:`jrl.run.sebulba.wait_limit` stops the run (:class:`~jrl.run.sebulba.ActorTimeout`
  naming the actor), as does an actor waiting that long for the parameters it is sent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import time
import uuid
from typing import Any

import jax

from jrl.core.types import EPISODE_DONE
from jrl.run import plugins as jrl_plugins
from jrl.run import ray_session  # the module, not its names: it imports jrl.run.sebulba too
from jrl.run.sebulba.acting import Item, LocalEnvs, PushActing, act_fn, prepare_fn
from jrl.run.sebulba.transfers import expand, nbytes
from jrl.run.sebulba.waits import WAIT_ENV, ActorError, ActorTimeout, seconds, wait_limit

__all__ = [
    "CONNECT_TIMEOUT_S",
    "MAX_RESTARTS",
    "RayActors",
    "RayPool",
    "check_address",
    "pids",
    "ray_pool",
]

MAX_RESTARTS = 5
"""Deaths of one actor the runner replaces before it stops the run."""
NAME_PREFIX = "jrl-actor-"
"""Ray actor names: ``jrl-actor-<run>-<index>``, ``-restart<k>`` appended for the k-th
replacement (``ray.util.list_named_actors`` finds them)."""
CONNECT_TIMEOUT_S = 10.0
"""Seconds :func:`check_address` waits for a TCP connection to ``--ray-address``."""
CLOSE_TIMEOUT_S = 10.0
"""Seconds the end of a run waits for its actors to close their envs before killing them."""

ADDRESS_FORMS = "HOST:PORT (e.g. 10.0.0.1:6379), ray://HOST:PORT or auto"


def check_address(address: str) -> None:
    """``ValueError`` unless ``address`` has one of the forms of :data:`ADDRESS_FORMS` and its
    host name resolves; ``ConnectionError`` when nothing accepts a TCP connection there within
    :data:`CONNECT_TIMEOUT_S` seconds (``auto``, the cluster Ray finds on this machine, is
    left to ``ray.init``). Bounded: no Ray is started or joined."""
    text = str(address).strip()
    if text == "auto":
        return
    hostport = text.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--ray-address must be {ADDRESS_FORMS}, got {text!r}")
    try:
        places = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ValueError(f"--ray-address {text}: host {host!r} does not resolve ({e})") from e
    errors = []
    for family, kind, proto, _, where in places:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.settimeout(CONNECT_TIMEOUT_S)
                probe.connect(where)
            return
        except OSError as e:
            errors.append(e)
    e = errors[-1]
    why = "no answer" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
    raise ConnectionError(
        f"--ray-address {text}: nothing accepts a connection there within "
        f"{seconds(CONNECT_TIMEOUT_S)} ({why}); start Ray's head there (ray start --head "
        f"--port {port}) or give the address of one"
    )


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
        plugins=(),
        wait_s=None,
    ):
        jrl_plugins.load(plugins)  # the run's envs and agents, registered as in the learner
        self.wait_s = wait_s
        envs = LocalEnvs.make(host_env, seeds, per_actor, index)
        act, prepare = act_fn(agent, replay), prepare_fn(replay)
        self.acting = PushActing(envs, index, act, num_steps, transfer, prepare)
        self.acting.reset(snapshots)
        self.expand = None
        if transfer != "float32":
            self.expand = jax.jit(lambda s: expand(s, template))
        self.version, self.params = -1, None

    def pid(self) -> int:
        return os.getpid()

    def rollout(self, j: int, version: int, box: list, snapshot: bool) -> Item:
        """Trajectory ``j`` acted with version ``version`` (``box``: ``[ref]`` of the
        published ``(agent_state, act_keys)``, fetched only when the version changed); with
        ``snapshot`` the host envs' saved state after it."""
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors

        if version != self.version:  # the object store may lose it: bounded
            agent_state, act_keys = ray.get(box[0], timeout=self.wait_s)
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
    :class:`jrl.run.sebulba.actors.ThreadActors`)."""

    def __init__(self, runner, make_actor, count: int):
        self.runner, self.make_actor, self.count = runner, make_actor, count
        self.handles = [make_actor(a, 0) for a in range(count)]
        self.deaths = [0] * count
        self.pending: list[list[tuple[int, Any]]] = [[] for _ in range(count)]  # (j, ref)
        self.next_j = runner.start
        self.version, self.ref = -1, None
        self._error: ActorError | None = None
        self.published, self.sent = None, [-1] * count  # the version each actor was sent last
        self.wire = [0, 0]  # bytes between the processes, env steps of every run

    @property
    def restarts(self) -> int:
        return sum(self.deaths)

    def publish(self, version: int, published) -> None:
        """Puts version ``version`` into the object store and requests the trajectories it
        allows."""
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors

        self.version, self.ref = version, ray.put(published)
        self.published = published  # (its bytes are counted as each actor is sent it)
        opts = self.runner.options
        ahead = min(opts.max_staleness, opts.queue_size)
        while self.next_j < self.runner.num_iterations and self.next_j <= version + ahead:
            for a in range(self.count):
                self.pending[a].append((self.next_j, self._request(a, self.next_j)))
            self.next_j += 1

    def _request(self, a: int, j: int):
        if self.sent[a] != self.version:  # the actor fetches this version once
            self.sent[a] = self.version
            self.wire[0] += nbytes(self.published)
        snapshot = bool(self.runner.snapshot_due(j + 1))
        return self.handles[a].rollout.remote(j, self.version, [self.ref], snapshot)

    def start(self) -> None:  # requests went out with the first publish
        pass

    def take(self) -> tuple[list[Item] | None, float]:
        """The next trajectory of every actor in order and the seconds waited (None when an
        actor failed or did not answer within :func:`~jrl.run.sebulba.wait_limit` seconds:
        :meth:`error` says how); a dead actor process is replaced and asked again."""
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors
        from ray.exceptions import RayActorError, RayTaskError  # (jrl[ray])

        limit = wait_limit()
        t0, items = time.perf_counter(), []
        for a in range(self.count):
            while True:
                j, ref = self.pending[a][0]
                try:
                    deadline = time.monotonic() + limit
                    while not ray.wait([ref], timeout=0.2)[0]:
                        if time.monotonic() > deadline:
                            message = (
                                f"the learner waited {seconds(limit)} for trajectory {j} of "
                                f"ray actor {a}, which sent none (stuck in its env, or no CPU "
                                f"for it in the cluster?; ${WAIT_ENV} sets the bound)"
                            )
                            self._error = ActorTimeout(message)
                            return None, 0.0
                    items.append(ray.get(ref, timeout=limit))
                    self.pending[a].pop(0)
                    self._count(items[-1])
                    break
                except RayActorError as e:
                    if getattr(e, "actor_init_failed", False):  # a restart would fail again
                        self._fail(f"ray actor {a} could not start: {ray_session.last_line(e)}", e)
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

    def _count(self, item: Item) -> None:
        snaps = sum(len(s or b"") for s in item.snapshots or [])
        self.wire[0] += nbytes(item.batch) + nbytes(item.episodes) + snaps
        self.wire[1] += int(item.episodes[EPISODE_DONE].size)

    def _restart(self, a: int, e: Exception) -> bool:
        self.deaths[a] += 1
        if self.deaths[a] > MAX_RESTARTS:
            self._fail(f"ray actor {a} died {self.deaths[a]} times; the last: {e}", e)
            return False
        with contextlib.suppress(Exception):
            import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors

            ray.kill(self.handles[a], no_restart=True)
        try:
            self.handles[a] = self.make_actor(a, self.deaths[a])
        except Exception as e2:  # Ray could not place a new actor
            self._fail(f"ray actor {a} died and could not be replaced: {e2}", e2)
            return False
        self.sent[a] = -1  # the new process fetches the parameters again
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
        """``ray/actor_restarts`` and ``ray/bytes_per_step``: trajectories (or replay items),
        snapshots and parameters between the processes so far, per env step of every run."""
        moved, steps = self.wire
        return {
            "ray/actor_restarts": float(self.restarts),
            "ray/bytes_per_step": moved / steps if steps else 0.0,
        }

    def close(self) -> None:
        """Asks every actor to close its envs (all together, for at most
        :data:`CLOSE_TIMEOUT_S` seconds: a stuck actor does not answer) and kills it."""
        import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors

        refs = []
        for handle in self.handles:
            with contextlib.suppress(Exception):
                refs.append(handle.close.remote())
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
        for handle in self.handles:
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
    and a Ray this call started is shut down (and its watchdog ends what is left of it). In a
    multi-process run each process's pool acts as actors ``first ..`` of all the processes'
    ``total_envs`` envs (seeds and act keys as those actors of a one-process run). With
    ``replay`` (an agent's :class:`~jrl.run.builders.ActorReplay`) the actors push replay items with
    priorities (Ape-X). Every actor imports ``runner.options.plugins`` and ``$JRL_PLUGINS``
    first."""
    import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors

    opts = runner.options
    count = opts.ray_actors
    session = (
        None if ray.is_initialized() else ray_session.RaySession.start(opts.ray_address, count)
    )
    remote = ray.remote(num_cpus=1)(_EnvActor)
    make_actor = _ActorMaker(
        remote, runner, agent, host_env, seeds, num_envs, template, first, total_envs, replay
    )

    pool = None
    try:
        pool = RayPool(runner, make_actor, count)
        yield pool
    finally:
        try:
            if pool is not None:
                pool.close()
        finally:
            if session is not None:
                session.close()


class _ActorMaker:
    """``make_actor(a, deaths)``: a new Ray actor process for actor ``a`` of a :func:`ray_pool`
    (named ``jrl-actor-<run>-<a>``; its ``deaths``-th replacement when ``deaths`` > 0)."""

    def __init__(
        self, remote, runner, agent, host_env, seeds, num_envs, template, first, total_envs, replay
    ):
        opts = runner.options
        self.remote, self.runner, self.agent, self.host_env = remote, runner, agent, host_env
        self.seeds, self.num_envs, self.template, self.first = seeds, num_envs, template, first
        self.total_envs, self.replay = total_envs, replay
        self.per_actor = num_envs // opts.ray_actors
        self.run_id = uuid.uuid4().hex[:8]
        self.snapshots = runner.env_snapshots
        self.modules = tuple(dict.fromkeys([*opts.plugins, *jrl_plugins.from_environment()]))
        self.wait_s = wait_limit()

    def __call__(self, a: int, deaths: int):
        # a replacement's envs are seeded past every env of every actor before it
        moved = [s + deaths * (self.total_envs or self.num_envs) for s in self.seeds]
        snapshots = self.snapshots
        return self.remote.options(
            name=f"{NAME_PREFIX}{self.run_id}-{a}" + (f"-restart{deaths}" if deaths else ""),
            runtime_env={"env_vars": {"JAX_PLATFORMS": "cpu"}},
        ).remote(
            self.agent,
            self.host_env,
            self.first + a,
            moved,
            self.per_actor,
            self.runner.num_steps,
            self.runner.options.transfer,
            self.template,
            snapshots[self.first + a] if snapshots is not None and deaths == 0 else None,
            self.replay,
            self.modules,
            self.wait_s,
        )


def pids(prefix: str = NAME_PREFIX) -> dict[str, int]:
    """Name -> process id of the live jrl Ray actors of the connected Ray (for tests and
    operators: ``kill -9`` one to see it replaced)."""
    import ray  # Ray is an optional extra (jrl[ray]): imported only for Ray actors

    out = {}
    for name in ray.util.list_named_actors():
        if str(name).startswith(prefix):
            with contextlib.suppress(Exception):
                out[name] = ray.get(ray.get_actor(name).pid.remote(), timeout=30)
    return out

"""Sebulba's actor threads: each owns a slice of every run's host envs and an actor device,
waits for parameters recent enough (:class:`Store`), collects trajectories (push mode:
:class:`~jrl.run.sebulba.acting.PushActing`; EnvPool's pull mode: whichever envs are ready) and
queues them for the learner, which drives the threads through :class:`ThreadActors`."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any, Callable

import jax
import numpy as np

from jrl.core.types import EPISODE_DONE, EPISODE_LENGTH, EPISODE_RETURN, Transition
from jrl.run.sebulba.acting import Item, LocalEnvs, PushActing, make_item
from jrl.run.sebulba.waits import (
    JOIN_S,
    WAIT_ENV,
    ActorError,
    ActorTimeout,
    Stopping,
    seconds,
    wait_limit,
)

__all__ = ["ActorThread", "Runner", "Store", "ThreadActors", "actor_threads", "thread_pool"]


class Store:
    """The learner's latest agent state, versioned; actors wait for a minimum version."""

    def __init__(self, stop: threading.Event):
        self._cond = threading.Condition()
        self._stop = stop
        self.version, self.value = -1, None

    def publish(self, version: int, value: Any) -> None:
        with self._cond:
            self.version, self.value = version, value
            self._cond.notify_all()

    def wait(self, min_version: int, who: str = "an actor") -> tuple[int, Any] | None:
        """``(version, value)`` once ``version >= min_version``; None when stopping;
        :class:`ActorTimeout` (naming ``who`` waited) after :func:`wait_limit` seconds."""
        limit = wait_limit()
        deadline = time.monotonic() + limit
        with self._cond:
            while self.version < min_version and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ActorTimeout(
                        f"{who} waited {seconds(limit)} for parameter version {min_version} "
                        f"from the learner, which published none (${WAIT_ENV} sets the bound)"
                    )
                self._cond.wait(min(0.1, left))
            return None if self._stop.is_set() else (self.version, self.value)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class Runner:
    """Shared state of one :func:`~jrl.run.sebulba.runner.run` call: the options, the jitted
    ``act`` (and ``prepare``), the parameter store and the stop event of its actors and learner."""

    def __init__(
        self, options, num_steps, num_iterations, start, act, snapshot_due, snapshots, prepare=None
    ):
        self.options, self.num_steps, self.num_iterations = options, num_steps, num_iterations
        self.start, self.act, self.snapshot_due = start, act, snapshot_due
        self.prepare = prepare  # trajectory -> replay items and priorities (Ape-X), or None
        self.env_snapshots = snapshots  # per actor, per run: saved host envs (or None)
        self.stop = threading.Event()
        self.store = Store(self.stop)
        self.expand: Callable | None = None  # bfloat16 parameters back to float32, on an actor


class ActorThread(threading.Thread):
    """One actor thread (see the module docstring) with its host envs (:class:`LocalEnvs`, or a
    Ray process's, :class:`jrl.run.ray_workers.RayEnvs`) and the device it acts on (None:
    ``runner.act`` is central inference, :mod:`jrl.run.sebulba.inference`, which places the
    parameters itself)."""

    def __init__(self, index: int, runner: Runner, envs, device):
        super().__init__(name=f"jrl-sebulba-actor-{index}", daemon=True)
        self.index, self.runner, self.envs, self.device = index, runner, envs, device
        self.out: queue.Queue = queue.Queue(maxsize=runner.options.queue_size)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.runner.options.pull_batch:
                self._pull()
            else:
                self._push()
        except Stopping:  # central inference ended with the run: nothing to report
            pass
        except BaseException as e:  # reported by the learner, which stops everything
            self.error = e
            self.runner.stop.set()
            self.runner.store.wake()

    def _params(self, j: int):
        got = self.runner.store.wait(
            j - self.runner.options.max_staleness, f"actor thread {self.index}"
        )
        if got is None:
            return None
        version, (agent_state, act_keys) = got
        if self.device is None:  # central inference places them once for every actor
            return version, agent_state, act_keys
        agent_state = jax.device_put(agent_state, self.device)  # the transfer (maybe bfloat16)
        if self.runner.expand is not None:
            agent_state = self.runner.expand(agent_state)
        return version, agent_state, jax.device_put(act_keys, self.device)

    def _put(self, item: Item) -> bool:
        """Queues ``item`` (False when stopping); :class:`ActorTimeout` when the queue stays
        full for :func:`wait_limit` seconds."""
        limit = wait_limit()
        deadline = time.monotonic() + limit
        while not self.runner.stop.is_set():
            try:
                self.out.put(item, timeout=0.1)
                return True
            except queue.Full:
                if time.monotonic() > deadline:
                    raise ActorTimeout(
                        f"actor thread {self.index} waited {seconds(limit)} for room in its "
                        f"queue: the learner took no trajectory (${WAIT_ENV} sets the bound)"
                    ) from None
        return False

    def _push(self) -> None:
        r = self.runner
        envs = PushActing(self.envs, self.index, r.act, r.num_steps, r.options.transfer, r.prepare)
        envs.reset(None if r.env_snapshots is None else r.env_snapshots[self.index])
        for j in range(r.start, r.num_iterations):
            got = self._params(j)
            if got is None:
                return
            item = envs.rollout(j, *got, stopping=r.stop.is_set)
            if item is None:
                return
            if r.snapshot_due(j + 1):
                item.snapshots = envs.snapshots()
            if not self._put(item):
                return

    def _pull(self) -> None:
        """EnvPool's async mode (one run): act on the ready envs, keep each env's own order."""
        r, pool = self.runner, self.envs.batches[0]
        pool.reset()
        j = r.start
        got = self._params(j)
        if got is None:
            return
        version, agent_state, act_keys = got
        store = _PerEnv(pool.num_envs, r.num_steps)
        t0, calls = time.perf_counter(), 0
        while True:
            step = pool.recv()
            store.record(step)  # completes the transitions of the envs that were acted on
            action, info = jax.device_get(
                r.act(agent_state, step.observation[None], act_keys, j, self.index, calls)
            )
            calls += 1
            store.acted(
                step.env_ids,
                step.observation,
                action[0],
                jax.tree.map(lambda x: x[0], info),
                version,
            )
            pool.send(action[0], step.env_ids)
            while store.ready():
                batch, episodes, oldest = store.take()
                item = make_item(oldest, batch, episodes, t0, r.options.transfer)
                if not self._put(item):
                    return
                j += 1
                if j >= r.num_iterations:
                    return
                got = self._params(j)
                if got is None:
                    return
                version, agent_state, act_keys = got
                t0, calls = time.perf_counter(), 0
            if r.stop.is_set():
                return


class _PerEnv:
    """Pull mode's storage: each env's transitions in its own time order, as arrays
    ``[n, capacity, ...]`` (grown when an env runs far ahead), filled row by row from
    ``recv`` batches of any envs. :meth:`take` cuts the first T of every env."""

    def __init__(self, num_envs: int, num_steps: int):
        self.n, self.T = num_envs, num_steps
        self.count = np.zeros(num_envs, np.int64)
        self.pending = None  # per env: (obs, action, info, version) acted, awaiting the result
        self.data = None  # per env, per step: the transition's arrays
        self.version = None

    def acted(self, ids, obs, action, info, version) -> None:
        values = {"observation": obs, "action": action, "info": info}
        if self.pending is None:
            alloc = lambda x: np.zeros((self.n,) + np.shape(x)[1:], np.asarray(x).dtype)
            self.pending = jax.tree.map(alloc, values)
            self.pending_version = np.zeros(self.n, np.int64)
        jax.tree.map(lambda b, v: b.__setitem__(ids, v), self.pending, values)
        self.pending_version[ids] = version

    def record(self, step) -> None:
        live = ~step.first
        if not live.any():
            return
        ids = step.env_ids[live]
        row = {
            **self.pending,
            "observation": self.pending["observation"][ids],
            "action": self.pending["action"][ids],
            "info": jax.tree.map(lambda x: x[ids], self.pending["info"]),
            "reward": step.reward[live],
            "terminated": step.terminated[live],
            "truncated": step.truncated[live],
            "final_observation": step.final_observation[live],
            EPISODE_RETURN: step.episode_return[live],
            EPISODE_LENGTH: step.episode_length[live],
        }
        if self.data is None:
            cap = 2 * self.T
            alloc = lambda x: np.zeros((self.n, cap) + np.shape(x)[1:], np.asarray(x).dtype)
            self.data = jax.tree.map(alloc, row)
            self.version = np.zeros((self.n, cap), np.int64)
        cap = self.version.shape[1]
        if self.count[ids].max() >= cap:  # an env ran far ahead: double the room
            grow = lambda b: np.concatenate([b, np.zeros_like(b)], axis=1)
            self.data, self.version = jax.tree.map(grow, self.data), grow(self.version)
        pos = self.count[ids]
        jax.tree.map(lambda b, v: b.__setitem__((ids, pos), v), self.data, row)
        self.version[ids, pos] = self.pending_version[ids]
        self.count[ids] += 1

    def ready(self) -> bool:
        return self.data is not None and int(self.count.min()) >= self.T

    def take(self) -> tuple[Transition, dict[str, np.ndarray], int]:
        """The first T transitions of every env as ``[1, T, n]`` arrays, with the oldest
        version any of them was acted with; the rest move to the front."""
        T = self.T
        cut = lambda b: np.swapaxes(b[:, :T], 0, 1)[None]  # [n, T, ...] -> [1, T, n, ...]
        d = jax.tree.map(cut, self.data)
        oldest = int(self.version[:, :T].min())
        shift = lambda b: np.concatenate([b[:, T:], np.zeros_like(b[:, :T])], axis=1)
        self.data, self.version = jax.tree.map(shift, self.data), shift(self.version)
        self.count -= T
        batch = Transition(
            d["observation"],
            d["action"],
            d["reward"],
            d["terminated"],
            d["truncated"],
            d["final_observation"],
            d["info"],
        )
        done = d["terminated"] | d["truncated"]
        episodes = {
            EPISODE_RETURN: d[EPISODE_RETURN],
            EPISODE_LENGTH: d[EPISODE_LENGTH],
            EPISODE_DONE: done,
        }
        return batch, episodes, oldest


class ThreadActors:
    """The actor threads as the learner drives them; :class:`jrl.run.ray_actors.RayPool` is
    the same interface over Ray actor processes."""

    def __init__(self, runner: Runner, actors: list[ActorThread]):
        self.runner, self.actors = runner, actors
        self.count = len(actors)
        self.next_j = runner.start  # the iteration of the next trajectories to take
        self._timeout: ActorTimeout | None = None

    def publish(self, version: int, published) -> None:
        """Makes ``published`` (agent state, act keys) version ``version``."""
        self.runner.store.publish(version, published)

    def start(self) -> None:
        for actor in self.actors:
            actor.start()

    def take(self) -> tuple[list[Item] | None, float]:
        """The next trajectory of every actor in order and the seconds waited (None when an
        actor failed or one waited for :func:`wait_limit` seconds did not come:
        :meth:`error` says how)."""
        try:
            items, waited = _take(self.actors, self.next_j)
        except ActorTimeout as e:
            self._timeout = e
            return None, 0.0
        self.next_j += items is not None
        return items, waited

    def error(self) -> ActorError:
        return _actor_error(self.actors, self._timeout)

    def metrics(self) -> dict[str, float]:
        """Per-iteration metrics of the actors themselves (none for threads)."""
        return {}


@contextlib.contextmanager
def actor_threads(
    runner: Runner, host_env: Any, seeds: list[int], num_envs: int, devices, first: int = 0
):
    """The actor threads (not started), each with its share of ``num_envs`` host envs of every
    run (env ``i`` of thread ``a`` in run ``r`` seeded ``seeds[r] + (first + a) * n + i``, and
    acting as actor ``first + a``: ``first`` > 0 in the later processes of a multi-process run)
    and a device in turn, as :func:`thread_pool`."""
    opts = runner.options
    per_thread = num_envs // opts.actor_threads

    def make(index: int) -> LocalEnvs:
        return LocalEnvs.make(host_env, seeds, per_thread, index, opts.pull_batch or None)

    with thread_pool(runner, make, opts.actor_threads, devices, first) as pool:
        yield pool


@contextlib.contextmanager
def thread_pool(runner: Runner, make_envs: Callable, count: int, devices, first: int = 0):
    """``count`` actor threads (not started) as a :class:`ThreadActors`: thread ``a`` acts as
    actor ``first + a`` on ``make_envs(first + a)`` and device ``devices[a % len(devices)]``
    (``devices`` None: central inference). On exit every thread is stopped (queues drained, so
    none blocks on a full one) and joined, and the envs are closed."""
    actors, made, failing = [], [], False
    try:
        for a in range(count):
            envs = make_envs(first + a)
            made.append(envs)
            device = None if devices is None else devices[a % len(devices)]
            actors.append(ActorThread(first + a, runner, envs, device))
        yield ThreadActors(runner, actors)
    except BaseException:
        failing = True
        raise
    finally:
        runner.stop.set()
        runner.store.wake()
        for actor in actors:
            _drain(actor.out)
        limit = min(JOIN_S, wait_limit())
        deadline = time.monotonic() + limit
        for actor in actors:
            if actor.is_alive():
                actor.join(timeout=max(deadline - time.monotonic(), 0.0))
        stuck = [actor.index for actor in actors if actor.is_alive()]
        for envs in made:
            with contextlib.suppress(Exception):  # after a crash the original error matters
                envs.close()
        if stuck and not failing:  # (a stuck thread under another error: that error is raised)
            raise ActorTimeout(
                f"actor thread {stuck[0]} did not stop within {seconds(limit)} of the end of "
                "the run (stuck in its env?)"
            )


def _drain(q: queue.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


def _take(actors, j: int) -> tuple[list[Item] | None, float]:
    """Trajectory ``j`` of every actor, in thread order (None when an actor failed);
    :class:`ActorTimeout` when one does not come within :func:`wait_limit` seconds."""
    limit = wait_limit()
    t0, items = time.perf_counter(), []
    for actor in actors:
        deadline = time.monotonic() + limit
        while True:
            if actor.error is not None or any(a.error is not None for a in actors):
                return None, 0.0
            try:
                items.append(actor.out.get(timeout=0.05))
                break
            except queue.Empty:
                if not actor.is_alive() and actor.out.empty():
                    return None, 0.0
                if time.monotonic() > deadline:
                    raise ActorTimeout(
                        f"the learner waited {seconds(limit)} for trajectory {j} of actor "
                        f"thread {actor.index}, which sent none (stuck in its env?; "
                        f"${WAIT_ENV} sets the bound)"
                    ) from None
    return items, time.perf_counter() - t0


def _actor_error(actors, timeout: ActorTimeout | None = None) -> ActorError:
    """The error to raise for a failed actor (its own timeout as it is) or, when none
    failed, the learner's ``timeout``."""
    for actor in actors:
        if actor.error is not None:
            e = actor.error
            if isinstance(e, ActorError):  # an actor's timeout names the thread already
                return e
            err = ActorError(f"actor thread {actor.index} failed: {type(e).__name__}: {e}")
            err.__cause__ = e
            return err
    return timeout or ActorError("an actor thread stopped without a result")

"""Central inference for the Sebulba runner (SEED RL): ``inference="learner"``
(``--inference learner``).

With actor-side inference (the default) every actor holds a copy of the parameters and acts on
its own device; the learner sends each new version to every actor, and every trajectory
travels to the learner. With central inference the actors are **env workers** that only step
envs:

- **Env workers.** ``actor_threads`` threads of the learner's process (or, with
  ``actors="ray:N"``, N Ray processes: :mod:`jrl.run.ray_workers`) each own a share of every
  run's host envs, seeded as actor-side actors' are. At each step a worker sends its
  observations ``[R, n, ...]`` to the inference server and waits for the actions.
- **Inference server.** One thread of the learner's process (:class:`InferenceServer`) takes
  the first waiting request, gathers the other workers' for at most ``inference_wait_ms``
  (none more once every worker has sent), and acts for all of them in one jitted call on the
  learner's first device: a batch of fixed shape ``[W, R, n, ...]`` (``W`` workers; a worker
  that has not sent is a row of zeros), worker ``w`` always in row ``w``. A row's actions
  depend on that row alone, not on which other workers happened to be in the batch, so a
  synchronous run (``max_staleness=0``) is the same run however the requests were batched.
  Each row's key folds in the iteration, the worker and the step, as an actor-side actor's.
- **Trajectories stay at the learner.** The worker's thread (in the learner's process, for
  Ray workers too) writes each step into the trajectory as actor-side acting does
  (:class:`~jrl.run.sebulba.acting.PushActing`) and queues it for the learner; what crosses
  between processes with Ray workers is observations and step results up, actions down, and
  neither parameters nor trajectories.
- **Staleness and resume** are the actor-side ones: trajectory ``j`` is acted with a version
  ``>= j - max_staleness`` (each worker takes the version at the start of its trajectory; the
  server acts with that version), queues are bounded by ``queue_size``, and the host envs are
  snapshotted at chunk ends for exact resume.
- **Refused** (:func:`~jrl.run.sebulba.options.check_options`): EnvPool's pull mode, actor
  devices, bfloat16 transfers and agents that compute replay priorities where they act
  (Ape-X). A Ray env worker that dies ends the run (:class:`~jrl.run.sebulba.ActorError`;
  resume from the last checkpoint): its trajectory in progress lives in the learner's process
  and would be cut.
- **Metrics.** ``inference/batch_size`` (workers per call), ``inference/wait_ms`` (from a
  request to its actions) and ``inference/calls`` per iteration; with Ray workers
  ``ray/bytes_per_step``, the bytes that crossed between processes per env step (the
  actor-side Ray pool logs the same).
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from typing import Any, Callable

import jax
import numpy as np

from jrl.parts.agent import Agent
from jrl.run.sebulba.acting import LocalEnvs, act_one
from jrl.run.sebulba.actors import Runner, ThreadActors, thread_pool
from jrl.run.sebulba.waits import (
    JOIN_S,
    WAIT_ENV,
    ActorError,
    ActorTimeout,
    Stopping,
    seconds,
    wait_limit,
)

__all__ = ["CentralActors", "InferenceServer", "central_act_fn", "central_pool"]


def central_act_fn(agent: Agent) -> Callable:
    """``act(agent_state [R], obs [W, R, n, ...], act_keys [R], j [W], a [W], t [W]) ->
    (actions, info) [W, R, n, ...]``, jitted: row ``w`` is
    :func:`~jrl.run.sebulba.acting.act_one` of every run on worker ``a[w]``'s observations at
    step ``t[w]`` of its trajectory ``j[w]``."""
    runs = jax.vmap(act_one(agent), in_axes=(0, 0, 0, None, None, None))
    return jax.jit(jax.vmap(runs, in_axes=(None, 0, None, 0, 0, 0)))


class _Request:
    """One worker's observations waiting for actions."""

    __slots__ = ("row", "state", "keys", "obs", "j", "t", "a", "t0", "done", "result")

    def __init__(self, row, state, keys, obs, j, a, t):
        self.row, self.state, self.keys, self.obs = row, state, keys, obs
        self.j, self.a, self.t = j, a, t
        self.t0 = time.perf_counter()
        self.done = threading.Event()
        self.result = None


class InferenceServer:
    """The inference thread of central inference (see the module docstring) for ``workers``
    env workers, acting as actors ``first .. first + workers - 1``, on ``device``. Calling it
    is the actors' ``act`` (``(agent_state, obs [R, n], act_keys, j, a, t) -> (actions,
    info)``, host arrays): it blocks until the server has acted, raising
    :class:`~jrl.run.sebulba.waits.Stopping` when ``stop`` is set and
    :class:`~jrl.run.sebulba.ActorTimeout` after :func:`~jrl.run.sebulba.wait_limit`
    seconds."""

    def __init__(self, act, workers: int, first: int, device, wait_ms: float, stop):
        self.act, self.W, self.first, self.device = act, workers, first, device
        self.wait_s = wait_ms / 1000.0
        self.stop = stop
        self.requests: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self._placed: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self._calls = self._rows = 0
        self._wait = 0.0
        self.thread = threading.Thread(target=self._loop, name="jrl-inference", daemon=True)

    def __call__(self, agent_state, obs, act_keys, j: int, a: int, t: int):
        request = _Request(a - self.first, agent_state, act_keys, obs, j, a, t)
        if self.stop.is_set():
            raise Stopping()
        self.requests.put(request)
        limit = wait_limit()
        deadline = time.monotonic() + limit
        while not request.done.wait(0.1):
            if self.stop.is_set():
                raise Stopping()
            if time.monotonic() > deadline:
                raise ActorTimeout(
                    f"actor thread {a} waited {seconds(limit)} for central inference to act "
                    f"on step {t} of trajectory {j} (${WAIT_ENV} sets the bound)"
                )
        return request.result

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        """Stops the thread (``stop`` is set) and waits for it (at most
        :data:`~jrl.run.sebulba.JOIN_S` or the wait limit)."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=min(JOIN_S, wait_limit()))

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    first = self.requests.get(timeout=0.1)
                except queue.Empty:
                    continue
                self._serve([first] + self._more())
        except BaseException as e:  # reported by the learner through CentralActors.error
            self.error = e
            self.stop.set()

    def _more(self) -> list[_Request]:
        """The requests that come within ``wait_s`` of the first (none more once every
        worker has one waiting: a worker sends one at a time)."""
        more, deadline = [], time.monotonic() + self.wait_s
        while 1 + len(more) < self.W:
            left = deadline - time.monotonic()
            try:
                got = self.requests.get(timeout=left) if left > 0 else self.requests.get_nowait()
                more.append(got)
            except queue.Empty:
                break
        return more

    def _serve(self, batch: list[_Request]) -> None:
        """Acts on ``batch``: one call per parameter version among its requests."""
        groups: dict[int, list[_Request]] = {}
        for request in batch:
            groups.setdefault(id(request.state), []).append(request)
        for requests in groups.values():
            self._act(requests)
            now = time.perf_counter()
            with self._lock:
                self._calls += 1
                self._rows += len(requests)
                self._wait += sum(now - r.t0 for r in requests)

    def _act(self, requests: list[_Request]) -> None:
        state, keys = self._place(requests[0].state, requests[0].keys)
        W = self.W
        pad = lambda x: np.zeros((W,) + np.shape(x), np.asarray(x).dtype)
        obs = jax.tree.map(pad, requests[0].obs)
        j, a, t = (np.zeros(W, np.int32) for _ in range(3))
        for r in requests:
            jax.tree.map(lambda b, x: b.__setitem__(r.row, x), obs, r.obs)
            j[r.row], a[r.row], t[r.row] = r.j, r.a, r.t
        actions, info = jax.device_get(self.act(state, obs, keys, j, a, t))
        for r in requests:
            r.result = (actions[r.row], jax.tree.map(lambda x: x[r.row], info))
            r.done.set()

    def _place(self, state, keys):
        """``(state, keys)`` on the server's device, copied once per version (the last few
        kept: with staleness workers may act with two versions at a time)."""
        key = id(state)
        if key not in self._placed:
            self._placed[key] = (state, jax.device_put((state, keys), self.device))
            while len(self._placed) > 4:
                self._placed.popitem(last=False)
        return self._placed[key][1]

    def metrics(self) -> dict[str, float]:
        """Since the last call: ``inference/calls``, ``inference/batch_size`` (workers per
        call) and ``inference/wait_ms`` (mean from a request to its actions)."""
        with self._lock:
            calls, rows, wait = self._calls, self._rows, self._wait
            self._calls = self._rows = 0
            self._wait = 0.0
        return {
            "inference/calls": float(calls),
            "inference/batch_size": rows / calls if calls else 0.0,
            "inference/wait_ms": 1000.0 * wait / rows if rows else 0.0,
        }


class CentralActors(ThreadActors):
    """The env workers' threads and the inference server as the learner drives them (the
    interface of :class:`~jrl.run.sebulba.actors.ThreadActors`)."""

    def __init__(self, threads: ThreadActors, server: InferenceServer, envs: list):
        super().__init__(threads.runner, threads.actors)
        self.server, self.envs = server, envs

    def start(self) -> None:
        self.server.start()
        super().start()

    def error(self) -> ActorError:
        if self.server.error is not None:
            e = self.server.error
            err = ActorError(f"central inference failed: {type(e).__name__}: {e}")
            err.__cause__ = e
            return err
        return super().error()

    def metrics(self) -> dict[str, float]:
        out = self.server.metrics()
        wire = [e.wire for e in self.envs if hasattr(e, "wire")]
        if wire:  # Ray env workers: bytes between processes per env step of every run
            moved, steps = sum(w[0] for w in wire), sum(w[1] for w in wire)
            out["ray/bytes_per_step"] = moved / steps if steps else 0.0
        return out


@contextlib.contextmanager
def central_pool(
    runner: Runner,
    agent: Agent,
    host_env: Any,
    seeds: list[int],
    num_envs: int,
    device,
    first: int = 0,
):
    """The :class:`CentralActors` of ``runner.options`` (``inference="learner"``): its env
    workers (threads, or Ray processes with ``actors="ray:N"``) share ``num_envs`` envs of
    every run and act as actors ``first ..`` of a one-process run's (seeded as
    :func:`~jrl.run.sebulba.actors.actor_threads`' are); the server acts on ``device``.
    ``runner.act`` becomes the server. On exit the workers are stopped and joined, their envs
    closed, the server stopped and Ray (when this call started it) shut down."""
    opts = runner.options
    count = opts.num_actors
    per_worker = num_envs // count
    server = InferenceServer(
        central_act_fn(agent), count, first, device, opts.inference_wait_ms, runner.stop
    )
    runner.act = server
    made: list = []
    if opts.ray_actors:
        from jrl.run import ray_workers  # Ray is an optional extra (jrl[ray])

        workers = ray_workers.env_workers(opts, host_env, seeds, per_worker, runner.stop)
    else:
        workers = contextlib.nullcontext(
            lambda index: LocalEnvs.make(host_env, seeds, per_worker, index)
        )
    try:
        with workers as make_envs:

            def make(index: int):
                made.append(make_envs(index))
                return made[-1]

            with thread_pool(runner, make, count, None, first) as threads:
                yield CentralActors(threads, server, made)
    finally:
        server.close()

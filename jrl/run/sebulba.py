"""The Sebulba runner: actor threads stepping host environments, a learner on its device(s).

Where the Anakin runner compiles the environment into the training program, Sebulba keeps the
environments on the host (:mod:`jrl.envs.host`: Gymnasium, EnvPool) and runs the agent's two
halves apart, the same agent in both runners:

- **Actors.** ``actor_threads`` Python threads each own a slice of every run's envs and an actor
  device. A thread waits for parameters recent enough (see staleness below), then collects a
  trajectory of ``num_steps`` steps: the agent's ``act`` (jitted, vmapped over runs) on the
  actor device, the host envs stepped with its actions. It pushes the trajectory (a time-major
  ``Transition [R, T, n]`` and the episodes that ended in it) into its own bounded queue
  (``queue_size``). With ``actors="ray:N"`` the actors are N Ray processes instead
  (:mod:`jrl.run.ray_actors`); both run :class:`PushActing`, and the learner drives either
  through the same small interface (:class:`ThreadActors`).
- **Learner.** Iteration ``j`` takes trajectory ``j`` from every actor's queue, joins them along
  the env axis (``[R, T, N]``) and calls the agent's ``learn`` (vmapped over runs;
  ``shard_map``ped over the learner devices, each taking its share of the envs, exactly as the
  Anakin runner shards a rollout). It then publishes the new agent state as version ``j + 1``.
- **Staleness.** Trajectory ``j`` is acted with a version ``v >= j - max_staleness``: with
  ``max_staleness=0`` actor and learner take turns (synchronous; the run then equals the same
  agent stepping the same envs in one loop), with ``k > 0`` actors run up to ``k`` versions
  ahead. The policy lag ``j - v`` of every trajectory is logged (``sebulba/policy_lag``).
- **Pull mode** (``pull_batch``: EnvPool's asynchronous ``send``/``recv``): a thread acts on
  whichever envs are ready; each env keeps its own time order, so slot ``i`` of a trajectory
  is env ``i``'s next ``T`` transitions (envs that ran ahead carry their extra steps into the
  next trajectory).
- **Transfers.** With ``transfer="bfloat16"`` the float32 parts of trajectories (observations,
  rewards, episode returns; not the agent's ``act_info``, whose log-probs and values the
  update is sensitive to) and of the parameters sent to actors travel as bfloat16 (uint8 and
  integer parts stay as they are); the bytes per transfer are logged either way.
- **Shutdown.** An exception in an actor (a crashing env) stops every thread, drains the
  queues and is raised by :func:`run` as :class:`ActorError` naming the thread and the error,
  after the iterations already learned have been handed to ``on_chunk`` (so a checkpoint of
  them can be written). A stop request (``should_stop``) is honoured between chunks.
- **Bounded waits.** Every wait between actors and learner (a trajectory, a parameter
  version, room in a queue, a Ray actor's result, a thread ending) gives up after
  :func:`wait_limit` seconds (:data:`WAIT_S`, or ``$JRL_SEBULBA_WAIT_S``; thread joins at the
  end after at most :data:`JOIN_S`): the run then stops as for a failing actor, with an
  :class:`ActorTimeout` naming what was waited for (a stuck env, a lost actor).
- **Checks first.** :func:`check_options` refuses, before anything is written, every option
  that cannot work with the env, the config and the machine (``jrl.app.api.check_runner``
  calls it; :func:`run` too).

Train states are :class:`SebulbaState` stacked ``[R, ...]`` (replicated over learner devices,
never with a device axis), so the run folder, metrics, checkpoints and evaluation of
:mod:`jrl.app.execution` serve both runners.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import sys
import threading
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jrl.core import parallel
from jrl.core.types import (
    EPISODE_DONE,
    EPISODE_LENGTH,
    EPISODE_RETURN,
    PRNGKey,
    PyTree,
    Transition,
    is_key,
)
from jrl.core.wrappers import NormalizeObservation, NormalizeReward
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec
from jrl.run.anakin import Report, RunHooks, RunResult, chunk_lengths, compiler_options, make_mesh
from jrl.run.loops import NO_EPISODE, episode_metrics
from jrl.util.bounds import seconds_from_env

__all__ = [
    "ActorError",
    "ActorTimeout",
    "JOIN_S",
    "SebulbaOptions",
    "SebulbaState",
    "WAIT_ENV",
    "WAIT_S",
    "abstract_states",
    "check_agent",
    "check_options",
    "collect",
    "init_states",
    "run",
    "wait_limit",
]

TRANSFERS = ("float32", "bfloat16")
LAG_METRICS = ("sebulba/policy_lag", "sebulba/policy_lag_max")


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


def wait_limit() -> float:
    """The bound of every wait between actors and learner, in seconds: ``$JRL_SEBULBA_WAIT_S``
    when set (``ValueError`` unless a positive number), else :data:`WAIT_S`."""
    return seconds_from_env(WAIT_ENV, WAIT_S)


def _seconds(limit: float) -> str:
    """``limit`` for a message: ``600 s``, ``0.5 s``."""
    return f"{limit:g} s"


@dataclasses.dataclass(frozen=True)
class SebulbaOptions:
    """How the Sebulba runner executes (see the module docstring)."""

    actor_threads: int = 1  # threads, each with num_envs / actor_threads envs of every run
    queue_size: int = 2  # trajectories an actor may hold ready
    max_staleness: int = 0  # 0: synchronous; k: trajectories acted up to k versions behind
    transfer: str = "float32"  # or "bfloat16"
    pull_batch: int = 0  # EnvPool pull mode: envs per recv, up to a thread's (0: push mode)
    learner_devices: int = 1  # the first devices, data-parallel
    actor_devices: int = 0  # the next devices, one per thread in turn (0: the learner's first)
    actors: str = "threads"  # or "ray:N": N Ray actor processes (jrl.run.ray_actors)
    ray_address: str = ""  # with ray:N, the cluster to join ("": a local Ray for the run)
    plugins: tuple[str, ...] = ()  # modules Ray actor processes import first (jrl.run.plugins)

    @property
    def ray_actors(self) -> int:
        """The number of Ray actor processes (0: actor threads)."""
        return parse_actors(self.actors)

    @property
    def num_actors(self) -> int:
        """Actors (threads or processes), each stepping ``num_envs / num_actors`` envs."""
        return self.ray_actors or self.actor_threads

    def validate(self, num_envs: int | None = None) -> "SebulbaOptions":
        """Raises ``ValueError`` for the first bad option (with ``num_envs``: also how the envs
        divide among threads); returns ``self``."""
        checks = [
            (self.actor_threads >= 1, f"actor_threads must be >= 1, got {self.actor_threads}"),
            (self.queue_size >= 1, f"queue_size must be >= 1, got {self.queue_size}"),
            (self.max_staleness >= 0, f"max_staleness must be >= 0, got {self.max_staleness}"),
            (
                self.transfer in TRANSFERS,
                f"transfer must be one of {TRANSFERS}, got {self.transfer!r}",
            ),
            (
                self.pull_batch >= 0,
                f"pull_batch must be >= 0 (0: push mode), got {self.pull_batch}",
            ),
            (self.learner_devices >= 1, f"devices must be >= 1, got {self.learner_devices}"),
            (self.actor_devices >= 0, f"actor_devices must be >= 0, got {self.actor_devices}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.ray_actors:
            _check_ray_options(self)
        elif self.ray_address:
            raise ValueError("--ray-address is for Ray actors: add --actors ray:N")
        if num_envs is None:
            return self
        what = f"actors ({self.actors})" if self.ray_actors else "actor_threads"
        checks = [
            (
                num_envs % (self.num_actors * self.learner_devices) == 0,
                f"num_envs ({num_envs}) must divide among {what} ({self.num_actors}) "
                f"and among the learner's devices ({self.learner_devices})",
            ),
        ]
        per_thread = num_envs // self.num_actors
        if self.pull_batch:  # equal: every recv waits for all of the thread's envs
            checks.append(
                (
                    per_thread % self.pull_batch == 0,
                    f"pull_batch ({self.pull_batch}) must divide the envs of one actor thread "
                    f"({per_thread}: num_envs {num_envs} / actor_threads {self.num_actors})",
                )
            )
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        return self


def check_processes(options: SebulbaOptions, num_envs: int, processes: int) -> None:
    """The learner of a multi-process run (``jax.distributed``) spans every device of every
    process; each process runs ``options.num_actors`` actors over its ``num_envs / processes``
    envs. Raises ``ValueError`` for what such a run cannot do."""
    if options.pull_batch:
        raise ValueError("EnvPool's pull mode runs in one process: drop --pull-batch")
    if options.actor_devices:
        raise ValueError(
            "--actor-devices is for a one-process run: with several processes the learner spans "
            "every device and each process's actors act on its first device"
        )
    if options.learner_devices != jax.device_count():
        raise ValueError(
            f"a multi-process sebulba learner spans every device ({jax.device_count()} in "
            f"{processes} processes), got --devices {options.learner_devices}"
        )
    if num_envs % (processes * options.num_actors * jax.local_device_count()):
        raise ValueError(
            f"num_envs ({num_envs}) must divide among the {processes} processes, each one's "
            f"{options.num_actors} actors and its {jax.local_device_count()} devices"
        )


def check_options(
    options: SebulbaOptions, host_env: Any, num_envs: int, runs: int, replay: bool = False
) -> None:
    """Raises ``ValueError`` (``ConnectionError`` for a Ray address where nothing answers)
    for the first option the run cannot execute with ``runs`` runs of ``num_envs`` envs of
    ``host_env`` on this machine: the options themselves and how the envs divide
    (:meth:`SebulbaOptions.validate`), pull mode (EnvPool envs, one run, push-mode actors for
    an agent with an actor ``replay``), the devices, a multi-process learner
    (:func:`check_processes`), ``$JRL_SEBULBA_WAIT_S`` and the Ray address
    (:func:`jrl.run.ray_actors.check_address`). ``jrl.app.api.check_runner`` calls it
    before the run folder is made, :func:`run` before it starts."""
    options.validate(num_envs)
    wait_limit()
    if replay and (options.learner_devices > 1 or options.pull_batch):
        raise ValueError(
            "an agent learning from its actors' replay (apex) has one learner device and "
            "push-mode actors: drop --devices and --pull-batch"
        )
    if options.pull_batch and not host_env.pull_capable:
        raise ValueError(f"{host_env.id} has no pull mode (EnvPool envs have: envpool:<id>)")
    if options.pull_batch and runs != 1:
        raise ValueError(f"pull mode runs one seed at a time, got {runs} runs")
    processes = jax.process_count()
    if processes > 1:
        check_processes(options, num_envs, processes)
    else:
        devices = jax.devices()
        L = options.learner_devices
        if L + options.actor_devices > len(devices):
            raise ValueError(
                f"{L} learner and {options.actor_devices} actor devices requested, "
                f"{len(devices)} available ({devices[0].platform}); on CPU, XLA_FLAGS="
                "--xla_force_host_platform_device_count=N gives fake devices"
            )
    if options.ray_actors and options.ray_address:
        from jrl.run import ray_actors

        ray_actors.check_address(options.ray_address)


def parse_actors(text: str) -> int:
    """``"threads"`` -> 0, ``"ray:N"`` -> N (``ValueError`` for anything else)."""
    kind, _, count = str(text).partition(":")
    if kind == "threads" and not count:
        return 0
    if kind == "ray" and count.isdigit() and int(count) >= 1:
        return int(count)
    raise ValueError(
        f"actors must be 'threads' or 'ray:N' with N >= 1 Ray actor processes, got {text!r}"
    )


def _check_ray_options(options: SebulbaOptions) -> None:
    """``ValueError`` for what Ray actors do not combine with, and when Ray is absent."""
    import importlib.util

    refused = [
        (options.actor_threads != 1, "--actor-threads (each Ray actor is one process)"),
        (options.pull_batch != 0, "--pull-batch (EnvPool's pull mode runs in threads)"),
        (options.actor_devices != 0, "--actor-devices (Ray actors act on their own CPU)"),
    ]
    for bad, what in refused:
        if bad:
            raise ValueError(f"--actors {options.actors} does not take {what}")
    absent = (
        sys.modules["ray"] is None if "ray" in sys.modules else not importlib.util.find_spec("ray")
    )
    if absent:
        raise ValueError(
            f"--actors {options.actors} needs Ray, which is not installed: pip install jrl-jax[ray]"
        )


@struct.dataclass
class SebulbaState:
    """One run's learner state (stacked ``[R, ...]`` for R runs)."""

    agent_state: PyTree
    key: PRNGKey  # the learner's key (learn keys fold in the iteration)
    act_key: PRNGKey  # actors' keys fold in iteration, thread and step
    env_seed: jax.Array  # [] int32 the run's host env seed (env i of thread a: seed + a*n + i)
    iteration: jax.Array  # [] int32 updates done (= the parameter version)
    env_steps: jax.Array  # [] int32 env transitions learned from (all envs)
    last_episode_return: jax.Array  # [] float32 (NaN before the first episode)
    last_episode_length: jax.Array  # [] float32
    replay: PyTree = None  # the learner's replay buffer (agents with an ActorReplay), or None

    @property
    def env_state(self):  # evaluation reads no env statistics from a host-env run
        return None


def check_agent(agent: Agent, built_env: Any) -> None:
    """Refuses what Sebulba cannot run: agents with memory (their acting state would cross
    threads) and training envs with normalisers (their statistics live in a pure env's
    state)."""
    if agent.recurrent is not None:
        raise ValueError(
            "the sebulba runner does not run agents with an acting state (recurrent policies, "
            "OU noise) yet; use the anakin runner"
        )
    env = built_env
    while env is not None:
        if isinstance(env, (NormalizeObservation, NormalizeReward)):
            raise ValueError(
                f"the sebulba runner does not normalise host envs ({type(env).__name__}): set "
                "normalize_observations=False and normalize_rewards=False"
            )
        env = getattr(env, "env", None)


def _init(agent: Agent, spec: EnvSpec, replay=None) -> Callable[[PRNGKey], SebulbaState]:
    def init(key):
        k_agent, k_env, k_loop, k_act = jax.random.split(key, 4)
        nan = jnp.full((), NO_EPISODE, jnp.float32)
        agent_state = agent.init(k_agent, spec)
        return SebulbaState(
            agent_state,
            k_loop,
            k_act,
            jax.random.randint(k_env, (), 0, 2**30, jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((), jnp.int32),
            nan,
            nan,
            None if replay is None else _empty_replay(replay, agent_state, spec, k_act),
        )

    return init


def _empty_replay(replay, agent_state, spec: EnvSpec, key) -> PyTree:
    """The learner's empty buffer, its items shaped as ``replay.prepare`` makes them from a
    trajectory of one step of one env."""
    obs = networks.example_observation(spec.observation_space)  # [1, ...]
    action, info = jax.eval_shape(replay.act, agent_state, obs, key, jnp.zeros(1, jnp.int32))

    def one_step():
        zeros = lambda x: jnp.zeros((1,) + tuple(x.shape), x.dtype)
        flags = jnp.zeros((1, 1), bool)
        return Transition(
            jax.tree.map(lambda x: x[None], obs),
            zeros(action),
            jnp.zeros((1, 1), jnp.float32),
            flags,
            flags,
            jax.tree.map(lambda x: x[None], obs),
            jax.tree.map(zeros, info),
        )

    items, _ = jax.eval_shape(lambda b: replay.prepare(agent_state, b, key), one_step())
    return replay.buffer.init(
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[2:], x.dtype), items)
    )


def init_states(agent: Agent, spec: EnvSpec, keys: jax.Array, replay=None) -> SebulbaState:
    """``[R]`` states, one per key (sequential ``lax.map``, as the Anakin runner does); with
    ``replay`` (:class:`jrl.run.builders.ActorReplay`) each holds an empty replay buffer."""
    init = _init(agent, spec, replay)
    program = jax.jit(lambda ks: jax.lax.map(init, ks)).lower(keys).compile(compiler_options())
    return program(keys)


def abstract_states(agent: Agent, spec: EnvSpec, keys: jax.Array, replay=None) -> SebulbaState:
    """Shapes and dtypes of :func:`init_states`'s result; nothing is allocated."""
    return jax.eval_shape(lambda ks: jax.lax.map(_init(agent, spec, replay), ks), keys)


# --- transfers ------------------------------------------------------------------------------


def _compress(tree: PyTree, transfer: str) -> PyTree:
    """float32 leaves as bfloat16 for ``transfer="bfloat16"`` (host or device arrays)."""
    if transfer == "float32":
        return tree
    return jax.tree.map(lambda x: x.astype(jnp.bfloat16) if x.dtype == np.float32 else x, tree)


def _compress_trajectory(batch: Transition, transfer: str) -> Transition:
    """:func:`_compress` of a trajectory but its ``extras``: the agent's act_info (behaviour
    log-probs, values) is what the update is most sensitive to and a small share of the
    bytes, so it stays float32."""
    return _compress(batch, transfer).replace(extras=batch.extras)


def _compress_items(items, transfer: str):
    """Replay items (``NStepTransition``) for the wire: their observations compressed as a
    trajectory's, rewards and discounts (gamma^m, which bfloat16 would round) kept float32."""
    if transfer == "float32":
        return items
    return items.replace(
        observation=_compress(items.observation, transfer),
        next_observation=_compress(items.next_observation, transfer),
    )


def _expand(tree: PyTree, like: PyTree) -> PyTree:
    """Back to the dtypes of ``like`` (a no-op for uncompressed leaves)."""
    return jax.tree.map(lambda x, l: x.astype(l.dtype) if x.dtype != l.dtype else x, tree, like)


def nbytes(tree: PyTree) -> int:
    """Bytes of every leaf of ``tree``."""
    return int(sum(x.nbytes for x in jax.tree.leaves(tree)))


# --- the parameter store ----------------------------------------------------------------------


class _Store:
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
                        f"{who} waited {_seconds(limit)} for parameter version {min_version} "
                        f"from the learner, which published none (${WAIT_ENV} sets the bound)"
                    )
                self._cond.wait(min(0.1, left))
            return None if self._stop.is_set() else (self.version, self.value)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


@dataclasses.dataclass
class _Item:
    """One actor's trajectory for one iteration (host arrays)."""

    version: int  # the parameter version the trajectory was acted with (its oldest)
    batch: Transition  # [R, T, n]
    episodes: dict[str, np.ndarray]  # [R, T, n]
    act_seconds: float  # acting and stepping the envs, without waiting
    snapshots: list[bytes | None] | None = None  # per run, after the trajectory (push mode)


# --- actors -----------------------------------------------------------------------------------


class _Actor(threading.Thread):
    """One actor thread (see the module docstring)."""

    def __init__(self, index: int, runner: "_Runner", batches: list, device):
        super().__init__(name=f"jrl-sebulba-actor-{index}", daemon=True)
        self.index, self.runner, self.batches, self.device = index, runner, batches, device
        self.out: queue.Queue = queue.Queue(maxsize=runner.options.queue_size)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.runner.options.pull_batch:
                self._pull()
            else:
                self._push()
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
        agent_state = jax.device_put(agent_state, self.device)  # the transfer (maybe bfloat16)
        if self.runner.expand is not None:
            agent_state = self.runner.expand(agent_state)
        return version, agent_state, jax.device_put(act_keys, self.device)

    def _put(self, item: _Item) -> bool:
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
                        f"actor thread {self.index} waited {_seconds(limit)} for room in its "
                        f"queue: the learner took no trajectory (${WAIT_ENV} sets the bound)"
                    ) from None
        return False

    def _push(self) -> None:
        r = self.runner
        envs = PushActing(
            self.batches, self.index, r.act, r.num_steps, r.options.transfer, r.prepare
        )
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
        r, pool = self.runner, self.batches[0]
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


def make_item(version: int, batch: Transition, episodes: dict, t0: float, transfer: str) -> _Item:
    """The queue item of a trajectory acted since ``t0``, compressed for the transfer."""
    return _Item(
        version,
        _compress_trajectory(batch, transfer),
        _compress(episodes, transfer),
        time.perf_counter() - t0,
    )


class PushActing:
    """One actor's share of every run's host envs in push mode (one ``HostBatch`` per run) and
    their current observations: the acting half of the Sebulba loop, shared by the actor
    threads and the Ray actor processes (:mod:`jrl.run.ray_actors`). With ``prepare`` (from
    :func:`_prepare_fn`) a trajectory leaves as replay items and their priorities, computed
    here with the parameters it was acted with (Ape-X)."""

    def __init__(
        self,
        batches: list,
        index: int,
        act: Callable,
        num_steps: int,
        transfer: str,
        prepare: Callable | None = None,
    ):
        self.batches, self.index, self.act = batches, index, act
        self.num_steps, self.transfer, self.prepare = num_steps, transfer, prepare
        self.obs: np.ndarray | None = None  # [R, n, ...]

    def reset(self, snapshots: list | None = None) -> None:
        """Fresh episodes, or (``snapshots``: per run, saved bytes or None) the saved ones."""
        obs = np.stack([b.reset() for b in self.batches])
        if snapshots is not None:
            for b, data in zip(self.batches, snapshots):
                if data is not None:
                    b.restore(data)
            obs = np.stack([b.last_observation() for b in self.batches])
        self.obs = obs

    def rollout(
        self, j: int, version: int, agent_state, act_keys, stopping: Callable[[], bool]
    ) -> _Item | None:
        """Trajectory ``j`` (``[R, T, n]``) acted with ``agent_state`` of ``version``; None
        when ``stopping()`` turned true on the way."""
        t0 = time.perf_counter()
        traj, obs = _Trajectory(self.num_steps), self.obs
        for t in range(self.num_steps):
            action, info = jax.device_get(
                self.act(agent_state, obs, act_keys, j, self.index, t)
            )  # one transfer back per step
            host = [b.step(action[i]) for i, b in enumerate(self.batches)]
            traj.add(t, obs, action, info, host)
            obs = (
                np.stack([s.observation for s in host])
                if len(host) > 1
                else host[0].observation[None]
            )
            if stopping():
                return None
        self.obs = obs
        if self.prepare is None:
            return make_item(version, *traj.arrays(), t0, self.transfer)
        batch, episodes = traj.arrays()
        items, priorities = jax.device_get(
            self.prepare(agent_state, batch, act_keys, j, self.index)
        )
        return _Item(
            version,
            (_compress_items(items, self.transfer), priorities),
            _compress(episodes, self.transfer),
            time.perf_counter() - t0,
        )

    def snapshots(self) -> list:
        """Per run, the host envs' saved state (None where they cannot be saved)."""
        return [b.snapshot() for b in self.batches]

    def close(self) -> None:
        for b in self.batches:
            try:
                b.close()
            except Exception:  # closing after a crash: the original error is what matters
                pass


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


class _Trajectory:
    """A push-mode trajectory ``[R, T, n]``, written step by step into arrays allocated at the
    first step."""

    FIELDS = ("reward", "terminated", "truncated", "final_observation")
    EPISODES = ((EPISODE_RETURN, "episode_return"), (EPISODE_LENGTH, "episode_length"))

    def __init__(self, num_steps: int):
        self.T, self.buf = num_steps, None

    def _alloc(self, x) -> np.ndarray:
        x = np.asarray(x)
        return np.empty((x.shape[0], self.T) + x.shape[1:], x.dtype)

    def add(self, t: int, obs, action, info, host) -> None:
        stack = (
            (lambda f: getattr(host[0], f)[None])
            if len(host) == 1
            else (lambda f: np.stack([getattr(s, f) for s in host]))
        )
        values = {
            "observation": obs,
            "action": action,
            "info": info,
            **{f: stack(f) for f in self.FIELDS},
            **{k: stack(f) for k, f in self.EPISODES},
            EPISODE_DONE: stack("terminated") | stack("truncated"),
        }
        if self.buf is None:
            self.buf = jax.tree.map(self._alloc, values)
        jax.tree.map(lambda b, v: b.__setitem__((slice(None), t), v), self.buf, values)

    def arrays(self) -> tuple[Transition, dict[str, np.ndarray]]:
        b = self.buf
        batch = Transition(
            b["observation"],
            b["action"],
            b["reward"],
            b["terminated"],
            b["truncated"],
            b["final_observation"],
            b["info"],
        )
        episodes = {k: b[k] for k in (EPISODE_RETURN, EPISODE_LENGTH, EPISODE_DONE)}
        return batch, episodes


# --- the learner ------------------------------------------------------------------------------


class _Runner:
    """Shared state of one :func:`run` call."""

    def __init__(
        self, options, num_steps, num_iterations, start, act, snapshot_due, snapshots, prepare=None
    ):
        self.options, self.num_steps, self.num_iterations = options, num_steps, num_iterations
        self.start, self.act, self.snapshot_due = start, act, snapshot_due
        self.prepare = prepare  # trajectory -> replay items and priorities (Ape-X), or None
        self.env_snapshots = snapshots  # per actor, per run: saved host envs (or None)
        self.stop = threading.Event()
        self.store = _Store(self.stop)
        self.expand: Callable | None = None  # bfloat16 parameters back to float32, on an actor


def _act_fn(agent: Agent, replay=None):
    """``act(agent_state [R], obs [R, n], act_keys [R], j, thread, t)``, jitted: each run's key
    folds in the iteration, the thread and the step. With ``replay`` the actors act with
    ``replay.act``, which also takes each env's index among the run's envs (thread ``a``'s env
    ``i`` is ``a * n + i``)."""

    def one(agent_state, obs, key, j, a, t):
        key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, j), a), t)
        if replay is None:
            return agent.act(agent_state, obs, key)
        n = jax.tree.leaves(obs)[0].shape[0]
        return replay.act(agent_state, obs, key, a * n + jnp.arange(n, dtype=jnp.int32))

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, None, None, None)))


def _prepare_fn(replay):
    """``prepare(agent_state [R], batch [R, T, n], act_keys [R], j, thread) -> (items,
    priorities)`` ``[R, T, n, ...]``, jitted (None without ``replay``): each run's key folds in
    the iteration, the thread and ``T`` (a step no act key of the trajectory uses)."""
    if replay is None:
        return None

    def one(agent_state, batch, key, j, a):
        T = batch.reward.shape[0]
        key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, j), a), T)
        return replay.prepare(agent_state, batch, key)

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, None, None)))


def _learn_fn(agent: Agent, mesh: Mesh | None, steps_per_iteration: int, replay=None):
    """``learn(states [R], batch [R, T, N], episodes [R, T, N]) -> (states, metrics [R])``;
    with ``replay`` the batch is ``(items, priorities)`` ``[R, T, N, ...]`` (see
    :func:`_replay_step`)."""

    def one(state: SebulbaState, batch, episodes):
        k_learn = jax.random.fold_in(state.key, state.iteration)
        agent_state, metrics, _ = agent.learn(state.agent_state, batch, k_learn)
        ret, length, ep = episode_metrics(
            episodes, state.last_episode_return, state.last_episode_length
        )
        new = state.replace(
            agent_state=agent_state,
            iteration=state.iteration + 1,
            env_steps=state.env_steps + steps_per_iteration,
            last_episode_return=ret,
            last_episode_length=length,
        )
        return new, {**metrics, **ep, "train/env_steps": new.env_steps}

    if replay is not None:
        one = _replay_step(replay, steps_per_iteration)

    def learn(states, batch, episodes):
        # bfloat16 transfers back to float32, inside the program (no extra dispatches)
        widen = lambda x: x.astype(jnp.float32) if x.dtype == jnp.bfloat16 else x
        batch, episodes = jax.tree.map(widen, (batch, episodes))
        with parallel.runs_axis():
            return jax.vmap(one, axis_name=parallel.RUNS)(states, batch, episodes)

    if mesh is None:  # no donation: actors may still hold the published agent state
        return jax.jit(learn)
    env_axis = P(None, None, parallel.AXIS)  # [R, T, N, ...]: the envs split over devices
    sharded = jax.shard_map(
        learn,
        mesh=mesh,
        in_specs=(P(), env_axis, env_axis),
        out_specs=(P(), P()),
        check_vma=False,
    )
    program = jax.jit(sharded)

    def call(states, batch, episodes):
        with parallel.device_axis(parallel.AXIS, mesh.devices.size):
            return program(states, batch, episodes)

    return call


def _replay_step(replay, steps_per_iteration: int):
    """One run's learner step for an agent with an :class:`~jrl.run.builders.ActorReplay`: the
    pushed items ``[T, N, ...]`` enter the replay buffer a step of the N envs at a time (in
    time order; a FIFO ring: the oldest go when it is full; an env-stratified uniform buffer
    keeps its layout) with the actors' priorities, then, once ``learning_starts`` items have
    been inserted, ``replay.updates`` sample, learn and update priorities."""
    buffer = replay.buffer

    def one(state: SebulbaState, batch, episodes):
        items, priorities = batch
        capacity = jax.tree.leaves(state.replay.storage)[0].shape[0]

        def insert(buf, step):  # one step of the N envs, as the one-process loop adds them
            step_items, step_priorities = step
            rows = (buf.position + jnp.arange(step_priorities.shape[0])) % capacity
            buf = buffer.add(buf, step_items)
            if buffer.update_priorities is not None:  # the actors' priorities, not the max
                buf = buffer.update_priorities(buf, rows, step_priorities)
            return buf, None

        buf, _ = jax.lax.scan(insert, state.replay, (items, priorities))
        env_steps = state.env_steps + steps_per_iteration
        ready = parallel.all_runs(env_steps >= replay.learning_starts)
        k_learn = jax.random.fold_in(state.key, state.iteration)
        agent_state, buf, metrics = replay.updates.gated(ready, state.agent_state, buf, k_learn)
        ret, length, ep = episode_metrics(
            episodes, state.last_episode_return, state.last_episode_length
        )
        new = state.replace(
            agent_state=agent_state,
            replay=buf,
            iteration=state.iteration + 1,
            env_steps=env_steps,
            last_episode_return=ret,
            last_episode_length=length,
        )
        extra = {"train/env_steps": env_steps, "apex/actor_priority": priorities.mean()}
        return new, {**metrics, **ep, **extra}

    return one


def run(
    agent: Agent,
    host_env: Any,
    spec: EnvSpec,
    keys: jax.Array,
    num_iterations: int,
    num_steps: int,
    num_envs: int,
    options: SebulbaOptions = SebulbaOptions(),
    *,
    num_reports: int = 20,
    hparams: dict[str, Any] | None = None,
    with_hparams: Callable | None = None,
    initial_state: SebulbaState | None = None,
    start_iteration: int = 0,
    hooks: RunHooks = RunHooks(),
    env_snapshots: list | None = None,
    on_snapshots: Callable[[int, list], None] | None = None,
    replay=None,
) -> RunResult:
    """Trains ``len(keys)`` runs of ``agent`` on ``host_env`` (see the module docstring).

    Args:
      agent: built for ``options.learner_devices`` devices (``num_envs / devices`` envs each).
      host_env: the env; every run has ``num_envs`` of it, split over the actor threads.
      spec: the agent's env spec (the host env's spaces).
      keys: ``[R]`` run keys.
      num_iterations, num_steps: updates per run and steps per env between them.
      hparams, with_hparams: swept values (name -> ``[R]``) set after init through the
        algorithm's hook (``with_hparams(state, values)`` of one agent state).
      initial_state, start_iteration: a resumed run's states and the updates they have done.
      hooks: as for :func:`jrl.run.anakin.run`; ``on_chunk`` gets :class:`SebulbaState`\\ s.
      env_snapshots: per actor thread, per run, the host envs' saved state to restore (exact
        resume in push mode); None: fresh envs.
      on_snapshots: ``on_snapshots(iteration, snapshots)`` receives the host envs' snapshots
        (per thread, per run) taken at every chunk end, on the learner thread, after that
        iteration is learned.
      replay: an agent's :class:`~jrl.run.builders.ActorReplay` (Ape-X): actors push replay items
        with priorities into a buffer the learner states hold, instead of trajectories.
    """
    check_options(options, host_env, num_envs, int(keys.shape[0]), replay is not None)
    if num_iterations <= 0:
        raise ValueError(f"num_iterations must be positive, got {num_iterations}")
    if initial_state is not None and hparams:
        raise ValueError("hparams are set after init: an initial_state carries its own")
    L = options.learner_devices
    processes = jax.process_count()
    # the actors act on their own process's devices
    devices = jax.local_devices() if processes > 1 else jax.devices()
    actor_devs = devices[L : L + options.actor_devices] or devices[:1]
    mesh = make_mesh(L) if L > 1 else None
    # this process's actors: the same envs and act keys as actors first .. first + A - 1 of a
    # one-process run with processes x A actors (its share of the envs, in process order)
    local_envs, first = num_envs // processes, jax.process_index() * options.num_actors
    lengths = remaining_chunks(num_iterations, num_reports, start_iteration)
    ends = set((np.cumsum(lengths) + start_iteration).tolist())

    if initial_state is not None:
        states = initial_state
    else:
        states = init_states(agent, spec, keys, replay)
    if hparams:
        values = {k: jnp.asarray(v) for k, v in hparams.items()}
        states = states.replace(agent_state=jax.vmap(with_hparams)(states.agent_state, values))
    per_iter = num_steps * num_envs
    learn = _learn_fn(agent, mesh, per_iter, replay)
    act = _act_fn(agent, replay)
    seeds = np.asarray(jax.device_get(states.env_seed)).tolist()

    def snapshot_due(done: int) -> bool:
        return done in ends

    runner = _Runner(
        options,
        num_steps,
        num_iterations,
        start_iteration,
        act,
        snapshot_due,
        env_snapshots,
        _prepare_fn(replay),
    )
    if options.ray_actors:  # actor processes (jrl[ray]), imported only when asked for
        from jrl.run import ray_actors

        template = jax.tree.map(lambda x: np.zeros((), x.dtype), states.agent_state)
        actors = ray_actors.ray_pool(
            runner, agent, host_env, seeds, local_envs, template, first, num_envs, replay=replay
        )
    else:
        actors = _actor_threads(runner, host_env, seeds, local_envs, actor_devs, first)
    with actors as pool:
        return _learner_loop(
            runner, pool, learn, states, lengths, hooks, mesh, on_snapshots, per_iter
        )


class ThreadActors:
    """The actor threads as the learner drives them; :class:`jrl.run.ray_actors.RayPool` is
    the same interface over Ray actor processes."""

    def __init__(self, runner: "_Runner", actors: list[_Actor]):
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

    def take(self) -> tuple[list[_Item] | None, float]:
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
def _actor_threads(
    runner: _Runner, host_env: Any, seeds: list[int], num_envs: int, devices, first: int = 0
):
    """The actor threads (not started), each with its share of ``num_envs`` host envs of every
    run (env ``i`` of thread ``a`` in run ``r`` seeded ``seeds[r] + (first + a) * n + i``, and
    acting as actor ``first + a``: ``first`` > 0 in the later processes of a multi-process run)
    and a device in turn. On exit every thread is stopped (queues drained, so none blocks on a
    full one) and joined, and the envs are closed."""
    opts = runner.options
    per_thread = num_envs // opts.actor_threads
    actors, made, failing = [], [], False
    try:
        for a in range(opts.actor_threads):
            index = first + a
            batches = [
                host_env.make_batch(per_thread, seed + index * per_thread, opts.pull_batch or None)
                for seed in seeds
            ]
            made += batches
            actors.append(_Actor(index, runner, batches, devices[a % len(devices)]))
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
        for b in made:
            try:
                b.close()
            except Exception:  # closing after a crash: the original error is what matters
                pass
        if stuck and not failing:  # (a stuck thread under another error: that error is raised)
            raise ActorTimeout(
                f"actor thread {stuck[0]} did not stop within {_seconds(limit)} of the end of "
                "the run (stuck in its env?)"
            )


def collect(
    agent: Agent,
    host_env: Any,
    spec: EnvSpec,
    keys: jax.Array,
    num_steps: int,
    num_envs: int,
    count: int,
    options: SebulbaOptions = SebulbaOptions(),
) -> list[list["_Item"]]:
    """The actors alone: ``count`` trajectories from every actor thread, all acted with the
    initial parameters (nothing is learned; ``max_staleness`` must allow ``count - 1``).
    Returns, per iteration, the actors' items (``batch``: ``Transition [R, T, n]``) in thread
    order; for tests and for measuring actor throughput."""
    options.validate(num_envs)
    if options.max_staleness < count - 1:
        raise ValueError(f"collecting {count} trajectories needs max_staleness >= {count - 1}")
    states = init_states(agent, spec, keys)
    seeds = np.asarray(jax.device_get(states.env_seed)).tolist()
    runner = _Runner(options, num_steps, count, 0, _act_fn(agent), lambda done: False, None)
    with _actor_threads(runner, host_env, seeds, num_envs, jax.devices()[:1]) as pool:
        pool.publish(0, _published(states, "float32"))
        pool.start()
        out = []
        for _ in range(count):
            items, _ = pool.take()
            if items is None:
                raise pool.error()
            out.append(items)
        return out


def remaining_chunks(num_iterations: int, num_reports: int, start: int) -> list[int]:
    """The chunks of :func:`jrl.run.anakin.chunk_lengths`'s schedule after ``start``; a start
    inside a chunk (a run stopped by a failing actor) first finishes that chunk."""
    ends = np.cumsum(chunk_lengths(num_iterations, num_reports))
    later = [int(e) for e in ends if e > start]
    return [b - a for a, b in zip([start] + later[:-1], later)]


def _drain(q: queue.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


def _published(states: SebulbaState, transfer: str):
    """What actors pull: the agent state (compressed) and the act keys."""
    return _compress(states.agent_state, transfer), states.act_key


def _shards_ready(tree: PyTree) -> None:
    """Builds, in the calling thread, the shard list of every array of ``tree`` that spans
    several devices: JAX makes it lazily on first use, and built here, before publishing, the
    actor threads copying the learner's arrays to their devices only read it. (One suite run
    failed inside an actor's ``device_put`` with ``safe_zip() argument 1 has length 2 but
    argument 0 has length 1``, the shard list shorter than the sharding; two threads making
    that lazy list at once is the suspected cause. A stress loop of 3,000 concurrent copies
    did not reproduce it.)"""
    for x in jax.tree.leaves(tree):
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
            x.addressable_shards  # noqa: B018 -- built and cached by JAX on this access


def _to_mesh(tree: PyTree, sharding: NamedSharding | None) -> PyTree:
    """``tree`` (this process's values) placed with ``sharding``. With several processes each
    one gives its part: its share of the envs where ``sharding`` splits them, the same
    replicated values otherwise."""
    if sharding is None or jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def put(x):
        if is_key(x):
            data = put(jax.random.key_data(x))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))

    return jax.tree.map(put, tree)


def _local(tree: PyTree) -> PyTree:
    """This process's copy of replicated arrays that span several processes (what its actors
    act with, what it reports); other leaves unchanged."""
    if jax.process_count() == 1:  # every array is this process's own
        return tree

    def local(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x.addressable_data(0)
        return x

    return jax.tree.map(local, tree)


def _learner_loop(runner, pool, learn, states, lengths, hooks, mesh, on_snapshots, per_iter):
    opts = runner.options
    if opts.transfer != "float32":
        template = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), states.agent_state
        )
        runner.expand = jax.jit(lambda s: _expand(s, template))

    def publish(version, states):
        published = _published(_local(states), opts.transfer)
        _shards_ready(published)
        pool.publish(version, published)
        return nbytes(published[0])

    sharding = None
    if mesh is not None:
        sharding = NamedSharding(mesh, P(None, None, parallel.AXIS))
        states = _to_mesh(states, NamedSharding(mesh, P()))
    compile_t0 = time.perf_counter()
    params_bytes = publish(runner.start, states)
    pool.start()
    t_last = time.perf_counter()
    done, runs = runner.start, int(states.iteration.shape[0])
    history, t_start, compile_seconds, first = [], None, 0.0, True
    error: ActorError | None = None
    timings = {"learner_wait_s": 0.0, "learner_s": 0.0, "actor_s": 0.0}
    for n in lengths:
        if hooks.should_stop is not None and hooks.should_stop():
            break
        chunk: list[dict[str, Any]] = []
        for _ in range(n):
            items, waited = pool.take()
            if items is None:
                error = pool.error()
                break
            lags = [done - it.version for it in items]
            batch = jax.tree.map(lambda *xs: np.concatenate(xs, 2), *[it.batch for it in items])
            episodes = {
                k: np.concatenate([it.episodes[k] for it in items], 2) for k in items[0].episodes
            }
            traj_bytes = nbytes(batch) + nbytes(episodes)
            batch, episodes = _to_mesh((batch, episodes), sharding)
            counted = not first  # the first update (compilation) is not timed
            t_learn = time.perf_counter()
            states, metrics = learn(states, batch, episodes)
            jax.block_until_ready(states)  # the learner's time is its own, not the actors'
            learn_seconds = time.perf_counter() - t_learn
            done += 1
            params_bytes = publish(done, states)
            now = time.perf_counter()
            if first:
                jax.block_until_ready(states)
                compile_seconds, first = time.perf_counter() - compile_t0, False
                t_start = time.perf_counter()
            if items[0].snapshots is not None and on_snapshots is not None:
                on_snapshots(done, [it.snapshots for it in items])
            if counted:
                timings["learner_wait_s"] += waited
                timings["learner_s"] += learn_seconds
                timings["actor_s"] += float(np.mean([it.act_seconds for it in items]))
            extra = {
                "sebulba/policy_lag": float(np.mean(lags)),
                "sebulba/policy_lag_max": float(max(lags)),
                "sebulba/trajectory_bytes": float(traj_bytes),
                "sebulba/params_bytes": float(params_bytes),
                # trajectories in, the new version out to every actor, per second of this
                # iteration (the first one's seconds include compiling the update)
                "sebulba/bytes_per_s": float(traj_bytes + params_bytes * pool.count)
                / max(now - t_last, 1e-9),
                **pool.metrics(),
            }
            t_last = now
            chunk.append((metrics, extra))
        if chunk:
            got = jax.device_get(_local([m for m, _ in chunk]))
            merged = {k: np.stack([np.asarray(g[k]) for g in got]) for k in got[0]}  # [c, R]
            for k in chunk[0][1]:
                merged[k] = np.stack([np.full(runs, e[k], np.float32) for _, e in chunk])
            history.append(merged)
            if hooks.on_chunk is not None:
                hooks.on_chunk(_local(states), done, merged)
            if hooks.on_report is not None and t_start is not None:
                elapsed = time.perf_counter() - t_start
                latest = {k: np.asarray(v[-1]) for k, v in merged.items()}
                rate = (done - runner.start) * per_iter * runs / max(elapsed, 1e-9)
                hooks.on_report(
                    Report(
                        done,
                        runner.num_iterations,
                        done * per_iter,
                        elapsed,
                        rate,
                        latest,
                        runner.start,
                    )
                )
        if error is not None:
            break
    jax.block_until_ready(states)
    run_seconds = 0.0 if t_start is None else time.perf_counter() - t_start
    merged = {}
    if history:
        merged = {k: np.concatenate([h[k] for h in history], axis=0).T for k in history[0]}
    result = RunResult(
        merged,
        _local(states),
        compile_seconds,
        run_seconds,
        (done - runner.start) * per_iter,
        runs,
        None,
        iterations=done,
    )
    result.timings = {**timings, "run_s": run_seconds}  # learner waiting vs. run time
    if error is not None:
        error.result = result
        raise error
    return result


def _take(actors, j: int) -> tuple[list[_Item] | None, float]:
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
                        f"the learner waited {_seconds(limit)} for trajectory {j} of actor "
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

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
- **Central inference** (``inference="learner"``, SEED RL: :mod:`jrl.run.sebulba.inference`):
  the actors only step envs and an inference thread acts for all of them on the learner's
  first device, in batches of fixed shape (so a synchronous run does not depend on the
  batching); trajectories are written in the learner's process, and with Ray processes
  (:mod:`jrl.run.ray_workers`) only actions, observations and step results cross.
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

The package's modules, from the bottom up: :mod:`~jrl.run.sebulba.waits` (the bounded waits
and the errors that stop a run), :mod:`~jrl.run.sebulba.transfers` (bfloat16 compression,
byte counts), :mod:`~jrl.run.sebulba.acting` (the acting half the actor threads and the Ray
actor processes share), :mod:`~jrl.run.sebulba.options` (:class:`SebulbaOptions` and the
checks), :mod:`~jrl.run.sebulba.state` (the learner's train states),
:mod:`~jrl.run.sebulba.actors` (the actor threads), :mod:`~jrl.run.sebulba.inference`
(central inference), :mod:`~jrl.run.sebulba.learner` (the
learner loop) and :mod:`~jrl.run.sebulba.runner` (:func:`run`, :func:`collect`). This package
re-exports their public names.
"""

from __future__ import annotations

from jrl.run.reports import RunHooks
from jrl.run.sebulba.acting import Item, LocalEnvs, PushActing, act_fn, make_item, prepare_fn
from jrl.run.sebulba.actors import Runner, ThreadActors, actor_threads
from jrl.run.sebulba.learner import published
from jrl.run.sebulba.options import (
    INFERENCE,
    TRANSFERS,
    SebulbaOptions,
    check_agent,
    check_options,
    check_processes,
    parse_actors,
)
from jrl.run.sebulba.runner import collect, remaining_chunks, run
from jrl.run.sebulba.state import SebulbaState, abstract_states, init_states
from jrl.run.sebulba.transfers import nbytes
from jrl.run.sebulba.waits import (
    JOIN_S,
    WAIT_ENV,
    WAIT_S,
    ActorError,
    ActorTimeout,
    wait_limit,
)

__all__ = [
    "ActorError",
    "ActorTimeout",
    "INFERENCE",
    "Item",
    "JOIN_S",
    "LocalEnvs",
    "PushActing",
    "RunHooks",
    "Runner",
    "SebulbaOptions",
    "SebulbaState",
    "TRANSFERS",
    "ThreadActors",
    "WAIT_ENV",
    "WAIT_S",
    "abstract_states",
    "act_fn",
    "actor_threads",
    "check_agent",
    "check_options",
    "check_processes",
    "collect",
    "init_states",
    "make_item",
    "nbytes",
    "parse_actors",
    "prepare_fn",
    "published",
    "remaining_chunks",
    "run",
    "wait_limit",
]

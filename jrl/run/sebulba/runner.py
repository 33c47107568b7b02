"""The Sebulba runner's entry points: :func:`run` (actors and learner together) and
:func:`collect` (the actors alone)."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jrl.parts.agent import Agent, EnvSpec
from jrl.run import ray_actors
from jrl.run.anakin import chunk_lengths
from jrl.run.placement import make_mesh
from jrl.run.reports import RunHooks, RunResult
from jrl.run.sebulba.acting import Item, act_fn, prepare_fn
from jrl.run.sebulba.actors import Runner, actor_threads
from jrl.run.sebulba.inference import central_pool
from jrl.run.sebulba.learner import learn_fn, learner_loop, published
from jrl.run.sebulba.options import SebulbaOptions, check_options
from jrl.run.sebulba.state import SebulbaState, init_states

__all__ = ["collect", "remaining_chunks", "run"]


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
      env_snapshots: per actor, per run, the host envs' saved state to restore (exact
        resume in push mode), indexed by global actor (in a multi-process run, process p's
        actors are ``p * A .. p * A + A - 1``); None: fresh envs.
      on_snapshots: ``on_snapshots(iteration, snapshots)`` receives the host envs' snapshots
        of this process's actors (per actor, per run) taken at every chunk end, on the
        learner thread, after that iteration is learned.
      replay: an agent's :class:`~jrl.run.builders.ActorReplay` (Ape-X): actors push replay items
        with priorities into a buffer the learner states hold, instead of trajectories.
    """
    check_options(options, host_env, num_envs, int(keys.shape[0]), replay is not None)
    _check_start(num_iterations, initial_state, hparams)
    L = options.learner_devices
    mesh = make_mesh(L) if L > 1 else None
    lengths = remaining_chunks(num_iterations, num_reports, start_iteration)
    states = _first_states(agent, spec, keys, replay, initial_state, hparams, with_hparams)
    per_iter = num_steps * num_envs
    learn = learn_fn(agent, mesh, per_iter, replay)
    runner = _runner(
        agent, options, num_steps, num_iterations, start_iteration, lengths, env_snapshots, replay
    )
    with _actor_pool(runner, agent, host_env, states, num_envs, replay) as pool:
        return learner_loop(
            runner, pool, learn, states, lengths, hooks, mesh, on_snapshots, per_iter
        )


def _check_start(num_iterations: int, initial_state, hparams) -> None:
    if num_iterations <= 0:
        raise ValueError(f"num_iterations must be positive, got {num_iterations}")
    if initial_state is not None and hparams:
        raise ValueError("hparams are set after init: an initial_state carries its own")


def _first_states(agent, spec, keys, replay, initial_state, hparams, with_hparams):
    """The states the run starts from: ``initial_state`` or fresh ones, with the swept
    ``hparams`` set through ``with_hparams``."""
    if initial_state is not None:
        states = initial_state
    else:
        states = init_states(agent, spec, keys, replay)
    if hparams:
        values = {k: jnp.asarray(v) for k, v in hparams.items()}
        states = states.replace(agent_state=jax.vmap(with_hparams)(states.agent_state, values))
    return states


def _runner(agent, options, num_steps, num_iterations, start, lengths, snapshots, replay):
    """The :class:`~jrl.run.sebulba.actors.Runner` of a run: the actors snapshot their envs at
    every chunk end."""
    ends = set((np.cumsum(lengths) + start).tolist())

    def snapshot_due(done: int) -> bool:
        return done in ends

    act = act_fn(agent, replay)
    return Runner(
        options, num_steps, num_iterations, start, act, snapshot_due, snapshots, prepare_fn(replay)
    )


def _actor_pool(runner: Runner, agent, host_env, states, num_envs: int, replay):
    """This process's actors (not started), as a context manager: Ray actor processes
    (``jrl[ray]``) or threads, which act on their own process's devices, or with
    ``inference="learner"`` env workers (threads or Ray processes) for which the learner's
    first device acts (:mod:`jrl.run.sebulba.inference`). In a multi-process
    run they take the envs and act keys of actors ``first .. first + A - 1`` of a one-process
    run with processes x A actors (this process's share of the envs, in process order)."""
    options, processes = runner.options, jax.process_count()
    devices = jax.local_devices() if processes > 1 else jax.devices()
    L = options.learner_devices
    actor_devs = devices[L : L + options.actor_devices] or devices[:1]
    local_envs, first = num_envs // processes, jax.process_index() * options.num_actors
    seeds = np.asarray(jax.device_get(states.env_seed)).tolist()
    if options.inference == "learner":  # SEED RL: the learner's first device acts for all
        return central_pool(runner, agent, host_env, seeds, local_envs, devices[0], first)
    if options.ray_actors:
        template = jax.tree.map(lambda x: np.zeros((), x.dtype), states.agent_state)
        return ray_actors.ray_pool(
            runner, agent, host_env, seeds, local_envs, template, first, num_envs, replay=replay
        )
    return actor_threads(runner, host_env, seeds, local_envs, actor_devs, first)


def collect(
    agent: Agent,
    host_env: Any,
    spec: EnvSpec,
    keys: jax.Array,
    num_steps: int,
    num_envs: int,
    count: int,
    options: SebulbaOptions = SebulbaOptions(),
) -> list[list[Item]]:
    """The actors alone: ``count`` trajectories from every actor thread, all acted with the
    initial parameters (nothing is learned; ``max_staleness`` must allow ``count - 1``).
    Returns, per iteration, the actors' items (``batch``: ``Transition [R, T, n]``) in thread
    order; for tests and for measuring actor throughput."""
    options.validate(num_envs)
    if options.max_staleness < count - 1:
        raise ValueError(f"collecting {count} trajectories needs max_staleness >= {count - 1}")
    states = init_states(agent, spec, keys)
    seeds = np.asarray(jax.device_get(states.env_seed)).tolist()
    runner = Runner(options, num_steps, count, 0, act_fn(agent), lambda done: False, None)
    with actor_threads(runner, host_env, seeds, num_envs, jax.devices()[:1]) as pool:
        pool.publish(0, published(states, "float32"))
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

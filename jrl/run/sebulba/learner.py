"""Sebulba's learner: the jitted update of every run (``shard_map``ped over the learner
devices), and the loop that takes trajectory ``j`` from every actor, learns from it and
publishes the new agent state as version ``j + 1`` (:func:`learner_loop`)."""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jrl.core import parallel
from jrl.core.types import PyTree, is_key
from jrl.parts.agent import Agent
from jrl.run.algorithm import episode_metrics
from jrl.run.reports import Report, RunHooks, RunResult
from jrl.run.sebulba.actors import Runner
from jrl.run.sebulba.state import SebulbaState
from jrl.run.sebulba.transfers import compress, expand, nbytes
from jrl.run.sebulba.waits import ActorError

__all__ = ["learn_fn", "learner_loop", "published"]


def learn_fn(agent: Agent, mesh: Mesh | None, steps_per_iteration: int, replay=None):
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


def published(states: SebulbaState, transfer: str):
    """What actors pull: the agent state (compressed) and the act keys."""
    return compress(states.agent_state, transfer), states.act_key


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


def learner_loop(
    runner: Runner, pool, learn, states, lengths, hooks: RunHooks, mesh, on_snapshots, per_iter
) -> RunResult:
    """Runs the chunks ``lengths`` of iterations with ``pool``'s actors (``ThreadActors`` or
    :class:`~jrl.run.ray_actors.RayPool`), calling the hooks after each chunk. An actor's
    failure ends the run once the iterations of the chunk learned so far have been handed to
    ``on_chunk``; it is raised with the :class:`RunResult` as ``error.result``."""
    if runner.options.transfer != "float32":
        template = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), states.agent_state
        )
        runner.expand = jax.jit(lambda s: expand(s, template))
    learner = _Learner(runner, pool, learn, mesh, per_iter, on_snapshots)
    if mesh is not None:
        states = _to_mesh(states, NamedSharding(mesh, P()))
    learner.begin(states)
    history, error = [], None
    for n in lengths:
        if hooks.should_stop is not None and hooks.should_stop():
            break
        chunk: list[tuple[dict, dict]] = []
        for _ in range(n):
            items, waited = pool.take()
            if items is None:
                error = pool.error()
                break
            states, row = learner.step(states, items, waited)
            chunk.append(row)
        if chunk:
            history.append(learner.end_chunk(states, chunk, hooks))
        if error is not None:
            break
    return learner.finish(states, history, error)


class _Learner:
    """The learner's side of one :func:`learner_loop`: publishing versions, one iteration
    (:meth:`step`), the chunk's metrics and hooks, and the result with its timings."""

    def __init__(self, runner: Runner, pool, learn, mesh: Mesh | None, per_iter, on_snapshots):
        self.runner, self.pool, self.learn = runner, pool, learn
        self.per_iter, self.on_snapshots = per_iter, on_snapshots
        self.sharding = None
        if mesh is not None:  # trajectories [R, T, N, ...]: the envs split over the devices
            self.sharding = NamedSharding(mesh, P(None, None, parallel.AXIS))
        self.done = runner.start
        self.t_start: float | None = None
        self.compile_seconds, self.first = 0.0, True
        self.timings = {"learner_wait_s": 0.0, "learner_s": 0.0, "actor_s": 0.0}
        # the copies of each version sent to actors (central inference keeps it at the learner)
        self.copies = 0 if runner.options.inference == "learner" else pool.count

    def publish(self, version: int, states) -> int:
        """Makes ``states`` version ``version`` for the actors; returns the bytes sent."""
        sent = published(_local(states), self.runner.options.transfer)
        _shards_ready(sent)
        self.pool.publish(version, sent)
        return nbytes(sent[0])

    def begin(self, states) -> None:
        """Publishes the first version and starts the actors."""
        self.runs = int(states.iteration.shape[0])
        self.compile_t0 = time.perf_counter()
        self.params_bytes = self.publish(self.runner.start, states)
        self.pool.start()
        self.t_last = time.perf_counter()

    def step(self, states, items: list, waited: float) -> tuple[Any, tuple[dict, dict]]:
        """Learns from the actors' ``items`` (trajectory ``done`` of each) and publishes the
        new version; returns the states and ``(metrics, transfer metrics)``."""
        lags = [self.done - it.version for it in items]
        batch = jax.tree.map(lambda *xs: np.concatenate(xs, 2), *[it.batch for it in items])
        episodes = {
            k: np.concatenate([it.episodes[k] for it in items], 2) for k in items[0].episodes
        }
        traj_bytes = nbytes(batch) + nbytes(episodes)
        batch, episodes = _to_mesh((batch, episodes), self.sharding)
        counted = not self.first  # the first update (compilation) is not timed
        t_learn = time.perf_counter()
        states, metrics = self.learn(states, batch, episodes)
        jax.block_until_ready(states)  # the learner's time is its own, not the actors'
        learn_seconds = time.perf_counter() - t_learn
        self.done += 1
        self.params_bytes = self.publish(self.done, states)
        now = time.perf_counter()
        if self.first:
            jax.block_until_ready(states)
            self.compile_seconds, self.first = time.perf_counter() - self.compile_t0, False
            self.t_start = time.perf_counter()
        if items[0].snapshots is not None and self.on_snapshots is not None:
            self.on_snapshots(self.done, [it.snapshots for it in items])
        if counted:
            self.timings["learner_wait_s"] += waited
            self.timings["learner_s"] += learn_seconds
            self.timings["actor_s"] += float(np.mean([it.act_seconds for it in items]))
        extra = {
            "sebulba/policy_lag": float(np.mean(lags)),
            "sebulba/policy_lag_max": float(max(lags)),
            "sebulba/trajectory_bytes": float(traj_bytes),
            "sebulba/params_bytes": float(self.params_bytes),
            # trajectories in, the new version out to every actor (none with central
            # inference), per second of this iteration (the first one's include compiling)
            "sebulba/bytes_per_s": float(traj_bytes + self.params_bytes * self.copies)
            / max(now - self.t_last, 1e-9),
            **self.pool.metrics(),
        }
        self.t_last = now
        return states, (metrics, extra)

    def end_chunk(self, states, chunk: list, hooks: RunHooks) -> dict[str, np.ndarray]:
        """The chunk's metrics ``[c, R]`` (its transfer metrics the same in every run), after
        ``on_chunk`` and ``on_report`` have had them."""
        got = jax.device_get(_local([m for m, _ in chunk]))
        merged = {k: np.stack([np.asarray(g[k]) for g in got]) for k in got[0]}  # [c, R]
        for k in chunk[0][1]:
            merged[k] = np.stack([np.full(self.runs, e[k], np.float32) for _, e in chunk])
        if hooks.on_chunk is not None:
            hooks.on_chunk(_local(states), self.done, merged)
        if hooks.on_report is not None and self.t_start is not None:
            runner, done = self.runner, self.done
            elapsed = time.perf_counter() - self.t_start
            latest = {k: np.asarray(v[-1]) for k, v in merged.items()}
            rate = (done - runner.start) * self.per_iter * self.runs / max(elapsed, 1e-9)
            hooks.on_report(
                Report(
                    done,
                    runner.num_iterations,
                    done * self.per_iter,
                    elapsed,
                    rate,
                    latest,
                    runner.start,
                )
            )
        return merged

    def finish(self, states, history: list, error: ActorError | None) -> RunResult:
        """The run's :class:`RunResult` (``timings``: learner waiting vs. run time); raises
        ``error`` with the result as its ``result`` when an actor failed."""
        jax.block_until_ready(states)
        run_seconds = 0.0 if self.t_start is None else time.perf_counter() - self.t_start
        merged = {}
        if history:
            merged = {k: np.concatenate([h[k] for h in history], axis=0).T for k in history[0]}
        result = RunResult(
            merged,
            _local(states),
            self.compile_seconds,
            run_seconds,
            (self.done - self.runner.start) * self.per_iter,
            self.runs,
            None,
            iterations=self.done,
        )
        result.timings = {**self.timings, "run_s": run_seconds}  # learner waiting vs. run time
        if error is not None:
            error.result = result
            raise error
        return result

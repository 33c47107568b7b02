"""Executing a run: the runner, and the run folder's outputs before and after it.

:func:`execute` builds the agent of a :class:`~jrl.app.run_options.RunSpec`, loads and
checks a checkpoint when resuming, refuses what would not fit in memory, and
only then touches the run folder; it runs the Anakin (or Sebulba) runner with a
:class:`~jrl.app.chunk_work.ChunkWork` as its per-chunk hook (all the host does
after a chunk: checks, history, sinks, evaluation, checkpoints) and returns a
:class:`~jrl.app.result.TrainResult`.

SIGINT/SIGTERM (:class:`~jrl.app.stopping.StopRequest`) ask the loop to stop before
the next chunk; it then writes a checkpoint and raises :class:`TrainingInterrupted`.
A NaN raises :class:`~jrl.app.chunk_work.NonFiniteError` without checkpointing the
bad state; any other failure of the per-chunk work checkpoints the good chunk first.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jrl.agents
import jrl.envs
from jrl.app import checkpoint, peers, reshard, run_folder, sinks
from jrl.app.checkpoint import CheckpointError
from jrl.app.chunk_work import (
    HOST_ENVS,
    CheckpointWriteError,
    ChunkWork,
    NonFiniteError,
    Start,
    abstract_states,
    decode_host_envs,
    is_sebulba,
)
from jrl.app.result import TrainResult
from jrl.app.run_options import RunSpec
from jrl.app.stopping import StopRequest
from jrl.envs.host import host_env_of
from jrl.core.parallel import AXIS
from jrl.run import anakin, pbt, sebulba

__all__ = [
    "CheckpointWriteError",
    "NonFiniteError",
    "StopRequest",
    "TrainingInterrupted",
    "abstract_states",
    "execute",
    "one_view",
]


class TrainingInterrupted(Exception):
    """Training stopped before its last iteration: a signal (SIGINT, SIGTERM) or
    ``stop_at_steps``. The current chunk was finished and, with a run folder, a
    checkpoint written; ``result`` holds the histories so far (None when it
    stopped before the first chunk)."""

    def __init__(self, message: str, result: Any, reason: str | None, checkpoint: Path | None):
        super().__init__(message)
        self.result, self.reason, self.checkpoint = result, reason, checkpoint

    @property
    def exit_code(self) -> int:
        """The shell convention: 128 + the signal number; 0 for a requested stop."""
        return {"SIGINT": 130, "SIGTERM": 143}.get(self.reason or "", 0)


def one_view(spec: RunSpec, states: Any) -> Any:
    """``[R, ...]`` states of a checkpoint (device 0's slice of a sharded Anakin run)."""
    if spec.options.devices is None or is_sebulba(spec):
        return states
    return anakin.first_device(states)


def load_start(spec: RunSpec, built, out_path: Path, step: int | None, mesh, cores=None) -> Start:
    """The checkpoint to resume from, loaded and checked against the run record (a
    checkpoint of another run is refused). A checkpoint at the last iteration gives a
    ``Start`` with ``complete`` set (only the final outputs may be missing)."""
    processes, like = jax.process_count(), abstract_states(spec, built)
    # a multi-process run reads only its own blocks of the state spread over the processes;
    # an Anakin state checkpointed on another device count is moved onto this one
    sharding = NamedSharding(mesh, P(AXIS)) if processes > 1 and mesh is not None else None
    devices = None
    if not is_sebulba(spec):
        devices = (spec.options.devices, reshard.buffer_leaves(like))
    ck = checkpoint.load(out_path, like, step, sharding=sharding, devices=devices)
    run_folder.check_checkpoint_run(ck.meta, spec, ck.path)
    before = ck.meta["run"].get("devices")
    if devices is not None and before != spec.options.devices and jax.process_index() == 0:
        print(
            f"jrl: note: resuming on {spec.options.devices or 1} device(s) a run checkpointed on "
            f"{before or 1}: its envs are split anew over the devices, so it goes on as the "
            "uninterrupted run would up to float rounding (not bit for bit)",
            file=sys.stderr,
        )
    return Start(
        ck.step,
        {k: np.asarray(v) for k, v in ck.history.items()},
        list(ck.meta["reports"]),
        list(ck.meta["evals"]),
        float(ck.meta["run_seconds"]),
        anakin.place(ck.state, mesh, cores),
        resuming=True,
        complete=ck.step >= spec.config.num_iterations,
        later=[s for s in checkpoint.steps(out_path) if s > ck.step],
        host_envs=ck.meta.get(HOST_ENVS),
    )


def execute(
    spec: RunSpec, out_path: Path | None, resume_step: int | None = None, resuming: bool = False
) -> TrainResult:
    """Runs ``spec`` (a new run, or with ``resuming`` the one in ``out_path``); writes
    ``out_path`` unless None (processes other than 0 of a multi-process run)."""
    opts = spec.options
    on_host = is_sebulba(spec)
    mesh = anakin.make_mesh(opts.devices) if opts.devices is not None and not on_host else None
    env, env_params = jrl.envs.make(spec.env_id, **opts.env_overrides)
    built = jrl.agents.get(spec.agent).build(
        spec.config, env, env_params, num_devices=opts.devices or 1
    )
    if on_host:
        sebulba.check_agent(built.agent, built.env)
    if opts.pbt is not None:
        ranges = spec.config.field_ranges()  # perturbed values stay in their fields' ranges
        pbt_algorithm = pbt.with_pbt(built.algorithm, opts.pbt, len(spec.run_seeds), ranges)
        built = dataclasses.replace(built, algorithm=pbt_algorithm)
    # the CPU cores an Anakin run's independent runs are spread over (anakin.spread_mesh)
    cores = None
    if mesh is None and not on_host:
        cores = anakin.spread_mesh(len(spec.run_seeds), built.algorithm)
    stop = StopRequest(quiet=jax.process_index() != 0)
    writer = jax.process_index() == 0  # process 0 writes the run folder
    with stop:  # from here on a signal only asks to stop: the checkpoint and outputs are written
        # everything that can refuse comes before the folder changes; in a multi-process run
        # every process loads and checks, and all stop when one refuses (jrl.app.peers)
        with peers.agreement("start the run"):
            start = (
                load_start(spec, built, out_path, resume_step, mesh, cores) if resuming else Start()
            )
            if start.complete:  # decided before process 0 writes what is missing
                missing = _missing_outputs(spec, out_path, start)
            else:
                if not on_host:  # a Sebulba learner holds no envs or buffers
                    anakin.check_memory(built.algorithm, spec.keys(), mesh)
                if out_path is not None and writer:
                    _prepare_folder(spec, out_path, start)
        if start.complete:
            return _complete(spec, out_path, start, missing)
        work = ChunkWork(spec, built, out_path, start, mesh, cores)
        try:
            with peers.agreement("open the run folder"):
                work.open_outputs()
            result = _run(work, stop)
        except BaseException as e:
            work.close(e)
            raise
        work.close(None)
        return _finish(work, result, work.stop_reason)  # a signal still only asks to stop


def _prepare_folder(spec: RunSpec, out_path: Path, start: Start) -> None:
    sinks.check_available(spec.options.log)
    if spec.options.overwrite and not start.resuming:
        run_folder.clear_run(out_path)
    out_path.mkdir(parents=True, exist_ok=True)
    if not start.resuming:
        run_folder.write_record(out_path, spec)
    elif start.later:  # the later ones belong to the history being replaced: dropped, but not yet
        print(
            f"jrl: resuming from iteration {start.iteration}: the later checkpoints "
            f"{start.later} are deleted when this run writes its first checkpoint",
            file=sys.stderr,
        )


def _result(
    spec: RunSpec, history, final_state, compile_seconds, run_seconds, evals
) -> TrainResult:
    env_steps = np.asarray(history["train/env_steps"][0], np.int64)  # warm-up steps included
    return TrainResult(
        spec.agent,
        spec.env_id,
        spec.config,
        spec.run_seeds,
        spec.run_sweep,
        env_steps,
        history,
        final_state,
        compile_seconds,
        run_seconds,
        evals=evals,
    )


def _missing_outputs(spec: RunSpec, out_path: Path, start: Start) -> list[str]:
    """The final outputs a run whose last checkpoint is its last iteration lacks (a kill
    after the final checkpoint); refuses a run that has them all."""
    missing = [f for f in run_folder.FINAL_FILES if not (out_path / f).is_file()]
    if not missing:
        raise CheckpointError(
            f"{out_path} is already complete ({start.iteration}/{spec.config.num_iterations} "
            f"iterations); evaluate it with `jrl eval {out_path}`"
        )
    return missing


def _complete(spec: RunSpec, out_path: Path, start: Start, missing: list[str]) -> TrainResult:
    """A resume of a run whose last checkpoint is its last iteration: writes the final
    outputs that are ``missing``."""
    state = one_view(spec, start.state)
    result = _result(spec, start.history, state, 0.0, start.prior_seconds, start.evals)
    if jax.process_index() != 0:  # process 0 writes the run folder
        return result
    result.save(out_path, start.reports, write_metrics=False)
    print(
        f"jrl: {out_path} had finished training; wrote its missing {', '.join(missing)}",
        file=sys.stderr,
    )
    return result


def _run(work: "ChunkWork", stop: StopRequest) -> anakin.RunResult:
    spec = work.spec
    num_iterations, limit = spec.config.num_iterations, spec.options.stop_at_steps

    # several processes stop after the same chunk or not at all (jrl.app.peers)
    group = peers.group()
    vote = peers.StopVote(group) if group is not None else None

    def should_stop() -> bool:  # polled before each chunk
        if work.t0 is None:
            work.t0 = time.perf_counter()  # compile done, the first chunk starts
        at_limit = limit is not None and work.done * work.per_iter >= limit
        reason = stop.reason  # read once: a signal after this counts at the next chunk
        if vote is not None:
            with work.paused():  # the others may still be compiling, or writing outputs
                decision = vote.decide(reason)
            reason, work.stopped_by = decision if decision is not None else (None, None)
        if reason is not None or (at_limit and work.done < num_iterations):
            work.stop_reason = reason
            stop.acknowledge()  # no chunk runs after this: a signal's grace bound is met
            return True
        return False

    if work.progress is not None:
        what = f"{num_iterations} iterations"
        if work.start.resuming:
            what = f"resuming at iteration {work.start.iteration}/{num_iterations}"
        total, steps = spec.config.total_steps, num_iterations * work.per_iter
        if steps != total and not work.start.resuming:  # said once, at the start
            what += f" (total_steps {total:,} rounds down to {steps:,} env steps per run)"
        print(
            f"[{work.label}] compiling {what} x {work.per_iter} steps ...",
            file=sys.stderr,
            flush=True,
        )
    # a resumed state carries its hyperparameters (PBT's perturbed ones too): set them on init only
    sweep = spec.run_sweep if work.start.state is None else {}
    hparams = {k: np.asarray(v, np.float32) for k, v in sweep.items()}
    hooks = anakin.RunHooks(on_chunk=work, on_report=work.progress, should_stop=should_stop)
    if is_sebulba(spec):
        res = _run_sebulba(work, hparams, hooks)
    else:
        with work.stall_watch():
            res = _run_anakin(work, hparams, hooks)
    stop.acknowledge()  # the chunks are done: what is left (the outputs) runs without a bound
    if work.checkpointer is not None and work.last_checkpoint != res.iterations:
        final = res.final_state if work.mesh is None else res.sharded_state
        try:
            work.save(res.iterations, final, work.start.prior_seconds + res.run_seconds)
        except CheckpointWriteError as e:  # the final outputs are still attempted (_finish)
            work.save_error = e
    return res


def _run_anakin(work: "ChunkWork", hparams, hooks) -> anakin.RunResult:
    """:func:`_run` on the Anakin runner."""
    spec, algorithm = work.spec, work.built.algorithm
    return anakin.run(
        algorithm,
        work.keys,
        spec.config.num_iterations,
        num_reports=spec.options.num_reports,
        hparams=hparams,
        initial_state=work.start.state,
        mesh=work.mesh,
        start_iteration=work.start.iteration,
        hooks=hooks,
        memory_check=False,  # done by execute() before the folder changed
        spread=False if work.cores is None else work.cores,  # the checks' placement
    )


def _run_sebulba(work: "ChunkWork", hparams, hooks) -> anakin.RunResult:
    """:func:`_run` on the Sebulba runner. A resumed run restores the host envs saved with its
    checkpoint (an exact resume in synchronous mode), or starts fresh episodes where they
    could not be saved. A failing actor stops the run; the iterations learned until then are
    checkpointed before :class:`~jrl.run.sebulba.ActorError` is raised."""
    spec, built, start = work.spec, work.built, work.start
    config = spec.config
    snapshots = None
    if start.resuming:
        snapshots = decode_host_envs(start.host_envs)
        actors = jax.process_count() * spec.options.sebulba().num_actors
        if snapshots is not None and len(snapshots) != actors:  # by global actor index
            raise CheckpointError(
                f"the checkpoint holds the host envs of {len(snapshots)} actors and this run "
                f"has {actors}: resume with as many actors in all"
            )
        if snapshots is None and jax.process_index() == 0:
            print(
                f"jrl: note: {spec.env_id}'s envs could not be saved with the checkpoint: the "
                "resumed run starts fresh episodes (it does not continue the saved ones)",
                file=sys.stderr,
            )
    try:
        return sebulba.run(
            built.agent,
            host_env_of(built.env),
            built.spec,
            work.keys,
            config.num_iterations,
            config.num_steps,
            config.num_envs,
            spec.options.sebulba(),
            num_reports=spec.options.num_reports,
            hparams=hparams,
            with_hparams=built.agent.with_hparams,
            initial_state=start.state,
            start_iteration=start.iteration,
            hooks=hooks,
            env_snapshots=snapshots,
            on_snapshots=work.keep_host_envs,
            replay=built.replay,
        )
    except sebulba.ActorError as e:
        res = getattr(e, "result", None)
        saved = ""
        # one process's actor failed: its peers go on, so a (collective) save is not possible
        alone = jax.process_count() == 1
        if (
            res is not None
            and work.checkpointer is not None
            and res.iterations > start.iteration
            and alone
        ):
            if work.last_checkpoint != res.iterations:
                work.save(res.iterations, res.final_state, start.prior_seconds + res.run_seconds)
            saved = (
                f"; the {res.iterations} iterations learned are checkpointed: resume with "
                f"{run_folder.resume_command(work.out_path)}"
            )
        raise sebulba.ActorError(f"{e}{saved}") from e.__cause__


def _finish(work: "ChunkWork", res: anakin.RunResult, reason: str | None) -> TrainResult:
    spec, out_path, per_iter = work.spec, work.out_path, work.per_iter
    done, num_iterations = res.iterations, spec.config.num_iterations
    saved = None if work.checkpointer is None else work.checkpointer.directory / str(done)
    resume_hint = (
        f"; resume with: {run_folder.resume_command(out_path)}" if out_path is not None else ""
    )
    if not work.history:  # stopped before the first chunk (result: None)
        what = reason or "stop_at_steps"
        raise TrainingInterrupted(
            f"{what}: stopped before the first chunk{resume_hint}", None, reason, saved
        )
    run_seconds = work.start.prior_seconds + res.run_seconds
    result = _result(
        spec, work.history, res.final_state, res.compile_seconds, run_seconds, work.evals
    )
    if out_path is not None and work.writer:
        try:
            result.save(out_path, work.reports, write_metrics=False)
            if spec.options.pbt is not None:
                labels = pbt.run_labels(work.runs)  # by index and seed: values are initial
                pbt.write_lineage(out_path, result.metrics, result.env_steps, labels)
        except OSError as e:
            if work.save_error is None:
                raise
            raise work.save_error from e
    if work.save_error is not None:
        raise work.save_error
    if done < num_iterations:
        by = f" by process {work.stopped_by}" if work.stopped_by is not None else ""
        why = (
            f"{reason} received{by}"  # by: several processes, whose signal it was
            if reason
            else f"stop_at_steps={spec.options.stop_at_steps} reached"
        )
        if out_path is not None:
            where = f"; checkpoint {saved}. Resume with: {run_folder.resume_command(out_path)}"
            if jax.process_count() > 1:
                where += f" {run_folder.ON_EVERY_PROCESS}"
        else:
            where = "; no run folder was given, so nothing was saved"
        steps = f"{done * per_iter:,}/{num_iterations * per_iter:,}"
        raise TrainingInterrupted(
            f"{why}: stopped after {steps} env steps per run{where}", result, reason, saved
        )
    return result

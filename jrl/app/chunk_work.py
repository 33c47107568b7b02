"""The host's work after each chunk of a run: :class:`ChunkWork`, and what it needs.

:class:`ChunkWork` is the Anakin (and Sebulba) runner's per-chunk hook
(:func:`jrl.app.execution.execute` runs it): the NaN/inf check of metrics and
parameters, the metric history, the sinks, periodic greedy evaluation and
checkpoints, with the state they keep between chunks. A NaN raises
:class:`NonFiniteError` once no run is finite; a checkpoint that cannot be
written raises :class:`CheckpointWriteError`, which says what to do next.
:class:`Start` is where a run starts (iteration 0, or a checkpoint when resuming).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.app import checkpoint, peers, run_folder, sinks, videos
from jrl.app.result import Progress, sweep_groups
from jrl.app.run_options import RunSpec
from jrl.app.stopping import StallWatch
from jrl.envs.host import host_env_of
from jrl.run import anakin, evaluation, sebulba
from jrl.run.loops import PER_AGENT_RETURN

__all__ = [
    "EVAL_KEY",
    "EVAL_SALT",
    "HOST_ENVS",
    "NAN_BEFORE_FIRST_EPISODE",
    "CheckpointWriteError",
    "ChunkWork",
    "NonFiniteError",
    "Start",
    "abstract_states",
    "decode_host_envs",
    "encode_host_envs",
    "is_sebulba",
    "make_evaluator",
    "passed",
]

NAN_BEFORE_FIRST_EPISODE = ("train/episode_return", "train/episode_length")
"""Metrics that are NaN (by design) until the first episode ends, not a failure."""
EVAL_KEY = "eval/episode_return"
"""The periodic evaluation's metric: mean greedy return over the evaluation episodes."""
HOST_ENVS = "host_envs"
"""Checkpoint metadata key of a Sebulba run's host envs (per actor thread, per run: the
batch's pickled state, base64, or None where the envs cannot be saved)."""
EVAL_SALT = 0x0E7A1
"""Folded into the base seed's key for evaluation keys, apart from every training key."""


class NonFiniteError(ValueError):
    """A loss, metric or parameter became NaN or infinite; training stopped at that chunk."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk...); the last good one is kept."""


def passed(before: int, after: int, every: int) -> bool:
    """Whether a multiple of ``every`` lies in ``(before, after]``."""
    return every > 0 and after // every > before // every


def make_evaluator(built, num_episodes: int, greedy: bool = True):
    """``jit(evaluate)(states [R, ...], key) -> (returns, lengths)`` ``[R, num_episodes]``
    (for a host env, a host loop: :func:`jrl.run.evaluation.host_evaluator`)."""
    if host_env_of(built.env) is not None:
        return evaluation.host_evaluator(built.agent, host_env_of(built.env), num_episodes, greedy)

    def one(state, key):
        return evaluation.evaluate(
            built.agent, built.env, state, key, num_episodes, built.env_params, greedy
        )

    def evaluate(states, key):
        runs = jax.tree.leaves(states)[0].shape[0]
        return jax.vmap(one)(states, jax.random.split(key, runs))

    return jax.jit(evaluate)


@dataclasses.dataclass
class Start:
    """Where a run starts: at iteration 0, or from a checkpoint (``resume``)."""

    iteration: int = 0
    history: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # name -> [R, n]
    reports: list[int] = dataclasses.field(default_factory=list)  # iterations reported so far
    evals: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    prior_seconds: float = 0.0  # run time before this call
    state: Any = None  # the train states to start from (None: init)
    resuming: bool = False
    complete: bool = False  # the checkpoint is the run's last iteration
    later: list[int] = dataclasses.field(default_factory=list)  # checkpoints after this one
    host_envs: Any = None  # sebulba: the host envs' saved state (see HOST_ENVS)


def is_sebulba(spec: RunSpec) -> bool:
    """Whether the run executes on the Sebulba runner (host envs) rather than Anakin."""
    return spec.options.runner == "sebulba"


def abstract_states(spec: RunSpec, built, device_axis: bool = True) -> Any:
    """Shapes of the run's stacked train states as its checkpoints hold them: ``[R, ...]``
    (``[D, R, ...]`` for an Anakin run sharded over D devices, unless ``device_axis`` is
    False; a Sebulba run's learner states are replicated, never with a device axis)."""
    if is_sebulba(spec):
        return sebulba.abstract_states(built.agent, built.spec, spec.keys(), built.replay)
    devices = spec.options.devices if device_axis else None
    return anakin.abstract_states(built.algorithm, spec.keys(), devices)


def encode_host_envs(snapshots: list) -> list | None:
    """Per actor thread, per run: base64 text of the pickled host envs (None when any batch
    cannot be saved)."""
    if any(data is None for thread in snapshots for data in thread):
        return None
    return [[base64.b64encode(data).decode("ascii") for data in thread] for thread in snapshots]


def decode_host_envs(encoded: list | None) -> list | None:
    """The inverse of :func:`encode_host_envs`."""
    if encoded is None:
        return None
    return [[base64.b64decode(text) for text in thread] for thread in encoded]


_OS_ERROR_CODE = re.compile(r"\[os_error_code=['\"]?(\d+)")


def _os_error_code(e: BaseException) -> int | None:
    """The OS error number behind a failed write: ``errno`` of an :class:`OSError`, else the
    last ``[os_error_code=N]`` that tensorstore puts in its messages (orbax may wrap several
    errors, with their tracebacks and tensorstore specs, into one message)."""
    if isinstance(e, OSError) and e.errno:
        return e.errno
    codes = _OS_ERROR_CODE.findall(str(e))
    return int(codes[-1]) if codes else None


def _io_reason(e: BaseException) -> str:
    """A short, one-line reason for a failed write: the OS error's text and number where there
    is one (``File too large (errno 27)``), else the exception's type and first line."""
    code = _os_error_code(e)
    if code is not None:
        text = e.strerror if isinstance(e, OSError) and e.strerror else os.strerror(code)
        return f"{text} (errno {code})"
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def _remedy(e: BaseException, where: Path | None = None) -> str:
    """What removes the cause of a failed write: ``free some space`` for a full disk or
    quota, ``make DIR writable`` for a refused write, else ``fix the cause``."""
    code, text = _os_error_code(e), str(e)
    if code in (errno.ENOSPC, errno.EDQUOT) or "No space left" in text:
        return "free some space"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS) or "not permitted" in text:
        return f"make {where or 'the run folder'} writable"
    return "fix the cause"


HOST_METRICS = ("sebulba/", "ray/", "inference/")
"""Prefixes of the metrics a process counts for its own actors (see
:meth:`ChunkWork._of_every_process`)."""


AVERAGED = ("sebulba/policy_lag", "ray/bytes_per_step")
"""Host metrics that are means over equal shares (each process's trajectories and env
steps), not totals."""
PER_CALL = {"inference/batch_size": "inference/calls", "inference/wait_ms": "inference/rows"}
"""Means over a process's inference calls (or requests, ``rows`` = calls x batch size): the
run's mean weighs each process's by its count."""


def combine_host_metrics(posted: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Every process's host metrics (name -> ``[c, R]`` values, in process order) as the
    run's: bytes, calls and restarts summed, the means of :data:`AVERAGED` averaged (each
    process has the same share of the envs), those of :data:`PER_CALL` weighted by each
    process's calls or requests, ``*_max`` the maximum, ``sebulba/params_bytes`` (one
    version's size) process 0's."""
    out = {}
    for k in posted[0]:
        every = np.stack([np.asarray(p[k], np.float64) for p in posted])  # [P, c, R]
        if k == "sebulba/params_bytes":
            out[k] = every[0]
        elif k in PER_CALL:
            weights = _weights(posted, PER_CALL[k])  # [P, c, R]
            out[k] = (every * weights).sum(axis=0) / np.maximum(weights.sum(axis=0), 1e-12)
        elif k in AVERAGED:
            out[k] = every.mean(axis=0)
        elif k.endswith("_max"):
            out[k] = every.max(axis=0)
        else:
            out[k] = every.sum(axis=0)
    return out


def _weights(posted: list[dict[str, Any]], count: str) -> np.ndarray:
    """Each process's ``inference/calls`` (or, for ``inference/rows``, calls x batch size)."""
    calls = np.stack([np.asarray(p["inference/calls"], np.float64) for p in posted])
    if count == "inference/calls":
        return calls
    return calls * np.stack([np.asarray(p["inference/batch_size"], np.float64) for p in posted])


class ChunkWork:
    """The host's work after each chunk (``anakin.run``'s ``on_chunk``): checks, history,
    sinks, periodic evaluation and checkpoints, with the state they keep between chunks.
    ``progress`` is the progress line (None when quiet or not process 0)."""

    def __init__(self, spec: RunSpec, built, out_path: Path | None, start: Start, mesh, cores=None):
        self.spec, self.built, self.out_path, self.start, self.mesh = (
            spec,
            built,
            out_path,
            start,
            mesh,
        )
        self.cores = cores  # the mesh of CPU devices the runs are spread over, or None
        self.keys, self.per_iter = spec.keys(), built.algorithm.env_steps_per_iteration
        self.history, self.reports, self.evals = start.history, start.reports, start.evals
        self.done, self.t0, self.diverged = start.iteration, None, {}
        self.save_error: CheckpointWriteError | None = None
        self.stop_reason: str | None = None  # why the chunks stopped early (a signal's name)
        self.stopped_by: int | None = None  # the process whose signal stopped a multi-process run
        self.last_checkpoint = start.iteration if start.resuming else None
        seeds, sweep = spec.run_seeds, spec.run_sweep
        self.runs = [
            {"run": r, "seed": seeds[r], **{k: v[r] for k, v in sweep.items()}}
            for r in range(len(seeds))
        ]
        devices = f" on {spec.options.devices} devices" if spec.options.devices else ""
        if cores is not None:
            devices = f" on {cores.devices.size} CPU cores"
        self.label = f"{spec.agent} {spec.env_id} x{len(seeds)}{devices}"
        self.sinks = self.checkpointer = self.progress = None
        self._stall: StallWatch | None = None
        self.host_envs: dict[int, Any] = {}  # sebulba: iteration -> encoded host envs
        # process 0 writes the run folder (its metrics, evaluations and final outputs); every
        # process takes part in its checkpoints
        self.writer = jax.process_index() == 0
        if spec.options.progress and self.writer:
            # PBT's runs change their hyperparameters: no groups by the values they started from
            population = spec.options.pbt is not None
            groups = [] if population else sweep_groups(spec.run_sweep, len(seeds))
            total = spec.config.num_iterations * self.per_iter
            self.progress = Progress(self.label, total, groups=groups, population=population)
        self._compile_checks()

    def open_outputs(self) -> None:
        """Opens the checkpointer (first: a checkpoint folder that refuses writes ends the run
        before anything else in the folder changes) and, in process 0, the metric sinks of the
        run folder."""
        spec, out, start = self.spec, self.out_path, self.start
        if out is None:
            return
        record = out / "config.json"
        if not self.writer and not record.is_file():
            raise FileNotFoundError(
                f"process {jax.process_index()} does not see {record}, which "
                "process 0 wrote: the run folder must be on a filesystem every process shares"
            )
        try:
            self.checkpointer = checkpoint.Checkpointer(out, spec.options.keep_checkpoints)
        except OSError as e:
            where = out / checkpoint.CHECKPOINT_DIR
            raise CheckpointWriteError(
                f"cannot write checkpoints in {where} ({_io_reason(e)}); nothing was "
                f"trained. {_remedy(e, where).capitalize()}, then "
                + (
                    f"resume with: {run_folder.resume_command(out)}"
                    if start.resuming
                    else "train again"
                )
            ) from e
        if not self.writer:
            return
        self.sinks = sinks.make_sinks(
            ["csv", *spec.options.log],
            out,
            runs=self.runs,
            config=spec.record(),
            resume_from_iteration=start.iteration if start.resuming else None,
            resume_from_step=start.iteration * self.per_iter if start.resuming else None,
            videos=spec.options.video_format if spec.options.video_every else None,
        )

    @contextlib.contextmanager
    def stall_watch(self):
        """A :class:`~jrl.app.stopping.StallWatch` over the Anakin runner on the CPU backend (on an
        accelerator the host rightly idles while a chunk runs); its checkpoint saves are
        excluded."""
        if jax.default_backend() != "cpu":
            yield
            return
        advice = ""
        if self.cores is not None:
            advice = (
                f" (its {len(self.runs)} runs are spread over {self.cores.devices.size} CPU "
                "devices, where XLA's CPU runtime can deadlock on some programs: "
                "JAX_NUM_CPU_DEVICES=1 runs them on one device)"
            )
        self._stall = StallWatch(advice=advice, what="the compiled training program")
        try:
            with self._stall:
                yield
        finally:
            self._stall = None

    def paused(self):
        """A block in which the process may rightly idle (a checkpoint written to a slow disk,
        a wait for the other processes of the run): the stall watch does not count it."""
        return self._stall.paused() if self._stall is not None else contextlib.nullcontext()

    def _compile_checks(self) -> None:
        """The per-chunk checks and evaluations see one device's view of the states, [R, ...],
        on this process's first device (split over the CPU cores where the runs are spread
        over them); they are compiled now, not in the timed loop."""
        self.local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        where = self.local if self.cores is None else anakin.spread_sharding(self.cores)
        view = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=where),
            abstract_states(self.spec, self.built, device_axis=False),
        )
        self.evaluator = self.eval_key = None
        opts = self.spec.options
        self.videos = None  # process 0 draws the --video-every videos (it writes the sinks)
        if opts.video_every > 0 and self.writer:
            self.videos = videos.VideoMaker(self.spec, self.built, view, self.runs)
        if opts.eval_every > 0:
            self.eval_key = jax.random.fold_in(jax.random.key(opts.seed), EVAL_SALT)
            evaluator = make_evaluator(self.built, opts.eval_episodes)
            if is_sebulba(self.spec):  # a host loop: nothing to compile ahead
                self.evaluator = evaluator
            else:
                self.evaluator = evaluator.lower(view, self.eval_key).compile()

        def params_finite(p):  # [R]
            rows = [jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1) for x in jax.tree.leaves(p)]
            return jnp.stack(rows).all(axis=0)

        self.params_finite = jax.jit(params_finite).lower(view.agent_state.params).compile()

    def keep_host_envs(self, iteration: int, snapshots: list) -> None:
        """Sebulba's ``on_snapshots``: the host envs after ``iteration`` (only the latest kept)."""
        self.host_envs = {iteration: encode_host_envs(snapshots)}

    def _host_envs_at(self, done: int) -> list | None:
        """The encoded host envs after iteration ``done`` of every actor: in a multi-process
        run each process's actors in process order (global actor ``p * A + a``), gathered from
        every process; None when any could not be saved."""
        mine = self.host_envs.get(done)
        group = peers.group()
        if group is None:
            return mine
        every = group.gather(f"the host envs of iteration {done}", mine)
        return None if any(e is None for e in every) else [thread for e in every for thread in e]

    def elapsed(self) -> float:
        """Run seconds so far, earlier calls of a resumed run included."""
        now = 0.0 if self.t0 is None else time.perf_counter() - self.t0
        return self.start.prior_seconds + now

    def save(self, done: int, states, run_seconds: float) -> Path:
        """Writes the checkpoint after iteration ``done``."""
        spec = self.spec
        meta = {
            "agent": spec.agent,
            "env_id": spec.env_id,
            "run": spec.options.record(),
            "config": dataclasses.asdict(spec.config),
            "reports": self.reports,
            "evals": self.evals,
            "run_seconds": run_seconds,
            "iterations": done,
            "env_steps": done * self.per_iter,
            "fingerprint": spec.fingerprint(),
        }
        if is_sebulba(spec):  # the host envs after the same iteration, when they could be saved
            meta[HOST_ENVS] = self._host_envs_at(done)
        if self.start.later:  # resumed from an older checkpoint: now the later ones go
            self.checkpointer.delete(self.start.later)
            self.start.later = []
        try:
            with self.paused():  # a slow disk may rightly idle the process
                path = self.checkpointer.save(done, states, self.history, meta)
        except Exception as e:  # orbax and tensorstore wrap I/O errors in many types
            raise CheckpointWriteError(
                f"could not write the checkpoint of iteration {done} in "
                f"{self.checkpointer.directory} ({_io_reason(e)}){self._kept()}; "
                f"{self._next_step(e)} (the libraries' own report: "
                f"{self.checkpointer.directory / checkpoint.SAVE_LOG})"
            ) from e
        self.last_checkpoint = done
        return path

    def __call__(self, states, done: int, metrics: dict[str, np.ndarray]) -> None:
        prev, per_iter = self.done, self.per_iter
        metrics = self._of_every_process(metrics, done)
        if self.mesh is not None:  # [D, R, ...]: device 0's slice
            view = jax.device_put(anakin.first_device(states), self.local)
        elif is_sebulba(self.spec) and (self.spec.options.devices or 1) > 1:
            view = jax.device_put(states, self.local)  # replicated over the learner's devices
        else:
            view = states
        self._check_finite(metrics, view, prev, done)
        for k, v in metrics.items():
            v = np.asarray(v).T  # [R, n]
            self.history[k] = (
                np.concatenate([self.history[k], v], axis=1) if k in self.history else v
            )
        self.reports.append(done)
        self.done = done
        try:  # process 0 evaluates (the parameters are the same in every process) and writes
            due = self.evaluator is not None and self.writer
            evaluated = self._evaluate(view, prev, done) if due else None
            if self.sinks is not None:
                sinks.write_records(self.sinks, self._records(metrics, prev, done, evaluated))
                if self.videos is not None:  # after the records of the same iteration
                    self.videos(self.sinks, view, prev, done)
        except Exception:  # e.g. a failing sink: keep this good chunk's state before stopping
            # (not in a multi-process run: a save is collective, and the others go on)
            if self.checkpointer is not None and jax.process_count() == 1:
                self.save(done, states, self.elapsed())
            raise
        every = self.spec.options.checkpoint_every
        if self.checkpointer is not None and passed(prev * per_iter, done * per_iter, every):
            self.save(done, states, self.elapsed())

    def _of_every_process(self, metrics: dict[str, np.ndarray], done: int) -> dict:
        """The Sebulba runner's host metrics (``sebulba/*``, ``ray/*``: each process counts
        its own actors' transfers) combined over the processes of a multi-process run: bytes
        and restarts summed, the policy lag averaged (its maximum the maximum), a version's
        size as it is. The learner's metrics are the global batch's already."""
        group = peers.group()
        host = sorted(k for k in metrics if k.startswith(HOST_METRICS))
        if group is None or not host:
            return metrics
        mine = {k: np.asarray(metrics[k], np.float64).tolist() for k in host}
        combined = combine_host_metrics(group.gather(f"the metrics of iteration {done}", mine))
        return {
            **metrics,
            **{k: v.astype(np.asarray(metrics[k]).dtype) for k, v in combined.items()},
        }

    def _records(self, metrics, prev: int, done: int, evaluated) -> list[sinks.Record]:
        """The sink records of iterations ``prev + 1 .. done`` (``metrics``: name -> ``[n, R]``)
        that ``log_every`` picks, and always ``done``; ``evaluated`` (``[R]`` or None) is the
        evaluation at ``done``, NaN in the other records."""
        every, per_iter = self.spec.options.log_every, self.per_iter
        picked = [
            i
            for i in range(prev + 1, done + 1)
            if i == done or every == 0 or passed((i - 1) * per_iter, i * per_iter, every)
        ]
        nan = np.full(len(self.runs), np.nan)
        arrays = {k: np.asarray(v, np.float64) for k, v in metrics.items()}  # [n, R]
        records = []
        for i in picked:
            values = {k: v[i - prev - 1] for k, v in arrays.items()}
            if evaluated is not None:
                values[EVAL_KEY] = evaluated if i == done else nan
            records.append(sinks.Record(i, i * per_iter, values, self.runs))
        return records

    def _evaluate(self, view, prev: int, done: int) -> np.ndarray:
        """``[R]`` mean greedy return when an evaluation is due, else NaN."""
        runs, per_iter = len(self.runs), self.per_iter
        due = passed(prev * per_iter, done * per_iter, self.spec.options.eval_every)
        if not (due or done == self.spec.config.num_iterations):
            return np.full(runs, np.nan)
        returns, _ = jax.device_get(self.evaluator(view, jax.random.fold_in(self.eval_key, done)))
        mean = np.asarray(returns, np.float64).mean(axis=1)
        self.evals.append(
            {"iteration": done, "env_steps": done * per_iter, "returns": mean.tolist()}
        )
        return mean

    def _check_finite(self, metrics, states, prev: int, done: int) -> None:
        """Finds the runs whose metrics or parameters became NaN/inf in this chunk. While
        other runs are still finite, each newly diverged run is reported (with its seed and
        swept values) and left to run on, its results kept for the record; when no finite
        run is left, :class:`NonFiniteError` stops training."""
        new = {
            r: why
            for r, why in self._nonfinite(metrics, states, prev, done).items()
            if r not in self.diverged
        }
        if not new:
            return
        described = "; ".join(f"{self.label_of(r)}: {why}" for r, why in sorted(new.items()))
        hint = "A smaller learning rate or gradient clipping usually helps"
        if len(self.diverged) + len(new) == len(self.runs):
            raise NonFiniteError(
                f"{described}: training stopped, no run is finite{self._kept()}. {hint}"
            )
        print(f"jrl: warning: {described}; the other runs go on. {hint}", file=sys.stderr)
        self.diverged.update(new)

    def _nonfinite(self, metrics, states, prev: int, done: int) -> dict[int, str]:
        """Run index -> what became NaN/inf first in this chunk (a metric, or the parameters)."""
        found: dict[int, str] = {}
        for name in sorted(metrics):
            if name in NAN_BEFORE_FIRST_EPISODE or name.startswith(PER_AGENT_RETURN):
                continue
            bad = ~np.isfinite(np.asarray(metrics[name], np.float64))  # [n, R]
            for it, r in np.argwhere(bad):
                if int(r) not in found:
                    at = prev + int(it) + 1
                    found[int(r)] = (
                        f"{name} became non-finite (NaN or inf) at iteration {at} "
                        f"({at * self.per_iter:,} env steps)"
                    )
        ok = np.asarray(jax.device_get(self.params_finite(states.agent_state.params)))
        for r in np.flatnonzero(~ok).tolist():
            found.setdefault(
                r,
                f"parameters became non-finite (NaN or inf) in iterations {prev + 1}-{done} "
                f"({done * self.per_iter:,} env steps)",
            )
        return found

    def label_of(self, r: int) -> str:
        """``run 2 (seed 0, learning_rate=0.001)``."""
        run = self.runs[r]
        swept = "".join(f", {k}={v:g}" for k, v in run.items() if k not in ("run", "seed"))
        return f"run {r} (seed {run['seed']}{swept})"

    def _next_step(self, cause: BaseException) -> str:
        """What to do after a failed checkpoint: remove the cause, then resume from the last
        good checkpoint, or (with none) train again into another folder, so that what this
        run wrote (its final parameters, when only the final checkpoint failed) is kept."""
        remedy = _remedy(cause, self.checkpointer.directory)
        if self.last_checkpoint is None:
            return (
                f"{remedy}, then train again with another --out ({self.out_path} keeps what "
                "this run wrote)"
            )
        return f"{remedy}, then resume with: {run_folder.resume_command(self.out_path)}"

    def _kept(self) -> str:
        if self.checkpointer is None:
            return ""
        if self.last_checkpoint is None:
            return "; no checkpoint had been written yet"
        last = self.checkpointer.directory / str(self.last_checkpoint)
        return f"; the last good checkpoint is {last}"

    def close(self, primary: BaseException | None) -> None:
        """Closes the sinks and the checkpointer; re-raises the first failure unless another
        error (``primary``) is in flight."""
        failure = None
        for resource in (self.sinks, self.checkpointer):
            if resource is None:
                continue
            try:
                resource.close()
            except Exception as e:  # keep closing the others
                failure = failure or e
        if failure is not None and primary is None:
            raise failure

"""Experiments: configs with presets, ``jrl.train``, run folders, plots.

``train("ppo", "CartPole-v1", seeds=8, learning_rate=3e-4)`` builds the env
and agent, runs every seed (and every swept hyperparameter value) in one
compiled program with the Anakin runner, shows progress, and returns a
:class:`TrainResult`; with ``out=DIR`` it also writes a run folder::

    DIR/config.json          agent, env, seeds, sweep and every config field
    DIR/metrics.csv          one row per report and run
    DIR/learning_curve.png   mean and spread over seeds vs env steps
    DIR/params.msgpack       final parameters of every run (flax serialisation)
    DIR/summary.json         final returns and timings
    DIR/checkpoints/N/       the whole train state after N iterations (:mod:`jrl.checkpoint`);
                             the last one is always written, others every ``checkpoint_every`` steps
    DIR/metrics.jsonl, DIR/tb/   with ``log=["jsonl", "tensorboard"]`` (:mod:`jrl.sinks`)

``resume(DIR)`` continues an interrupted run exactly; ``load_run(DIR)`` and
``evaluate_run(DIR)`` give back its policies (``jrl eval``, ``jrl render``).
SIGINT/SIGTERM during training finish the current chunk, write a checkpoint
and raise :class:`TrainingInterrupted`; a NaN/inf loss or parameter stops
training at the chunk where it appears (:class:`NonFiniteError`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
import typing
import warnings
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np


import jrl.agents
import jrl.envs
from jrl import __version__, names
from jrl.checkpoint import CheckpointError
from jrl.run import anakin

__all__ = [
    "CheckpointError",
    "LoadedRun",
    "NonFiniteError",
    "RUN_FILES",
    "RunSpec",
    "TrainResult",
    "TrainingInterrupted",
    "evaluate_run",
    "load_run",
    "make_config",
    "read_spec",
    "resume",
    "train",
]

RUN_FILES = ("config.json", "metrics.csv", "learning_curve.png", "params.msgpack", "summary.json")
RETURN_KEY = "train/episode_return"


def _coerce(field: dataclasses.Field, value: Any, hints: dict[str, Any]) -> Any:
    """Checks/converts an override to the field's declared type."""
    tp = hints[field.name]
    try:
        if tp is bool:
            if isinstance(value, str):
                if value.lower() in ("true", "1", "yes"):
                    return True
                if value.lower() in ("false", "0", "no"):
                    return False
                raise ValueError
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError
            return bool(value)
        if tp is int:
            if isinstance(value, bool) or (
                isinstance(value, float) and not float(value).is_integer()
            ):
                raise ValueError
            return int(value)
        if tp is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                raise ValueError
            return value
        if typing.get_origin(tp) is tuple:
            return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(
            f"config field {field.name!r} expects {getattr(tp, '__name__', tp)}, got {value!r}"
        ) from None
    return value


def make_config(agent: str, env_id: str, **overrides: Any):
    """The agent's config: defaults, then the env's preset, then ``overrides``.

    Unknown fields raise ``TypeError`` with close matches; ill-typed values
    raise ``TypeError``; out-of-range values raise ``ValueError``.
    """
    module, config_cls = jrl.agents.get(agent)
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        hints_txt = "; ".join(
            f"{u!r}" + "".join(f" (did you mean {c}?)" for c in names.closest(u, fields, n=1))
            for u in unknown
        )
        raise TypeError(
            f"unknown {agent} config field(s): {hints_txt}. Fields: {', '.join(sorted(fields))}"
        )
    values = dict(getattr(config_cls, "PRESETS", module.PRESETS).get(env_id, {}))
    values.update({k: _coerce(fields[k], v, hints) for k, v in overrides.items()})
    config = config_cls(**values)
    config.validate()
    return config


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns: histories of every run and the final state.

    Runs are ordered sweep-major: for each combination of swept values, every
    seed. ``metrics[name]`` is ``[R, num_iterations]``.
    """

    agent: str
    env_id: str
    config: Any
    seeds: list[int]  # [R] the seed of each run
    sweep: dict[str, list[float]]  # [R] swept value of each run, per swept field
    env_steps: np.ndarray  # [num_iterations] env steps per run after each iteration
    metrics: dict[str, np.ndarray]  # name -> [R, num_iterations]
    final_state: Any  # stacked train state, leading axis [R]
    compile_seconds: float
    run_seconds: float
    out_dir: Path | None = None
    evals: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # periodic evaluations:
    # {"iteration", "env_steps", "returns": [R] mean greedy return over the evaluation episodes}

    @property
    def num_runs(self) -> int:
        return len(self.seeds)

    @property
    def steps_per_second(self) -> float:
        """Env steps per second over all runs (compile excluded)."""
        return float(self.env_steps[-1]) * self.num_runs / max(self.run_seconds, 1e-9)

    @property
    def final_params(self) -> Any:
        """Network parameters of every run, leading axis [R]."""
        return self.final_state.agent_state.params

    def final_returns(self, fraction: float = 0.05) -> np.ndarray:
        """[R] mean training return over the last ``fraction`` of iterations."""
        ret = self.metrics[RETURN_KEY]
        k = max(1, int(math.ceil(ret.shape[1] * fraction)))
        return np.nanmean(ret[:, -k:], axis=1)

    def groups(self) -> list[tuple[str, np.ndarray]]:
        """(label, run indices) for each combination of swept values (one group without a sweep)."""
        if not self.sweep:
            return [("", np.arange(self.num_runs))]
        keys = [tuple(self.sweep[k][i] for k in self.sweep) for i in range(self.num_runs)]
        out: dict[tuple, list[int]] = {}
        for i, key in enumerate(keys):
            out.setdefault(key, []).append(i)
        return [
            (", ".join(f"{n}={v:g}" for n, v in zip(self.sweep, key)), np.asarray(idx))
            for key, idx in out.items()
        ]

    def summary(self) -> str:
        """A one-line summary of the run."""
        parts = []
        for label, idx in self.groups():
            fr = self.final_returns()[idx]
            prefix = f"[{label}] " if label else ""
            parts.append(
                f"{prefix}final return {fr.mean():.1f} ± {fr.std():.1f} over {len(idx)} seed(s)"
            )
        return (
            f"{self.agent} on {self.env_id}: "
            + "; ".join(parts)
            + f" | {int(self.env_steps[-1]):,} steps/run in {self.run_seconds:.1f}s"
            + f" ({self.steps_per_second:,.0f} steps/s, compile {self.compile_seconds:.1f}s)"
        )

    def plot(self, path: str | os.PathLike | None = None, metric: str = RETURN_KEY):
        """Draws ``metric`` (mean and min-max band over seeds) against env steps.

        Returns the matplotlib figure; saves it to ``path`` when given.
        """
        import matplotlib

        if path is not None:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.2))
        values = self.metrics[metric]
        for label, idx in self.groups():
            v = values[idx]
            with warnings.catch_warnings():  # columns before the first finished episode are all NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, low, high = np.nanmean(v, axis=0), np.nanmin(v, axis=0), np.nanmax(v, axis=0)
            ax.plot(self.env_steps, mean, label=label or f"mean of {len(idx)} seed(s)")
            if len(idx) > 1:
                ax.fill_between(self.env_steps, low, high, alpha=0.2)
            if self.evals and metric == RETURN_KEY:
                ev = np.asarray([e["returns"] for e in self.evals])[
                    :, idx
                ]  # [evaluations, runs in group]
                ax.plot(
                    [e["env_steps"] for e in self.evals],
                    ev.mean(axis=1),
                    "o--",
                    ms=4,
                    label=f"{label + ' ' if label else ''}greedy evaluation",
                )
        ax.set_xlabel("environment steps (per run)")
        ax.set_ylabel(metric.split("/")[-1].replace("_", " "))
        ax.set_title(f"{self.agent} on {self.env_id}")
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=100)
            plt.close(fig)
        return fig

    def save(
        self,
        out_dir: str | os.PathLike,
        report_iterations: Sequence[int],
        write_metrics: bool = True,
    ) -> Path:
        """Writes the run folder (see the module docstring). Files are written to
        temporary names and renamed, so an interrupted save leaves no half file.
        ``write_metrics=False`` leaves ``metrics.csv`` to the CSV sink that wrote it during training."""
        from flax import serialization

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)

        def write(name: str, data: bytes | str):
            tmp = out / f".{name}.tmp"
            tmp.write_bytes(data if isinstance(data, bytes) else data.encode())
            os.replace(tmp, out / name)

        if not (
            out / "config.json"
        ).exists():  # train() writes the full run record before it starts
            config = {
                "agent": self.agent,
                "env_id": self.env_id,
                "seeds": self.seeds,
                "sweep": self.sweep,
                "config": dataclasses.asdict(self.config),
                "jrl_version": __version__,
            }
            write("config.json", json.dumps(config, indent=2))

        if write_metrics:
            names = sorted(self.metrics)
            rows = [["run", "seed", *self.sweep.keys(), "iteration", "env_steps", *names]]
            for r in range(self.num_runs):
                for it in report_iterations:
                    rows.append(
                        [
                            r,
                            self.seeds[r],
                            *(self.sweep[k][r] for k in self.sweep),
                            it,
                            int(self.env_steps[it - 1]),
                            *(float(self.metrics[n][r, it - 1]) for n in names),
                        ]
                    )
            buf = io.StringIO()
            csv.writer(buf).writerows(rows)
            write("metrics.csv", buf.getvalue())
        write("params.msgpack", serialization.to_bytes(jax.device_get(self.final_params)))
        summary = {
            "summary": self.summary(),
            "final_returns": self.final_returns().tolist(),
            "compile_seconds": self.compile_seconds,
            "run_seconds": self.run_seconds,
            "steps_per_second": self.steps_per_second,
            "env_steps_per_run": int(self.env_steps[-1]),
            "evaluations": self.evals,
        }
        write("summary.json", json.dumps(summary, indent=2))
        tmp_png = out / ".learning_curve.tmp.png"
        self.plot(tmp_png)
        os.replace(tmp_png, out / "learning_curve.png")
        self.out_dir = out
        return out


class _Progress:
    """A live progress line on a terminal (plain lines when not a terminal)."""

    def __init__(self, label: str, total_steps: int, stream=None):
        self.label, self.total = label, total_steps
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def __call__(self, report: anakin.Report) -> None:
        ret = report.metrics.get(RETURN_KEY)
        ret_txt = (
            f"return {np.nanmean(ret):8.1f} ± {np.nanstd(ret):6.1f}"
            if ret is not None and np.isfinite(ret).any()
            else "return      n/a         "
        )
        pct = 100.0 * report.iteration / report.num_iterations
        line = (
            f"[{self.label}] {report.env_steps:>10,}/{self.total:,} steps ({pct:5.1f}%) | "
            f"{report.steps_per_second:>10,.0f} steps/s | {ret_txt} | ETA {report.eta:5.1f}s"
        )
        if self.tty:
            self.stream.write("\r" + line)
            if report.iteration == report.num_iterations:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


class TrainingInterrupted(Exception):
    """Training stopped before its last iteration: a signal (SIGINT, SIGTERM) or
    ``stop_at_steps``. The current chunk was finished and, with a run folder, a
    checkpoint written; ``result`` holds the histories so far (None when it
    stopped before the first chunk)."""

    def __init__(
        self, message: str, result: "TrainResult", reason: str | None, checkpoint: Path | None
    ):
        super().__init__(message)
        self.result, self.reason, self.checkpoint = result, reason, checkpoint

    @property
    def exit_code(self) -> int:
        """The shell convention: 128 + the signal number; 0 for a requested stop."""
        return {"SIGINT": 130, "SIGTERM": 143}.get(self.reason or "", 0)


class NonFiniteError(ValueError):
    """A loss, metric or parameter became NaN or infinite; training stopped at that chunk."""


NAN_BEFORE_FIRST_EPISODE = ("train/episode_return", "train/episode_length")
"""Metrics that are NaN (by design) until the first episode ends, not a failure."""
EVAL_KEY = "eval/episode_return"


@dataclasses.dataclass
class RunSpec:
    """Everything that defines a run; saved as the run folder's ``config.json``
    and read back by :func:`resume`, :func:`load_run`, ``jrl eval`` and ``jrl render``."""

    agent: str
    env_id: str
    num_seeds: int
    seed: int
    sweep: dict[str, list[float]]  # swept field -> values (each trained for every seed)
    config: Any
    env_overrides: dict[str, Any]
    devices: int | None
    num_reports: int
    eval_every: int
    eval_episodes: int
    checkpoint_every: int
    log: tuple[str, ...] = ()  # extra metric sinks (resumed runs keep writing to them)

    @property
    def combos(self) -> list[tuple]:
        return list(itertools.product(*self.sweep.values())) if self.sweep else [()]

    @property
    def run_seeds(self) -> list[int]:
        return [s for _ in self.combos for s in range(self.num_seeds)]

    @property
    def run_sweep(self) -> dict[str, list[float]]:
        return {
            k: [c[i] for c in self.combos for _ in range(self.num_seeds)]
            for i, k in enumerate(self.sweep)
        }

    def keys(self) -> jax.Array:
        """``[R]`` run keys: seed i of every swept combination uses ``split(key(seed), num_seeds)[i]``."""
        base = jax.random.split(jax.random.key(self.seed), self.num_seeds)
        # without a sweep there is one combination: no concatenate (each jnp call compiles a small program)
        return base if len(self.combos) == 1 else jax.numpy.concatenate([base] * len(self.combos))

    def record(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "env_id": self.env_id,
            "seeds": self.run_seeds,
            "sweep": self.run_sweep,
            "config": dataclasses.asdict(self.config),
            "jrl_version": __version__,
            "run": {
                "format_version": RUN_FORMAT_VERSION,
                "num_seeds": self.num_seeds,
                "seed": self.seed,
                "sweep_values": self.sweep,
                "env_overrides": self.env_overrides,
                "devices": self.devices,
                "num_reports": self.num_reports,
                "eval_every": self.eval_every,
                "eval_episodes": self.eval_episodes,
                "checkpoint_every": self.checkpoint_every,
                "log": list(self.log),
            },
        }

    @classmethod
    def from_record(cls, record: dict[str, Any], where: Path) -> "RunSpec":
        run = record.get("run")
        if not isinstance(run, dict) or "num_seeds" not in run:
            raise CheckpointError(
                f"{where} was written by an older jrl without a run record; it cannot be "
                "resumed, evaluated or rendered"
            )
        if run.get("format_version", 0) > RUN_FORMAT_VERSION:
            raise CheckpointError(
                f"{where} has run format {run.get('format_version')}, newer than this jrl "
                f"({__version__}) reads; upgrade jrl"
            )
        config = make_config(record["agent"], record["env_id"], **record["config"])
        return cls(
            record["agent"],
            record["env_id"],
            int(run["num_seeds"]),
            int(run["seed"]),
            {k: [float(v) for v in vs] for k, vs in run["sweep_values"].items()},
            config,
            dict(run["env_overrides"]),
            run["devices"],
            int(run["num_reports"]),
            int(run["eval_every"]),
            int(run["eval_episodes"]),
            int(run["checkpoint_every"]),
            tuple(run.get("log", ())),
        )


RUN_FORMAT_VERSION = 1


def _enable_cache(compile_cache: bool | str | os.PathLike) -> None:
    if compile_cache:
        from jrl import compile_cache as _cache

        _cache.enable(None if compile_cache is True else compile_cache)


def train(
    agent: str,
    env: str = "CartPole-v1",
    seeds: int = 1,
    *,
    seed: int = 0,
    sweep: dict[str, Sequence[float]] | None = None,
    out: str | os.PathLike | None = None,
    overwrite: bool = False,
    num_reports: int = 20,
    progress: bool = True,
    env_overrides: dict[str, Any] | None = None,
    devices: int | None = None,
    compile_cache: bool | str | os.PathLike = True,
    checkpoint_every: int = 0,
    keep_checkpoints: int = 3,
    eval_every: int = 0,
    eval_episodes: int = 10,
    log: Sequence[str] = (),
    stop_at_steps: int | None = None,
    **overrides: Any,
) -> TrainResult:
    """Trains ``agent`` on ``env`` for ``seeds`` seeds in one compiled program.

    Args:
      agent: a registered agent name (``jrl.agents.names()``), e.g. "ppo".
      env: a registered env id (``jrl.envs.list()``) or "gymnax:<name>".
      seeds: independent runs per swept value (vmapped).
      seed: base seed; run i uses ``split(key(seed), seeds)[i]``.
      sweep: sweepable config field -> values; every value is trained for
        every seed, in the same compiled program (the agent module's ``SWEEPABLE``).
      out: run folder to write (refuses a folder holding another run unless
        ``overwrite``, which first removes that run's files).
      num_reports: progress reports / chunks over the run.
      env_overrides: env parameters to override (``jrl.envs.make`` kwargs).
      devices: run data-parallel over this many devices (``shard_map``,
        pmap semantics; ``num_envs`` must be divisible by it). None: the
        plain single-device program. In a multi-process run (after
        :func:`jrl.distributed.initialize`) it defaults to every device of
        every process, and only process 0 writes ``out``.
      compile_cache: JAX's persistent compilation cache (:mod:`jrl.compile_cache`):
        True for the default directory (``$JRL_COMPILE_CACHE`` or the user
        cache dir), a path for another one, False to leave JAX's setting alone.
      checkpoint_every: with ``out``, write a checkpoint (:mod:`jrl.checkpoint`)
        at the end of the first chunk past every multiple of this many env
        steps per run (0: only the final one, and one on an interruption).
      keep_checkpoints: how many checkpoints to keep.
      eval_every: evaluate every run's greedy policy on ``eval_episodes``
        fresh episodes at the end of the first chunk past every multiple of
        this many env steps per run, and at the end (0: never). Logged as
        ``eval/episode_return`` and drawn on the learning curve.
      log: extra metric sinks (:mod:`jrl.sinks`): "jsonl", "tensorboard",
        "wandb"; a run folder always gets ``metrics.csv``.
      stop_at_steps: stop (as on SIGINT) after the chunk that reaches this many
        env steps per run; :func:`resume` continues the run.
      **overrides: config fields, e.g. ``total_steps=100_000, learning_rate=3e-4``.

    Raises:
      TrainingInterrupted: on SIGINT/SIGTERM (after the current chunk, with a
        checkpoint in ``out``) or at ``stop_at_steps``.
      NonFiniteError: a loss or parameter became NaN/inf (the last good
        checkpoint is kept).
    """
    _enable_cache(compile_cache)
    anakin.compiler_options()  # a bad JRL_CPU_OPT_LEVEL fails here, before the run folder is touched
    if int(seeds) < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    for name, value in (("checkpoint_every", checkpoint_every), ("eval_every", eval_every)):
        if int(value) < 0:
            raise ValueError(f"{name} must be >= 0 (0: off), got {value}")
    if int(eval_episodes) < 1:
        raise ValueError(f"eval_episodes must be >= 1, got {eval_episodes}")
    if int(num_reports) < 1:
        raise ValueError(f"num_reports must be >= 1, got {num_reports}")
    if int(keep_checkpoints) < 1:
        raise ValueError(f"keep_checkpoints must be >= 1, got {keep_checkpoints}")
    if stop_at_steps is not None and int(stop_at_steps) < 0:
        raise ValueError(f"stop_at_steps must be >= 0, got {stop_at_steps}")
    if out is None and (int(checkpoint_every) > 0 or log):
        raise ValueError("checkpoint_every and log write into the run folder: pass out=DIR")
    config = make_config(agent, env, **overrides)
    sweep = {k: [float(v) for v in vs] for k, vs in (sweep or {}).items()}
    module, _ = jrl.agents.get(agent)
    bad = sorted(set(sweep) - set(module.SWEEPABLE))
    if bad:
        raise ValueError(
            f"cannot sweep {bad} in one program: sweepable fields are {list(module.SWEEPABLE)}"
        )
    if "gamma" in sweep and getattr(config, "normalize_rewards", False):
        raise ValueError(
            "cannot sweep gamma with normalize_rewards: the reward normaliser's discount is fixed "
            "when the env is built; sweep it in separate runs or turn normalize_rewards off"
        )
    for k, vs in sweep.items():
        if not vs:
            raise ValueError(f"sweep over {k!r} has no values")
        for v in vs:  # each value must be valid on its own
            dataclasses.replace(config, **{k: v}).validate()
    if devices is None and jax.process_count() > 1:
        devices = jax.device_count()
    spec = RunSpec(
        agent,
        env,
        int(seeds),
        int(seed),
        sweep,
        config,
        dict(env_overrides or {}),
        None if devices is None else int(devices),
        int(num_reports),
        int(eval_every),
        int(eval_episodes),
        int(checkpoint_every),
        tuple(log),
    )
    if log:
        from jrl import sinks as sinks_mod

        sinks_mod.check_names(["csv", *log])
    out_path = Path(out) if out is not None and jax.process_index() == 0 else None
    if out_path is not None:
        _check_out_dir(out_path, overwrite)
    return _execute(
        spec,
        out_path,
        progress=progress,
        keep_checkpoints=keep_checkpoints,
        stop_at_steps=stop_at_steps,
        clear=overwrite,
    )


def read_spec(run_dir: str | os.PathLike) -> RunSpec:
    """The :class:`RunSpec` of a run folder (its ``config.json``)."""
    run_dir = Path(run_dir)
    cfg = run_dir / "config.json"
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    if not cfg.is_file():
        raise CheckpointError(f"{run_dir} is not a jrl run folder (it has no config.json)")
    try:
        record = json.loads(cfg.read_text())
    except ValueError as e:
        raise CheckpointError(f"{cfg} is not valid JSON ({e})") from None
    return RunSpec.from_record(record, cfg)


def resume(
    run_dir: str | os.PathLike,
    *,
    step: int | None = None,
    progress: bool = True,
    compile_cache: bool | str | os.PathLike = True,
    keep_checkpoints: int = 3,
    stop_at_steps: int | None = None,
    agent: str | None = None,
    env: str | None = None,
    **overrides: Any,
) -> TrainResult:
    """Continues the run in ``run_dir`` from its latest checkpoint (or ``step``).

    The run goes on with the saved configuration, seeds, sweep and chunk
    schedule, so it ends with the same parameters and metrics, bit for bit,
    as the run would have uninterrupted. ``agent``, ``env`` and config
    ``overrides``, when given, must equal the saved ones (a
    :class:`~jrl.checkpoint.CheckpointError` names what differs); nothing
    in the folder changes before the checkpoint has loaded and checked.
    """
    _enable_cache(compile_cache)
    anakin.compiler_options()  # a bad JRL_CPU_OPT_LEVEL fails here, before the run folder is touched
    if jax.process_count() > 1:
        raise CheckpointError("multi-process runs write no checkpoints, so they cannot be resumed")
    if int(keep_checkpoints) < 1:
        raise ValueError(f"keep_checkpoints must be >= 1, got {keep_checkpoints}")
    run_dir = Path(run_dir)
    spec = read_spec(run_dir)
    diffs = []
    if agent is not None and agent != spec.agent:
        diffs.append(f"agent: saved {spec.agent!r}, given {agent!r}")
    if env is not None and env != spec.env_id:
        diffs.append(f"env: saved {spec.env_id!r}, given {env!r}")
    if not diffs and overrides:
        given = make_config(
            spec.agent, spec.env_id, **{**dataclasses.asdict(spec.config), **overrides}
        )
        diffs += [
            f"{k}: saved {getattr(spec.config, k)!r}, given {getattr(given, k)!r}"
            for k in sorted(overrides)
            if getattr(given, k) != getattr(spec.config, k)
        ]
    if diffs:
        raise CheckpointError(
            f"{run_dir} holds a different run; --resume continues the saved one: "
            + "; ".join(diffs)
        )
    return _execute(
        spec,
        run_dir if jax.process_index() == 0 else None,
        progress=progress,
        keep_checkpoints=keep_checkpoints,
        stop_at_steps=stop_at_steps,
        resume_step=step,
        resuming=True,
    )


@dataclasses.dataclass
class LoadedRun:
    """A trained run folder loaded back: its spec, the built experiment and the
    train states of every run at a checkpoint (``[R, ...]``, device 0's view)."""

    spec: RunSpec
    built: Any
    state: Any
    step: int
    checkpoint: Any

    def policy(self, run: int = 0, greedy: bool = True):
        """``policy(obs [E, ...], key) -> actions [E]`` of run ``run`` (frozen normalisers)."""
        from jrl import evaluation

        if not 0 <= run < len(self.spec.run_seeds):
            raise ValueError(f"run must lie in [0, {len(self.spec.run_seeds)}), got {run}")
        one = jax.tree.map(lambda x: x[run], self.state)
        return evaluation.run_policy(
            self.built.agent, self.built.env, one.agent_state, one.env_state, greedy
        )


def load_run(run_dir: str | os.PathLike, step: int | None = None) -> LoadedRun:
    """Loads a run folder's checkpoint (default: the latest) for evaluation or rendering."""
    from jrl import checkpoint

    run_dir = Path(run_dir)
    spec = read_spec(run_dir)
    module, _ = jrl.agents.get(spec.agent)
    env_obj, env_params = jrl.envs.make(spec.env_id, **spec.env_overrides)
    built = module.build(spec.config, env_obj, env_params, num_devices=spec.devices or 1)
    like = anakin.abstract_states(built.algorithm, spec.keys(), spec.devices)
    ck = checkpoint.load(run_dir, like, step, step_flag="--step")
    state = ck.state if spec.devices is None else jax.tree.map(lambda x: x[0], ck.state)
    return LoadedRun(spec, built, state, ck.step, ck)


def _make_evaluator(built, num_episodes: int, greedy: bool = True):
    """``jit(evaluate)(states [R, ...], key) -> (returns, lengths)`` ``[R, num_episodes]``."""
    from jrl import evaluation

    def one(state, key):
        return evaluation.evaluate(
            built.agent, built.env, state, key, num_episodes, built.env_params, greedy
        )

    return jax.jit(
        lambda states, key: jax.vmap(one)(
            states, jax.random.split(key, jax.tree.leaves(states)[0].shape[0])
        )
    )


def evaluate_run(
    run_dir: str | os.PathLike,
    episodes: int = 100,
    greedy: bool = True,
    seed: int = 0,
    step: int | None = None,
) -> dict[str, Any]:
    """Evaluates every run of a run folder on ``episodes`` fresh episodes each
    (vmapped) and returns the statistics that ``jrl eval`` prints and writes."""
    if int(episodes) < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    loaded = load_run(run_dir, step)
    returns, lengths = jax.device_get(
        _make_evaluator(loaded.built, int(episodes), greedy)(
            loaded.state, jax.random.key(int(seed))
        )
    )
    returns = np.asarray(returns, np.float64)
    flat = np.sort(returns.reshape(-1))
    q = len(flat) // 4
    iqm = float(flat[q : len(flat) - q].mean()) if len(flat) - 2 * q > 0 else float(flat.mean())
    spec = loaded.spec
    return {
        "agent": spec.agent,
        "env_id": spec.env_id,
        "checkpoint_iteration": loaded.step,
        "policy": "greedy" if greedy else "stochastic",
        "episodes_per_run": int(episodes),
        "seed": int(seed),
        "mean": float(flat.mean()),
        "std": float(flat.std()),
        "median": float(np.median(flat)),
        "iqm": iqm,
        "min": float(flat.min()),
        "max": float(flat.max()),
        "mean_length": float(np.mean(lengths)),
        "runs": [
            {
                "run": r,
                "seed": spec.run_seeds[r],
                **{k: v[r] for k, v in spec.run_sweep.items()},
                "mean": float(returns[r].mean()),
                "std": float(returns[r].std()),
            }
            for r in range(returns.shape[0])
        ],
        "returns": returns.tolist(),
    }


class _StopRequest:
    """SIGINT/SIGTERM handlers (main thread only) that ask the loop to stop after the
    current chunk; a second Ctrl-C aborts at once (KeyboardInterrupt)."""

    def __init__(self, quiet: bool):
        self.reason: str | None = None
        self.quiet = quiet
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame):
        if self.reason is None:
            self.reason = signal.Signals(signum).name
            if (
                not self.quiet
            ):  # os.write: print() from a handler can re-enter a stderr write in progress
                os.write(
                    2,
                    f"\njrl: {self.reason} received: stopping after the current chunk and writing a "
                    "checkpoint (Ctrl-C again aborts without one)\n".encode(),
                )
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


def _passed(before: int, after: int, every: int) -> bool:
    """Whether a multiple of ``every`` lies in ``(before, after]``."""
    return every > 0 and after // every > before // every


def _execute(
    spec: RunSpec,
    out_path: Path | None,
    *,
    progress: bool,
    keep_checkpoints: int,
    stop_at_steps: int | None,
    resuming: bool = False,
    resume_step: int | None = None,
    clear: bool = False,
) -> TrainResult:
    from jrl import checkpoint

    config, module = spec.config, jrl.agents.get(spec.agent)[0]
    mesh = anakin.make_mesh(spec.devices) if spec.devices is not None else None
    writer = jax.process_index() == 0
    env_obj, env_params = jrl.envs.make(spec.env_id, **spec.env_overrides)
    built = module.build(config, env_obj, env_params, num_devices=spec.devices or 1)
    algorithm, keys = built.algorithm, spec.keys()
    num_iterations = config.num_iterations

    start, history, reports, evals, prior_seconds, initial_state = 0, {}, [], [], 0.0, None
    stop = _StopRequest(quiet=not writer)
    with (
        stop
    ):  # from here on a signal only asks to stop: the checkpoint and outputs are still written
        if resuming:  # load and check everything before anything in the folder changes
            ck = checkpoint.load(
                out_path, anakin.abstract_states(algorithm, keys, spec.devices), resume_step
            )
            start, history = ck.step, {k: np.asarray(v) for k, v in ck.history.items()}
            reports, evals = list(ck.meta["reports"]), list(ck.meta["evals"])
            prior_seconds = float(ck.meta["run_seconds"])
            if ck.meta["run"] != json.loads(json.dumps(spec.record()["run"])):
                raise CheckpointError(
                    f"checkpoint {ck.path} was written by a different run than "
                    f"{out_path}/config.json describes"
                )
            if start >= num_iterations:
                raise CheckpointError(
                    f"{out_path} is already complete ({start}/{num_iterations} iterations); "
                    f"evaluate it with `jrl eval {out_path}`"
                )
            initial_state = anakin.place(ck.state, mesh)
        anakin.check_memory(
            algorithm, keys, mesh
        )  # refusals that need no folder come before it changes
        if out_path is not None:
            from jrl import sinks as sinks_mod

            sinks_mod.check_available(spec.log)
            if clear:
                _clear_run(out_path)
            out_path.mkdir(parents=True, exist_ok=True)
            if not resuming:
                _write_atomic(out_path / "config.json", json.dumps(spec.record(), indent=2))
            else:  # continuing from an older checkpoint: the later ones belong to the history being replaced
                checkpoint.delete_after(out_path, start)
        result = _train_loop(
            spec,
            built,
            mesh,
            keys,
            out_path,
            stop,
            writer=writer,
            progress=progress,
            keep_checkpoints=keep_checkpoints,
            stop_at_steps=stop_at_steps,
            resuming=resuming,
            start=start,
            history=history,
            reports=reports,
            evals=evals,
            prior_seconds=prior_seconds,
            initial_state=initial_state,
        )
    return result


def _close_all(resources, primary: BaseException | None) -> None:
    """Closes every resource; re-raises the first failure unless another error is in flight."""
    failure = None
    for r in resources:
        if r is None:
            continue
        try:
            r.close()
        except Exception as e:  # keep closing the others
            failure = failure or e
    if failure is not None and primary is None:
        raise failure


def _train_loop(
    spec: RunSpec,
    built,
    mesh,
    keys,
    out_path: Path | None,
    stop: "_StopRequest",
    *,
    writer: bool,
    progress: bool,
    keep_checkpoints: int,
    stop_at_steps: int | None,
    resuming: bool,
    start: int,
    history: dict,
    reports: list,
    evals: list,
    prior_seconds: float,
    initial_state,
) -> TrainResult:
    from jrl import checkpoint

    config, algorithm = spec.config, built.algorithm
    num_iterations, per_iter = config.num_iterations, algorithm.env_steps_per_step
    run_seeds, run_sweep = spec.run_seeds, spec.run_sweep
    runs = [
        {"run": r, "seed": run_seeds[r], **{k: v[r] for k, v in run_sweep.items()}}
        for r in range(len(run_seeds))
    ]
    sinks = checkpointer = None
    if out_path is not None:
        from jrl import sinks as sinks_mod

        sinks = sinks_mod.make_sinks(
            ["csv", *spec.log],
            out_path,
            runs=runs,
            config=spec.record(),
            resume_from_iteration=start if resuming else None,
            resume_from_step=start * per_iter if resuming else None,
        )
        if jax.process_count() == 1:
            checkpointer = checkpoint.Checkpointer(out_path, keep_checkpoints)
        else:  # the state is spread over processes: see jrl.checkpoint
            print(
                "jrl: note: checkpoints are not written in multi-process runs (the run cannot be resumed)",
                file=sys.stderr,
            )
    try:
        # The per-chunk checks and evaluations see one device's view of the states, [R, ...], on this
        # process's first device; they are compiled for it now, so that they are not compiled in the timed loop.
        local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        abstract_view = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=local),
            anakin.abstract_states(algorithm, keys),
        )
        evaluator = eval_key = None
        if spec.eval_every > 0:
            eval_key = jax.random.fold_in(
                jax.random.key(spec.seed), 0x0E7A1
            )  # apart from every training key
            evaluator = (
                _make_evaluator(built, spec.eval_episodes).lower(abstract_view, eval_key).compile()
            )
        params_finite = (
            jax.jit(
                lambda p: jnp.stack(
                    [
                        jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1)
                        for x in jax.tree.leaves(p)
                    ]
                ).all(axis=0)  # [R]
            )
            .lower(abstract_view.agent_state.params)
            .compile()
        )
        label = f"{spec.agent} {spec.env_id} x{len(run_seeds)}" + (
            f" on {spec.devices} devices" if spec.devices else ""
        )
        show = _Progress(label, num_iterations * per_iter) if progress and writer else None
        progress_state = {"done": start, "last_checkpoint": start if resuming else None, "t0": None}

        def elapsed() -> float:
            t0 = progress_state["t0"]
            return prior_seconds + (0.0 if t0 is None else time.perf_counter() - t0)

        def meta(done: int, run_seconds: float) -> dict[str, Any]:
            return {
                "agent": spec.agent,
                "env_id": spec.env_id,
                "run": spec.record()["run"],
                "config": dataclasses.asdict(config),
                "reports": reports,
                "evals": evals,
                "run_seconds": run_seconds,
                "iterations": done,
                "env_steps": done * per_iter,
            }

        def save(done: int, states, run_seconds: float) -> Path:
            path = checkpointer.save(done, states, history, meta(done, run_seconds))
            progress_state["last_checkpoint"] = done
            return path

        def on_chunk(states, done, metrics):
            prev = progress_state["done"]
            view = states if mesh is None else jax.device_put(anakin.first_device(states), local)
            last = progress_state["last_checkpoint"]
            kept = (
                f"; the last good checkpoint is {checkpointer.directory / str(last)}"
                if checkpointer and last is not None
                else "; no checkpoint had been written yet"
                if checkpointer
                else ""
            )
            _check_finite(metrics, view, params_finite, prev, done, run_seeds, per_iter, kept)
            for k, v in metrics.items():
                v = np.asarray(v).T  # [R, n]
                history[k] = np.concatenate([history[k], v], axis=1) if k in history else v
            reports.append(done)
            progress_state["done"] = done
            try:
                latest = {k: np.asarray(v[-1], np.float64) for k, v in metrics.items()}
                if evaluator is not None:
                    latest[EVAL_KEY] = np.full(len(run_seeds), np.nan)
                    if (
                        _passed(prev * per_iter, done * per_iter, spec.eval_every)
                        or done == num_iterations
                    ):
                        returns, _ = jax.device_get(
                            evaluator(view, jax.random.fold_in(eval_key, done))
                        )
                        latest[EVAL_KEY] = np.asarray(returns, np.float64).mean(axis=1)
                        evals.append(
                            {
                                "iteration": done,
                                "env_steps": done * per_iter,
                                "returns": latest[EVAL_KEY].tolist(),
                            }
                        )
                if sinks is not None:
                    sinks.write(sinks_mod.Record(done, done * per_iter, latest, runs))
            except Exception:  # e.g. a failing sink: keep this good chunk's state before stopping
                if checkpointer is not None:
                    save(done, states, elapsed())
                raise
            if checkpointer is not None and _passed(
                prev * per_iter, done * per_iter, spec.checkpoint_every
            ):
                save(done, states, elapsed())

        def on_report(report: anakin.Report):
            if show is not None:
                show(report)

        def should_stop() -> bool:  # polled before each chunk
            if progress_state["t0"] is None:
                progress_state["t0"] = time.perf_counter()  # compile done, the first chunk starts
            at_limit = (
                stop_at_steps is not None and progress_state["done"] * per_iter >= stop_at_steps
            )
            return stop.reason is not None or (at_limit and progress_state["done"] < num_iterations)

        if progress and writer:
            what = (
                f"resuming at iteration {start}/{num_iterations}"
                if resuming
                else f"{num_iterations} iterations"
            )
            print(f"[{label}] compiling {what} x {per_iter} steps ...", file=sys.stderr, flush=True)
        res = anakin.run(
            algorithm,
            keys,
            num_iterations,
            num_reports=spec.num_reports,
            hparams={k: np.asarray(v, np.float32) for k, v in run_sweep.items()},
            on_report=on_report,
            mesh=mesh,
            initial_state=initial_state,
            start_iteration=start,
            on_chunk=on_chunk,
            should_stop=should_stop,
        )
        done = res.iterations
        run_seconds = prior_seconds + res.run_seconds
        saved = None
        if checkpointer is not None and progress_state["last_checkpoint"] != done:
            saved = save(done, res.final_state if mesh is None else res.sharded_state, run_seconds)
        elif checkpointer is not None:
            saved = checkpointer.directory / str(done)
    except BaseException as e:
        _close_all([sinks, checkpointer], e)
        raise
    _close_all([sinks, checkpointer], None)
    reason = stop.reason
    if not history:  # stopped before the first chunk (result: None)
        raise TrainingInterrupted(
            f"{reason or 'stop_at_steps'}: stopped before the first chunk"
            + (f"; resume with: jrl train --resume {out_path}" if out_path is not None else ""),
            None,
            reason,
            saved,
        )
    env_steps = np.asarray(
        history["train/env_steps"][0], np.int64
    )  # what the loop counted (warm-up included)
    result = TrainResult(
        spec.agent,
        spec.env_id,
        config,
        run_seeds,
        run_sweep,
        env_steps,
        history,
        res.final_state,
        res.compile_seconds,
        run_seconds,
        evals=evals,
    )
    if out_path is not None:
        result.save(out_path, reports, write_metrics=False)
    if done < num_iterations:
        why = f"{reason} received" if reason else f"stop_at_steps={stop_at_steps} reached"
        where = (
            f"; checkpoint {saved}. Resume with: jrl train --resume {out_path}"
            if out_path is not None
            else "; no run folder was given, so nothing was saved"
        )
        raise TrainingInterrupted(
            f"{why}: stopped after {done * per_iter:,}/{num_iterations * per_iter:,} env steps "
            f"per run{where}",
            result,
            reason,
            saved,
        )
    return result


def _check_finite(
    metrics, states, params_finite, prev: int, done: int, run_seeds, per_iter: int, kept: str
) -> None:
    """Raises NonFiniteError naming the first metric (or the parameters) that is NaN/inf."""
    for name in sorted(metrics):
        if name in NAN_BEFORE_FIRST_EPISODE:
            continue
        bad = ~np.isfinite(np.asarray(metrics[name], np.float64))  # [n, R]
        if bad.any():
            it, _ = np.argwhere(bad)[0]
            runs = sorted(set(np.argwhere(bad)[:, 1].tolist()))
            where = f"iteration {prev + it + 1} ({(prev + it + 1) * per_iter:,} env steps)"
            break
    else:
        ok = np.asarray(jax.device_get(params_finite(states.agent_state.params)))
        if ok.all():
            return
        name, runs = "parameters", np.flatnonzero(~ok).tolist()
        where = f"iterations {prev + 1}-{done} ({done * per_iter:,} env steps)"
    raise NonFiniteError(
        f"{name} became non-finite (NaN or inf) at {where} in run(s) {runs} "
        f"(seeds {[run_seeds[r] for r in runs]}); training stopped{kept}. A smaller learning rate "
        "or gradient clipping usually helps"
    )


OUTPUTS = RUN_FILES + ("metrics.jsonl", "eval.json", "checkpoints", "tb")


def _clear_run(out: Path) -> None:
    """Removes the files of a previous run (``--overwrite``); other files stay."""
    import shutil

    for name in OUTPUTS:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _write_atomic(path: Path, data: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(data)
    os.replace(tmp, path)


def _is_run_record(path: Path) -> bool:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and {"agent", "env_id", "config"} <= set(record)


def _check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuses an output folder that holds a run (unless ``overwrite``), and one whose
    outputs do not belong to a jrl run even with ``overwrite`` (nothing of it is deleted)."""
    from jrl import checkpoint

    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output path {out} exists and is not a folder")
    if not out.is_dir() or not any((out / f).exists() for f in OUTPUTS):
        return
    if not _is_run_record(out / "config.json"):
        raise FileExistsError(
            f"output folder {out} holds files named like a run's ({', '.join(OUTPUTS)}) but "
            "no jrl config.json; refusing to write or delete there: choose another --out"
        )
    if overwrite:
        return
    hint = f"continue it with `jrl train --resume {out}`, " if checkpoint.steps(out) else ""
    raise FileExistsError(
        f"output folder {out} already holds a run; {hint}choose another --out, or pass "
        "--overwrite to replace it"
    )

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
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import math
import os
import sys
import typing
import warnings
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np


import jrl.agents
import jrl.envs
from jrl import __version__, names
from jrl.run import anakin

__all__ = ["TrainResult", "make_config", "train", "RUN_FILES"]

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
            if isinstance(value, bool) or (isinstance(value, float) and not float(value).is_integer()):
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
        raise TypeError(f"config field {field.name!r} expects {getattr(tp, '__name__', tp)}, got {value!r}") from None
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
        hints_txt = "; ".join(f"{u!r}" + "".join(f" (did you mean {c}?)" for c in names.closest(u, fields, n=1))
                              for u in unknown)
        raise TypeError(f"unknown {agent} config field(s): {hints_txt}. Fields: {', '.join(sorted(fields))}")
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
        return [(", ".join(f"{n}={v:g}" for n, v in zip(self.sweep, key)), np.asarray(idx)) for key, idx in out.items()]

    def summary(self) -> str:
        """A one-line summary of the run."""
        parts = []
        for label, idx in self.groups():
            fr = self.final_returns()[idx]
            prefix = f"[{label}] " if label else ""
            parts.append(f"{prefix}final return {fr.mean():.1f} ± {fr.std():.1f} over {len(idx)} seed(s)")
        return (f"{self.agent} on {self.env_id}: " + "; ".join(parts)
                + f" | {int(self.env_steps[-1]):,} steps/run in {self.run_seconds:.1f}s"
                + f" ({self.steps_per_second:,.0f} steps/s, compile {self.compile_seconds:.1f}s)")

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

    def save(self, out_dir: str | os.PathLike, report_iterations: Sequence[int]) -> Path:
        """Writes the run folder (see the module docstring). Files are written to
        temporary names and renamed, so an interrupted save leaves no half file."""
        from flax import serialization

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)

        def write(name: str, data: bytes | str):
            tmp = out / f".{name}.tmp"
            tmp.write_bytes(data if isinstance(data, bytes) else data.encode())
            os.replace(tmp, out / name)

        config = {"agent": self.agent, "env_id": self.env_id, "seeds": self.seeds, "sweep": self.sweep,
                  "config": dataclasses.asdict(self.config), "jrl_version": __version__}
        write("config.json", json.dumps(config, indent=2))

        names = sorted(self.metrics)
        rows = [["run", "seed", *self.sweep.keys(), "iteration", "env_steps", *names]]
        for r in range(self.num_runs):
            for it in report_iterations:
                rows.append([r, self.seeds[r], *(self.sweep[k][r] for k in self.sweep), it,
                             int(self.env_steps[it - 1]), *(float(self.metrics[n][r, it - 1]) for n in names)])
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        write("metrics.csv", buf.getvalue())
        write("params.msgpack", serialization.to_bytes(jax.device_get(self.final_params)))
        summary = {"summary": self.summary(), "final_returns": self.final_returns().tolist(),
                   "compile_seconds": self.compile_seconds, "run_seconds": self.run_seconds,
                   "steps_per_second": self.steps_per_second, "env_steps_per_run": int(self.env_steps[-1])}
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
        ret_txt = (f"return {np.nanmean(ret):8.1f} ± {np.nanstd(ret):6.1f}"
                   if ret is not None and np.isfinite(ret).any() else "return      n/a         ")
        pct = 100.0 * report.iteration / report.num_iterations
        line = (f"[{self.label}] {report.env_steps:>10,}/{self.total:,} steps ({pct:5.1f}%) | "
                f"{report.steps_per_second:>10,.0f} steps/s | {ret_txt} | ETA {report.eta:5.1f}s")
        if self.tty:
            self.stream.write("\r" + line)
            if report.iteration == report.num_iterations:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


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
        ``overwrite``).
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
      **overrides: config fields, e.g. ``total_steps=100_000, learning_rate=3e-4``.
    """
    if compile_cache:
        from jrl import compile_cache as _cache

        _cache.enable(None if compile_cache is True else compile_cache)
    if int(seeds) < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    config = make_config(agent, env, **overrides)
    sweep = {k: [float(v) for v in vs] for k, vs in (sweep or {}).items()}
    module, _ = jrl.agents.get(agent)
    bad = sorted(set(sweep) - set(module.SWEEPABLE))
    if bad:
        raise ValueError(f"cannot sweep {bad} in one program: sweepable fields are {list(module.SWEEPABLE)}")
    if "gamma" in sweep and getattr(config, "normalize_rewards", False):
        raise ValueError("cannot sweep gamma with normalize_rewards: the reward normaliser's discount is fixed "
                         "when the env is built; sweep it in separate runs or turn normalize_rewards off")
    for k, vs in sweep.items():
        if not vs:
            raise ValueError(f"sweep over {k!r} has no values")
        for v in vs:  # each value must be valid on its own
            dataclasses.replace(config, **{k: v}).validate()
    if devices is None and jax.process_count() > 1:
        devices = jax.device_count()
    mesh = None
    if devices is not None:
        mesh = anakin.make_mesh(devices)  # too many devices: a clear error before anything is built
    writer = jax.process_index() == 0
    out_path = Path(out) if out is not None and writer else None
    if out_path is not None:
        _check_out_dir(out_path, overwrite)

    env_obj, env_params = jrl.envs.make(env, **(env_overrides or {}))
    built = module.build(config, env_obj, env_params, num_devices=1 if devices is None else int(devices))

    combos = list(itertools.product(*sweep.values())) if sweep else [()]
    run_seeds = [s for _ in combos for s in range(int(seeds))]
    run_sweep = {k: [c[i] for c in combos for _ in range(int(seeds))] for i, k in enumerate(sweep)}
    base_keys = jax.random.split(jax.random.key(int(seed)), int(seeds))
    keys = jax.numpy.concatenate([base_keys] * len(combos))

    label = f"{agent} {env} x{len(run_seeds)}" + (f" on {devices} devices" if devices else "")
    reports: list[int] = []
    show = _Progress(label, config.num_iterations * built.algorithm.env_steps_per_step) if progress and writer else None

    def on_report(report: anakin.Report):
        reports.append(report.iteration)
        if show is not None:
            show(report)

    if progress and writer:
        print(f"[{label}] compiling {config.num_iterations} iterations x {built.algorithm.env_steps_per_step} "
              f"steps ...", file=sys.stderr, flush=True)
    res = anakin.run(built.algorithm, keys, config.num_iterations, num_reports=num_reports,
                     hparams={k: np.asarray(v, np.float32) for k, v in run_sweep.items()}, on_report=on_report,
                     mesh=mesh)
    env_steps = np.asarray(res.metrics["train/env_steps"][0], np.int64)  # what the loop counted (warm-up included)
    result = TrainResult(agent, env, config, run_seeds, run_sweep, env_steps, res.metrics, res.final_state,
                         res.compile_seconds, res.run_seconds)
    if out_path is not None:
        result.save(out_path, reports)
    return result


def _check_out_dir(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output path {out} exists and is not a folder")
    if out.is_dir() and any((out / f).exists() for f in RUN_FILES) and not overwrite:
        raise FileExistsError(f"output folder {out} already holds a run; choose another --out or pass --overwrite")



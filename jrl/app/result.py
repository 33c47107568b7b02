"""What training returns: :class:`TrainResult`, with its summary, plot and
run-folder files, and the live progress line."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np
from flax import serialization

import jrl
from jrl.app.supervisor import STDERR_TTY_ENV
from jrl.run import anakin
from jrl.util import files

__all__ = ["ENV_STEPS_KEY", "RETURN_KEY", "UPDATES_KEY", "Progress", "TrainResult"]

RETURN_KEY = "train/episode_return"
"""The training return metric (mean return of the episodes that finished in an iteration)."""
ENV_STEPS_KEY = "train/env_steps"
"""The env steps a run has taken (warm-up steps included, e.g. the n-step DQN's window)."""
UPDATES_KEY = "train/updates"
"""The gradient updates an off-policy run has made (none during its warm-up)."""
PBT_SOURCE = "pbt/source"
"""The metric of a population-based training run (:data:`jrl.run.pbt.SOURCE`)."""


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

    @property
    def pbt_fields(self) -> list[str]:
        """The hyperparameters population-based training perturbed (their ``pbt/<field>``
        metrics); empty for a run without PBT."""
        if PBT_SOURCE not in self.metrics:
            return []
        return [k[len("pbt/") :] for k in self.metrics if k.startswith("pbt/") and k != PBT_SOURCE]

    def groups(self) -> list[tuple[str, np.ndarray]]:
        """(label, run indices) for each combination of swept values (one group without a
        sweep). A PBT population is one group: its runs copy each other and change their
        hyperparameters, so the values they started from group nothing."""
        if self.pbt_fields:
            return [(f"PBT population of {self.num_runs} runs", np.arange(self.num_runs))]
        return sweep_groups(self.sweep, self.num_runs)

    def summary(self) -> str:
        """A one-line summary of the run: the final training return per combination of swept
        values (a PBT population's over all its runs, with its best run's hyperparameters at
        the end), the last periodic greedy evaluation's mean return (``eval_every``), the env
        steps per run (warm-up included, as the progress line counts them) and the speed."""
        final = self.final_returns()
        if self.pbt_fields:
            parts = [self._population(final)]
        else:
            parts = [
                f"{_prefix(label)}final return {final[idx].mean():.1f} ± {final[idx].std():.1f} "
                f"over {len(idx)} seed(s)"
                for label, idx in self.groups()
            ]
        parts[-1] += " (training return, mean of the last 5% of iterations)"
        evaluation = f" | {self._last_evaluation()}" if self.evals else ""
        return (
            f"{self.agent} on {self.env_id}: "
            + "; ".join(parts)
            + evaluation
            + f" | {int(self.env_steps[-1]):,} steps/run in {self.run_seconds:.1f}s"
            + f" ({self.steps_per_second:,.0f} steps/s, compile {self.compile_seconds:.1f}s)"
        )

    def _population(self, final: np.ndarray) -> str:
        """The summary of a PBT population: the final return over all runs, and the best
        run's (by index and seed) with the hyperparameters it ended with."""
        text = f"PBT population of {self.num_runs} runs: final return {final.mean():.1f} ± "
        text += f"{final.std():.1f}"
        if not np.isfinite(final).any():
            return text
        best = int(np.nanargmax(final))
        now = ", ".join(f"{f}={self.metrics[f'pbt/{f}'][best, -1]:.3g}" for f in self.pbt_fields)
        return (
            f"{text}; best run {best} (seed {self.seeds[best]}) {final[best]:.1f}, "
            f"ending with {now}"
        )

    def _last_evaluation(self) -> str:
        """The last periodic evaluation: mean ± std over the runs of each group of the
        runs' mean greedy returns."""
        last = self.evals[-1]
        returns = np.asarray(last["returns"], np.float64)
        it = int(last["iteration"])
        # the env steps of that iteration as steps/run counts them (warm-up included)
        steps = int(self.env_steps[it - 1]) if 0 < it <= len(self.env_steps) else last["env_steps"]
        parts = [
            f"{_prefix(label)}{returns[idx].mean():.1f} ± {returns[idx].std():.1f}"
            for label, idx in self.groups()
        ]
        return f"greedy evaluation return at {steps:,} steps/run: " + "; ".join(parts)

    def plot(self, path: str | os.PathLike | None = None, metric: str = RETURN_KEY):
        """Draws ``metric`` (mean and min-max band over seeds) against env steps.

        Returns the matplotlib figure; saves it to ``path`` when given.
        """
        # matplotlib (0.2 s, pyplot more) only once a plot is drawn, after training: not
        # before a run's first progress line (benchmarks/startup.py)
        import matplotlib

        if path is not None:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt  # after the backend is chosen

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
        """Writes the run folder (see :mod:`jrl.app.run_folder`). Files are written to
        temporary names and renamed, so an interrupted save leaves no half file.
        ``write_metrics=False`` leaves ``metrics.csv`` to the CSV sink that wrote it during
        training."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)

        def write(name: str, data: bytes | str):
            files.write_atomic(out / name, data)

        if not (out / "config.json").exists():  # train() writes the full record before it starts
            write("config.json", json.dumps(self._record(), indent=2))
        if write_metrics:
            write("metrics.csv", self._metrics_csv(report_iterations))
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
        with files.replacing(out / "learning_curve.png") as tmp_png:
            self.plot(tmp_png)
        self.out_dir = out
        return out

    def _record(self) -> dict[str, Any]:
        """The ``config.json`` of a result saved outside :func:`jrl.train` (no run record)."""
        return {
            "agent": self.agent,
            "env_id": self.env_id,
            "seeds": self.seeds,
            "sweep": self.sweep,
            "config": dataclasses.asdict(self.config),
            "jrl_version": jrl.__version__,
        }

    def _metrics_csv(self, report_iterations: Sequence[int]) -> str:
        """``metrics.csv``: a row per run and reported iteration."""
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
        return buf.getvalue()


def _prefix(label: str) -> str:
    """``"[label] "``, or nothing for an empty label."""
    return f"[{label}] " if label else ""


def sweep_groups(sweep: dict[str, list[float]], num_runs: int) -> list[tuple[str, np.ndarray]]:
    """``(label, run indices)`` for each combination of swept values, in order (one group,
    labelled "", without a sweep); ``sweep`` maps each swept field to its ``[R]`` values."""
    if not sweep:
        return [("", np.arange(num_runs))]
    out: dict[tuple, list[int]] = {}
    for i in range(num_runs):
        out.setdefault(tuple(sweep[k][i] for k in sweep), []).append(i)
    return [
        (", ".join(f"{n}={v:g}" for n, v in zip(sweep, key)), np.asarray(idx))
        for key, idx in out.items()
    ]


class Progress:
    """A live progress line on a terminal (plain lines when not a terminal).

    ``groups`` (``(label, run indices)`` of a sweep) show one return per swept value; a
    ``population`` (PBT, whose runs copy each other and change their hyperparameters) shows
    the return over all runs and its best run by index instead. The env steps are those the
    runs took (``train/env_steps``: warm-up steps included, as the summary counts them). The
    ETA extrapolates the time per iteration of the chunks in which every iteration learned:
    an off-policy agent's first chunks collect its warm-up (``learning_starts`` env steps of
    acting without an update, ``train/updates`` still 0), far faster than learning, so they
    are left out; until such a chunk has finished, the ETA shows as n/a.
    """

    def __init__(self, label: str, total_steps: int, stream=None, groups=None, population=False):
        self.label, self.total = label, total_steps
        self.groups = groups or []  # (label, run indices) of a sweep: one return per value
        self.population = population
        self.stream = stream or sys.stderr
        self.tty = (hasattr(self.stream, "isatty") and self.stream.isatty()) or (
            self.stream is sys.stderr and os.environ.get(STDERR_TTY_ENV) == "1"
        )  # a multi-process run's stderr passes through its parent (jrl.app.supervisor)
        self._learning_from: tuple[int, float] | None = None  # (iteration, elapsed) after
        # which every iteration learns: the ETA's baseline

    def eta(self, report: anakin.Report) -> float | None:
        """Seconds left: the iterations left at the time per iteration of the chunks since
        every iteration learns (the whole run when the agent reports no ``train/updates``);
        None until one such chunk has finished."""
        left = report.num_iterations - report.iteration
        if self._learning_from is None:
            updates = report.metrics.get(UPDATES_KEY)
            if updates is None:  # learns from the first iteration on
                self._learning_from = (report.start_iteration, 0.0)
            elif np.all(np.asarray(updates) > 0):  # every later iteration learns
                self._learning_from = (report.iteration, report.elapsed)
        if left <= 0:
            return 0.0
        if self._learning_from is None or report.iteration <= self._learning_from[0]:
            return None
        iteration, elapsed = self._learning_from
        per_iteration = (report.elapsed - elapsed) / (report.iteration - iteration)
        return per_iteration * left

    def __call__(self, report: anakin.Report) -> None:
        ret = report.metrics.get(RETURN_KEY)
        finite = ret is not None and np.isfinite(ret).any()
        ret_txt = (
            f"return {np.nanmean(ret):8.1f} ± {np.nanstd(ret):6.1f}"
            if finite
            else "return      n/a         "
        )
        if self.population and finite:
            best = int(np.nanargmax(ret))
            ret_txt += f" (best: run {best}, {ret[best]:.1f})"
        elif len(self.groups) > 1 and finite:
            shown = [f"{label}: {np.nanmean(ret[idx]):.1f}" for label, idx in self.groups[:4]]
            more = f", +{len(self.groups) - 4} more" if len(self.groups) > 4 else ""
            ret_txt = "return " + ", ".join(shown) + more
        # the env steps the runs took (warm-up included) and the total they will reach
        taken = report.metrics.get(ENV_STEPS_KEY)
        extra = 0 if taken is None else int(np.max(taken)) - report.env_steps
        steps, total = report.env_steps + extra, self.total + extra
        pct = 100.0 * report.iteration / report.num_iterations
        eta = self.eta(report)
        eta_txt = "ETA   n/a" if eta is None else f"ETA {eta:5.1f}s"
        line = (
            f"[{self.label}] {steps:>10,}/{total:,} steps ({pct:5.1f}%) | "
            f"{report.steps_per_second:>10,.0f} steps/s | {ret_txt} | {eta_txt}"
        )
        if self.tty:
            self.stream.write("\r" + line)
            if report.iteration == report.num_iterations:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

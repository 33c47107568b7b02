"""Hyperparameter search in batches of trials, each batch one compiled program.

``jrl.train("ppo", search_space={"learning_rate": "log:1e-4:1e-2"}, trials=32, search_batch=8)``
(``jrl train ppo --search-space learning_rate=log:1e-4:1e-2 --trials 32 --search-batch 8``)
runs 32 trials in 4 batches of 8. Before each batch, Optuna's TPE sampler (Bergstra et al.,
2011) asks for the batch's 8 trials; the batch then trains as one ``jrl.train`` run whose
paired sweep (:attr:`~jrl.app.run_options.RunOptions.sweep_zip`) gives run ``t * seeds + s``
trial ``t``'s values and seed ``s``: seeds x 8 runs in one compiled program, with the
runner, checkpoints and run folder of any run. Each trial's value, the search metric averaged
over its seeds, is told back to the sampler before the next batch is asked.

A search space maps sweepable fields (``jrl agents`` lists them) to ``log:LO:HI`` (log-uniform),
``uniform:LO:HI``, ``int:LO:HI`` (whole numbers) or ``choice:a,b,c``; its ends and choices must
be valid values of the field (its :class:`~jrl.parts.agent_config.Range`). The metric is
``final_return`` (:meth:`~jrl.app.result.TrainResult.final_returns`, the training return of
the last 5% of iterations) or ``eval_return`` (the last ``eval_every`` evaluation's greedy
return). A search varies the hyperparameters itself: ``sweep`` and ``pbt`` are refused with it.

The sampler is ``TPESampler(seed=seed mod 2**32, n_startup_trials=search_batch,
constant_liar=True, multivariate=True)``: the first batch is random, and the trials of a batch
are asked before any is told, the pending ones counting as the worst value seen (the constant
liar), which spreads a batch out. The same seed gives the same trials and the same result.

With ``out=OUT`` the search writes::

    OUT/batch-000/ ...      each batch's run folder (jrl eval / render / export read it)
    OUT/search/trials.csv   trial, batch, each field's value, the value of each seed, mean, state
    OUT/search/study.json   agent, env, config fields, run options, space, sampler, best trial,
                            and every finished trial

both rewritten atomically after every batch. ``jrl train --resume OUT`` (:func:`resume_search`)
goes on after the last finished batch: the sampler is seeded again and told the finished
trials in order (it must propose them again, exactly, or the resume is refused), and a batch
that stopped halfway resumes from its own checkpoint, so the resumed search ends with the
trials and result of an uninterrupted one.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

import jrl.agents
import jrl.envs
from jrl import __version__
from jrl.app import api, checkpoint, run_folder
from jrl.app.checkpoint import CheckpointError
from jrl.app.execution import TrainingInterrupted
from jrl.app.result import TrainResult
from jrl.app.run_options import OPTION_NAMES, RunOptions, RunSpec, make_config
from jrl.app.search_space import (
    KEYWORDS,
    METRICS,
    SearchResult,
    SearchSettings,
    best_trial,
    params_text,
    parse_items,
)
from jrl.util import files

__all__ = [
    "KEYWORDS",
    "resume",
    "train",
    "METRICS",
    "SearchResult",
    "SearchSettings",
    "cli_keywords",
    "is_search_folder",
    "resume_search",
    "run_search",
    "saved_spec",
    "trial_values",
]

STUDY_FORMAT = 1
"""Version of ``search/study.json`` (a newer one is refused)."""
INVOCATION = ("progress", "compile_cache", "keep_checkpoints", "stop_at_steps")
"""Run options of one invocation, which a resumed search may change."""


def _optuna():
    """The ``optuna`` module; ``ImportError`` with the extra to install when it is missing."""
    try:
        import optuna  # the search extra, optional: only a search needs it
    except ImportError:
        raise ImportError(
            "hyperparameter search needs Optuna: pip install jrl-jax[search]"
        ) from None
    return optuna


def _sampler_record(seed: int, batch: int) -> dict[str, Any]:
    return {
        "name": "TPESampler",
        "seed": seed % 2**32,
        "n_startup_trials": batch,
        "constant_liar": True,
        "multivariate": True,
    }


def _study(optuna, sampler: dict[str, Any]):
    """A fresh maximising Optuna study with the TPE sampler of ``sampler`` (its record)."""
    with warnings.catch_warnings():  # multivariate (and constant_liar): experimental in Optuna 4
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tpe = optuna.samplers.TPESampler(**{k: v for k, v in sampler.items() if k != "name"})
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line saying a study was made
    try:
        return optuna.create_study(direction="maximize", sampler=tpe)
    finally:
        optuna.logging.set_verbosity(level)


@dataclasses.dataclass
class _Search:
    """A search under way: what trains each batch, the study, and the finished trials."""

    agent: str
    env_id: str
    overrides: dict[str, Any]
    options: RunOptions
    settings: SearchSettings
    out: Path | None
    study: Any = None
    trials: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def sampler(self) -> dict[str, Any]:
        return _sampler_record(self.options.seed, self.settings.batch)

    def ask(self, size: int) -> tuple[list[Any], list[dict[str, float]]]:
        """The next ``size`` trials, asked before any of them is told: (trials, their values)."""
        asked = [self.study.ask() for _ in range(size)]
        return asked, [{f: d.suggest(t, f) for f, d in self.settings.space.items()} for t in asked]

    def tell(self, asked: list[Any], values: np.ndarray, batch: int) -> None:
        """Tells the study each trial's mean of ``values`` ``[trials, seeds]`` (a trial with a
        non-finite value fails) and records it."""
        optuna = _optuna()
        for trial, row in zip(asked, values):
            mean = float(np.mean(row))
            finite = math.isfinite(mean)
            if finite:
                self.study.tell(trial, mean)
            else:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.trials.append(
                {
                    "number": trial.number,
                    "batch": batch,
                    "params": dict(trial.params),
                    "values": [float(v) for v in row],
                    "value": mean if finite else None,
                    "state": "complete" if finite else "failed",
                }
            )

    def record(self) -> dict[str, Any]:
        return {
            "format_version": STUDY_FORMAT,
            "agent": self.agent,
            "env_id": self.env_id,
            "overrides": self.overrides,
            "run": self.options.record(),
            **self.settings.record(),
            "sampler": self.sampler,
            "optuna_version": _optuna().__version__,
            "jrl_version": __version__,
            "batches_done": len({t["batch"] for t in self.trials}),
            "best": best_trial(self.trials),
            "finished_trials": self.trials,
        }

    def write(self) -> None:
        """``search/trials.csv`` and ``search/study.json``, each atomically (the study last:
        a resume reads it)."""
        if self.out is None or jax.process_index() != 0:
            return
        folder = self.out / "search"
        folder.mkdir(parents=True, exist_ok=True)
        files.write_atomic(folder / "trials.csv", _trials_csv(self))
        text = json.dumps(self.record(), indent=2, default=str)
        files.write_atomic(folder / "study.json", text)


def _trials_csv(search: _Search) -> str:
    fields = list(search.settings.space)
    seeds = range(search.options.seed, search.options.seed + search.options.seeds)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(
        ["trial", "batch", *fields, *(f"value_seed{s}" for s in seeds), "value", "state"]
    )
    for t in search.trials:
        value = "" if t["value"] is None else repr(t["value"])
        row = [t["number"], t["batch"], *(repr(t["params"][f]) for f in fields)]
        writer.writerow([*row, *(repr(v) for v in t["values"]), value, t["state"]])
    return buf.getvalue()


def trial_values(result: TrainResult, metric: str, size: int, seeds: int) -> np.ndarray:
    """``[size, seeds]`` each trial's metric per seed, from a batch's result (runs ordered
    trial-major: run ``t * seeds + s``)."""
    if metric == "final_return":
        values = result.final_returns()
    elif result.evals:
        values = np.asarray(result.evals[-1]["returns"], np.float64)
    else:
        raise ValueError("search_metric eval_return: the batch ran no evaluation")
    return np.asarray(values, np.float64).reshape(size, seeds)


def train(
    agent: str,
    env: Any = "CartPole-v1",
    seeds: int | None = None,
    *,
    out: str | os.PathLike | None = None,
    options: RunOptions | None = None,
    **kwargs: Any,
) -> TrainResult | SearchResult:
    """``jrl.train``: :func:`jrl.app.api.train` (every argument is described there), or, given
    any of :data:`KEYWORDS`, a search (:func:`run_search`), which returns a
    :class:`~jrl.app.search_space.SearchResult`."""
    if kwargs.keys() & set(KEYWORDS):
        return run_search(agent, env, seeds, out=out, options=options, **kwargs)
    return api.train(agent, env, seeds, out=out, options=options, **kwargs)


def resume(run_dir: str | os.PathLike, **kwargs: Any) -> TrainResult | SearchResult:
    """``jrl train --resume``: :func:`resume_search` of a search's folder, else
    :func:`jrl.app.api.resume` of a run's (the keywords are theirs)."""
    if is_search_folder(run_dir):
        return resume_search(run_dir, **kwargs)
    return api.resume(run_dir, **kwargs)


def run_search(
    agent: str,
    env: Any = "CartPole-v1",
    seeds: int | None = None,
    *,
    out: str | os.PathLike | None = None,
    options: RunOptions | None = None,
    **kwargs: Any,
) -> SearchResult:
    """``jrl.train`` with ``search_space`` (and ``trials``, ``search_batch``,
    ``search_metric``): the search of the module docstring. The other keywords are
    ``jrl.train``'s: run options and config fields, the same in every batch; ``out`` the
    search's folder. Everything is checked before a folder is touched; a batch stopped by a
    signal or ``stop_at_steps`` raises :class:`~jrl.app.execution.TrainingInterrupted` saying
    how to resume the search."""
    optuna = _optuna()  # a missing extra: one line before anything else
    settings = SearchSettings.from_keywords(kwargs)
    given = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTION_NAMES}
    given.update({k: {} for k in ("sweep", "env_overrides") if k in given and given[k] is None})
    opts = dataclasses.replace(options or RunOptions(), **given)
    opts = dataclasses.replace(opts, seeds=opts.seeds if seeds is None else seeds)
    env_id, object_overrides = jrl.envs.register_object(env)
    if object_overrides:
        opts = dataclasses.replace(opts, env_overrides={**object_overrides, **opts.env_overrides})
    opts = opts.validate(has_out=out is not None).normalized()
    config = make_config(agent, env_id, **kwargs)
    if getattr(config, "dataset_digest", ""):  # an offline agent: the file as resolved, pinned
        kwargs.update(dataset=config.dataset, dataset_digest=config.dataset_digest)
    settings.check(agent, config, kwargs, opts)
    api.check_env(RunSpec(agent, env_id, config, opts))  # as a batch's run would, up front
    search = _Search(agent, env_id, kwargs, opts, settings, None if out is None else Path(out))
    search.study = _study(optuna, search.sampler)
    if search.out is None:
        return _execute(search, 0)
    with run_folder.RunLock(search.out, quiet=not opts.progress):
        _prepare(search.out, opts.overwrite)
        search.write()  # a search folder from the start: resumable once a batch checkpoints
        return _execute(search, 0)


def _prepare(out: Path, overwrite: bool) -> None:
    """Refuses a folder that holds a search or a run (unless ``overwrite``, which removes
    them: the study, the batches' run folders, a run's files)."""
    if is_search_folder(out) and not overwrite:
        raise FileExistsError(
            f"{out} holds a search: continue it with `{run_folder.resume_command(out)}`, or "
            "pass --overwrite (overwrite=True) to start anew"
        )
    run_folder.check_out_dir(out, overwrite)
    if overwrite:
        run_folder.clear_run(out)
        shutil.rmtree(out / "search", ignore_errors=True)
        for batch in sorted(out.glob("batch-*")):
            if batch.is_dir():
                shutil.rmtree(batch)


def _execute(search: _Search, done: int) -> SearchResult:
    """Runs the batches after the first ``done`` (whose trials the study has been told)."""
    sizes, results = search.settings.sizes, []
    for k in range(done, len(sizes)):
        asked, params = search.ask(sizes[k])
        try:
            result = _train_batch(search, k, params)
        except TrainingInterrupted as e:
            if search.out is None:
                where = "without a run folder (out) a search cannot be resumed"
            else:
                where = f"continue it with `{run_folder.resume_command(search.out)}`"
            message = (
                f"the search stopped in batch {k + 1} of {len(sizes)} ({len(search.trials)} "
                f"trial(s) finished): {where}"
            )
            raise TrainingInterrupted(message, e.result, e.reason, e.checkpoint) from None
        values = trial_values(result, search.settings.metric, sizes[k], search.options.seeds)
        search.tell(asked, values, k)
        search.write()
        results.append(result)
        _progress(search, k)
    return SearchResult(
        search.agent, search.env_id, search.settings, search.trials, results, search.out
    )


def _train_batch(search: _Search, k: int, params: list[dict[str, float]]) -> TrainResult:
    """Batch ``k`` (``params``: each trial's values) as one run: a new one, or the resume of
    its folder's run when that stopped halfway with a checkpoint."""

    sweep = {f: tuple(p[f] for p in params) for f in search.settings.space}
    opts = dataclasses.replace(search.options, sweep=sweep, sweep_zip=True)
    folder = None if search.out is None else search.out / f"batch-{k:03d}"
    if folder is not None and folder.exists():
        complete = all((folder / f).is_file() for f in run_folder.FINAL_FILES)
        if checkpoint.steps(folder) and not complete and _sweep_of(folder) == sweep:
            kw = {n: getattr(search.options, n) for n in INVOCATION}
            return api.resume(folder, **kw)
        opts = dataclasses.replace(opts, overwrite=True)  # a batch that never checkpointed
    return api.train(search.agent, search.env_id, out=folder, options=opts, **search.overrides)


def _sweep_of(folder: Path) -> dict[str, tuple[float, ...]] | None:
    try:
        return dict(run_folder.read_spec(folder).options.sweep)
    except (ValueError, OSError, CheckpointError):
        return None


def _progress(search: _Search, k: int) -> None:
    """A line per finished batch: its trials, and the best trial so far."""
    if not search.options.progress or jax.process_index() != 0:
        return
    metric = search.settings.metric
    done = [t for t in search.trials if t["batch"] == k]
    shown = "; ".join(
        f"trial {t['number']} {_value_text(t)} ({params_text(t['params'])})" for t in done
    )
    best = best_trial(search.trials)
    lead = (
        "none finished"
        if best is None
        else (
            f"trial {best['number']}, {metric} {best['value']:.1f} ({params_text(best['params'])})"
        )
    )
    n = len(search.settings.sizes)
    print(f"search batch {k + 1}/{n}: {shown} | best so far: {lead}", file=sys.stderr)


def _value_text(trial: dict[str, Any]) -> str:
    return "failed (non-finite)" if trial["value"] is None else f"{trial['value']:.1f}"


def is_search_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a search (its ``search/study.json``)."""
    return (Path(path) / "search" / "study.json").is_file()


def _read_study(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "search" / "study.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path} cannot be read as a search record: {e}") from None
    if not isinstance(record, dict) or "finished_trials" not in record:
        raise CheckpointError(f"{path} is not a jrl search record")
    if record.get("format_version", 0) > STUDY_FORMAT:
        raise CheckpointError(
            f"{path} has search format {record['format_version']}, newer than "
            f"this jrl ({__version__}) reads; upgrade jrl"
        )
    return record


def saved_spec(run_dir: str | os.PathLike) -> RunSpec | None:
    """The spec every batch of the search in ``run_dir`` shares (its searched fields at their
    defaults, no sweep); None where ``run_dir`` holds no search."""
    if not is_search_folder(run_dir):
        return None
    record = _read_study(Path(run_dir))
    config = make_config(record["agent"], record["env_id"], **record["overrides"])
    return RunSpec(record["agent"], record["env_id"], config, RunOptions.from_record(record["run"]))


def resume_search(
    run_dir: str | os.PathLike,
    *,
    step: int | None = None,
    agent: str | None = None,
    env: str | None = None,
    **kwargs: Any,
) -> SearchResult:
    """Continues the search in ``run_dir`` after its last finished batch (see the module
    docstring), with the same trials and result as the search uninterrupted. Options of this
    invocation (``progress``, ``compile_cache``, ``keep_checkpoints``, ``stop_at_steps``) may
    be given; anything else given must equal the saved search's
    (:class:`~jrl.app.checkpoint.CheckpointError` names what differs)."""
    optuna = _optuna()
    run_dir = Path(run_dir)
    if step is not None:
        raise ValueError(
            "a search resumes after its last finished batch: a checkpoint step (--resume-step) "
            "names one run's checkpoint; resume a batch's folder (OUT/batch-NNN) for that"
        )
    saved, record = saved_spec(run_dir), _read_study(run_dir)
    search_given = sorted(set(kwargs) & set(KEYWORDS))
    diffs = [f"{k}: the search keeps its own" for k in search_given]
    diffs += _differences(saved, record["overrides"], agent, env, kwargs)
    if diffs:
        raise CheckpointError(
            f"{run_dir} holds a different search; --resume continues the saved one: "
            + "; ".join(diffs)
        )
    invocation = {k: kwargs[k] for k in INVOCATION if k in kwargs}
    opts = dataclasses.replace(saved.options, **invocation)
    settings = SearchSettings.from_keywords(
        {
            "search_space": record["space"],
            "trials": record["trials"],
            "search_batch": record["search_batch"],
            "search_metric": record["metric"],
        }
    )
    search = _Search(saved.agent, saved.env_id, record["overrides"], opts, settings, run_dir)
    search.study = _study(optuna, record["sampler"])
    with run_folder.RunLock(run_dir, quiet=not opts.progress):
        done = _replay(search, record["finished_trials"])
        return _execute(search, done)


def _differences(saved: RunSpec, overrides: dict, agent, env, kwargs: dict) -> list[str]:
    """What a resume call asks that differs from the saved search, one phrase each."""
    diffs = []
    if agent is not None and agent != saved.agent:
        diffs.append(f"agent: saved {saved.agent!r}, given {agent!r}")
    if env is not None and env != saved.env_id:
        diffs.append(f"env: saved {saved.env_id!r}, given {env!r}")
    if kwargs.get("overwrite"):
        diffs.append("overwrite: a resume continues the search in its own folder")
    asked = {k: v for k, v in kwargs.items() if k in OPTION_NAMES and k not in INVOCATION}
    asked.pop("overwrite", None)
    mine = dataclasses.replace(saved.options, **asked).normalized()
    diffs += [
        f"{k}: saved {getattr(saved.options, k)!r}, given {getattr(mine, k)!r}"
        for k in mine.changed_from(saved.options, sorted(asked))
    ]
    fields = {k: v for k, v in kwargs.items() if k not in OPTION_NAMES and k not in KEYWORDS}
    if fields:
        given = make_config(saved.agent, saved.env_id, **{**overrides, **fields})
        diffs += [
            f"{k}: saved {getattr(saved.config, k)!r}, given {getattr(given, k)!r}"
            for k in sorted(fields)
            if getattr(given, k) != getattr(saved.config, k)
        ]
    return diffs


def _replay(search: _Search, finished: list[dict[str, Any]]) -> int:
    """Asks the finished batches' trials again, checks the sampler proposes what they were,
    and tells it their recorded values; returns the number of batches."""
    batches = sorted({t["batch"] for t in finished})
    if batches != list(range(len(batches))):
        raise CheckpointError(f"{search.out}'s study records batches {batches}, not 0, 1, ...")
    for k in batches:
        recorded = [t for t in finished if t["batch"] == k]
        asked, params = search.ask(len(recorded))
        for trial, p, rec in zip(asked, params, recorded):
            if trial.number != rec["number"] or p != rec["params"]:
                raise CheckpointError(
                    f"{search.out} cannot be resumed exactly: the sampler now proposes "
                    f"{p} for trial {rec['number']}, not the recorded {rec['params']} (Optuna "
                    f"{_optuna().__version__}; the search ran with the version in study.json)"
                )
        values = np.asarray([rec["values"] for rec in recorded], np.float64)
        search.tell(asked, values, k)
    return len(batches)


SEARCH_FLAGS = ("--search-space", "--trials", "--search-batch", "--search-metric")
"""``jrl train``'s flags of a search."""


def cli_keywords(cli: Any, given: set[str]) -> dict[str, Any]:
    """``jrl.train``'s search keywords from ``jrl train``'s flags (``cli``: its own options;
    ``given``: the ``--flag`` spellings on its command line); none without
    ``--search-space``. ``ValueError`` for a search flag without ``--search-space``, and for
    any with ``--resume`` (a resumed search keeps its own settings)."""
    spelled = {g.replace("_", "-") for g in given}
    named = [f for f in SEARCH_FLAGS if f in spelled]
    if cli.resume is not None and named:
        raise ValueError(f"{named[0]} does not apply with --resume: a search keeps its settings")
    if not cli.search_space:
        if named:
            raise ValueError(f"{named[0]} sets a hyperparameter search: add --search-space")
        return {}
    return {
        "search_space": parse_items(cli.search_space),
        "trials": cli.trials,
        "search_batch": cli.search_batch,
        "search_metric": cli.search_metric,
    }

"""The search space of a hyperparameter search (:mod:`jrl.app.search`), its settings and
what it returns.

A field's space is ``log:LO:HI`` (log-uniform), ``uniform:LO:HI``, ``int:LO:HI`` (whole
numbers) or ``choice:a,b,c`` (:func:`parse_dimension`); :class:`SearchSettings` holds a
search's spaces, trial count, batch size and metric and checks them against the agent's
config; :class:`SearchResult` is what ``jrl.train(..., search_space=...)`` returns.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Sequence

import jrl.agents
from jrl.app.result import TrainResult
from jrl.app.run_options import RunOptions

__all__ = [
    "KEYWORDS",
    "METRICS",
    "Dimension",
    "SearchResult",
    "SearchSettings",
    "best_trial",
    "params_text",
    "parse_dimension",
    "parse_items",
]

KEYWORDS = ("search_space", "trials", "search_batch", "search_metric")
"""``jrl.train``'s keywords of a search (``search_space`` starts one)."""
METRICS = ("final_return", "eval_return")
"""What a trial's value is, per seed, averaged over its seeds (higher is better)."""
KINDS = ("log", "uniform", "int", "choice")


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One field's search space: ``kind`` (log, uniform, int, choice) with ``low``/``high``
    or ``choices``."""

    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[float, ...] = ()

    def text(self) -> str:
        """The spec it was parsed from, in canonical form (``log:0.0001:0.01``), exact: it
        reads back to the same numbers (a resumed search's sampler needs them)."""
        if self.kind == "choice":
            return "choice:" + ",".join(map(_number, self.choices))
        return f"{self.kind}:{_number(self.low)}:{_number(self.high)}"

    def ends(self) -> tuple[float, ...]:
        """The values that bound the space (each must be a valid value of the field)."""
        return self.choices if self.kind == "choice" else (self.low, self.high)

    def suggest(self, trial: Any, name: str) -> float:
        """The value an Optuna ``trial`` takes for field ``name``."""
        if self.kind == "choice":
            return float(trial.suggest_categorical(name, list(self.choices)))
        if self.kind == "int":
            return float(trial.suggest_int(name, int(self.low), int(self.high)))
        return float(trial.suggest_float(name, self.low, self.high, log=self.kind == "log"))


def _number(value: float) -> str:
    """``value`` as the shortest text that reads back to it (``8``, ``0.0001``, ``1e-05``)."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(value)


def parse_dimension(field: str, spec: str) -> Dimension:
    """``spec`` (``log:LO:HI``, ``uniform:LO:HI``, ``int:LO:HI``, ``choice:a,b,c``) of ``field``;
    ``ValueError`` with one line saying what is wrong."""
    where = f"search space of {field} ({spec!r})"
    kind, _, rest = str(spec).partition(":")
    if kind not in KINDS or not rest:
        raise ValueError(f"{where}: expected log:LO:HI, uniform:LO:HI, int:LO:HI or choice:a,b,...")
    parts = rest.split("," if kind == "choice" else ":")
    try:
        numbers = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"{where}: {rest!r} are not numbers") from None
    if not all(math.isfinite(v) for v in numbers):
        raise ValueError(f"{where}: the values must be finite")
    if kind == "choice":
        if len(set(numbers)) != len(numbers):
            raise ValueError(f"{where}: a choice is listed twice")
        return Dimension(kind, choices=numbers)
    if len(numbers) != 2:
        raise ValueError(f"{where}: expected {kind}:LO:HI")
    low, high = numbers
    if not low < high:
        raise ValueError(f"{where}: LO must be below HI")
    if kind == "log" and low <= 0:
        raise ValueError(f"{where}: a log scale needs LO > 0")
    if kind == "int" and not (low.is_integer() and high.is_integer()):
        raise ValueError(f"{where}: int:LO:HI takes whole numbers")
    return Dimension(kind, low, high)


def parse_items(items: Sequence[str]) -> dict[str, str]:
    """``--search-space FIELD=SPEC`` occurrences as ``{field: spec}`` (``-`` in a field name
    read as ``_``)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        if not sep or not spec:
            example = "learning_rate=log:1e-4:1e-2"
            raise ValueError(f"--search-space expects FIELD=SPEC (e.g. {example}), got {item!r}")
        name = name.replace("-", "_")
        if name in out:
            raise ValueError(f"--search-space {name} is given twice")
        out[name] = spec
    return out


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """A search: ``space`` (field -> :class:`Dimension`), ``trials`` in batches of ``batch``
    (the last batch takes what is left), ``metric`` (:data:`METRICS`)."""

    space: dict[str, Dimension]
    trials: int
    batch: int
    metric: str = "final_return"

    @classmethod
    def from_keywords(cls, kwargs: dict[str, Any]) -> "SearchSettings":
        """Takes :data:`KEYWORDS` out of ``kwargs`` (``trials`` default 16, ``search_batch``
        default ``trials``); ``ValueError`` for a bad one."""
        space = kwargs.pop("search_space", None)
        trials, batch = kwargs.pop("trials", 16), kwargs.pop("search_batch", None)
        metric = kwargs.pop("search_metric", "final_return")
        if not isinstance(space, dict) or not space:
            raise ValueError(
                "search_space must map sweepable fields to specs, e.g. "
                "{'learning_rate': 'log:1e-4:1e-2'}"
            )
        batch = trials if batch is None else batch
        for name, value in (("trials", trials), ("search_batch", batch)):
            if isinstance(value, bool) or not float(value).is_integer() or int(value) < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if metric not in METRICS:
            raise ValueError(f"search_metric must be one of {', '.join(METRICS)}, got {metric!r}")
        dims = {
            k: v if isinstance(v, Dimension) else parse_dimension(k, v) for k, v in space.items()
        }
        return cls(dims, int(trials), int(batch), metric)

    @property
    def sizes(self) -> list[int]:
        """``[number of batches]`` the trials of each batch."""
        full, rest = divmod(self.trials, self.batch)
        return [self.batch] * full + ([rest] if rest else [])

    def check(self, agent: str, config: Any, overrides: dict, options: RunOptions) -> None:
        """Refuses a field that is not sweepable, set as well as searched, or whose space
        reaches values the field does not take; a search with ``sweep`` or ``pbt``; the
        ``eval_return`` metric without evaluations."""
        if options.sweep or options.pbt is not None:
            flag = "sweep (--sweep)" if options.sweep else "pbt (--pbt)"
            raise ValueError(f"a search chooses its trials' hyperparameters itself: drop {flag}")
        if self.metric == "eval_return" and not options.eval_every:
            raise ValueError("search_metric eval_return needs evaluations: set eval_every")
        sweepable = jrl.agents.get(agent).sweepable
        ranges = type(config).field_ranges()
        for field, dim in self.space.items():
            if field not in sweepable:
                raise ValueError(
                    f"cannot search {field}: a batch of trials is one program, which varies "
                    f"sweepable fields only ({agent}'s: {', '.join(sweepable) or 'none'})"
                )
            if field in overrides:
                raise ValueError(f"{field} is both set and searched; give one of them")
            for value in dim.ends():
                if field in ranges and value not in ranges[field]:
                    raise ValueError(
                        f"search space of {field} ({dim.text()}): {field} must "
                        f"{ranges[field].describe()}, and {value:g} does not"
                    )
                dataclasses.replace(config, **{field: value}).validate()

    def record(self) -> dict[str, Any]:
        return {
            "space": {k: d.text() for k, d in self.space.items()},
            "trials": self.trials,
            "search_batch": self.batch,
            "metric": self.metric,
        }


@dataclasses.dataclass
class SearchResult:
    """What a search returns: every finished trial (``{"number", "batch", "params", "values"
    [seeds], "value", "state"}``, in order), the best one, and the :class:`TrainResult` of each
    batch trained by this call (a resumed search's earlier batches are in their folders)."""

    agent: str
    env_id: str
    settings: SearchSettings
    trials: list[dict[str, Any]]
    batches: list[TrainResult]
    out_dir: Path | None = None

    @property
    def best(self) -> dict[str, Any] | None:
        """The finished trial of the highest value (the first of equal ones); None if none."""
        return best_trial(self.trials)

    @property
    def best_params(self) -> dict[str, float]:
        return dict(self.best["params"]) if self.best else {}

    @property
    def best_value(self) -> float:
        return float(self.best["value"]) if self.best else math.nan

    def summary(self) -> str:
        """One line: the trials run, and the best trial's value and parameters."""
        s = self.settings
        space = ", ".join(f"{k}={d.text()}" for k, d in s.space.items())
        head = f"{self.agent} on {self.env_id}: search of {len(self.trials)} trial(s) over {space}"
        if self.best is None:
            return head + ": no trial finished with a finite value"
        return (
            head
            + f": best trial {self.best['number']}, {s.metric} {self.best_value:.1f} with "
            + params_text(self.best_params)
        )


def best_trial(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    done = [t for t in trials if t["state"] == "complete"]
    return max(done, key=lambda t: (t["value"], -t["number"])) if done else None


def params_text(params: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in params.items())

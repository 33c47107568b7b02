"""Population-based training inside the compiled program (the run layer, ``jrl/run``).

PBT (Jaderberg et al., 2017) treats the runs of one program (seeds x swept values, the
runner's vmapped runs axis :data:`jrl.core.parallel.RUNS`) as a population. :func:`with_pbt`
wraps a loop's ``step``: every ``interval`` env steps, after the loop's own step,

- **exploit** (truncation selection): runs are ranked by their latest mean episode return
  (``last_episode_return``; a run without a finished episode ranks last); each run in the
  bottom ``fraction`` copies the agent state (parameters, optimiser, hyperparameters) and
  the observation/reward normaliser statistics of a run drawn uniformly from the top
  ``fraction``; its env states, key and counters stay its own;
- **explore**: each copied run multiplies every hyperparameter of ``fields`` by a factor
  drawn from ``perturb`` (0.8 or 1.2 by default), clipped into the range its config field
  must lie in (the config's :meth:`~jrl.parts.agent_config.AgentConfig.field_ranges`: a discount
  stays in ``[0, 1]``), set through the loop's ``with_hparams``.

The ranks and copies are collectives over the runs axis (``all_gather``), so nothing goes
back to the host; the branch is a real ``cond`` (its predicate, the iteration count, is the
same in every run). Sharded over devices, every device holds every run and the returns are
already device means, so every device makes the same choices.

Every iteration also reports ``pbt/source`` (the run copied from at this iteration, or the
run itself) and ``pbt/<field>`` (the hyperparameter's value after it) for every run; the
lineage (:func:`lineage`, :func:`write_lineage`) is read from those metric histories, so a
resumed run's lineage is whole. A run keeps its index and seed; the swept values it was
launched with are only its initial ones (:func:`run_labels`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import parallel
from jrl.core.normalization import copy_statistics
from jrl.parts.agent_config import FLOAT32_MAX, Range
from jrl.run.algorithm import Algorithm
from jrl.util import files

__all__ = [
    "PBT",
    "SOURCE",
    "check_loop_state",
    "check_pbt",
    "lineage",
    "perturb_value",
    "run_labels",
    "with_pbt",
    "write_lineage",
]

SOURCE = "pbt/source"
"""The metric holding, per run and iteration, the run whose state it copied (itself: none)."""
LINEAGE_FILES = ("pbt_lineage.json", "pbt_lineage.png")


@dataclasses.dataclass(frozen=True)
class PBT:
    """Population-based training of the runs of one program (see the module docstring)."""

    interval: int = 10_000
    """Env steps per run between exploit/explore steps (rounded to whole iterations)."""
    fraction: float = 0.25
    """The bottom fraction of runs copies the top fraction (at least one run each)."""
    perturb: tuple[float, float] = (0.8, 1.2)
    """A copied run's hyperparameters are each multiplied by one of these, drawn uniformly."""
    fields: tuple[str, ...] = ()
    """The hyperparameters to perturb (sweepable fields); empty: the swept fields, or
    learning_rate without a sweep."""

    def validate(self) -> "PBT":
        """``ValueError`` for a setting that makes no sense on its own: an interval that is
        not a whole number >= 1 of env steps, a fraction outside ``(0, 0.5]``, perturb factors
        that are not two finite positive numbers, a field named twice; returns ``self``."""
        interval = self.interval
        if isinstance(interval, bool) or not _real(interval) or not float(interval).is_integer():
            raise ValueError(f"PBT interval must be a whole number of env steps, got {interval!r}")
        if int(interval) < 1:
            raise ValueError(f"PBT interval must be >= 1 env step, got {interval}")
        if not (_real(self.fraction) and 0.0 < float(self.fraction) <= 0.5):
            raise ValueError(f"PBT fraction must lie in (0, 0.5], got {self.fraction!r}")
        factors = tuple(self.perturb)
        if len(factors) != 2 or not all(_real(x) and math.isfinite(x) and x > 0 for x in factors):
            raise ValueError(f"PBT perturb must be two finite positive factors, got {factors}")
        twice = sorted({f for f in self.fields if list(self.fields).count(f) > 1})
        if twice:
            raise ValueError(f"PBT fields name {twice} more than once")
        return self

    def record(self) -> dict[str, Any]:
        return {
            "interval": int(self.interval),
            "fraction": float(self.fraction),
            "perturb": [float(x) for x in self.perturb],
            "fields": list(self.fields),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "PBT":
        return cls(
            int(record["interval"]),
            float(record["fraction"]),
            tuple(float(x) for x in record["perturb"]),
            tuple(record["fields"]),
        )


def check_pbt(pbt: PBT, sweepable: Sequence[str], sweep: dict, num_runs: int) -> PBT:
    """``pbt`` with its fields filled in (when none are named: the swept fields, else
    ``learning_rate``); ``ValueError`` for an out-of-range setting (:meth:`PBT.validate`), a
    field that is not sweepable (naming the sweepable ones), no field at all, or fewer than
    2 runs."""
    pbt.validate()
    fields = tuple(pbt.fields) or tuple(sweep)
    if not fields and "learning_rate" in sweepable:
        fields = ("learning_rate",)  # a population of seeds: PBT tunes the learning rate
    bad = [f for f in fields if f not in sweepable]
    if bad:
        raise ValueError(
            f"PBT cannot perturb {bad}: it perturbs hyperparameters traced in the agent state, "
            f"and the sweepable fields are {list(sweepable)}"
        )
    if not fields:
        raise ValueError(
            "PBT needs hyperparameters to perturb: sweep some (--sweep learning_rate=...) or "
            f"name them (--pbt-fields); sweepable fields are {list(sweepable)}"
        )
    if num_runs < 2:
        raise ValueError(f"PBT needs at least 2 runs (seeds x swept values), got {num_runs}")
    return dataclasses.replace(pbt, fields=fields, perturb=tuple(float(x) for x in pbt.perturb))


def _real(x: Any) -> bool:
    """Whether ``x`` is a real number (an int or float of Python or NumPy, not a bool)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def perturb_value(value: jax.Array, factor: jax.Array, bounds: tuple[float, float]):
    """``value * factor`` clipped into ``bounds`` (``(low, high)``, closed, float32): PBT's
    explore step for one hyperparameter."""
    low, high = bounds
    return jnp.clip(value * factor, low, high)


def _bounds(fields: Sequence[str], ranges: Mapping[str, Range] | None) -> dict:
    """Field -> the closed float32 interval its perturbed values are clipped into: its
    :class:`~jrl.parts.agent_config.Range` where ``ranges`` has one, else the finite float32
    numbers."""
    ranges = ranges or {}
    free = (-FLOAT32_MAX, FLOAT32_MAX)
    return {f: ranges[f].float32_bounds() if f in ranges else free for f in fields}


def every_iterations(pbt: PBT, env_steps_per_iteration: int) -> int:
    """The PBT interval in iterations (at least 1)."""
    return max(1, int(pbt.interval) // int(env_steps_per_iteration))


def check_loop_state(like: Any) -> None:
    """``ValueError`` unless a loop's train state (``like``: its shapes) has what PBT reads and
    changes: the latest episode returns and an agent state with hyperparameters."""
    if not hasattr(like, "last_episode_return") or not hasattr(
        getattr(like, "agent_state", None), "hparams"
    ):
        raise ValueError(
            "PBT ranks runs by their latest episode returns and perturbs the hyperparameters "
            "of their agent state; this agent's loop keeps neither (PBT serves the gradient "
            "agents' on- and off-policy loops)"
        )


def with_pbt(
    algorithm: Algorithm, pbt: PBT, num_runs: int, ranges: Mapping[str, Range] | None = None
) -> Algorithm:
    """``algorithm`` with PBT after every ``pbt.interval`` env steps (see the module
    docstring); ``pbt`` must have its fields (:func:`check_pbt`). A perturbed hyperparameter
    is clipped into its :class:`~jrl.parts.agent_config.Range` in ``ranges`` (the config's
    :meth:`~jrl.parts.agent_config.AgentConfig.field_ranges`; a field without one, into the finite
    float32 numbers). The state's structure is unchanged; ``step`` must run vmapped over the
    ``num_runs`` runs inside :func:`jrl.core.parallel.runs_axis` (the runner does)."""
    like = jax.eval_shape(algorithm.init, jax.random.key(0))
    check_loop_state(like)
    every = every_iterations(pbt, algorithm.env_steps_per_iteration)
    fields, (low, high) = tuple(pbt.fields), pbt.perturb
    bounds = _bounds(fields, ranges)
    n = max(1, int(float(pbt.fraction) * num_runs))

    def exploit_explore(state):
        name = parallel.runs_axis_name()
        me = jax.lax.axis_index(name)
        fitness = jnp.nan_to_num(state.last_episode_return, nan=-jnp.inf)
        order = jnp.argsort(jax.lax.all_gather(fitness, name), stable=True)  # worst first
        position = jnp.argsort(order, stable=True)[me]
        key = jax.random.fold_in(state.key, state.iteration)  # the loop's own key is untouched
        k_pick, k_perturb = jax.random.split(key)
        copy = position < n
        source = jnp.where(copy, order[num_runs - n + jax.random.randint(k_pick, (), 0, n)], me)
        gathered = jax.tree.map(
            lambda x: jax.lax.all_gather(x, name), (state.agent_state, state.env_state)
        )
        src_agent, src_env = jax.tree.map(lambda x: x[source], gathered)
        pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(copy, x, y), a, b)
        agent_state = pick(src_agent, state.agent_state)
        env_state = pick(copy_statistics(src_env, state.env_state), state.env_state)
        up = jax.random.bernoulli(k_perturb, 0.5, (len(fields),))
        factors = jnp.where(up, high, low)
        values = {}
        for i, f in enumerate(fields):
            value = getattr(agent_state.hparams, f)
            values[f] = jnp.where(copy, perturb_value(value, factors[i], bounds[f]), value)
        state = state.replace(agent_state=agent_state, env_state=env_state)
        return algorithm.with_hparams(state, values), source.astype(jnp.int32)

    def step(state):
        state, metrics = algorithm.step(state)
        if parallel.runs_axis_name() is None:
            raise ValueError("PBT runs over the runs axis: run the algorithm with jrl.run.anakin")
        due = parallel.all_runs(state.iteration % every == 0)
        me = jax.lax.axis_index(parallel.runs_axis_name()).astype(jnp.int32)
        state, source = jax.lax.cond(due, exploit_explore, lambda s: (s, me), state)
        hp = state.agent_state.hparams
        metrics = {**metrics, SOURCE: source, **{f"pbt/{f}": getattr(hp, f) for f in fields}}
        return state, metrics

    return algorithm._replace(step=step, independent_runs=False)  # ranks all runs together


def run_labels(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Labels of PBT runs from their identities (``{"run", "seed", <swept field>: value}``):
    ``run 2 (seed 0, initial learning_rate=0.001)``. A run is its index and seed; PBT changes
    its hyperparameters, so the values it was launched with are only its initial ones (its
    current values are the ``pbt/<field>`` metrics)."""
    out = []
    for r, run in enumerate(runs):
        swept = [f"initial {k}={v:g}" for k, v in run.items() if k not in ("run", "seed")]
        inside = ", ".join([f"seed {run['seed']}", *swept]) if "seed" in run else ", ".join(swept)
        out.append(f"run {run.get('run', r)}" + (f" ({inside})" if inside else ""))
    return out


def lineage(metrics: dict[str, np.ndarray], env_steps: np.ndarray) -> dict[str, Any]:
    """The lineage of a PBT run from its metric histories (``[R, T]`` each; ``env_steps
    [T]``): every copy as ``{"iteration", "env_steps", "run", "source", "hparams"}`` (the
    run's hyperparameters after the copy and perturbation), and every run's hyperparameters
    over time."""
    source = np.asarray(metrics[SOURCE])
    fields = [k[len("pbt/") :] for k in metrics if k.startswith("pbt/") and k != SOURCE]
    events = []
    for r, t in zip(*np.nonzero(source != np.arange(source.shape[0])[:, None])):
        t, r = int(t), int(r)
        events.append(
            {
                "iteration": t + 1,
                "env_steps": int(env_steps[t]),
                "run": r,
                "source": int(source[r, t]),
                "hparams": {f: float(metrics[f"pbt/{f}"][r, t]) for f in fields},
            }
        )
    events.sort(key=lambda e: (e["iteration"], e["run"]))
    return {
        "copies": events,
        "env_steps": [int(x) for x in env_steps],
        "hparams": {f: np.asarray(metrics[f"pbt/{f}"]).tolist() for f in fields},
    }


def write_lineage(
    out: Path, metrics: dict[str, np.ndarray], env_steps: np.ndarray, runs: list[str]
) -> None:
    """``pbt_lineage.json`` (:func:`lineage`, with the run labels) and ``pbt_lineage.png``
    (each run's hyperparameters over env steps, a marker where it copied another run)."""
    # matplotlib takes about a second to import: only runs that write a lineage pay for it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (after choosing the backend, as matplotlib asks)

    record = {"runs": list(runs), **lineage(metrics, env_steps)}
    files.write_atomic(Path(out) / "pbt_lineage.json", json.dumps(record, indent=1))
    fields = list(record["hparams"])
    fig, axes = plt.subplots(len(fields), 1, figsize=(7, 3 * len(fields)), squeeze=False)
    steps = np.asarray(env_steps)
    for ax, f in zip(axes[:, 0], fields):
        values = np.asarray(record["hparams"][f])
        for r, label in enumerate(runs):
            line = ax.plot(steps, values[r], label=label, lw=1)[0]
            copies = [e for e in record["copies"] if e["run"] == r]
            ax.scatter(
                [e["env_steps"] for e in copies],
                [e["hparams"][f] for e in copies],
                color=line.get_color(),
                s=12,
            )
        ax.set_yscale("log" if np.all(values > 0) else "linear")
        ax.set_ylabel(f)
    axes[-1, 0].set_xlabel("env steps per run (dots: the run copied a better one)")
    axes[0, 0].legend(fontsize=7, ncol=2)
    axes[0, 0].set_title("PBT lineage")
    fig.tight_layout()
    with files.replacing(Path(out) / "pbt_lineage.png") as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)

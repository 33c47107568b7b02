"""What the benchmark scripts share: the machine and commit lines, markdown output,
timing, subprocess workers and their tables, the skeleton of the side-by-side scripts
(their command line, the jrl and peer workers of one run, the ratios), and PureJaxRL's
side of the comparisons.

The scripts run as ``python benchmarks/NAME.py``, so this module is importable
as ``common`` from the script's own folder. It is the one place for code more
than one script uses; a script keeps only what is its own. It imports only the
standard library at module level (jax and jrl inside the functions that use them), so
that workers run in a peer's own interpreter (Stable-Baselines3's, pgx's example's:
``pgx_uniform_baseline.py``), where jrl and maybe jax are absent, can use it.

Benchmarks use jrl's public names only: ``jrl.train``, ``jrl.agents.get``,
``jrl.envs.make`` and the public functions of jrl's modules, never a name with a
leading underscore (``tests/test_benchmarks.py`` checks it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = REPO / "BENCHMARKS.md"
TARGET_RETURN = 475.0
"""The CartPole-v1 return the PPO and DQN benchmarks time ("time to 475")."""
DEFAULT_PUREJAXRL = "/work/purejaxrl"
"""Where the benchmarks look for a PureJaxRL checkout (``--purejaxrl``): a folder holding
the ``purejaxrl`` package of github.com/luchris429/purejaxrl. It is never part of jrl."""


# --------------------------------------------------------------------------
# The machine and the commit
# --------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(*extras: str) -> str:
    """'<cpu>, <n> cores, backend <b>; Python <v>, jax <v>', then ``extras`` (e.g. other
    libraries' versions), comma-separated."""
    import jax

    return ", ".join(
        (
            f"{cpu_model()}, {os.cpu_count()} cores, backend {jax.default_backend()}; "
            f"Python {platform.python_version()}, jax {jax.__version__}",
            *extras,
        )
    )


def measured_on() -> str:
    """The 'Measured <date> on <cpu>, <n> cores, Python, jax; load' line of a section."""
    import jax

    return (
        f"Measured {datetime.date.today().isoformat()} on {cpu_model()}, {os.cpu_count()} cores,\n"
        f"Python {platform.python_version()}, jax {jax.__version__}; 1-minute load average "
        f"{os.getloadavg()[0]:.1f} at the end."
    )


def git_commit() -> str:
    """Short HEAD commit of the repo, marked when jrl's sources (``jrl``, ``agents``,
    ``envs``) have uncommitted changes; "unknown" outside a git checkout."""
    try:
        head, dirty = (
            subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
            for cmd in (
                ["git", "rev-parse", "--short", "HEAD"],
                ["git", "status", "--porcelain", "jrl", "agents", "envs"],
            )
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" plus uncommitted changes" if dirty else "")


# --------------------------------------------------------------------------
# Markdown output
# --------------------------------------------------------------------------


def write_section(path: Path, heading: str, text: str) -> None:
    """Replaces the section that starts with the line ``heading`` in ``path`` (up to the
    next ``## `` heading) by ``text``, or appends ``text``; the other sections are kept."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.DOTALL | re.MULTILINE)
    if pattern.search(old):
        new = pattern.sub(lambda _: text.rstrip("\n") + "\n\n", old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    path.write_text(new.rstrip("\n") + "\n")


def publish(heading: str, text: str, write: bool) -> None:
    """Prints a section and, with ``write``, puts it in BENCHMARKS.md."""
    print(text)
    if write:
        write_section(BENCHMARKS_MD, heading, text)
        print(f"wrote {BENCHMARKS_MD}")


def default_output(output: Path | None, quick: bool) -> Path | None:
    """The markdown file a script with ``--output`` and ``--quick`` updates: ``output``
    when given, else BENCHMARKS.md, or none for a quick (smoke) run."""
    if output is not None:
        return output
    return None if quick else BENCHMARKS_MD


def or_dash(x: float | None, fmt: str = "{:.1f}", none: str = "–") -> str:
    """``x`` formatted with ``fmt``, or ``none`` (a dash) when it is missing."""
    return none if x is None else fmt.format(x)


def rate(x: float | None, k_digits: int = 1) -> str:
    """A rate for a table: '1.23 M', '45.6 k' (``k_digits`` decimals), '789', or a dash."""
    if x is None:
        return "–"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.{k_digits}f} k"
    return f"{x:.0f}"


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float, float]:
    """Calls ``fn(*args)`` and waits for its result (``jax.block_until_ready``):
    ``(result, wall seconds, CPU seconds of this process)``."""
    import jax

    t0, c0 = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0, time.process_time() - c0


def compile_and_run(fn, *args):
    """AOT-compiles the jitted ``fn`` for ``args`` (``lower().compile()``), then calls it
    once and waits for the result: ``(output, times)``, ``times`` holding the wall
    (``compile``, ``run``) and this process's CPU (``compile_cpu``, ``run_cpu``) seconds."""
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = fn.lower(*args).compile()
    compile_s, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    out, run_s, run_cpu = timed(compiled, *args)
    return out, {"compile": compile_s, "compile_cpu": compile_cpu, "run": run_s, "run_cpu": run_cpu}


# --------------------------------------------------------------------------
# Workers: one measurement per fresh interpreter, one JSON line back
# --------------------------------------------------------------------------


def run_json_worker(
    cmd: list[str], env: dict[str, str], timeout: float, cwd: Path = REPO
) -> dict | str:
    """Runs ``cmd`` (a worker printing one JSON line) in a fresh interpreter; returns the last
    JSON line it printed, or an error string (timeout, or the exit code and its last lines)."""
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, check=False
        )
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return f"exit {proc.returncode}: " + " | ".join(tail)


def run_worker(script: str, python: str, library: str, timeout: float, **flags: Any) -> dict | str:
    """Runs ``python script --worker library --flag value ...`` (``flags`` by keyword,
    ``total_steps=`` becoming ``--total-steps``) in a fresh interpreter, so that every
    compile starts cold; returns its JSON or an error string (:func:`run_json_worker`).
    A peer library's interpreter gets an empty ``PYTHONPATH``, keeping jrl's out of it."""
    cmd = [python, str(Path(script).resolve()), "--worker", library]
    for name, value in flags.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    env = dict(os.environ) if library == "jrl" else {**os.environ, "PYTHONPATH": ""}
    return run_json_worker(cmd, env, timeout)


def measure(
    schedule: Iterable[tuple[int, str, int]],
    run_one: Callable[[str, int], dict | str],
    describe: Callable[[dict], str],
    names: dict[str, str] | None = None,
) -> dict[tuple[str, int], list]:
    """Runs ``run_one(library, seeds)`` for each ``(repeat, library, seeds)`` of
    ``schedule``, in order, printing a progress line on stderr (``describe(result)`` for a
    measurement, the error string otherwise). Returns ``(name, seeds) -> results`` in the
    order run, ``name`` being ``names.get(library, library)``."""
    measured: dict[tuple[str, int], list] = {}
    for rep, lib, seeds in schedule:
        name = (names or {}).get(lib, lib)
        r = run_one(lib, seeds)
        text = r if isinstance(r, str) else describe(r)
        print(f"{name:14s} seeds={seeds:3d} repeat {rep + 1}: {text}", file=sys.stderr)
        measured.setdefault((name, seeds), []).append(r)
    return measured


def dump_measured(path: Path, measured: dict[tuple[str, int], list]) -> None:
    """Writes :func:`measure`'s results as JSON (keys ``"name|seeds"``)."""
    path.write_text(json.dumps({f"{k[0]}|{k[1]}": v for k, v in measured.items()}, indent=1))


def load_measured(paths: Iterable[Path]) -> dict[tuple[str, int], list]:
    """Reads :func:`dump_measured` files back, merging them in order."""
    measured: dict[tuple[str, int], list] = {}
    for path in paths:
        for key, results in json.loads(Path(path).read_text()).items():
            name, seeds = key.rsplit("|", 1)
            measured.setdefault((name, int(seeds)), []).extend(results)
    return measured


def best_of(results: list[dict]) -> dict:
    """The repeat with the lowest run time, given the lowest compile, compile CPU and init
    seconds of all repeats (each taken separately), plus ``repeats``, ``loads`` (the
    1-minute load average of each) and ``all_compile`` / ``all_run``."""
    out = dict(min(results, key=lambda r: r["run"]))
    out["compile"] = min(r["compile"] for r in results)
    for key in ("compile_cpu", "init"):
        values = [r[key] for r in results if r.get(key) is not None]
        out[key] = min(values) if values else None
    out["repeats"] = len(results)
    out["loads"] = [r["load"] for r in results]
    out["all_compile"] = [round(r["compile"], 2) for r in results]
    out["all_run"] = [round(r["run"], 2) for r in results]
    return out


def best_rows(
    measured: dict[tuple[str, int], list], best: Callable[[list[dict]], dict] = best_of
) -> dict[tuple[str, int], dict | str]:
    """One table row per configuration: ``best`` of the repeats that finished, with the
    error strings of the others under ``failures``; the last error string when none did."""
    rows: dict[tuple[str, int], dict | str] = {}
    for key, results in measured.items():
        ok = [r for r in results if isinstance(r, dict)]
        rows[key] = best(ok) if ok else results[-1]
        if ok:
            rows[key]["failures"] = [r for r in results if not isinstance(r, dict)]
    return rows


def first_reach(points: Iterable[tuple[int, float | None]], target: float = TARGET_RETURN):
    """The index of the first ``(index, value)`` whose value is >= ``target`` (None and NaN
    never are), or None."""
    for index, value in points:
        if value is not None and value >= target:
            return index
    return None


def chunk_values(values: list[float | None], num_chunks: int) -> list[tuple[int, float | None]]:
    """(end index, mean of the non-missing values) of ``num_chunks`` near-equal chunks of
    ``values``; :func:`first_reach` finds the first at the target return."""
    n = len(values)
    out = []
    for c in range(num_chunks):
        lo, hi = n * c // num_chunks, n * (c + 1) // num_chunks
        known = [v for v in values[lo:hi] if v is not None]
        out.append((hi, sum(known) / len(known) if known else None))
    return out


def latest_returns(
    returns: Iterable[float], lengths: Iterable[int], total_steps: int
) -> list[float | None]:
    """Per env step of a one-env run of ``total_steps`` steps, the return of the latest
    episode finished before it (None before the first), from the finished episodes' returns
    and lengths in order (an SB3 ``Monitor``'s ``get_episode_rewards`` and ``_lengths``)."""
    per_step: list[float | None] = [None] * total_steps
    step, last = 0, None
    for ret, length in zip(returns, lengths):
        end = min(step + length, total_steps)
        per_step[step:end] = [last] * (end - step)
        step, last = end, float(ret)
    per_step[step:] = [last] * (total_steps - step)
    return per_step


def time_to_target(r: dict) -> float | None:
    """Estimated wall seconds to the target return: ``compile + run * f``, ``f`` the
    fraction of the run done when it was first reached (``reached_fraction``, or
    ``reached / num_iterations``); the run is taken to progress uniformly. None when the
    run never reached it."""
    f = r.get("reached_fraction")
    if f is None and r.get("reached") is not None:
        f = r["reached"] / r["num_iterations"]
    return None if f is None else r["compile"] + r["run"] * f


def nan_to_none(values: Iterable[float]) -> list[float | None]:
    """``values`` as JSON-ready floats, None for NaN."""
    return [None if math.isnan(x) else float(x) for x in values]


def check_config(agent: str, env: str, expected: dict, what: str, **overrides: Any):
    """``jrl.app.api.make_config(agent, env, **overrides)``, refused (``SystemExit``)
    unless its fields equal ``expected``; ``what`` names where ``expected`` comes from."""
    from jrl.app.api import make_config

    config = make_config(agent, env, **overrides)
    got = {k: getattr(config, k) for k in expected}
    if got != expected:
        raise SystemExit(f"jrl's {agent} {env} config differs from {what}: {got} != {expected}")
    return config


# --------------------------------------------------------------------------
# The skeleton of a side-by-side script: jrl and its peers in one run
# --------------------------------------------------------------------------
#
# A script that times jrl against peer libraries runs itself once per measurement, as a
# worker (``--worker LIBRARY``, in that library's interpreter), and otherwise orchestrates:
#
#     parser = comparison_parser(__doc__, seeds=..., repeats=..., timeout=..., ...)
#     args = parser.parse_args(argv)
#     if run_worker_if_asked(args, {"jrl": worker_jrl_of_args, "peer": ...}):
#         return
#     measured = side_by_side(__file__, args, schedule, pythons, flags, describe)
#     rows = best_rows(measured)
#     ... its tables (time_ratios for the ratio columns), then publish / write_result.

SHARED_FLAGS: dict[str, dict[str, Any]] = {
    "quick": {"action": "store_true", "help": "smoke run: small budgets, 1 repeat, prints only"},
    "seeds": {"type": int, "nargs": "+", "help": "seed counts (vmapped in one program)"},
    "repeats": {"type": int, "help": "runs per configuration, best reported"},
    "total_steps": {"type": int, "help": "env steps per seed"},
    "num_reports": {"type": int, "help": "chunks per run (host syncs)"},
    "seed": {"type": int, "default": 0},
    "purejaxrl": {
        "default": DEFAULT_PUREJAXRL,
        "help": "a PureJaxRL checkout (the folder holding purejaxrl/) to run side by side; "
        "skipped if absent",
    },
    "purejaxrl_python": {"default": sys.executable, "help": "interpreter for PureJaxRL"},
    "timeout": {"type": float, "default": 1800, "help": "seconds per worker"},
    "output": {
        "type": Path,
        "help": "markdown file to update (default BENCHMARKS.md; quick: none)",
    },
    "write": {"action": "store_true", "help": "put the section in BENCHMARKS.md"},
    "json": {"type": Path, "help": "also dump every measurement here"},
}
"""The flags side-by-side scripts share (``--total-steps`` for ``total_steps``), with their
argparse settings; :func:`comparison_parser` adds those a script names, with its overrides."""


def script_parser(doc: str | None) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` described by the first paragraph of ``doc`` (the script's
    docstring), so that ``python benchmarks/NAME.py --help`` says what the script measures."""
    return argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])


def comparison_parser(doc: str | None, **flags: bool | dict[str, Any]) -> argparse.ArgumentParser:
    """:func:`script_parser` with the hidden ``--worker LIBRARY`` (how :func:`run_worker`
    starts one measurement) and, in the order given, the :data:`SHARED_FLAGS` named in
    ``flags``, each ``True`` (the shared settings) or a dict of argparse settings overriding
    them (``seeds={"default": [1, 8]}``). The script adds its own flags after."""
    parser = script_parser(doc)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    for name, settings in flags.items():
        if settings is False:
            continue
        merged = dict(SHARED_FLAGS[name])
        merged.update(settings if isinstance(settings, dict) else {})
        parser.add_argument("--" + name.replace("_", "-"), **merged)
    return parser


def run_worker_if_asked(
    args: argparse.Namespace, workers: dict[str, Callable[[argparse.Namespace], dict]]
) -> bool:
    """With ``--worker LIBRARY``: runs ``workers[LIBRARY](args)`` here and prints its result
    as the one JSON line :func:`run_worker` reads back; True. Without it: False (the caller
    orchestrates)."""
    if not args.worker:
        return False
    if args.worker not in workers:
        raise SystemExit(f"unknown --worker {args.worker!r}: one of {', '.join(workers)}")
    print(json.dumps(workers[args.worker](args)))
    return True


def side_by_side(
    script: str,
    args: argparse.Namespace,
    schedule: Iterable[tuple[int, str, int]],
    pythons: dict[str, str],
    flags: Callable[[str, int], dict[str, Any]],
    describe: Callable[[dict], str],
    names: dict[str, str] | None = None,
) -> dict[tuple[str, int], list]:
    """Runs jrl and its peers in one run of ``script``: each ``(repeat, library, seeds)`` of
    ``schedule`` in a fresh interpreter ``pythons[library]`` (jrl's: this one), as
    :func:`run_worker` with ``flags(library, seeds)`` under ``args.timeout``, the progress on
    stderr (:func:`measure`, ``describe`` and ``names``). Dumps the results to ``args.json``
    when the script has that flag and it is given (:func:`dump_measured`); returns them."""

    def run_one(library: str, seeds: int) -> dict | str:
        python = pythons.get(library, sys.executable)
        return run_worker(script, python, library, args.timeout, **flags(library, seeds))

    measured = measure(schedule, run_one, describe, names)
    if getattr(args, "json", None):
        dump_measured(args.json, measured)
    return measured


def worker_record(library: str, seeds: int | None = None, **fields: Any) -> dict:
    """A worker's JSON result: ``library`` (and ``seeds``), ``fields``, then the jax version
    and the 1-minute load average at the end of the measurement."""
    import jax

    head: dict[str, Any] = {"library": library}
    if seeds is not None:
        head["seeds"] = seeds
    return {**head, **fields, "jax": jax.__version__, "load": os.getloadavg()[0]}


def package_versions(*packages: str) -> dict[str, str]:
    """``{package: installed version}`` of a worker's libraries."""
    from importlib.metadata import version

    return {p: version(p) for p in packages}


def load_range(rows: Iterable[dict | str]) -> str:
    """'<min> to <max>' of the 1-minute load averages of :func:`best_of` rows, or '?'."""
    loads = [x for r in rows if isinstance(r, dict) for x in r["loads"]]
    return f"{min(loads):.1f} to {max(loads):.1f}" if loads else "?"


def time_ratios(j: dict, x: dict) -> dict[str, float | None]:
    """jrl's times over a peer's (< 1: jrl takes less), from two rows: ``run``; ``compile``,
    jrl's compile + init against the peer's compile (the peers initialise inside their
    compiled program); ``total``, compile + init + run; ``to_target``, the estimated times to
    the target return (:func:`time_to_target`), None unless both reached it."""
    init = j.get("init") or 0.0
    tj, tx = time_to_target(j), time_to_target(x)
    return {
        "run": j["run"] / x["run"],
        "compile": (j["compile"] + init) / x["compile"],
        "total": (j["compile"] + init + j["run"]) / (x["compile"] + x["run"]),
        "to_target": tj / tx if tj is not None and tx is not None else None,
    }


def output_path(args: argparse.Namespace) -> Path | None:
    """Where a script with ``--output`` and ``--quick`` (and maybe ``--no-write``) writes its
    section: :func:`default_output`, or none with ``--no-write``."""
    if getattr(args, "no_write", False):
        return None
    return default_output(args.output, args.quick)


def write_result(output: Path | None, heading: str, text: str) -> None:
    """Puts the section ``text`` in the markdown file ``output`` (:func:`write_section`) and
    says so; nothing when ``output`` is None."""
    if output is not None:
        write_section(output, heading, text)
        print(f"wrote {output}")


# --------------------------------------------------------------------------
# PureJaxRL (a checkout outside jrl)
# --------------------------------------------------------------------------


def purejaxrl_available(checkout: str, module: str, python: str) -> bool:
    """Whether ``purejaxrl/<module>.py`` is in ``checkout`` and the interpreter ``python``
    exists; says on stderr that PureJaxRL is skipped when not."""
    found = Path(checkout) / "purejaxrl" / f"{module}.py"
    if found.exists() and Path(python).exists():
        return True
    print(f"PureJaxRL skipped: {found} or {python} not found (see --purejaxrl)", file=sys.stderr)
    return False


def import_purejaxrl(checkout: str, module: str):
    """``purejaxrl.<module>`` from the checkout at ``checkout``, run as it is, except:

    - ``purejaxrl.wrappers`` (also as the top-level ``wrappers`` its scripts import) is
      gymnax's ``gymnax.wrappers.purerl``, gymnax's copy
      of the same ``LogWrapper`` and ``FlattenObservationWrapper`` (which
      PureJaxRL's own dqn.py imports). With PureJaxRL's wrappers.py, its PPO with
      16 vmapped seeds hung here on jax 0.10.2 CPU, reproducibly (every thread
      idle, the main thread waiting for the result). 1 seed did not hang. With
      gymnax's copy it runs. The two files differ only in type hints and
      ``static_argnums=(0,)`` against ``static_argnames=("self",)``.
    - dqn.py imports ``wandb``, which is not used while logging is off; where it
      is not installed, an empty stand-in is registered.
    - dqn.py calls ``jax.tree_map``, which newer jax removed; it is pointed at
      ``jax.tree.map``, the same function.
    """
    import importlib
    import importlib.util
    import types

    import jax

    if "wandb" not in sys.modules and importlib.util.find_spec("wandb") is None:
        sys.modules["wandb"] = types.ModuleType("wandb")
    if not hasattr(jax, "tree_map"):
        jax.tree_map = jax.tree.map
    package = Path(checkout).resolve() / "purejaxrl"
    if not (package / f"{module}.py").exists():
        raise SystemExit(f"no purejaxrl/{module}.py under {package.parent} (--purejaxrl)")
    # the package is loaded from its folder by name; the import path is left as it is
    spec = importlib.util.spec_from_file_location(
        "purejaxrl", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    sys.modules["purejaxrl"] = importlib.util.module_from_spec(spec)
    if (package / "__init__.py").exists():
        spec.loader.exec_module(sys.modules["purejaxrl"])
    wrappers = importlib.import_module("gymnax.wrappers.purerl")
    # its scripts import ``wrappers`` as a top-level module (``from wrappers import ...``)
    sys.modules["purejaxrl.wrappers"] = sys.modules["wrappers"] = wrappers
    return importlib.import_module(f"purejaxrl.{module}")


def purejaxrl_ppo_config(config: dict, env_name: str, total_steps: int) -> dict:
    """A jrl PPO ``config`` (jrl's field names) in the keys of PureJaxRL's PPO scripts'
    ``__main__`` configs (``ppo.py``, ``ppo_rnn.py``; DEBUG off) for gymnax's ``env_name``."""
    c = config
    return {
        "LR": c["learning_rate"],
        "NUM_ENVS": c["num_envs"],
        "NUM_STEPS": c["num_steps"],
        "TOTAL_TIMESTEPS": int(total_steps),
        "UPDATE_EPOCHS": c["num_epochs"],
        "NUM_MINIBATCHES": c["num_minibatches"],
        "GAMMA": c["gamma"],
        "GAE_LAMBDA": c["gae_lambda"],
        "CLIP_EPS": c["clip_eps"],
        "ENT_COEF": c["ent_coef"],
        "VF_COEF": c["vf_coef"],
        "MAX_GRAD_NORM": c["max_grad_norm"],
        "ACTIVATION": c["activation"],
        "ENV_NAME": env_name,
        "ANNEAL_LR": c["anneal_lr"],
        "DEBUG": False,
    }


def carried_returns(total, count):
    """``[R, iterations]``: per run, the mean return of the episodes that finished in
    each iteration (``total / count`` of their returns), carried forward through
    iterations where none finished, NaN before the first. Averaged over runs
    (``nanmean``) this is the quantity jrl logs as ``train/episode_return``."""
    import numpy as np

    total, count = np.asarray(total, np.float64), np.asarray(count, np.float64)
    out = np.full(count.shape, np.nan)
    last = np.full(count.shape[0], np.nan)
    for i in range(count.shape[1]):
        last = np.where(count[:, i] > 0, total[:, i] / np.maximum(count[:, i], 1), last)
        out[:, i] = last
    return out


def mean_and_final(per_run):
    """For a ``[R, iterations]`` return history: the mean over runs per iteration
    (``[iterations]``, NaN before any episode) and the mean over runs and the last 5%
    of the iterations (the final return)."""
    import warnings

    import numpy as np

    per_run = np.asarray(per_run, np.float64)
    with warnings.catch_warnings():  # iterations before the first finished episode are NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(per_run, axis=0), float(
            np.nanmean(per_run[:, -max(1, per_run.shape[1] // 20) :])
        )


def purejaxrl_ppo_returns(metrics):
    """``[R, iterations]`` training returns (:func:`carried_returns`) from the metrics of
    PureJaxRL's PPO, its LogWrapper's info per step ``[R, iterations, num_steps, num_envs]``."""
    import numpy as np

    done = np.asarray(metrics["returned_episode"], np.float64)
    total = (np.asarray(metrics["returned_episode_returns"], np.float64) * done).sum(axis=(2, 3))
    return carried_returns(total, done.sum(axis=(2, 3)))


def purejaxrl_independent_seeds(train):
    """PureJaxRL's DQN ``train(rng)`` with one random stream per seed.

    Its ``dqn.py`` (commit 19f8284) rebinds its key to ``jax.random.PRNGKey(0)``
    (commented "a dummy rng", meant for a template transition) and keeps drawing
    from that key: the network init, exploration and replay sampling. Under
    ``vmap`` over seeds every seed therefore gets the same initial network and
    the same random draws, only the env resets differ, and the program draws its
    random numbers once for all seeds instead of once per seed. The returned
    function makes that ``PRNGKey(0)`` call, while ``train`` is traced, return
    ``fold_in(rng, 0)`` of the seed's own key, so every seed draws its own
    stream, as jrl's seeds do. PureJaxRL's code is not changed.
    """
    import jax

    def seeded(rng):
        original, calls = jax.random.PRNGKey, []

        def own_key(seed):
            calls.append(seed)
            return jax.random.fold_in(rng, seed)

        jax.random.PRNGKey = own_key
        try:
            out = train(rng)
        finally:
            jax.random.PRNGKey = original
        if not calls:  # a later PureJaxRL that no longer makes the call: nothing to redirect
            raise RuntimeError(
                "PureJaxRL's train did not call jax.random.PRNGKey: purejaxrl_independent_seeds "
                "has nothing to redirect; compare against the published program instead"
            )
        return out

    return seeded


# --------------------------------------------------------------------------
# The Sebulba runner: one seed of an agent, and Ray actors against threads
# --------------------------------------------------------------------------


def sebulba_once(agent: str, env_id: str, steps: int, options: dict, **overrides: Any):
    """``(config, RunResult)`` of one seed (key 0) of ``agent`` on the Sebulba runner:
    ``env_id`` with CartPole-v1's preset, ``total_steps=steps`` and config ``overrides``,
    ``SebulbaOptions(**options)``, 4 reports. ``RunResult.timings["run_s"]`` leaves out the
    first update (compilation)."""
    import jax
    import jrl.agents
    import jrl.envs

    from jrl.app import api as experiment
    from jrl.run import sebulba

    env, params = jrl.envs.make(env_id)
    config = experiment.make_config(agent, "CartPole-v1", total_steps=steps, **overrides)
    built = jrl.agents.get(agent).build(config, env, params)
    res = sebulba.run(
        built.agent,
        env,
        built.spec,
        jax.random.key(0)[None],
        config.num_iterations,
        config.num_steps,
        config.num_envs,
        sebulba.SebulbaOptions(**options),
        num_reports=4,
        replay=built.replay,
    )
    return config, res


def ray_against_threads(run: Callable, steps: int, counts: Iterable[int]) -> list[tuple]:
    """For each actor count n: ``(n, Ray env steps/s, Ray updates/s, Ray bytes/s, threads' env
    steps/s, threads' updates/s)``; ``run(steps, **options)`` returns ``(env steps/s,
    updates/s, metrics)``; bytes/s is the median over updates of ``sebulba/bytes_per_s``."""
    import numpy as np

    rows = []
    for n in counts:
        ray_rate, ray_updates, m = run(steps, actors=f"ray:{n}")
        ray_bytes = float(np.median(m["sebulba/bytes_per_s"][0, 1:]))
        thread_rate, thread_updates, _ = run(steps, actor_threads=n)
        rows.append((n, ray_rate, ray_updates, ray_bytes, thread_rate, thread_updates))
        print(rows[-1], flush=True)
    return rows


def wire_bytes(run: Callable, steps: int) -> list[tuple]:
    """With 2 Ray actors, float32 and bfloat16 transfers: ``(transfer, bytes pushed per update
    (all actors), bytes per parameter version, median bytes/s, env steps/s)``."""
    import numpy as np

    out = []
    for transfer in ("float32", "bfloat16"):
        rate, _, m = run(steps, actors="ray:2", transfer=transfer)
        per_s = float(np.median(m["sebulba/bytes_per_s"][0, 1:]))
        last = {k: float(m["sebulba/" + k][0, -1]) for k in ("trajectory_bytes", "params_bytes")}
        pushed, params = last["trajectory_bytes"], last["params_bytes"]
        out.append((transfer, pushed, params, per_s, rate))
        print(out[-1], flush=True)
    return out


def ray_tables(rows: list[tuple], wire: list[tuple], pushed: str) -> list[str]:
    """Markdown lines of :func:`ray_against_threads`'s and :func:`wire_bytes`'s tables;
    ``pushed`` names what the actors push per update."""
    text = [
        "| actors | Ray: env steps/s | Ray: updates/s | Ray: bytes/s | threads: env steps/s "
        "| threads: updates/s | Ray / threads |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, rr, ru, rb, tr, tu in rows:
        text.append(
            f"| {n} | {rr:,.0f} | {ru:,.1f} | {rb:,.0f} | {tr:,.0f} | {tu:,.1f} | {rr / tr:.2f} |"
        )
    text += [
        "",
        "Bytes on the wire with 2 Ray actors:",
        "",
        f"| transfer | {pushed} | bytes per parameter version | bytes/s | env steps/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for transfer, tb, pb, per_s, rate in wire:
        text.append(f"| {transfer} | {tb:,.0f} | {pb:,.0f} | {per_s:,.0f} | {rate:,.0f} |")
    return text


def spread_cores(state) -> int:
    """How many CPU devices a jrl run's final state lies on: the cores ``jrl.train`` or
    ``anakin.run`` spread its runs over (1: not spread)."""
    import jax

    return len(jax.tree.leaves(state)[0].sharding.device_set)


def cores_note(jrl_rows: Iterable[dict], peers: str) -> str:
    """The "cores" bullet of a section comparing jrl with peers: ``jrl_rows`` are jrl's
    measurements (their ``seeds`` and ``cores``, from :func:`spread_cores`); ``peers`` says
    how the peers run (e.g. "PureJaxRL runs on one device, as its own script runs it")."""
    spread = sorted({(r["seeds"], r.get("cores", 1)) for r in jrl_rows})
    if not any(c > 1 for _, c in spread):
        return (
            "every program ran on one CPU device (jrl's runs were not spread over the cores: "
            "measured before `jrl train` spread them, or on a one-core machine)."
        )
    per = ", ".join(
        f"{s} seed{'s' if s > 1 else ''} on {c} core{'s' if c > 1 else ''}" for s, c in spread
    )
    return (
        "jrl's worker makes one CPU device per core and its runs are spread over them, as "
        "`jrl train` runs them (`parallel.use_cpu_cores`, `anakin.spread_mesh`; each core "
        f"steps its block of seeds with nothing exchanged): {per}. One run is never split. "
        f"{peers}. XLA keeps the small kernels of an RL program on one thread."
    )

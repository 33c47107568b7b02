"""Writing benchmark results into BENCHMARKS.md (shared by the benchmark scripts).

The scripts run as ``python benchmarks/NAME.py``, so this module is importable
as ``report`` from the script's own folder.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


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


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measured_on() -> str:
    """The 'Measured <date> on <cpu>, <n> cores, Python, jax; load' line of a section."""
    import jax

    return (
        f"Measured {datetime.date.today().isoformat()} on {cpu_model()}, {os.cpu_count()} cores,\n"
        f"Python {platform.python_version()}, jax {jax.__version__}; 1-minute load average "
        f"{os.getloadavg()[0]:.1f} at the end."
    )


def publish(heading: str, text: str, write: bool) -> None:
    """Prints a section and, with ``write``, puts it in BENCHMARKS.md."""
    print(text)
    if write:
        write_section(BENCHMARKS_MD, heading, text)
        print(f"wrote {BENCHMARKS_MD}")


def run_json_worker(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path) -> dict | str:
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


def compile_and_run(fn, *args):
    """AOT-compiles the jitted ``fn`` for ``args`` (``lower().compile()``), then calls it
    once and waits for the result: ``(output, times)``, ``times`` holding the wall
    (``compile``, ``run``) and this process's CPU (``compile_cpu``, ``run_cpu``) seconds."""
    import time

    import jax

    t0, c0 = time.perf_counter(), time.process_time()
    compiled = fn.lower(*args).compile()
    t1, c1 = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(compiled(*args))
    t2, c2 = time.perf_counter(), time.process_time()
    return out, {"compile": t1 - t0, "compile_cpu": c1 - c0, "run": t2 - t1, "run_cpu": c2 - c1}


DEFAULT_PUREJAXRL = "/work/purejaxrl"
"""Where the benchmarks look for a PureJaxRL checkout (``--purejaxrl``): a folder holding
the ``purejaxrl`` package of github.com/luchris429/purejaxrl. It is never part of jrl."""


def import_purejaxrl(checkout: str, module: str):
    """``purejaxrl.<module>`` from the checkout at ``checkout``, run as it is, except:

    - ``purejaxrl.wrappers`` is gymnax's ``gymnax.wrappers.purerl``, gymnax's copy
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
    import sys
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
    sys.modules["purejaxrl.wrappers"] = importlib.import_module("gymnax.wrappers.purerl")
    return importlib.import_module(f"purejaxrl.{module}")


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

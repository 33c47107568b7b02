"""PPO CartPole-v1 end to end: the whole ``jrl train`` command against PureJaxRL's ``ppo.py``.

The paired benchmark (``paired.py``) times the compiled programs inside one process. What a
user waits for is the whole command: the interpreter, imports, building, compiling, the run,
and (jrl) writing the run folder. Here each measurement is one fresh process, timed from its
start to its exit, cold (no persistent compilation cache on either side):

- **jrl**: ``jrl train ppo --env CartPole-v1 --seeds S --no-compile-cache`` (the preset is
  PureJaxRL's configuration, 499,712 env steps per seed), in a new temporary folder, so it
  writes its run folder (metrics, learning curve, checkpoint, parameters) as a user's run does.
- **PureJaxRL**: its own ``make_train`` from ``purejaxrl/ppo.py`` (a checkout outside jrl,
  ``--purejaxrl``) with its ``__main__`` configuration (``DEBUG`` off, which otherwise prints
  every finished episode), run as its ``__main__`` runs it: ``jit(make_train(config))(key)``
  for one seed and ``jit(vmap(make_train(config)))(keys)`` for several, in a process of this
  script (``--worker``), waiting for the result.

Both run in this interpreter, which needs jrl and PureJaxRL's dependencies (see
``paired.py``). The libraries alternate within each round; the result per seed count is the
median over rounds of the paired ratio PureJaxRL seconds / jrl seconds (> 1: the jrl command
finishes first), with the median and best seconds of each.

Usage::

    /work/venv-rejax/bin/python benchmarks/end_to_end.py [--seeds 1 16] [--rounds 3] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from common import DEFAULT_PUREJAXRL, measured_on, publish, run_json_worker

HEADING = "## PPO CartPole-v1 end to end (jrl train against PureJaxRL's ppo.py)"
FINAL = re.compile(r"final return (-?[\d.]+)")


def worker(seeds: int, checkout: str) -> None:
    """PureJaxRL's PPO for ``seeds`` seeds, as its ``__main__`` runs it; prints its final
    training return (mean over seeds of the last 5% of iterations) as JSON."""
    import jax
    import numpy as np
    from common import import_purejaxrl, purejaxrl_ppo_config, purejaxrl_ppo_returns
    from ppo_cartpole import CONFIG

    config = purejaxrl_ppo_config(CONFIG, "CartPole-v1", 500_000)
    train = import_purejaxrl(checkout, "ppo").make_train(config)
    key = jax.random.PRNGKey(30)  # its __main__'s key
    if seeds == 1:
        out = jax.block_until_ready(jax.jit(train)(key))
        metrics = jax.tree.map(lambda x: np.asarray(x)[None], out["metrics"])
    else:
        out = jax.block_until_ready(jax.jit(jax.vmap(train))(jax.random.split(key, seeds)))
        metrics = out["metrics"]
    returns = np.asarray(purejaxrl_ppo_returns(metrics), np.float64)  # [R, iterations]
    tail = max(1, returns.shape[1] // 20)
    print(json.dumps({"final_return": float(np.nanmean(returns[:, -tail:]))}))


def run_jrl(seeds: int, timeout: float) -> tuple[float, float]:
    """Wall seconds from start to exit of the ``jrl train`` command, and its final return."""
    jrl = Path(sys.executable).with_name("jrl")
    if not jrl.exists():
        raise SystemExit(f"no jrl command next to {sys.executable}: install jrl in this venv")
    cmd = [str(jrl), "train", "ppo", "--env", "CartPole-v1", "--seeds", str(seeds)]
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        done = subprocess.run(
            [*cmd, "--no-compile-cache"], cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    out = done.stdout
    found = FINAL.search(out)
    if found is None:
        raise SystemExit(f"jrl train printed no final return:\n{out[-2000:]}")
    return seconds, float(found.group(1))


def run_purejaxrl(seeds: int, checkout: str, timeout: float) -> tuple[float, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(seeds)]
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        out = run_json_worker([*cmd, "--purejaxrl", checkout], dict(os.environ), timeout, cwd)
        seconds = time.perf_counter() - start
    if isinstance(out, str):
        raise SystemExit(f"PureJaxRL's worker failed: {out}")
    return seconds, out["final_return"]


def section(results: list[dict], rounds: int) -> str:
    rows = [
        "| seeds | jrl s (median, best) | PureJaxRL s (median, best) | ratio PureJaxRL / jrl "
        "(median, range) | rounds jrl first | final return jrl / PureJaxRL (median) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        jrl_s, pjr_s, ratios = r["jrl"], r["purejaxrl"], r["ratios"]
        rows.append(
            f"| {r['seeds']} | {statistics.median(jrl_s):.2f}, {min(jrl_s):.2f} "
            f"| {statistics.median(pjr_s):.2f}, {min(pjr_s):.2f} "
            f"| **{statistics.median(ratios):.2f}x** ({min(ratios):.2f}-{max(ratios):.2f}) "
            f"| {sum(x > 1 for x in ratios)}/{len(ratios)} "
            f"| {statistics.median(r['jrl_return']):.1f} / "
            f"{statistics.median(r['purejaxrl_return']):.1f} |"
        )
    table = "\n".join(rows)
    seeds = " ".join(str(r["seeds"]) for r in results)
    return f"""{HEADING}

The whole command, from process start to exit, cold (no persistent compilation cache on
either side): `jrl train ppo --env CartPole-v1 --seeds S --no-compile-cache` (PureJaxRL's
configuration, 499,712 env steps per seed; it also writes its run folder) against PureJaxRL's
own `purejaxrl/ppo.py` `make_train` with its `__main__` configuration (DEBUG off), run as its
`__main__` runs it (`jit(make_train(config))` for one seed, under `vmap` for several), each
in a fresh process of one interpreter, the libraries alternated in each of {rounds} rounds.
The ratio is each round's PureJaxRL seconds / jrl seconds (> 1: jrl finishes first); final
returns are the training return over the last 5% of iterations, as each prints or logs it.
The in-process comparison of the programs alone is "jrl and PureJaxRL in one process
(paired)". Reproduce with (an interpreter with jrl and PureJaxRL's dependencies, see
`paired.py`):

    python benchmarks/end_to_end.py --seeds {seeds} --rounds {rounds} --write

{measured_on()}

{table}
"""


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 16])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--purejaxrl", default=DEFAULT_PUREJAXRL, help="PureJaxRL checkout")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per command")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--write", action="store_true", help="write the section to BENCHMARKS.md")
    a = p.parse_args(argv)
    if a.worker is not None:
        worker(a.worker, a.purejaxrl)
        return
    if a.rounds < 1 or min(a.seeds) < 1:
        p.error("--rounds and --seeds must be positive")
    if not (Path(a.purejaxrl) / "purejaxrl" / "ppo.py").exists():
        p.error(f"no purejaxrl/ppo.py under --purejaxrl {a.purejaxrl}")
    results = []
    for seeds in a.seeds:
        r = {"seeds": seeds, "ratios": []}
        r.update({k: [] for k in ("jrl", "purejaxrl", "jrl_return", "purejaxrl_return")})
        for i in range(a.rounds):
            order = ("jrl", "purejaxrl") if i % 2 == 0 else ("purejaxrl", "jrl")
            got = {}
            for lib in order:
                run = run_jrl if lib == "jrl" else partial(run_purejaxrl, checkout=a.purejaxrl)
                got[lib] = run(seeds, timeout=a.timeout)
                r[lib].append(got[lib][0])
                r[f"{lib}_return"].append(got[lib][1])
            r["ratios"].append(got["purejaxrl"][0] / got["jrl"][0])
            print(
                f"seeds {seeds} round {i + 1}: jrl {got['jrl'][0]:.2f} s, PureJaxRL "
                f"{got['purejaxrl'][0]:.2f} s, ratio {r['ratios'][-1]:.3f}, load "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
        results.append(r)
    publish(HEADING, section(results, a.rounds), a.write)


if __name__ == "__main__":
    main()

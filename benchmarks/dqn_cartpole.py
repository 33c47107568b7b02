"""DQN on CartPole-v1: compile time, run time, steps/s and time to a return of 475.

The configuration is PureJaxRL's DQN one (``purejaxrl/dqn.py``): 10 envs,
replay 1e4, batch 128, Adam lr 2.5e-4 (constant), one update per 10 env
steps, target network copied every 500 env steps, epsilon 1 -> 0.05 over the
first half of training, learning starts at 1e4 env steps, gamma 0.99, a
120-84 ReLU Q-network, squared TD loss, plain (not double) DQN, no gradient
clipping, Adam eps 1e-8, 5e5 env steps. In jrl's ``DQNConfig`` terms that is
``CONFIG`` below (one iteration = one step of the 10 envs + one update;
target every 50 updates; epsilon over half of the updates). jrl runs it for
1 seed and for 4 seeds vmapped in one program.

Measurements (each in a fresh subprocess, so that every compile starts cold;
the libraries alternate, ``--repeats`` times):

- **jrl**: ``jrl.train("dqn", "CartPole-v1", seeds=S, **CONFIG)``; compile and
  run seconds are the runner's own (AOT compile of the chunk program; run
  = executing the ``--num-reports`` chunks); ``init`` is the rest of the call
  (building, the memory check, per-seed ``jit(init)``). The persistent
  compilation cache is off, so every compile is cold, like the peers'.
- **PureJaxRL** (its own ``purejaxrl/dqn.py``, from a checkout outside jrl,
  ``--purejaxrl``, run by ``--purejaxrl-python``, an interpreter with
  gymnax 0.0.x and flashbax): ``jit(vmap(make_train(config)))`` as its
  ``main()`` builds it (wandb off), compiled ahead of time, then called
  once, for the same seed counts as jrl. Its per-step metric ``returns``
  (the mean over envs of each env's latest finished return) gives the
  time to 475 the same way.
- **Stable-Baselines3** (``stable_baselines3.DQN`` in its own venv, torch on
  CPU, ``--sb3-python``): the closest configuration its API allows on one
  gymnasium ``CartPole-v1`` env, for a shorter budget (``--sb3-steps``); run
  = ``learn()``, torch with one intra-op thread (``--sb3-threads``; two
  threads were far slower on this busy 2-core machine). Its steps/s is also
  taken over the learning phase alone (after ``learning_starts``), which is
  what jrl's 5e5-step run is 98% of.
- **time to 475**: each run is cut into ``--num-reports`` equal chunks of
  env steps; a chunk's value is the mean, over its steps and over seeds, of
  the latest training-episode return (jrl: ``train/episode_return`` per
  iteration, carried forward; SB3: the Monitor's episode returns, carried
  forward per env step). The first chunk whose value is >= 475 is converted
  to wall time as ``compile + run_seconds * chunk_end / total`` (an
  estimate: the run is taken to progress uniformly).
- **final return**: mean training return over the last 5% of the run
  (``TrainResult.final_returns()``), averaged over seeds.
- Compile and run are each the best over the repeats.

The issue cites PureJaxRL's DQN on this configuration as measured earlier on
the same 2-core machine: about 2.4 s compile and 11 s run for one seed
(~45 k steps/s). That row is shown only when PureJaxRL is not run side by
side.

Usage::

    python benchmarks/dqn_cartpole.py            # full run, writes BENCHMARKS.md
    python benchmarks/dqn_cartpole.py --quick    # small budgets, 1 repeat, prints only
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
import time
from pathlib import Path

from common import (
    best_of,
    best_rows,
    check_config,
    chunk_values,
    compile_and_run,
    comparison_parser,
    cores_note,
    cpu_model,
    first_reach,
    git_commit,
    import_purejaxrl,
    latest_returns,
    load_range,
    nan_to_none,
    or_dash,
    output_path,
    package_versions,
    purejaxrl_available,
    rate,
    run_worker_if_asked,
    side_by_side,
    spread_cores,
    time_ratios,
    time_to_target,
    worker_record,
    write_result,
)

HEADING = "## DQN CartPole-v1"
DEFAULT_SB3_PYTHON = "/work/venv-sb3/bin/python"
DEFAULT_PUREJAXRL_PYTHON = (
    "/work/venv-rejax/bin/python"  # gymnax 0.0.x (PureJaxRL's 5-value step) and flashbax
)

# PureJaxRL's DQN configuration in jrl's DQNConfig fields.
CONFIG = {
    "total_steps": 500_000,
    "num_envs": 10,
    "steps_per_iteration": 1,
    "updates_per_iteration": 1,
    "batch_size": 128,
    "buffer_size": 10_000,
    "learning_starts": 10_000,
    "target_update_interval": 50,
    "epsilon_start": 1.0,
    "epsilon_end": 0.05,
    "exploration_fraction": 0.5,
    "learning_rate": 2.5e-4,
    "anneal_lr": False,
    "gamma": 0.99,
    "n_step": 1,
    "dueling": False,
    "double_q": False,
    "prioritized": False,
    "hidden_sizes": (120, 84),
    "activation": "relu",
    "loss": "mse",
    "distribution": "none",
    "noisy": False,
    "tau": 1.0,
    "max_grad_norm": 0.0,
    "adam_eps": 1e-8,
}

# Stable-Baselines3's closest settings (counted in env steps of its single env).
SB3_CONFIG = {
    "learning_rate": 2.5e-4,
    "buffer_size": 10_000,
    "learning_starts": 10_000,
    "batch_size": 128,
    "tau": 1.0,
    "gamma": 0.99,
    "train_freq": 10,
    "gradient_steps": 1,
    "target_update_interval": 500,
    "exploration_fraction": 0.5,
    "exploration_initial_eps": 1.0,
    "exploration_final_eps": 0.05,
    "max_grad_norm": 10.0,
}
SB3_NET_ARCH = [120, 84]

# PureJaxRL, same configuration, 1 seed, measured earlier on this machine (cited by the issue);
# shown only when PureJaxRL itself is not run side by side (--purejaxrl).
REFERENCE = {"compile": 2.4, "run": 11.0, "steps_per_second": 45_000}


# --------------------------------------------------------------------------
# Workers (run in a subprocess; print one JSON line)
# --------------------------------------------------------------------------


def worker_jrl(seeds: int, total_steps: int, num_reports: int, seed: int) -> dict:
    import warnings

    import numpy as np

    import jrl
    from jrl.core import parallel

    parallel.use_cpu_cores()  # as jrl train does: one CPU device per core
    overrides = {**CONFIG, "total_steps": total_steps}
    config = check_config("dqn", "CartPole-v1", overrides, "the one asked for", **overrides)
    t0 = time.perf_counter()
    res = jrl.train(
        "dqn",
        "CartPole-v1",
        seeds=seeds,
        seed=seed,
        num_reports=num_reports,
        progress=False,
        compile_cache=False,
        **overrides,
    )  # a cold compile, like the peers'

    wall = time.perf_counter() - t0
    ret = np.asarray(res.metrics["train/episode_return"], np.float64)  # [R, iterations]
    with warnings.catch_warnings():  # iterations before the first finished episode are NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(ret, axis=0)
        final = float(np.nanmean(res.final_returns()))
    per_iteration = nan_to_none(mean)
    chunks = chunk_values(per_iteration, num_reports)
    reached = first_reach(chunks)
    steps_per_iteration = config.num_envs * config.steps_per_iteration
    return worker_record(
        "jrl",
        seeds,
        cores=spread_cores(res.final_state),
        steps_per_run=int(res.env_steps[-1]),
        compile=res.compile_seconds,
        run=res.run_seconds,
        init=wall - res.compile_seconds - res.run_seconds,
        wall=wall,
        steps_per_second=res.steps_per_second,
        final_return=final,
        reached_fraction=None if reached is None else reached / len(per_iteration),
        reached_steps=None if reached is None else reached * steps_per_iteration,
        chunks=[(end * steps_per_iteration, v) for end, v in chunks],
    )


# PureJaxRL's dqn.py configuration (its main()), the same run as CONFIG.
PUREJAXRL_CONFIG = {
    "NUM_ENVS": 10,
    "BUFFER_SIZE": 10_000,
    "BUFFER_BATCH_SIZE": 128,
    "EPSILON_START": 1.0,
    "EPSILON_FINISH": 0.05,
    "EPSILON_ANNEAL_TIME": 250_000,
    "TARGET_UPDATE_INTERVAL": 500,
    "LR": 2.5e-4,
    "LEARNING_STARTS": 10_000,
    "TRAINING_INTERVAL": 10,
    "LR_LINEAR_DECAY": False,
    "GAMMA": 0.99,
    "TAU": 1.0,
    "ENV_NAME": "CartPole-v1",
}


def worker_purejaxrl(
    seeds: int, total_steps: int, num_reports: int, seed: int, checkout: str
) -> dict:
    """PureJaxRL's own ``purejaxrl/dqn.py`` (a checkout outside jrl), unchanged:
    ``jit(vmap(make_train(config)))`` as its ``main()`` builds it (wandb off),
    compiled ahead of time, then called once. Its init is inside."""
    import warnings

    import jax
    import numpy as np

    t_start = time.perf_counter()
    dqn = import_purejaxrl(checkout, "dqn")
    config = {**PUREJAXRL_CONFIG, "TOTAL_TIMESTEPS": int(total_steps)}
    keys = jax.random.split(jax.random.PRNGKey(seed), seeds)
    with warnings.catch_warnings():  # flashbax asks for int64 indices, which jax truncates to int32
        warnings.simplefilter("ignore", UserWarning)
        out, times = compile_and_run(jax.jit(jax.vmap(dqn.make_train(config))), keys)
    wall = time.perf_counter() - t_start
    # "returns": per step, the mean over the envs of each env's latest finished return
    # (0 before any)
    per_step = np.asarray(out["metrics"]["returns"], np.float64).mean(
        axis=0
    )  # [steps], mean over seeds
    chunks = chunk_values(per_step.tolist(), num_reports)
    reached = first_reach(chunks)
    steps = per_step.shape[0] * config["NUM_ENVS"]
    return worker_record(
        "PureJaxRL",
        seeds,
        steps_per_run=steps,
        compile=times["compile"],
        run=times["run"],
        init=0.0,
        wall=wall,
        steps_per_second=steps * seeds / times["run"],
        final_return=float(per_step[-max(1, per_step.shape[0] // 20) :].mean()),
        reached_fraction=None if reached is None else reached / per_step.shape[0],
        reached_steps=None if reached is None else reached * config["NUM_ENVS"],
        chunks=[(end * config["NUM_ENVS"], v) for end, v in chunks],
        versions=package_versions("gymnax", "jax", "flax", "optax", "flashbax"),
    )


def worker_sb3(total_steps: int, num_reports: int, seed: int, threads: int) -> dict:
    from importlib.metadata import version

    import gymnasium as gym
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor

    learning_starts = SB3_CONFIG["learning_starts"]

    class LearningStartClock(BaseCallback):
        """Notes the wall time at which the learning phase begins."""

        def __init__(self):
            super().__init__()
            self.at = None

        def _on_step(self) -> bool:
            if self.at is None and self.num_timesteps >= learning_starts:
                self.at = time.perf_counter()
            return True

    t0 = time.perf_counter()
    env = Monitor(gym.make("CartPole-v1"))
    model = DQN(
        "MlpPolicy",
        env,
        policy_kwargs={"net_arch": SB3_NET_ARCH},
        seed=seed,
        device="cpu",
        verbose=0,
        **SB3_CONFIG,
    )
    init_s = time.perf_counter() - t0
    clock = LearningStartClock()
    t0 = time.perf_counter()
    model.learn(total_timesteps=total_steps, callback=clock)
    run_s = time.perf_counter() - t0
    learning_s = time.perf_counter() - clock.at if clock.at is not None else None

    returns = env.get_episode_rewards()
    per_step = latest_returns(returns, env.get_episode_lengths(), total_steps)
    chunks = chunk_values(per_step, num_reports)
    reached = first_reach(chunks)
    tail = per_step[-max(1, total_steps // 20) :]
    known = [v for v in tail if v is not None]
    return {
        "library": "sb3",
        "seeds": 1,
        "steps_per_run": total_steps,
        "compile": 0.0,
        "run": run_s,
        "init": init_s,
        "wall": init_s + run_s,
        "steps_per_second": total_steps / run_s,
        "learning_steps_per_second": (total_steps - learning_starts) / learning_s
        if learning_s
        else None,
        "final_return": sum(known) / len(known) if known else None,
        "reached_fraction": None if reached is None else reached / total_steps,
        "reached_steps": reached,
        "chunks": chunks,
        "episodes": len(returns),
        "torch_threads": torch.get_num_threads(),
        "versions": {p: version(p) for p in ("stable-baselines3", "torch", "gymnasium", "numpy")},
        "load": os.getloadavg()[0],
    }


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------


def best(results: list[dict]) -> dict:
    """:func:`common.best_of`, plus every repeat's env steps to 475 and the best SB3
    learning-phase rate."""
    out = best_of(results)
    out["all_reached"] = [r["reached_steps"] for r in results]
    learning = [
        r["learning_steps_per_second"] for r in results if r.get("learning_steps_per_second")
    ]
    if learning:
        out["learning_steps_per_second"] = max(learning)
    return out


NAMES = {"jrl": "jrl", "purejaxrl": "PureJaxRL", "sb3": "Stable-Baselines3"}


def make_tables(rows: dict[tuple[str, int], dict | str], jrl_seeds: list[int], quick: bool) -> str:
    lines = [
        (
            "| library | seeds | env steps per seed | compile s | init s | run s | env steps/s "
            "| run s / seed | time to 475 s (env steps), estimate | final return |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    if not quick and not isinstance(rows.get(("purejaxrl", 1)), dict):
        ref = REFERENCE
        lines.append(
            f"| PureJaxRL (reference, cited) | 1 | {CONFIG['total_steps']:,} "
            f"| ~{ref['compile']} | – | "
            f"~{ref['run']:.0f} | ~{rate(ref['steps_per_second'])} | ~{ref['run']:.0f} | – | – |"
        )
    keys = [(lib, s) for s in jrl_seeds for lib in ("jrl", "purejaxrl")] + [("sb3", 1)]
    for key in keys:
        r = rows.get(key)
        name = NAMES[key[0]]
        if r is None:
            continue
        if isinstance(r, str):
            lines.append(f"| {name} | {key[1]} | failed: {r} | | | | | | | |")
            continue
        t = time_to_target(r)
        reach = f"{t:.1f} ({r['reached_steps']:,})" if t is not None else "not reached"
        compile_txt = "– (eager)" if key[0] == "sb3" else f"{r['compile']:.1f}"
        speed = rate(r["steps_per_second"])
        if r.get("learning_steps_per_second"):
            speed += f" (learning phase {rate(r['learning_steps_per_second'])})"
        init = "(in compile)" if key[0] == "purejaxrl" else f"{r['init']:.1f}"
        lines.append(
            f"| {name} | {key[1]} | {r['steps_per_run']:,} | {compile_txt} | {init} | "
            f"{r['run']:.1f} | {speed} | {r['run'] / key[1]:.2f} | {reach} "
            f"| {or_dash(r.get('final_return'))} |"
        )

    ratios = []
    j1, sb3 = rows.get(("jrl", 1)), rows.get(("sb3", 1))
    for s in jrl_seeds:
        j, x = rows.get(("jrl", s)), rows.get(("purejaxrl", s))
        if isinstance(j, dict) and isinstance(x, dict):
            t = time_ratios(j, x)
            ratios.append(
                f"- jrl / PureJaxRL, {s} seed{'s' if s > 1 else ''} (side by side): "
                f"**steps/s {j['steps_per_second'] / x['steps_per_second']:.2f}x** "
                "(> 1: jrl faster), "
                f"run time {t['run']:.2f}x, compile (jrl: compile + init) "
                f"{t['compile']:.2f}x, compile + init + run {t['total']:.2f}x, "
                f"time to 475 {or_dash(t['to_target'], '{:.2f}x')} (times: < 1, jrl takes less)."
            )
    if isinstance(j1, dict):
        if not quick and not isinstance(rows.get(("purejaxrl", 1)), dict):
            ratios.append(
                "- jrl (1 seed) / PureJaxRL reference: "
                f"compile {j1['compile'] / REFERENCE['compile']:.2f}x, "
                f"run {j1['run'] / REFERENCE['run']:.2f}x (times; < 1: jrl takes less), "
                f"steps/s {j1['steps_per_second'] / REFERENCE['steps_per_second']:.2f}x "
                "(against a cited number, not a side-by-side measurement)."
            )
        if isinstance(sb3, dict):
            learning = sb3.get("learning_steps_per_second")
            txt = (
                f"- jrl (1 seed) steps/s / Stable-Baselines3 steps/s: "
                f"**{j1['steps_per_second'] / sb3['steps_per_second']:.0f}x** over SB3's whole run"
            )
            if learning:
                txt += (
                    f", **{j1['steps_per_second'] / learning:.0f}x** over its learning phase "
                    "(the fairer one: "
                    f"jrl's run is {1 - CONFIG['learning_starts'] / j1['steps_per_run']:.0%} "
                    "learning phase, "
                    "SB3's short run only "
                    f"{1 - SB3_CONFIG['learning_starts'] / sb3['steps_per_run']:.0%})"
                )
            ratios.append(txt + ".")
        j4 = rows.get(("jrl", 4))
        if isinstance(j4, dict):
            ratios.append(
                "- jrl, 4 vmapped seeds vs 1: "
                f"{j4['steps_per_second'] / j1['steps_per_second']:.2f}x "
                "the env steps/s (summed over seeds)."
            )
    return "\n".join(lines) + ("\n\n" + "\n".join(ratios) if ratios else "")


def section(
    rows,
    tables: str,
    command: str,
    repeats: int,
    total_steps: int,
    sb3_steps: int,
    num_reports: int,
    sb3_note: str | None,
) -> str:
    import jax

    sb3 = rows.get(("sb3", 1))
    pj = next((r for k, r in rows.items() if k[0] == "purejaxrl" and isinstance(r, dict)), None)
    pj_versions = (
        ("; PureJaxRL's venv: " + ", ".join(f"{k} {v}" for k, v in pj["versions"].items()))
        if pj
        else ""
    )
    load_txt = load_range(rows.values())
    if isinstance(sb3, dict):
        v = sb3["versions"]
        sb3_versions = (
            f"; SB3's venv: stable-baselines3 {v['stable-baselines3']}, torch {v['torch']} "
            f"({sb3['torch_threads']} thread{'s' if sb3['torch_threads'] != 1 else ''}), "
            f"gymnasium {v['gymnasium']}"
        )
    else:
        sb3_versions = ""
    skipped = f"\n**Stable-Baselines3 not measured**: {sb3_note}\n" if sb3_note else ""
    cores_txt = cores_note(
        [r for k, r in rows.items() if k[0] == "jrl" and isinstance(r, dict)],
        "PureJaxRL runs on one device, as its own script runs it",
    )
    threads = sb3["torch_threads"] if isinstance(sb3, dict) else None
    sb3_threads_txt = (
        f"{threads} intra-op thread{'s' if threads != 1 else ''}" if threads else "one thread"
    )
    return f"""{HEADING}

DQN with PureJaxRL's CartPole-v1 configuration: 10 envs, replay 10,000,
batch 128, Adam lr 2.5e-4 (constant), one update per 10 env steps, target
network copied every 500 env steps, epsilon 1 -> 0.05 over the first half of
training, learning from 10,000 env steps, gamma 0.99, a 120-84 ReLU Q-network,
squared TD loss, plain DQN (no double Q, no dueling, 1-step), {total_steps:,} env steps
per seed. jrl runs 1 seed, and 4 seeds vmapped in one program. To reproduce:

    {command}

Measured {datetime.date.today().isoformat()} on {cpu_model()} \
({os.cpu_count()}-core CPU, shared), Python
{platform.python_version()}, jax {jax.__version__}{pj_versions}{sb3_versions}. \
jrl at commit {git_commit()}.
Each configuration ran {repeats} time{"s" if repeats != 1 else ""} in fresh processes, \
alternating the libraries;
compile and run are each the best of those runs. Other jobs were using the machine: \
the 1-minute load average was {load_txt}
at the starts of the runs (2 cores), so the wall times are noisy.
{skipped}
- **cores**: {cores_txt}
- **jrl config**: `jrl.train("dqn", "CartPole-v1", num_envs=10, steps_per_iteration=1,
  updates_per_iteration=1, batch_size=128, buffer_size=10_000, learning_starts=10_000,
  target_update_interval=50, epsilon_end=0.05, exploration_fraction=0.5, learning_rate=2.5e-4,
  anneal_lr=False, gamma=0.99, n_step=1, dueling=False, double_q=False, hidden_sizes=(120, 84),
  loss="mse", max_grad_norm=0.0, adam_eps=1e-8)`: one iteration is one step of the 10 envs and
  one update, so the target copy every 50 updates is every 500 env steps; `max_grad_norm=0`
  turns gradient clipping off, as in PureJaxRL (and with it the `train/grad_norm` metric; the clip's
  global reduction cost 9-12% of an iteration with 1 seed and about 1% with 4, measured as \
paired ratios
  by `python benchmarks/dqn_clip_ab.py [--seeds 4]`), and Adam's eps is PureJaxRL's (optax's
  default; with jrl's default 1e-5, 4 seeds first reached 475 at 355k env steps instead of 235k).
  Differences from PureJaxRL left in place: jrl's loss is 0.5 x TD^2 (PureJaxRL: TD^2; the same
  under Adam up to its eps), epsilon decays over the
  first half of the *updates* (env steps 10k to ~255k; PureJaxRL: env steps 0 to 250k), and
  truncated episodes bootstrap from their final observation (PureJaxRL treats them as terminal).
- **compile**: the runner's `lower().compile()` of the chunk program, cold (jrl's persistent
  compilation cache off); **init**: the rest of the `jrl.train` call outside compile and run
  (building, memory check, per-seed `jit(init)`). PureJaxRL compiles its init inside its one
  program, so the fair compile ratio is jrl's compile + init against PureJaxRL's compile.
  jrl's runner compiles on CPU at XLA's LLVM level 2 (`anakin.compiler_options()`; PureJaxRL
  uses XLA's default, 3).
- **time to 475 (estimate)**: the run is cut into {num_reports} equal chunks of env steps; a
  chunk's value is the mean over its steps (and over seeds) of the latest training-episode
  return (`train/episode_return`, carried forward). The first chunk at >= 475 is converted to
  wall time as `compile + run_seconds * chunk_end / total_steps`, taking the run to progress
  uniformly. "final return": the mean training return over the last 5% of the run.
- **PureJaxRL** is its own `purejaxrl/dqn.py` (github.com/luchris429/purejaxrl, commit
  19f8284), run unchanged from a checkout outside this repository (`--purejaxrl`) in a venv
  with gymnax 0.0.9 (its 5-value `step`) and flashbax. It imports wandb, which is off here;
  an empty stand-in is registered where wandb is not installed, and `jax.tree_map`, which
  newer jax removed, is pointed at `jax.tree.map`. Its learn step is a `lax.cond` on an
  unbatched step counter, so even under `vmap` it skips the updates before learning_starts
  (2% of this run). jrl's gate does the same under its runner's `vmap`: the per-run counter
  is reduced over the runs (`parallel.all_runs`). The issue also cites PureJaxRL as \
"about 2.4 s compile
  and 11 s run, ~45 k steps/s", measured earlier on this machine with another jax version;
  that row is shown only when PureJaxRL is not run.
- **PureJaxRL's vmapped seeds share one random stream** (the same initial network,
  exploration and replay draws; see the paired section below for why), so its 4-seed
  program draws its random numbers once for all seeds, where jrl draws them per seed. The
  4-seed rows here compare against the program as published; given one stream per seed,
  PureJaxRL's 4-seed DQN does the work independent seeds need and runs slower still (the
  paired row "DQN, PureJaxRL's seeds independent").
- **Stable-Baselines3**: `stable_baselines3.DQN("MlpPolicy")` in a separate venv (torch CPU), on one
  gymnasium `CartPole-v1` env (with SB3's Monitor), {sb3_steps:,} env steps (SB3 learns at about
  2 k steps/s here, so not 5e5); settings: buffer 10,000, batch 128, lr 2.5e-4, learning_starts
  10,000, train_freq 10 env steps with 1 gradient step, target_update_interval 500 env steps,
  exploration_fraction 0.5 of its total steps (so epsilon reaches 0.05 at {sb3_steps // 2:,} steps),
  final eps 0.05, net_arch [120, 84] ReLU, gamma 0.99, max_grad_norm 10. Differences SB3 does
  not let us remove: a Huber (smooth L1) loss, not the squared TD error; one env, not 10 (the
  update rate per env step is the same); Adam eps 1e-8; torch's default initialisation; the
  shorter budget, so its return and time-to-475 columns are not comparable with jrl's.
  Its steps/s is given over the whole `learn()` call and over its learning phase (after
  learning_starts); "init" is building the model. torch runs with {sb3_threads_txt}
  (`--sb3-threads`): with torch's default of one thread per core (2 here), a probe while
  writing this script (machine load ~4.4) ran SB3's learning phase at 88 steps/s, against
  2,158 steps/s with one thread (two threads wait on each other over a tiny MLP on a busy
  machine), so one thread is SB3's best case here. jrl's XLA program uses both cores.

{tables}
"""


WORKERS = {
    "jrl": lambda a: worker_jrl(a.seeds[0], a.total_steps, a.num_reports, a.seed),
    "purejaxrl": lambda a: worker_purejaxrl(
        a.seeds[0], a.total_steps, a.num_reports, a.seed, a.purejaxrl
    ),
    "sb3": lambda a: worker_sb3(a.total_steps, a.num_reports, a.seed, a.sb3_threads),
}
"""``--worker LIBRARY`` -> the worker it runs, given the parsed arguments."""


def parse_args(argv=None):
    parser = comparison_parser(
        __doc__,
        quick={"help": "smoke run: 50k jrl / 15k SB3 steps, 1 repeat, prints only"},
        seeds={"help": "jrl seed counts (default 1 4)"},
        repeats={"help": "runs per configuration, best reported (default 3; quick: 1)"},
        total_steps={"help": "jrl env steps per seed (default 500000; quick: 50000)"},
        num_reports={"default": 100, "help": "chunks per run (host syncs; time-to-475 grid)"},
        seed=True,
        purejaxrl={
            "help": "a PureJaxRL checkout (the folder holding purejaxrl/dqn.py) to run side by "
            "side; skipped if absent"
        },
        purejaxrl_python={
            "default": DEFAULT_PUREJAXRL_PYTHON,
            "help": "interpreter for PureJaxRL (needs gymnax 0.0.x and flashbax)",
        },
        timeout={"default": 900},
        output=True,
        json=True,
    )
    parser.add_argument("--sb3-steps", type=int, help="SB3 env steps (default 50000; quick: 15000)")
    parser.add_argument(
        "--sb3-python",
        default=DEFAULT_SB3_PYTHON,
        help="interpreter with stable-baselines3 installed (skipped if absent)",
    )
    parser.add_argument(
        "--sb3-threads",
        type=int,
        default=1,
        help="torch intra-op threads for SB3 (default 1; 0: torch's default, one per core)",
    )
    args = parser.parse_args(argv)
    args.total_steps = args.total_steps or (50_000 if args.quick else CONFIG["total_steps"])
    args.sb3_steps = args.sb3_steps or (15_000 if args.quick else 50_000)
    return args


def run_libraries(args, jrl_seeds: list[int]) -> tuple[dict, str | None]:
    """Measures jrl and the peers found, side by side: ``(measured, sb3_note)``."""
    with_pjr = purejaxrl_available(args.purejaxrl, "dqn", args.purejaxrl_python)
    runs = [(lib, s) for s in jrl_seeds for lib in (("jrl", "purejaxrl") if with_pjr else ("jrl",))]
    sb3_note = None
    if Path(args.sb3_python).exists():
        runs.append(("sb3", 1))
    else:
        sb3_note = f"{args.sb3_python} not found (create the venv, or pass --sb3-python)"
        print(f"Stable-Baselines3 skipped: {sb3_note}", file=sys.stderr)
    measured = side_by_side(
        __file__,
        args,
        [(rep, lib, s) for rep in range(args.repeats) for lib, s in runs],
        {"purejaxrl": args.purejaxrl_python, "sb3": args.sb3_python},
        lambda lib, seeds: dict(
            seeds=seeds,
            total_steps=args.sb3_steps if lib == "sb3" else args.total_steps,
            num_reports=args.num_reports,
            seed=args.seed,
            sb3_threads=args.sb3_threads,
            purejaxrl=args.purejaxrl,
        ),
        lambda r: (
            f"compile {r['compile']:5.2f} s run {r['run']:6.2f} s "
            f"{r['steps_per_second']:9,.0f} steps/s final {or_dash(r['final_return'])} "
            f"reached {r['reached_steps']} load {r['load']:.1f}"
        ),
    )
    return measured, sb3_note


def command_line(args, jrl_seeds_given: list[int] | None) -> str:
    """The command that reproduces this run, for the section."""
    command = "python benchmarks/dqn_cartpole.py"
    for flag, value, default in (
        ("--total-steps", args.total_steps, CONFIG["total_steps"]),
        ("--sb3-steps", args.sb3_steps, 50_000),
        ("--repeats", args.repeats, 3),
        ("--num-reports", args.num_reports, 100),
        ("--sb3-threads", args.sb3_threads, 1),
    ):
        if value != default:
            command += f" {flag} {value}"
    if jrl_seeds_given:
        command += " --seeds " + " ".join(map(str, jrl_seeds_given))
    return command


def main(argv=None) -> None:
    args = parse_args(argv)
    if run_worker_if_asked(args, WORKERS):
        return

    args.repeats = args.repeats or (1 if args.quick else 3)
    jrl_seeds = args.seeds or [1, 4]
    measured, sb3_note = run_libraries(args, jrl_seeds)
    rows = best_rows(measured, best)
    if isinstance(rows.get(("sb3", 1)), str):  # every SB3 run failed: the first one's error
        sb3_note = f"the SB3 worker failed: {measured['sb3', 1][0]}"
    tables = make_tables(rows, jrl_seeds, args.quick)
    print(tables)

    output = output_path(args)
    if output is not None:
        text = section(
            rows,
            tables,
            command_line(args, args.seeds),
            args.repeats,
            args.total_steps,
            args.sb3_steps,
            args.num_reports,
            sb3_note,
        )
        write_result(output, HEADING, text)


if __name__ == "__main__":
    main()

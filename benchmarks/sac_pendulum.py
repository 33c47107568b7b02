"""SAC on Pendulum-v1: jrl side by side with SBX (SB3's JAX version) and Stable-Baselines3.

The configuration is jrl's SAC Pendulum-v1 preset (``CONFIG`` below: 20,000 env steps on one
env, one update of 256 per env step, Adam 1e-3 for actor, critics and temperature, replay of
20,000, the first 1,000 steps uniform random actions, tau 0.005, gamma 0.99, two critics,
temperature tuned from 1.0 to a target entropy of -|A|, ReLU 64-64 networks), and the peers
get the same through their SAC arguments (``PEER_CONFIG``).

Measurements (each in a fresh interpreter, so every compile starts cold; the peers in their
own venvs, given by ``--sbx-python`` and ``--sb3-python``):

- **jrl**: ``jrl.train("sac", "Pendulum-v1", seeds=S, ...)`` for S = 1 and 16 (vmapped in one
  program); compile and run seconds are the runner's own, steps/s counts every seed's steps
  over the run (compile excluded).
- **SBX** and **SB3**: ``SAC("MlpPolicy", Monitor(gym.make("Pendulum-v1")), ...)`` and
  ``learn(20_000)``, one seed (they train one at a time); run = ``learn()``, which for SBX
  includes its JIT compiles; SB3 runs torch on CPU.
- **time to -250**: each run is cut into ``--chunks`` equal chunks of env steps; a chunk's
  value is the mean over its steps (and seeds) of the latest finished training-episode return;
  the first chunk at >= -250 is turned into wall time as ``compile + run * chunk_end / total``
  (the run taken to progress uniformly).

Usage::

    python benchmarks/sac_pendulum.py --sbx-python /tmp/peers/sbx/bin/python \\
        --sb3-python /tmp/peers/sb3/bin/python --write
"""

from __future__ import annotations

import os
import sys
import time
import warnings

from common import (
    check_config,
    chunk_values,
    comparison_parser,
    cores_note,
    first_reach,
    git_commit,
    latest_returns,
    measured_on,
    nan_to_none,
    or_dash,
    publish,
    rate,
    run_worker_if_asked,
    side_by_side,
    spread_cores,
    time_to_target,
    worker_record,
)

HEADING = "## SAC Pendulum-v1"
TARGET = -250.0
TOTAL_STEPS = 20_000
CONFIG = {
    "total_steps": TOTAL_STEPS,
    "num_envs": 1,
    "steps_per_iteration": 1,
    "updates_per_iteration": 1,
    "batch_size": 256,
    "buffer_size": 20_000,
    "learning_starts": 1_000,
    "learning_rate": 1e-3,
    "gamma": 0.99,
    "tau": 0.005,
    "num_critics": 2,
    "alpha": 1.0,
    "autotune": True,
    "target_entropy_scale": -1.0,
    "hidden_sizes": (64, 64),
    "activation": "relu",
    "max_grad_norm": 0.0,
}
PEER_CONFIG = {
    "learning_rate": 1e-3,
    "buffer_size": 20_000,
    "learning_starts": 1_000,
    "batch_size": 256,
    "tau": 0.005,
    "gamma": 0.99,
    "train_freq": 1,
    "gradient_steps": 1,
    "ent_coef": "auto_1.0",
    "target_entropy": "auto",
}
PEER_NET = [64, 64]


def worker_jrl(seeds: int, chunks: int) -> dict:
    import numpy as np

    import jrl
    from jrl.core import parallel

    parallel.use_cpu_cores()  # as jrl train does: one CPU device per core
    check_config("sac", "Pendulum-v1", CONFIG, "this benchmark's CONFIG")
    res = jrl.train(
        "sac", "Pendulum-v1", seeds=seeds, progress=False, compile_cache=False, **CONFIG
    )
    ret = np.asarray(res.metrics["train/episode_return"], np.float64)  # [R, iterations]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        per_step = nan_to_none(np.nanmean(ret, axis=0))
    parts = chunk_values(per_step, chunks)
    reached = first_reach(parts, TARGET)
    return worker_record(
        "jrl",
        seeds,
        cores=spread_cores(res.final_state),
        compile=res.compile_seconds,
        run=res.run_seconds,
        steps_per_second=res.steps_per_second,
        final_return=float(np.mean(res.final_returns())),
        reached_fraction=None if reached is None else reached / len(per_step),
    )


def worker_peer(library: str, chunks: int) -> dict:
    from importlib.metadata import version

    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor

    if library == "sbx":
        from sbx import SAC
    else:
        import torch
        from stable_baselines3 import SAC

        torch.set_num_threads(1)
    env = Monitor(gym.make("Pendulum-v1"))
    model = SAC(
        "MlpPolicy", env, policy_kwargs={"net_arch": PEER_NET}, seed=0, verbose=0, **PEER_CONFIG
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=TOTAL_STEPS)
    run = time.perf_counter() - t0
    per_step = latest_returns(env.get_episode_rewards(), env.get_episode_lengths(), TOTAL_STEPS)
    reached = first_reach(chunk_values(per_step, chunks), TARGET)
    tail = [v for v in per_step[-TOTAL_STEPS // 20 :] if v is not None]
    package = "sbx-rl" if library == "sbx" else "stable-baselines3"
    return {
        "library": library,
        "seeds": 1,
        "compile": 0.0,
        "run": run,
        "steps_per_second": TOTAL_STEPS / run,
        "final_return": sum(tail) / len(tail) if tail else None,
        "reached_fraction": None if reached is None else reached / TOTAL_STEPS,
        "version": version(package),
        "load": os.getloadavg()[0],
    }


OBS, ACT = 3, 1  # Pendulum-v1's observation and action sizes
SMALL_SHAPE_GFLOPS, PEAK_GFLOPS = 116, 330
"""Issue #25's measurements on this 2-core CPU: XLA's matmul rate on the small batched shapes
RL networks have, and on a 1024 x 1024 matmul."""
H200_FP32_TFLOPS = 60  # one H200's fp32 rate without tensor cores, about


def mlp_macs(sizes) -> int:
    """Multiply-adds of one sample through dense layers of ``sizes``."""
    return sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))


def update_macs() -> dict[str, int]:
    """Multiply-adds per sample of one SAC update with ``CONFIG``'s networks: the actor (mean
    and log-std heads), one critic, the target (actor and both target critics), the critic
    step (forward and backward of both critics, 3x a forward) and the actor step (the actor's
    forward and backward, the critics' forward and input-gradient passes)."""
    hidden = list(CONFIG["hidden_sizes"])
    actor = mlp_macs([OBS, *hidden, 2 * ACT])
    critic = mlp_macs([OBS + ACT, *hidden, 1])
    critics = CONFIG["num_critics"] * critic
    parts = {
        "actor": actor,
        "critic": critic,
        "target": actor + critics,
        "critic step": 3 * critics,
        "actor step": 3 * actor + 2 * critics,
    }
    parts["total"] = parts["target"] + parts["critic step"] + parts["actor step"]
    return parts


def reading(rows: list[dict]) -> str:
    """The prose after the table, computed from the rows: the issue's targets against SBX and
    the FLOP rate arithmetic behind them."""
    sbx = next((r for r in rows if r["library"] == "sbx"), None)
    jrl_rows = [r for r in rows if r["library"] == "jrl"]
    if sbx is None or not jrl_rows:
        return "SBX or jrl did not run: no ratios."
    macs = update_macs()
    flop = 2 * macs["total"] * CONFIG["batch_size"]  # per update
    per = CONFIG["updates_per_iteration"] / (  # updates per env step
        CONFIG["steps_per_iteration"] * CONFIG["num_envs"]
    )
    lines = []
    for r in jrl_rows:
        cores = r.get("cores", 1)
        ratio = r["steps_per_second"] / r["seeds"] / sbx["steps_per_second"]
        gflops = r["steps_per_second"] * per * flop / 1e9
        target = 3 if r["seeds"] == 1 else 10
        lines.append(
            f"- jrl with {r['seeds']} seed{'s' if r['seeds'] > 1 else ''} "
            f"(on {cores} core{'s' if cores > 1 else ''}): {ratio:.1f}x SBX per seed "
            f"(issue target >= {target}x: {'met' if ratio >= target else 'not met'}), "
            f"at about {gflops:.0f} GFLOP/s of update arithmetic."
        )
    sbx_gflops = sbx["steps_per_second"] * per * flop / 1e9
    ten_x = 10 * sbx["steps_per_second"] * 16 * per * flop / 1e12
    return (
        "\n".join(lines)
        + f"""

The per-update arithmetic, from `CONFIG`'s networks (Pendulum: observation {OBS}, action \
{ACT}): actor {macs["actor"]:,} and critic {macs["critic"]:,} multiply-adds per sample; \
the target {macs["target"]:,}, the critic step {macs["critic step"]:,}, the actor step \
{macs["actor step"]:,}; {macs["total"]:,} in all, {2 * macs["total"] / 1e3:.0f} kFLOP per \
sample, {flop / 1e6:.0f} MFLOP per update of {CONFIG["batch_size"]}. SBX's one seed runs at \
about {sbx_gflops:.0f} GFLOP/s. Ten times SBX's steps/s for each of 16 seeds is \
{ten_x:.1f} TFLOP/s, against about {SMALL_SHAPE_GFLOPS} GFLOP/s for XLA on the small shapes \
RL networks have (one CPU device; spread over both cores, at most about twice that) and \
{PEAK_GFLOPS} GFLOP/s on a 1024 x 1024 matmul on this 2-core CPU (issue #25's \
measurements): the 16-seed target needs an accelerator (one H200 does about \
{H200_FP32_TFLOPS} TFLOP/s in fp32 without tensor cores). Each row is one run in a fresh \
interpreter; SBX's JIT compiles are inside its run seconds (its compile column is 0).
"""
    )


def table(rows: list[dict]) -> str:
    sbx = next((r for r in rows if r["library"] == "sbx"), None)
    lines = [
        "| library | seeds | compile s | run s | steps/s (all seeds) | steps/s per seed "
        "| x SBX per seed | time to -250 s | final return |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        per_seed = r["steps_per_second"] / r["seeds"]
        ratio = f"{per_seed / (sbx['steps_per_second']):.1f}" if sbx else "–"
        lines.append(
            f"| {r['library']} | {r['seeds']} | {r['compile']:.1f} | {r['run']:.1f} "
            f"| {rate(r['steps_per_second'])} | {rate(per_seed)} | {ratio} "
            f"| {or_dash(time_to_target(r))} | {or_dash(r['final_return'])} |"
        )
    return "\n".join(lines)


WORKERS = {
    "jrl": lambda a: worker_jrl(a.seeds, a.chunks),
    "sbx": lambda a: worker_peer("sbx", a.chunks),
    "sb3": lambda a: worker_peer("sb3", a.chunks),
}
"""``--worker LIBRARY`` -> the worker it runs, given the parsed arguments."""


def main(argv=None) -> None:
    p = comparison_parser(
        __doc__, seeds={"nargs": None, "default": 1}, timeout={"default": 3600}, write=True
    )
    p.add_argument("--chunks", type=int, default=40)
    p.add_argument("--jrl-seeds", type=int, nargs="*", default=[1, 16])
    p.add_argument("--sbx-python", default="/tmp/peers/sbx/bin/python")
    p.add_argument("--sb3-python", default="/tmp/peers/sb3/bin/python")
    a = p.parse_args(argv)
    if run_worker_if_asked(a, WORKERS):
        return
    runs = [("jrl", s) for s in a.jrl_seeds] + [("sbx", 1), ("sb3", 1)]
    measured = side_by_side(
        __file__,
        a,
        [(0, library, seeds) for library, seeds in runs],
        {"sbx": a.sbx_python, "sb3": a.sb3_python},
        lambda library, seeds: dict(seeds=seeds, chunks=a.chunks),
        str,
    )
    rows = [r for results in measured.values() for r in results if isinstance(r, dict)]
    versions = [f"{r['library']} {r['version']}" for r in rows if "version" in r]
    cores_txt = "Cores: " + cores_note(
        [r for r in rows if r["library"] == "jrl"],
        "SBX and SB3 train one seed at a time, as their APIs do",
    )
    text = f"""{HEADING}

jrl's SAC Pendulum-v1 preset (20,000 env steps, one update of 256 per step, Adam 1e-3, 64-64
ReLU networks, two critics, tuned temperature) against SBX's and Stable-Baselines3's SAC with
the same hyperparameters, one fresh interpreter each (cold compiles), the peers one seed at a
time, SB3 on torch CPU with one thread. "x SBX per seed" divides each row's steps/s per seed by
SBX's. Reproduce with:

    python benchmarks/sac_pendulum.py --sbx-python PEER_VENV/bin/python \\
        --sb3-python PEER_VENV2/bin/python --write

{measured_on()} jrl at commit {git_commit()}. Peers: {", ".join(versions) or "none ran"}.
{cores_txt}

{table(rows)}

{reading(rows)}"""
    publish(HEADING, text, a.write)


if __name__ == "__main__":
    main(sys.argv[1:])

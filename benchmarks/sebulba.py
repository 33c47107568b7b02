"""The Sebulba runner: PPO's env steps/s on host envs, side by side with Stable-Baselines3.

One process runs every jrl configuration in turn; Stable-Baselines3 runs in a subprocess of
another interpreter (``--sb3-python``, a venv with ``stable-baselines3`` and
``gymnasium[classic-control]``), between them. All use PPO with the same settings: N envs x
128 steps, 4 epochs x 4 minibatches, a 64x64 tanh actor and critic, Adam 2.5e-4, gamma 0.99,
GAE 0.95, clip 0.2, entropy 0.01, value 0.5, gradient clip 0.5 (jrl's PPO defaults, with
``num_envs`` = N).

- **jrl Sebulba on envpool:CartPole-v1**: ``jrl.run.sebulba.run`` over a grid of actor threads,
  queue size and staleness, plus EnvPool's pull mode; steps/s exclude the first update
  (compilation). Actor utilisation is the share of the run its threads spent acting and
  stepping envs (the rest waiting for parameters or a free queue slot); learner utilisation is
  the share it spent in updates (the rest waiting for trajectories).
- **jrl Sebulba on gymnasium:CartPole-v1** (Gymnasium's Python env), synchronous.
- **jrl Anakin** on jrl's own CartPole-v1: the whole loop compiled (``jrl.train``).
- **SB3**: ``stable_baselines3.PPO("MlpPolicy")`` on ``SubprocVecEnv`` of N Gymnasium
  CartPole-v1 processes, ``learn()`` timed (model construction excluded).
- **Atari** (``envpool:Breakout-v5``, EnvPool's own 84x84x4 preprocessing, uint8): throughput
  only, PPO with the Nature CNN torso, 8 envs x 32 steps, one epoch.
- **Bytes per transfer**: trajectories and parameters, float32 and bfloat16.

    python benchmarks/sebulba.py --sb3-python /path/to/sb3-venv/bin/python --write
    python benchmarks/sebulba.py --quick      # a smoke run, prints only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import warnings

import common
import numpy as np

HEADING = "## Sebulba: PPO on host environments (side by side with SB3)"

SB3_SCRIPT = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv
n, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
env = make_vec_env("CartPole-v1", n_envs=n, seed=0, vec_env_cls=SubprocVecEnv)
model = PPO("MlpPolicy", env, n_steps=128, batch_size=n * 128 // 4, n_epochs=4,
            learning_rate=2.5e-4, gamma=0.99, gae_lambda=0.95, clip_range=0.2, ent_coef=0.01,
            vf_coef=0.5, max_grad_norm=0.5, seed=0, device="cpu",
            policy_kwargs=dict(net_arch=[64, 64], activation_fn=torch.nn.Tanh))
t = time.perf_counter()
model.learn(total_timesteps=steps)
seconds = time.perf_counter() - t
import stable_baselines3
print(json.dumps({"seconds": seconds, "steps": model.num_timesteps,
                  "version": stable_baselines3.__version__, "torch": torch.__version__}))
env.close()
"""


def sebulba_run(env_id, num_envs, steps, *, num_steps=128, torso=None, epochs=4, **options):
    """``(steps/s, actor utilisation, learner utilisation, metrics)`` of one Sebulba run."""
    extra = {"num_epochs": epochs, **({} if torso is None else {"torso": torso})}
    config, res = common.sebulba_once(
        "ppo", env_id, steps, options, num_envs=num_envs, num_steps=num_steps, **extra
    )
    t = res.timings
    per_iter = config.num_steps * config.num_envs
    timed_steps = (res.iterations - 1) * per_iter  # the first update (compilation) excluded
    rate = timed_steps / max(t["run_s"], 1e-9)
    actor = t["actor_s"] / max(t["run_s"], 1e-9)
    learner = t["learner_s"] / max(t["run_s"], 1e-9)
    return rate, min(actor, 1.0), min(learner, 1.0), res.metrics


def anakin_rate(num_envs, steps):
    from jrl.app import api as experiment

    r = experiment.train(
        "ppo", "CartPole-v1", progress=False, num_envs=num_envs, total_steps=steps, num_reports=4
    )
    return float(r.env_steps[-1]) / r.run_seconds


def sb3_rate(python, num_envs, steps, timeout=3600):
    out = subprocess.run(
        [python, "-c", SB3_SCRIPT, str(num_envs), str(steps)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        return None, out.stderr[-500:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return got["steps"] / got[
        "seconds"
    ], f"stable-baselines3 {got['version']}, torch {got['torch']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sb3-python", default=None, help="an interpreter with stable-baselines3")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--steps", type=int, default=300_000, help="env steps per jrl run")
    parser.add_argument("--sb3-steps", type=int, default=50_000)
    parser.add_argument("--atari-steps", type=int, default=4_096)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true", help="write BENCHMARKS.md")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    steps = 20_000 if args.quick else args.steps
    n = max(args.num_envs)  # the grid's env count
    grid = [(1, 1, 0), (1, 2, 1), (1, 4, 4), (2, 1, 0), (2, 2, 1), (2, 4, 4)]
    if args.quick:
        grid = grid[:2]
    rows = []
    for threads, queue_size, staleness in grid:
        rate, actor, learner, metrics = sebulba_run(
            "envpool:CartPole-v1",
            n,
            steps,
            actor_threads=threads,
            queue_size=queue_size,
            max_staleness=staleness,
        )
        lag = float(np.mean(metrics["sebulba/policy_lag"]))
        rows.append(
            (
                "envpool:CartPole-v1",
                f"push, {threads}",
                queue_size,
                staleness,
                rate,
                actor,
                learner,
                lag,
            )
        )
        print(rows[-1], flush=True)
    for pull in (n // 4, n // 2):
        rate, actor, learner, metrics = sebulba_run(
            "envpool:CartPole-v1", n, steps, pull_batch=pull, max_staleness=1
        )
        lag = float(np.mean(metrics["sebulba/policy_lag"]))
        rows.append(
            ("envpool:CartPole-v1", f"pull {pull} of {n}, 1", 2, 1, rate, actor, learner, lag)
        )
        print(rows[-1], flush=True)

    versions, compare = "SB3 not run (no --sb3-python)", []
    for m in sorted(args.num_envs):
        envpool, _, _, _ = sebulba_run("envpool:CartPole-v1", m, steps)
        gym, _, _, _ = sebulba_run("gymnasium:CartPole-v1", m, steps)
        anakin = anakin_rate(m, steps)
        sb3 = None
        if args.sb3_python:
            sb3, versions = sb3_rate(args.sb3_python, m, 10_000 if args.quick else args.sb3_steps)
        compare.append((m, envpool, gym, anakin, sb3))
        print(compare[-1], versions, flush=True)

    atari_steps = 4_096 if args.quick else args.atari_steps
    bytes_rows, atari = [], {}
    for transfer in ("float32", "bfloat16"):
        rate, actor, learner, metrics = sebulba_run(
            "envpool:Breakout-v5",
            8,
            atari_steps,
            num_steps=32,
            torso="nature_cnn",
            epochs=1,
            transfer=transfer,
            queue_size=2,
            max_staleness=1,
        )
        atari[transfer] = (rate, actor, learner)
        last = lambda k: metrics[k][0, -1]
        bytes_rows.append(
            (
                "envpool:Breakout-v5, 8 envs x 32 steps (uint8 84x84x4)",
                transfer,
                last("sebulba/trajectory_bytes"),
                last("sebulba/params_bytes"),
            )
        )
        _, _, _, metrics = sebulba_run("envpool:CartPole-v1", n, 4 * n * 128, transfer=transfer)
        bytes_rows.append(
            (
                f"envpool:CartPole-v1, {n} envs x 128 steps",
                transfer,
                last("sebulba/trajectory_bytes"),
                last("sebulba/params_bytes"),
            )
        )
        print(bytes_rows[-2:], flush=True)

    text = [
        HEADING,
        "",
        "PPO (jrl's defaults: 128 steps per env, 4 epochs x 4 minibatches, 64x64 tanh, with N "
        "envs) on CartPole-v1 stepped on the host, one seed. Steps/s exclude compilation (the "
        "first update). Actor utilisation: the share of the run the actor threads spent acting "
        "and stepping envs (mean over threads; the rest waiting for parameters or a queue slot); "
        "learner utilisation: the share it spent in updates (the rest waiting for "
        "trajectories). Reproduce with `python benchmarks/sebulba.py --sb3-python "
        "PEER_VENV/bin/python --write` (a venv with stable-baselines3 and "
        "gymnasium[classic-control]).",
        "",
        common.measured_on() + f" Peers: {versions}; commit {common.git_commit()}.",
        "",
        f"Sebulba on envpool:CartPole-v1 with {n} envs:",
        "",
        "| env | mode, actor threads | queue | max staleness | steps/s | actor util. "
        "| learner util. | mean policy lag |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for env_id, actors, q, k, rate, a, l, lag in rows:
        text.append(
            f"| {env_id} | {actors} | {q} | {k} | {rate:,.0f} | {a:.0%} | {l:.0%} | {lag:.2f} |"
        )
    text += [
        "",
        "Side by side (Sebulba: 1 actor thread, synchronous, the fastest setting on 2 cores; "
        "SB3: `SubprocVecEnv` of N processes):",
        "",
        "| N envs | jrl Sebulba envpool | jrl Sebulba gymnasium | jrl Anakin (jrl's CartPole) "
        "| SB3 | Sebulba envpool x SB3 |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for m, envpool, gym, anakin, sb3 in compare:
        ratio = "–" if sb3 is None else f"{envpool / sb3:.1f}"
        text.append(
            f"| {m} | {envpool:,.0f} | {gym:,.0f} | {anakin:,.0f} "
            f"| {common.or_dash(sb3, '{:,.0f}')} | {ratio} |"
        )
    text += [
        "",
        f"Atari throughput (envpool:Breakout-v5, EnvPool's preprocessing, PPO with the Nature "
        f"CNN, 8 envs x 32 steps, one epoch of 4 minibatches (XLA's CPU convolutions are slow: "
        f"the learner bounds this), {atari_steps:,} steps, queue 2, max staleness 1): float32 "
        f"transfers {atari['float32'][0]:,.0f} steps/s (actor {atari['float32'][1]:.0%}, "
        f"learner {atari['float32'][2]:.0%}); bfloat16 {atari['bfloat16'][0]:,.0f} steps/s.",
        "",
        "| env | transfer | bytes per trajectory | bytes per parameter transfer |",
        "|---|---|---:|---:|",
    ]
    for env_id, transfer, tb, pb in bytes_rows:
        text.append(f"| {env_id} | {transfer} | {tb:,.0f} | {pb:,.0f} |")
    common.publish(HEADING, "\n".join(text) + "\n", args.write and not args.quick)


if __name__ == "__main__":
    main()

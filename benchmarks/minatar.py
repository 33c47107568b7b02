"""MinAtar: jrl's PPO, PQN and DQN presets next to a published PPO learning curve.

Each agent trains with its MinAtar preset (``jrl train AGENT --env gymnax:GAME-MinAtar``:
the preset's whole schedule, learning rate and epsilon annealed over its full budget) and is
stopped at ``--steps`` env steps per seed (``stop_at_steps``; the chunk that crosses it is
finished), which is the stated fraction of the preset's budget. At the stop it reports:

- **train**: the training return, mean of the episodes that ended in the last 5% of the
  iterations run (``TrainResult.final_returns``), per seed;
- **greedy** / **behaviour**: ``jrl eval``'s mean return over ``--episodes`` fresh episodes
  of the greedy policy and of the behaviour policy (PPO: sampled actions; PQN, DQN:
  epsilon-greedy at the epsilon reached), per seed.

The published numbers are the PPO learning curves of gymnax's own baselines (gymnax-blines,
github.com/RobertTLange/gymnax-blines, ``agents/<GAME>-MinAtar/ppo.pkl``, commit c7dd018 of
2022-06-21; these curves are the MinAtar figures of the gymnax README): ``log_return`` at
``log_steps``, the mean return of its 164 evaluation episodes every 320,000 env steps of a
1e7-step run (64 envs x 128 steps, 4 epochs of 8 minibatches, lr 5e-4, entropy 0.01, gamma
0.999, an MLP of 2 x 256 on the flattened image; one run). ``published_at(game, steps)``
interpolates that curve linearly. Numbers, not code, are taken from it: they are written
below. No PQN or DQN curve was available as data here (the PQN paper and MinAtar paper give
figures), so the PQN and DQN rows stand next to the same PPO curve as a reference only.

Usage::

    python benchmarks/minatar.py [--agents ppo pqn dqn] [--games Breakout ...]
        [--steps 320000] [--seeds 1] [--episodes 64] [--out results.jsonl]

One JSON line per (agent, game) is printed (and appended to ``--out``);
``--table results.jsonl`` prints the Markdown table of a results file.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

import jrl
from jrl.app import api as experiment
from jrl.app.execution import TrainingInterrupted

GAMES = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")

PUBLISHED_STEP = 320_000
"""gymnax-blines evaluated every 320,000 env steps (its log_steps are 320,000 k - 64)."""

PUBLISHED = {
    "Asterix": tuple(
        float(x)
        for x in (
            "1.36 1.62 1.80 2.14 2.55 2.76 3.45 4.67 5.38 7.21 6.68 7.00 8.64 7.65 8.08 7.65 "
            "8.54 9.99 11.26 9.72 10.48 12.51 12.38 11.49 11.46 13.77 12.74 13.34 14.83 15.37 "
            "14.95"
        ).split()
    ),
    "Breakout": tuple(
        float(x)
        for x in (
            "8.37 15.45 16.63 15.71 16.02 15.42 16.29 16.23 15.63 15.54 14.91 16.54 17.90 "
            "21.63 21.97 21.95 22.51 22.72 23.02 22.55 22.99 22.12 22.87 22.91 23.34 20.70 "
            "23.04 23.46 23.46 20.07 22.88"
        ).split()
    ),
    "Freeway": tuple(
        float(x)
        for x in (
            "24.69 28.16 29.04 30.25 32.80 36.16 38.32 40.33 43.18 43.77 46.99 48.57 49.60 "
            "50.78 52.09 51.23 53.98 54.64 54.52 54.49 54.41 55.73 55.28 56.45 57.04 57.54 "
            "57.86 57.40 57.51 58.27 58.80"
        ).split()
    ),
    "SpaceInvaders": tuple(
        float(x)
        for x in (
            "19.40 30.37 50.38 58.38 71.53 84.32 87.51 89.55 94.06 90.36 88.91 92.37 99.55 "
            "97.34 99.87 92.71 105.68 112.76 122.37 118.57 125.35 126.55 125.74 123.34 126.72 "
            "120.77 126.03 127.53 130.36 136.54 131.64"
        ).split()
    ),
}
"""gymnax-blines' PPO evaluation returns at 320,000 k env steps, k = 1..31 (rounded to 0.01)."""


def published_at(game: str, steps: int) -> float | None:
    """The published PPO curve of ``game`` at ``steps``, linearly interpolated between its
    evaluation points (None before the first point, 320,000 steps, or after the last)."""
    curve = PUBLISHED[game]
    position = steps / PUBLISHED_STEP
    if position < 1 or position > len(curve):
        return None
    below = min(int(math.floor(position)), len(curve) - 1)
    frac = position - below
    lo = curve[below - 1]
    hi = curve[below] if below < len(curve) else lo
    return lo + frac * (hi - lo)


def measure(agent: str, game: str, steps: int, seeds: int, episodes: int) -> dict:
    env_id = f"gymnax:{game}-MinAtar"
    config = experiment.make_config(agent, env_id)
    per_iter = config.num_envs * getattr(config, "num_steps", 1)
    # about 10 chunks before the stop, so that the stop lands within a tenth of it
    chunk = max(per_iter, steps // 10)
    num_reports = max(1, config.total_steps // chunk)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        start = time.perf_counter()
        try:
            result = jrl.train(
                agent,
                env_id,
                seeds,
                out=run_dir,
                progress=False,
                stop_at_steps=steps,
                num_reports=num_reports,
            )
        except TrainingInterrupted as stopped:
            result = stopped.result
        seconds = time.perf_counter() - start
        done = int(result.env_steps[-1])
        greedy = experiment.evaluate_run(run_dir, episodes=episodes, greedy=True)
        behaviour = experiment.evaluate_run(run_dir, episodes=episodes, greedy=False)
    return {
        "agent": agent,
        "game": game,
        "budget": config.total_steps,
        "steps": done,
        "seeds": seeds,
        "train": [round(float(x), 2) for x in result.final_returns()],
        "greedy": [round(r["mean"], 2) for r in greedy["runs"]],
        "behaviour": [round(r["mean"], 2) for r in behaviour["runs"]],
        "published_ppo": published_at(game, done),
        "seconds": round(seconds, 1),
    }


def table(rows: list[dict]) -> str:
    def cell(values):
        return ", ".join(f"{v:.2f}" for v in values)

    lines = [
        "| agent | game | steps per seed (of budget) | train | greedy | behaviour "
        "| published PPO at these steps |",
        "|---|---|---:|---|---|---|---:|",
    ]
    for r in rows:
        share = 100 * r["steps"] / r["budget"]
        published = r["published_ppo"]
        lines.append(
            f"| {r['agent']} | {r['game']} | {r['steps']:,} ({share:.1f}%) | {cell(r['train'])} "
            f"| {cell(r['greedy'])} | {cell(r['behaviour'])} "
            f"| {'–' if published is None else f'{published:.2f}'} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", nargs="+", default=["ppo", "pqn", "dqn"])
    p.add_argument("--games", nargs="+", default=list(GAMES), choices=GAMES)
    p.add_argument("--steps", type=int, default=PUBLISHED_STEP)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--table", type=Path, default=None, help="print the table of a results file")
    args = p.parse_args()
    if args.table is not None:
        rows = [json.loads(line) for line in args.table.read_text().splitlines() if line]
        print(table(rows))
        return
    for agent in args.agents:
        for game in args.games:
            row = measure(agent, game, args.steps, args.seeds, args.episodes)
            line = json.dumps(row)
            print(line, flush=True)
            if args.out is not None:
                with args.out.open("a") as f:
                    f.write(line + "\n")


if __name__ == "__main__":
    np.set_printoptions(precision=2)
    main()

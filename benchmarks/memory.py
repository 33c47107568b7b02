"""What the memory and MinAtar tests' configurations reach (tests/test_recurrent.py,
tests/test_minatar.py): each configuration as its test runs it (seed 0, 2 seeds vmapped), with
the greedy return per seed as ``jrl eval`` computes it (``experiment.evaluate_run``, seed 0),
the final training return per seed and the seconds of the ``jrl.train`` call.

Usage::

    python benchmarks/memory.py [--only NAME ...]

``breakout-random`` is the uniform random policy on ``gymnax:Breakout-MinAtar`` (1000
episodes), the baseline of the MinAtar smoke test.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import jax
import jrl.envs
import numpy as np

import jrl
from jrl.app import api as experiment
from jrl.run.evaluation import episode_returns

SMOKE = dict(
    total_steps=49_152,
    num_envs=32,
    num_steps=64,
    num_epochs=2,
    num_minibatches=4,
    learning_rate=1e-3,
)
"""tests/test_minatar.py's SMOKE budget (as learning_reach.py does, the test's configuration is
written here too: benchmarks do not import the tests)."""

CONFIGS = {
    # name: (agent, env, overrides, greedy episodes per seed)
    "memorychain-lstm": ("ppo", "MemoryChain-v0", {}, 64),
    "memorychain-gru": ("ppo", "MemoryChain-v0", {"recurrent": "gru"}, 64),
    "memorychain-ff": ("ppo", "MemoryChain-v0", {"recurrent": "none"}, 64),
    "cartpolenovel-lstm": ("ppo", "CartPoleNoVel-v1", {}, 16),
    "cartpolenovel-ff": ("ppo", "CartPoleNoVel-v1", {"recurrent": "none"}, 16),
    "breakout-ppo-smoke": ("ppo", "gymnax:Breakout-MinAtar", SMOKE, 64),
}


def random_breakout(episodes: int = 1000) -> dict:
    env, params = jrl.envs.make("gymnax:Breakout-MinAtar")
    n = env.action_space(params).n
    policy = lambda obs, key: jax.random.randint(key, (obs.shape[0],), 0, n)
    run = jax.jit(lambda k: episode_returns(policy, env, k, episodes, params))
    returns, _ = run(jax.random.key(0))
    r = np.asarray(returns, np.float64)
    return {"name": "breakout-random", "episodes": episodes, "mean": r.mean(), "std": r.std()}


def measure(name: str) -> dict:
    if name == "breakout-random":
        return random_breakout()
    agent, env_id, overrides, episodes = CONFIGS[name]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = jrl.train(agent, env_id, 2, out=Path(tmp) / "run", progress=False, **overrides)
        seconds = time.perf_counter() - start
        stats = experiment.evaluate_run(Path(tmp) / "run", episodes=episodes)
    return {
        "name": name,
        "steps_per_seed": result.config.total_steps,
        "greedy": [round(r["mean"], 3) for r in stats["runs"]],
        "final_training_return": [
            round(float(x), 2) for x in result.metrics["train/episode_return"][:, -1]
        ],
        "seconds": round(seconds, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", choices=[*CONFIGS, "breakout-random"])
    names = p.parse_args().only or [*CONFIGS, "breakout-random"]
    for name in names:
        print(json.dumps(measure(name)), flush=True)


if __name__ == "__main__":
    main()

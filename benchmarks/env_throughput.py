"""Environment throughput: jrl vs gymnax vs Gymnasium's SyncVectorEnv.

Measures environment steps per second (one step of one env = one step) of
random-action rollouts with auto-reset on:

- jrl: ``AutoReset(VmapEnv(make(id)[0], B))`` (``make`` adds the TimeLimit;
  resets only the envs that finished), the full
  ``wrap_for_training(make(id)[0], B)`` (adds EpisodeStatistics), and
  ``VmapEnv(AutoReset(...), B)`` (every env draws a reset every step and keeps
  it if it finished: the same program as gymnax's);
- gymnax: ``vmap(env.step)``, gymnax's own auto-resetting, time-limited step;
- Gymnasium: ``SyncVectorEnv`` of ``gymnasium.make(id)`` (its default
  next-step auto-reset), batch sizes up to 256 only.

Method. For the JAX libraries one timed call is ``jit(lax.scan(body))`` over
``T`` steps of a batch of ``B`` envs; ``body`` splits the carried key, draws
the actions inside the scan with the same sampler for both libraries
(``randint`` for Discrete, ``uniform`` over the bounds for Box), steps, and
folds reward, observation and done flags into a carried checksum so that no
output is dead code. ``T`` depends only on ``B``, so every library runs the
same number of steps. Each function is compiled and run once before timing
(compile time excluded); then the libraries are timed in turn, ``repeats``
rounds interleaved (the order rotating each round) so that background load
hits them alike, each call ended by ``block_until_ready``, and the best round
is reported. Gymnasium steps a
Python loop with actions from a NumPy generator, same rounds, best of them.

Usage::

    python benchmarks/env_throughput.py            # full run, writes BENCHMARKS.md
    python benchmarks/env_throughput.py --quick    # smoke run, prints only
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jrl.envs
import numpy as np
from common import default_output, machine, rate, timed, write_section

from jrl.core import spaces
from jrl.core.wrappers import AutoReset, VmapEnv, wrap_for_training

ENV_IDS = ("CartPole-v1", "Pendulum-v1")
BATCHES = (1, 16, 256, 4096)
GYMNASIUM_BATCHES = (1, 16, 256)
HEADING = "## Environment throughput"


@dataclass
class Config:
    """How much work one timed call does."""

    quick: bool  # smoke run: fewer steps and rounds
    repeats: int  # timed rounds per library (best one reported)
    batches: tuple[int, ...] = BATCHES  # batch sizes for the JAX libraries
    gymnasium_batches: tuple[int, ...] = GYMNASIUM_BATCHES  # batch sizes for Gymnasium

    def jax_steps(self, batch: int) -> int:
        """Scan length: ~0.5M env steps per call (short calls: more chances of a quiet moment)."""
        steps = min(50_000, max(250, (1 << 19) // batch))
        return max(100, steps // 20) if self.quick else steps

    def gymnasium_steps(self, batch: int) -> int:
        steps = max(50, 10_000 // batch)
        return max(20, steps // 20) if self.quick else steps


# --------------------------------------------------------------------------
# JAX libraries
# --------------------------------------------------------------------------


def make_sampler(space: spaces.Space, batch: int) -> Callable[[jax.Array], jax.Array]:
    """Random actions for a batch, drawn the same way for every library."""
    if isinstance(space, spaces.Discrete):
        return lambda key: jax.random.randint(key, (batch,), 0, space.n, dtype=jnp.int32)
    if isinstance(space, spaces.Box):
        low, high = jnp.asarray(space.low, jnp.float32), jnp.asarray(space.high, jnp.float32)
        return lambda key: jax.random.uniform(key, (batch,) + space.shape, jnp.float32, low, high)
    raise TypeError(f"no sampler for {space!r}")


@dataclass
class Runner:
    """A compiled ``carry -> carry`` that advances ``steps`` steps of ``batch`` envs."""

    name: str
    run: Callable[[Any], Any]
    carry: Any
    env_steps: int  # steps * batch per call
    times: list[float] = field(default_factory=list)  # wall-clock seconds per timed call
    cpu_times: list[float] = field(
        default_factory=list
    )  # this process's CPU seconds per timed call

    def warm_up(self) -> float:
        """Compiles and runs twice: the first call's output carry can differ from the
        initial one in weak types (gymnax's ``time=0``), which would compile again."""
        t0 = time.perf_counter()
        for _ in range(2):
            self.carry = jax.block_until_ready(self.run(self.carry))
        return time.perf_counter() - t0

    def time_once(self) -> None:
        self.carry, wall, cpu = timed(self.run, self.carry)
        self.times.append(wall)
        self.cpu_times.append(cpu)

    def rate(self) -> float:
        """Best steps/s over the timed rounds (wall clock)."""
        return self.env_steps / min(self.times)

    def median_rate(self) -> float:
        return self.env_steps / statistics.median(self.times)

    def cpu_rate(self) -> float:
        """Best steps per CPU-second of this process: insensitive to other processes' load."""
        return self.env_steps / min(self.cpu_times)


def _scan_runner(name, step_fn, state, sample, batch, steps, seed) -> Runner:
    """``step_fn(key, state, action) -> (state, reward, obs, done)`` rolled ``steps`` times."""

    def body(carry, _):
        state, key, checksum = carry
        key, k_act, k_step = jax.random.split(key, 3)
        state, reward, obs, done = step_fn(k_step, state, sample(k_act))
        checksum = checksum + reward.sum() + obs.sum() + done.sum()
        return (state, key, checksum), None

    def run(carry):
        return jax.lax.scan(body, carry, None, length=steps)[0]

    carry = (state, jax.random.key(seed), jnp.zeros((), jnp.float32))
    return Runner(name, jax.jit(run), carry, steps * batch)


JRL_KINDS = {
    "jrl": "AutoReset(VmapEnv)",
    "jrl (full)": "wrap_for_training",
    "jrl (per-env reset)": "VmapEnv(AutoReset)",
}


def jrl_runner(env_id: str, batch: int, steps: int, kind: str) -> Runner:
    env, params = jrl.envs.make(env_id)
    benv = {
        "jrl": lambda: AutoReset(VmapEnv(env, batch)),
        "jrl (full)": lambda: wrap_for_training(env, batch),
        "jrl (per-env reset)": lambda: VmapEnv(AutoReset(env), batch),
    }[kind]()
    sample = make_sampler(env.action_space(params), batch)
    state, _ = jax.jit(benv.reset)(jax.random.key(0), params)

    def step_fn(key, state, action):
        state, ts = benv.step(key, state, action, params)
        return state, ts.reward, ts.observation, ts.terminated | ts.truncated

    return _scan_runner(kind, step_fn, state, sample, batch, steps, 1)


def gymnax_runner(env_id: str, batch: int, steps: int) -> Runner:
    import gymnax
    from jrl.envs.gymnax_adapter import to_jrl_space

    genv, gparams = gymnax.make(env_id)
    sample = make_sampler(to_jrl_space(genv.action_space(gparams)), batch)
    vstep = jax.vmap(genv.step, in_axes=(0, 0, 0, None))
    _, state = jax.jit(jax.vmap(genv.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.key(0), batch), gparams
    )

    def step_fn(key, state, action):
        obs, state, reward, terminated, truncated, _ = vstep(
            jax.random.split(key, batch), state, action, gparams
        )
        return state, reward, obs, terminated | truncated

    return _scan_runner("gymnax", step_fn, state, sample, batch, steps, 1)


# --------------------------------------------------------------------------
# Gymnasium
# --------------------------------------------------------------------------


class GymnasiumRunner:
    """SyncVectorEnv stepped from Python with NumPy random actions."""

    def __init__(self, env_id: str, batch: int, steps: int):
        import gymnasium as gym

        self.name = "gymnasium"
        self.venv = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(batch)])
        self.venv.reset(seed=0)
        self.rng = np.random.default_rng(0)
        space = self.venv.single_action_space
        if isinstance(space, gym.spaces.Discrete):
            self.sample = lambda: self.rng.integers(0, space.n, batch)
        else:
            self.sample = lambda: self.rng.uniform(
                space.low, space.high, (batch,) + space.shape
            ).astype(np.float32)
        self.steps, self.env_steps = steps, steps * batch
        self.times: list[float] = []
        self.cpu_times: list[float] = []

    def _run(self) -> None:
        checksum = 0.0  # touch the outputs as the JAX runs do
        for _ in range(self.steps):
            obs, reward, terminated, truncated, _ = self.venv.step(self.sample())
            checksum += (
                float(reward.sum()) + float(obs.sum()) + float((terminated | truncated).sum())
            )

    def warm_up(self) -> float:
        t0 = time.perf_counter()
        for _ in range(10):
            self.venv.step(self.sample())
        return time.perf_counter() - t0

    def time_once(self) -> None:
        _, wall, cpu = timed(self._run)
        self.times.append(wall)
        self.cpu_times.append(cpu)

    rate = Runner.rate
    median_rate = Runner.median_rate
    cpu_rate = Runner.cpu_rate


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def measure(cfg: Config) -> list[dict[str, Any]]:
    rows = []
    for env_id in ENV_IDS:
        for batch in cfg.batches:
            steps = cfg.jax_steps(batch)
            runners = [
                *(jrl_runner(env_id, batch, steps, kind) for kind in JRL_KINDS),
                gymnax_runner(env_id, batch, steps),
            ]
            if batch in cfg.gymnasium_batches:
                runners.append(GymnasiumRunner(env_id, batch, cfg.gymnasium_steps(batch)))
            for r in runners:
                r.warm_up()
            for i in range(cfg.repeats):
                for r in (
                    runners[i % len(runners) :] + runners[: i % len(runners)]
                ):  # rotate the order
                    r.time_once()
            row = {"env": env_id, "batch": batch, "steps": steps}
            for r in runners:
                row[r.name] = r.rate()
                row[r.name + " median"] = r.median_rate()
                row[r.name + " cpu"] = r.cpu_rate()
            rows.append(row)
            print(_progress(row), flush=True)
    return rows


def _progress(row: dict[str, Any]) -> str:
    parts = [f"{row['env']:<12} B={row['batch']:<5}"]
    for name in (*JRL_KINDS, "gymnax", "gymnasium"):
        if name in row:
            parts.append(
                f"{name} {row[name] / 1e6:8.3f} M/s (median {row[name + ' median'] / 1e6:.3f})"
            )
    return "  ".join(parts)


def table(rows: list[dict[str, Any]]) -> str:
    columns = [
        "env",
        "batch",
        "jrl",
        "jrl + stats",
        "jrl, reset per env",
        "gymnax",
        "Gymnasium Sync",
        "jrl / gymnax",
        "jrl / gymnax (CPU time)",
        "jrl / Gymnasium",
    ]
    lines = ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]
    for r in rows:
        gym_rate = r.get("gymnasium")
        lines.append(
            f"| {r['env']} | {r['batch']} | {rate(r['jrl'])} | {rate(r['jrl (full)'])} | "
            f"{rate(r['jrl (per-env reset)'])} | "
            f"{rate(r['gymnax'])} | {rate(gym_rate)} | {r['jrl'] / r['gymnax']:.2f}x | "
            f"{r['jrl cpu'] / r['gymnax cpu']:.2f}x | "
            + (f"{r['jrl'] / gym_rate:.0f}x |" if gym_rate else "– |")
        )
    return "\n".join(lines)


def versions() -> str:
    """gymnax's and Gymnasium's versions."""
    from importlib.metadata import version

    import gymnasium
    import gymnax  # noqa: F401

    return f"gymnax {version('gymnax')}, gymnasium {gymnasium.__version__}"


def section(rows: list[dict[str, Any]], cfg: Config, command: str, load: str) -> str:
    return f"""{HEADING}

Environment steps per second (one env advanced one step = one step) of a
random-action rollout with auto-reset, best of {cfg.repeats} interleaved rounds,
compile time excluded. Reproduce with:

    {command}

Measured {datetime.date.today().isoformat()} on {machine(versions())}.

- **jrl**: `AutoReset(VmapEnv(jrl.envs.make(id)[0], B))` (TimeLimit inside),
  stepped by `jit(lax.scan(...))`: only the envs that finished are reset
  (gathered, reset, scattered back); **jrl + stats**:
  `wrap_for_training(env, B)`, the same plus EpisodeStatistics, what the
  agents train on; **jrl, reset per env**: `VmapEnv(AutoReset(env), B)`,
  where every env draws a reset on every step and keeps it if it finished.
- **gymnax**: `vmap(env.step)` of `gymnax.make(id)` (its own auto-reset and
  time limit), in the same scan with the same action sampler and key splits.
- **Gymnasium Sync**: `gymnasium.vector.SyncVectorEnv` of `gymnasium.make(id)`,
  a Python loop with NumPy random actions (batch 4096 not run).
- Rates are wall clock (best round). The CPU-time ratio divides steps per
  CPU-second of this process: less sensitive to other processes than wall
  clock, but XLA's worker threads on a busy 2-core machine still move it.
  "jrl, reset per env" and gymnax compile to the same work (same HLO ops,
  flops and bytes) except at B = 1, where jrl's one env takes the step's key
  itself instead of `split(key, 1)`; elsewhere their ratio away from 1.00x
  is measurement noise. The gain of jrl over both is the skipped resets
  (and their key splits). 1-minute load average
  during this run: {load}.
- A JAX call runs the same number of steps for both libraries: {
        ", ".join(f"{cfg.jax_steps(b)} iterations at B={b}" for b in cfg.batches)
    }.

{table(rows)}
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: few steps, 2 rounds, no file written"
    )
    parser.add_argument(
        "--batches",
        type=int,
        nargs="+",
        default=None,
        help=f"batch sizes (default {' '.join(map(str, BATCHES))}; quick: 16 256)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed rounds per library (default 15; quick 2)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="markdown file to update (default BENCHMARKS.md at the repo root; quick: none)",
    )
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    batches = tuple(args.batches) if args.batches else ((16, 256) if args.quick else BATCHES)
    cfg = Config(
        quick=args.quick, repeats=args.repeats or (2 if args.quick else 15), batches=batches
    )
    load_before = os.getloadavg()[0]
    rows = measure(cfg)
    load = f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    command = "python benchmarks/env_throughput.py" + (" --quick" if args.quick else "")
    text = section(rows, cfg, command, load)
    print()
    print(text)
    output = default_output(args.output, args.quick)
    if output is not None and not args.no_write:
        write_section(output, HEADING, text)
        print(f"wrote {output}")


if __name__ == "__main__":
    main(sys.argv[1:])

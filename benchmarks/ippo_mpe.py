"""IPPO on JaxMARL's MPE simple_spread: jrl side by side with JaxMARL's own IPPO baseline.

The peer is ``baselines/IPPO/ippo_ff_mpe.py`` from a checkout of FLAIROx/JaxMARL (outside this
repository, given by ``--jaxmarl``), run unchanged: this script imports the module and calls
its ``make_train(config)`` with the config of its own ``config/ippo_ff_mpe.yaml`` (16 envs x 128
steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, gamma 0.99, GAE 0.95, clip 0.2, entropy
0.01, value 0.5, grad norm 0.5, 64x64 tanh), with only ``TOTAL_TIMESTEPS`` and ``NUM_SEEDS``
set from the command line (the yaml's 1e7 steps x 10 seeds are hours on a CPU). As its
``main`` does, wandb is initialised in the yaml's mode (disabled) and the training function
is vmapped over the seeds and jitted; compile and run are timed apart (``lower().compile()``,
then the call with ``block_until_ready``).

jrl trains ``ippo`` on ``jaxmarl:MPE_simple_spread_v3`` with the same numbers (its defaults
are PPO's, which are these, plus ``num_envs=16``); compile and run seconds are the runner's.

Returns are the team's: JaxMARL's ``returned_episode_returns`` (its ``MPELogWrapper`` logs
every agent's reward times the number of agents, which for simple_spread's shared reward is
the team's sum) averaged over actors and the steps of the last 5% of updates; jrl's team return
``train/episode_return`` (the sum over agents) over the same last 5% of iterations. Both count
env steps the same way (one step of one env moves every agent).

Usage (in a venv with jaxmarl, distrax, hydra-core, wandb and jrl)::

    python benchmarks/ippo_mpe.py --jaxmarl /work/peers/JaxMARL --steps 1000000 --seeds 2
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np


def peer(checkout: str, steps: int, seeds: int) -> dict:
    import importlib.util

    from omegaconf import OmegaConf

    # the baseline is one file importing only installed packages: load it by its path
    path = f"{checkout}/baselines/IPPO/ippo_ff_mpe.py"
    spec = importlib.util.spec_from_file_location("ippo_ff_mpe", path)
    module = sys.modules["ippo_ff_mpe"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    config = OmegaConf.to_container(
        OmegaConf.load(f"{checkout}/baselines/IPPO/config/ippo_ff_mpe.yaml")
    )
    config.update(TOTAL_TIMESTEPS=steps, NUM_SEEDS=seeds)
    import wandb  # its training logs through wandb.log: initialised as its main does

    wandb.init(project=config["PROJECT"], config=config, mode=config["WANDB_MODE"])
    rngs = jax.random.split(jax.random.PRNGKey(config["SEED"]), seeds)
    train = jax.jit(jax.vmap(module.make_train(dict(config))))
    t = time.perf_counter()
    compiled = train.lower(rngs).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    out = jax.block_until_ready(compiled(rngs))
    run_s = time.perf_counter() - t
    ret = np.asarray(out["metrics"]["returned_episode_returns"])  # [S, updates, T, actors]
    per_update = ret.reshape(ret.shape[0], ret.shape[1], -1).mean(-1)  # [S, updates]
    done_steps = per_update.shape[1] * config["NUM_STEPS"] * config["NUM_ENVS"]
    tail = max(1, per_update.shape[1] // 20)
    return dict(
        name="JaxMARL ippo_ff_mpe.py",
        config=config,
        steps=done_steps,
        compile_s=compile_s,
        run_s=run_s,
        steps_per_s=done_steps * seeds / run_s,
        final=per_update[:, -tail:].mean(1),
    )


def ours(steps: int, seeds: int, num_envs: int) -> dict:
    import jrl

    res = jrl.train(
        "ippo",
        "jaxmarl:MPE_simple_spread_v3",
        seeds=seeds,
        total_steps=steps,
        num_envs=num_envs,
        progress=False,
        compile_cache=False,
    )
    team = np.asarray(res.metrics["train/episode_return"])  # [S, iterations]
    tail = max(1, team.shape[1] // 20)
    return dict(
        name="jrl ippo",
        steps=int(res.env_steps[-1]),
        compile_s=res.compile_seconds,
        run_s=res.run_seconds,
        steps_per_s=res.steps_per_second,
        final=team[:, -tail:].mean(1),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jaxmarl", required=True, help="a checkout of FLAIROx/JaxMARL")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--seeds", type=int, default=2)
    a = p.parse_args()
    theirs = peer(a.jaxmarl, a.steps, a.seeds)
    mine = ours(a.steps, a.seeds, theirs["config"]["NUM_ENVS"])
    print(f"device: {jax.devices()[0].device_kind}, {a.seeds} seeds, {a.steps:,} steps each")
    print("| | env steps/run | compile s | run s | steps/s | team return (last 5%) |")
    print("|---|---:|---:|---:|---:|---|")
    for r in (mine, theirs):
        f = r["final"]
        print(
            f"| {r['name']} | {r['steps']:,} | {r['compile_s']:.1f} | {r['run_s']:.1f} | "
            f"{r['steps_per_s']:,.0f} | {f.mean():.2f} ({', '.join(f'{x:.2f}' for x in f)}) |"
        )
    print(f"speed ratio jrl / JaxMARL: {mine['steps_per_s'] / theirs['steps_per_s']:.2f}x")


if __name__ == "__main__":
    main()

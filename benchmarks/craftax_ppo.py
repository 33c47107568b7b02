"""PPO on Craftax-Classic (symbolic): jrl side by side with Craftax's own PPO baseline.

The peer is ``ppo.py`` of a checkout of MichaelTMatthews/Craftax_Baselines (outside this
repository, ``--craftax-baselines``), run unchanged: a process of this script whose import path
starts with the checkout's folder (for its ``models``, ``wrappers`` and ``logz``) imports it and
calls its ``make_train(config)`` with the defaults of its own command line (:data:`PEER`: a
3 x 512 tanh actor and critic, lr 2e-4 annealed, 64 steps, 4 epochs x 8 minibatches, gamma
0.99, GAE 0.8, clip 0.2, entropy 0.01, value 0.5, grad norm 1.0, its optimistic resets), with
only the env, the number of envs, the steps and the seed set here (its 1024 envs x 1e9 steps
are a GPU's). As its ``run_ppo`` does, the training function is vmapped over the repeats (1)
and jitted; compile and run are timed apart (``lower().compile()``, then the call with
``block_until_ready``). Its per-update return reaches the host through its own debug callback,
which hands ``batch_log`` the mean return of the episodes that ended in the update; that one
name is pointed at a recorder (no wandb run is started), which is the only change.

jrl trains ``ppo`` on ``craftax:Craftax-Classic-Symbolic-v1`` with the same numbers (the
network, the optimiser settings, the batch and the budget), in the parent process; compile
and run seconds are the runner's; its ``train/episode_return`` is the same statistic (the mean
return of the episodes that ended in the iteration). Both returns are averaged over the last
10% of updates. The two differ in resets: the peer's optimistic resets (a pool of
``num_envs / 16`` fresh worlds per step) against jrl's AutoReset of every finished env.

Usage (in a venv with jrl, craftax, distrax and wandb)::

    python benchmarks/craftax_ppo.py --craftax-baselines /path/to/Craftax_Baselines \\
        [--steps 262144] [--num-envs 64] [--write]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
import time

import numpy as np
from common import machine, publish

HEADING = "## Craftax: PPO against Craftax's own baseline"
ENV = "Craftax-Classic-Symbolic-v1"
PEER = dict(
    # ppo.py's command-line defaults, upper-cased as its run_ppo does
    LR=2e-4,
    NUM_STEPS=64,
    UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=8,
    GAMMA=0.99,
    GAE_LAMBDA=0.8,
    CLIP_EPS=0.2,
    ENT_COEF=0.01,
    VF_COEF=0.5,
    MAX_GRAD_NORM=1.0,
    ACTIVATION="tanh",
    ANNEAL_LR=True,
    DEBUG=True,
    JIT=True,
    USE_WANDB=True,
    SAVE_POLICY=False,
    NUM_REPEATS=1,
    LAYER_SIZE=512,
    WANDB_PROJECT=None,
    WANDB_ENTITY=None,
    USE_OPTIMISTIC_RESETS=True,
    OPTIMISTIC_RESET_RATIO=16,
    EXPLORATION_UPDATE_EPOCHS=4,
    ICM_REWARD_COEFF=1.0,
    TRAIN_ICM=False,
    ICM_LR=3e-4,
    ICM_FORWARD_LOSS_COEF=1.0,
    ICM_INVERSE_LOSS_COEF=1.0,
    ICM_LAYER_SIZE=256,
    ICM_LATENT_SIZE=32,
    E3B_REWARD_COEFF=1.0,
    USE_E3B=False,
    E3B_LAMBDA=0.1,
)


def tail_mean(values: list[float], fraction: float = 0.1) -> float:
    """The mean of the last ``fraction`` of ``values`` (NaNs, updates without an episode end,
    left out)."""
    k = max(1, int(np.ceil(len(values) * fraction)))
    return float(np.nanmean(np.asarray(values[-k:], np.float64)))


def peer(checkout: str, steps: int, num_envs: int, seed: int) -> dict:
    """Runs :func:`peer_worker` in a process of its own whose import path starts with the
    checkout's folder (its ``models``, ``wrappers`` and ``logz``), as running its script
    does; its JSON result."""
    cmd = [sys.executable, __file__, "--craftax-baselines", checkout, "--peer-worker"]
    cmd += ["--steps", str(steps), "--num-envs", str(num_envs), "--seed", str(seed)]
    path = os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run(
        cmd, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=7200
    )
    if out.returncode != 0:
        raise RuntimeError(f"the Craftax_Baselines worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def peer_worker(checkout: str, steps: int, num_envs: int, seed: int) -> dict:
    """The peer's ``make_train`` in this process: its compile and run seconds and the mean
    return of its last updates."""
    import jax

    spec = importlib.util.spec_from_file_location("craftax_baselines_ppo", f"{checkout}/ppo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    returns: dict[int, float] = {}
    # its debug callback's logger, recorded instead of sent to wandb
    module.batch_log = lambda step, log, config: returns.__setitem__(
        int(step), float(log["episode_return"])
    )
    config = {**PEER, "ENV_NAME": ENV, "NUM_ENVS": num_envs, "TOTAL_TIMESTEPS": steps}
    config["SEED"] = seed
    rngs = jax.random.split(jax.random.PRNGKey(seed), config["NUM_REPEATS"])
    train = jax.jit(jax.vmap(module.make_train(config)))
    t = time.perf_counter()
    compiled = train.lower(rngs).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    jax.block_until_ready(compiled(rngs))
    run_s = time.perf_counter() - t
    done_steps = config["NUM_UPDATES"] * config["NUM_STEPS"] * num_envs
    per_update = [returns[k] for k in sorted(returns)]
    return dict(
        name="Craftax_Baselines ppo.py",
        steps=done_steps,
        compile_s=compile_s,
        run_s=run_s,
        steps_per_s=done_steps / run_s,
        final=tail_mean(per_update),
    )


def ours(steps: int, num_envs: int, seed: int) -> dict:
    """jrl's PPO with the peer's numbers (see the module docstring)."""
    import jrl

    res = jrl.train(
        "ppo",
        f"craftax:{ENV}",
        seed=seed,
        total_steps=steps,
        num_envs=num_envs,
        num_steps=PEER["NUM_STEPS"],
        num_epochs=PEER["UPDATE_EPOCHS"],
        num_minibatches=PEER["NUM_MINIBATCHES"],
        learning_rate=PEER["LR"],
        anneal_lr=PEER["ANNEAL_LR"],
        gamma=PEER["GAMMA"],
        gae_lambda=PEER["GAE_LAMBDA"],
        clip_eps=PEER["CLIP_EPS"],
        ent_coef=PEER["ENT_COEF"],
        vf_coef=PEER["VF_COEF"],
        max_grad_norm=PEER["MAX_GRAD_NORM"],
        hidden_sizes=(PEER["LAYER_SIZE"],) * 3,
        activation=PEER["ACTIVATION"],
        progress=False,
        compile_cache=False,
    )
    return dict(
        name="jrl ppo",
        steps=int(res.env_steps[-1]),
        compile_s=res.compile_seconds,
        run_s=res.run_seconds,
        steps_per_s=res.steps_per_second,
        final=float(res.final_returns(0.1)[0]),
    )


def table(rows: list[dict], args: argparse.Namespace) -> str:
    import craftax

    version = getattr(craftax, "__version__", None) or metadata.version("craftax")
    head = subprocess.run(
        ["git", "-C", args.craftax_baselines, "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    lines = [
        HEADING,
        "",
        f"`python benchmarks/craftax_ppo.py --steps {args.steps} --num-envs {args.num_envs} "
        f"--seed {args.seed}`, {machine(f'craftax {version}')}: `{ENV}`, one seed each; "
        f"Craftax_Baselines at {head or 'an unknown commit'}.",
        "",
        "| | env steps | compile s | run s | steps/s | return (last 10% of updates) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['steps']:,} | {r['compile_s']:.1f} | {r['run_s']:.1f} | "
            f"{r['steps_per_s']:,.0f} | {r['final']:.3f} |"
        )
    ratio = rows[0]["steps_per_s"] / rows[1]["steps_per_s"]
    lines += ["", f"Speed ratio jrl / Craftax_Baselines (run steps/s): **{ratio:.2f}x**."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--craftax-baselines", required=True, help="a checkout of Craftax_Baselines")
    p.add_argument("--steps", type=int, default=262_144)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write", action="store_true", help="write the table to BENCHMARKS.md")
    p.add_argument("--peer-worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.peer_worker:  # the peer's side, in the process peer() starts
        print(json.dumps(peer_worker(a.craftax_baselines, a.steps, a.num_envs, a.seed)))
        return
    mine = ours(a.steps, a.num_envs, a.seed)
    theirs = peer(a.craftax_baselines, a.steps, a.num_envs, a.seed)
    publish(HEADING, table([mine, theirs], a), a.write)


if __name__ == "__main__":
    main()

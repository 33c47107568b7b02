"""Recurrent PPO: jrl side by side with PureJaxRL's ``ppo_rnn.py`` on a memory task.

The configuration is the ``__main__`` config of PureJaxRL's ``purejaxrl/ppo_rnn.py`` (``CONFIG``
below, in jrl's names): 4 envs x 128 steps, 4 epochs x 4 minibatches (cut along envs), Adam
2.5e-4 annealed to 0, gamma 0.99, GAE lambda 0.95, clip 0.2 (value clipped too), entropy 0.01,
value 0.5, gradient clip 0.5, 5e5 env steps; a 128-unit ReLU embedding, a GRU of 128 whose
state is reset where an episode starts. It runs on gymnax's ``MemoryChain-bsuite`` (the
bsuite memory chain: a cue at the first step, to be recalled 5 steps later; jrl reads it as
``gymnax:MemoryChain-bsuite``) and on CartPole-v1 (PureJaxRL's own env choice; jrl's CartPole
and gymnax's are the same dynamics).

What cannot be matched: PureJaxRL's heads each have a hidden layer of 128 ReLU units between
the GRU and the logits/value, jrl's heads are linear on the GRU's output. PureJaxRL does
about 2 x 128 x 128 more multiply-adds per network call (a GRU of 128 on a 128 input is
about 6 x 128 x 128), so it computes about a quarter more per step; the table says so beside
the ratio.

Measurements (each in a fresh interpreter, so every compile starts cold):

- **jrl**: ``jrl.train("ppo", env, recurrent="gru", ...)`` with ``num_reports`` chunks; the
  compile and run seconds are the runner's own.
- **PureJaxRL**: its own ``purejaxrl/ppo_rnn.py`` from a checkout outside this repository
  (``--purejaxrl``; its ``wrappers`` module is gymnax's copy, see
  ``common.import_purejaxrl``), run by ``--purejaxrl-python``:
  ``jit(vmap(make_train(config)))`` compiled ahead of time, then called once. ``ppo_rnn.py``
  calls flax's ``GRUCell.initialize_carry(rng, batch_dims, size)``, which flax 0.7 removed,
  and flax 0.6 does not import on jax 0.10; so its interpreter has the stack of its time
  (jax/jaxlib 0.4.13, flax 0.6.11, optax 0.1.7, distrax 0.1.4, gymnax 0.0.6), and the two
  libraries also differ in their XLA version. The table names both.
- The final return is the mean over seeds of the last 5% of iterations' training return (the
  mean return of the episodes finished in an iteration), computed for both from their
  per-iteration episode statistics.

Usage::

    python benchmarks/ppo_rnn.py --purejaxrl /work/peers/purejaxrl \\
        --purejaxrl-python /work/peers/pjrl/bin/python --write
"""

from __future__ import annotations

import time

from common import (
    best_rows,
    comparison_parser,
    compile_and_run,
    import_purejaxrl,
    mean_and_final,
    measured_on,
    package_versions,
    publish,
    purejaxrl_available,
    purejaxrl_ppo_config,
    purejaxrl_ppo_returns,
    rate,
    run_worker_if_asked,
    side_by_side,
    worker_record,
)

HEADING = "## Recurrent PPO and PureJaxRL's ppo_rnn"
CONFIG = {
    "learning_rate": 2.5e-4,
    "num_envs": 4,
    "num_steps": 128,
    "num_epochs": 4,
    "num_minibatches": 4,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_eps": 0.2,
    "clip_value": True,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "anneal_lr": True,
    "recurrent": "gru",
    "core_size": 128,
    "hidden_sizes": (128,),
    "activation": "relu",
    "normalize_advantages": True,
}
TOTAL_STEPS = 500_000
ENVS = {"memorychain": ("gymnax:MemoryChain-bsuite", "MemoryChain-bsuite"),
        "cartpole": ("CartPole-v1", "CartPole-v1")}  # fmt: skip
"""name -> (jrl's env id, gymnax's env id)."""


def worker_jrl(env: str, seeds: int, total_steps: int, seed: int) -> dict:
    import numpy as np

    import jrl

    t0 = time.perf_counter()
    res = jrl.train(
        "ppo",
        ENVS[env][0],
        seeds=seeds,
        seed=seed,
        total_steps=total_steps,
        progress=False,
        num_reports=4,
        **CONFIG,
    )
    _, final = mean_and_final(np.asarray(res.metrics["train/episode_return"]))
    return worker_record(
        "jrl",
        compile=res.compile_seconds,
        run=res.run_seconds,
        wall=time.perf_counter() - t0,
        steps_per_run=int(res.env_steps[-1]),
        final_return=final,
    )


def worker_purejaxrl(env: str, seeds: int, total_steps: int, seed: int, checkout: str) -> dict:
    import jax

    t0 = time.perf_counter()
    ppo_rnn = import_purejaxrl(checkout, "ppo_rnn")
    config = purejaxrl_ppo_config(CONFIG, ENVS[env][1], total_steps)
    batch = CONFIG["num_envs"] * CONFIG["num_steps"]
    keys = jax.random.split(jax.random.PRNGKey(seed), seeds)
    out, times = compile_and_run(jax.jit(jax.vmap(ppo_rnn.make_train(config))), keys)
    _, final = mean_and_final(purejaxrl_ppo_returns(out["metric"]))
    return worker_record(
        "PureJaxRL",
        **times,
        wall=time.perf_counter() - t0,
        steps_per_run=(int(total_steps) // batch) * batch,
        final_return=final,
        versions=package_versions("jax", "flax", "optax", "distrax", "gymnax"),
    )


def table(rows: dict, seeds_list: list[int]) -> str:
    lines = [
        "| env | library | seeds | compile s | run s | steps/s (all seeds) | jrl / PureJaxRL "
        "steps/s | final return |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for env in ENVS:
        for seeds in seeds_list:
            pair = {lib: rows.get((f"{env}:{lib}", seeds)) for lib in ("jrl", "purejaxrl")}
            ok = {k: v for k, v in pair.items() if isinstance(v, dict)}
            sps = {k: v["steps_per_run"] * seeds / v["run"] for k, v in ok.items()}
            ratio = sps["jrl"] / sps["purejaxrl"] if len(sps) == 2 else None
            for lib, r in pair.items():
                if r is None:
                    continue
                name = {"jrl": "jrl", "purejaxrl": "PureJaxRL"}[lib]
                if isinstance(r, str):
                    lines.append(f"| {ENVS[env][1]} | {name} | {seeds} | {r} | | | | |")
                    continue
                shown = f"{ratio:.2f}" if lib == "jrl" and ratio is not None else ""
                lines.append(
                    f"| {ENVS[env][1]} | {name} | {seeds} | {r['compile']:.1f} | {r['run']:.1f} "
                    f"| {rate(sps[lib])} | {shown} | {r['final_return']:.2f} |"
                )
    return "\n".join(lines)


WORKERS = {
    "jrl": lambda a: worker_jrl(a.env, a.seeds[0], a.total_steps, a.seed),
    "purejaxrl": lambda a: worker_purejaxrl(a.env, a.seeds[0], a.total_steps, a.seed, a.purejaxrl),
}
"""``--worker LIBRARY`` -> the worker it runs, given the parsed arguments."""


def main(argv=None) -> None:
    p = comparison_parser(
        __doc__.split("\n")[0],
        seeds={"default": [1, 8]},
        total_steps={"default": TOTAL_STEPS},
        seed=True,
        repeats={"default": 2},
        purejaxrl=True,
        purejaxrl_python=True,
        timeout={"default": 1200},
        write=True,
    )
    p.add_argument("--env", choices=list(ENVS), default="memorychain")
    p.add_argument("--envs", nargs="+", choices=list(ENVS), default=list(ENVS))
    args = p.parse_args(argv)
    if run_worker_if_asked(args, WORKERS):
        return
    libraries = ["jrl"]
    if purejaxrl_available(args.purejaxrl, "ppo_rnn", args.purejaxrl_python):
        libraries.append("purejaxrl")
    measured = {}
    for env in args.envs:

        def flags(lib: str, seeds: int, env=env) -> dict:
            flags = dict(env=env, seeds=seeds, total_steps=args.total_steps, seed=args.seed)
            if lib == "purejaxrl":
                flags["purejaxrl"] = args.purejaxrl
            return flags

        got = side_by_side(
            __file__,
            args,
            [(r, lib, s) for r in range(args.repeats) for s in args.seeds for lib in libraries],
            {"purejaxrl": args.purejaxrl_python},
            flags,
            lambda r: (
                f"compile {r['compile']:.1f} s, run {r['run']:.1f} s, final {r['final_return']:.2f}"
            ),
        )
        measured.update({(f"{env}:{lib}", s): v for (lib, s), v in got.items()})
    rows = best_rows(measured)
    peer = next((r for k, r in rows.items() if "purejaxrl" in k[0] and isinstance(r, dict)), {})
    peer_versions = ", ".join(f"{m} {v}" for m, v in peer.get("versions", {}).items())
    flags = (
        f"--envs {' '.join(args.envs)} --seeds {' '.join(map(str, args.seeds))} \\\n        "
        f"--total-steps {args.total_steps} --repeats {args.repeats} "
    )
    text = f"""{HEADING}

Recurrent PPO (GRU 128) at the configuration of PureJaxRL's `purejaxrl/ppo_rnn.py`
(`benchmarks/ppo_rnn.py`'s docstring lists it), {args.total_steps:,} env steps per seed, jrl and
PureJaxRL's own script side by side in one run of the benchmark, each measurement in a fresh
interpreter, {args.repeats} repeats alternating the libraries, the best run time of each
kept. Reproduce with:

    python benchmarks/ppo_rnn.py --purejaxrl PUREJAXRL_CHECKOUT \\
        --purejaxrl-python PEER_VENV/bin/python {flags}--write

{measured_on()} PureJaxRL: github.com/luchris429/purejaxrl at commit 31756b1, in a venv with
{peer_versions or "(not run)"} (its script needs flax < 0.7, which needs a jax of its time).

{table(rows, args.seeds)}
"""
    publish(HEADING, text, args.write)


if __name__ == "__main__":
    main()

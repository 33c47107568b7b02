"""Discrete SAC on CartPole-v1: jrl side by side with rejax's SAC (pure JAX, gymnax envs).

rejax (PyPI ``rejax``, github.com/keraJLi/rejax) is the one discrete-action SAC found that runs
on this machine: a JAX library whose ``SAC`` takes a categorical actor and per-action critics
when the env's actions are Discrete. CleanRL's ``sac_atari.py`` needs torch, Stoix's SAC is
continuous-only, rljax is not on PyPI and predates today's JAX.

The configuration is jrl's ``sac_discrete`` CartPole-v1 preset (``CONFIG``: 5e4 env steps of 4
envs, one update of 128 per iteration from 1e3 steps on, a replay of 5e4, Adam 1e-3, tau 0.02,
two critics, ReLU 64-64 networks, a target entropy of 0.5 log 2) and the peer gets the same
through its ``SAC.create`` arguments (``PEER``: ``polyak = 1 - tau``, ``fill_buffer`` the
warm-up, ``num_epochs`` the updates per iteration). What the peer does not let one set, and
how it differs:

- its temperature starts at 1 (jrl's preset: 0.1) and its Adam's eps is optax's 1e-8 (jrl's
  SAC: 1e-5);
- it bootstraps from nothing after any episode end (gymnax's ``done``): a truncation at 500
  steps is taken as a termination, where jrl bootstraps from the final observation;
- it updates the actor before the critics, and acts with its current actor from the first
  step (jrl: uniform actions before the first update).

Measurements, each in a fresh interpreter (cold compiles; the peer in its own venv,
``--rejax-python``):

- **jrl**: ``jrl.train("sac_discrete", "CartPole-v1", seeds=S, **CONFIG)``; compile and run
  seconds are the runner's own; the return is ``final_returns()``, the training episodes
  (actions sampled from the policy) that ended in the last 5% of iterations.
- **rejax**: ``jit(vmap(algo.train))`` over S keys, compiled ahead of time, then called once;
  one evaluation at the end (its ``eval_freq`` = the budget, no initial one): 128 episodes of
  actions sampled from the policy, as its ``act`` does. Its run seconds include that
  evaluation.

steps/s counts every seed's env steps over the run (compile excluded).

Usage (the peer's venv: ``pip install rejax "gymnax==0.0.9"``; rejax 0.1.3 unpacks the five
outputs of gymnax 0.0.x's ``step`` and fails on gymnax 1.0)::

    python benchmarks/sac_discrete_rejax.py --rejax-python /tmp/peers/rejax/bin/python \\
        [--seeds 1 8] [--write]
"""

from __future__ import annotations

import sys

from common import (
    check_config,
    comparison_parser,
    compile_and_run,
    measured_on,
    or_dash,
    package_versions,
    publish,
    rate,
    run_worker_if_asked,
    side_by_side,
    worker_record,
)

HEADING = "## Discrete SAC CartPole-v1 against rejax"
TOTAL_STEPS = 50_000
CONFIG = {
    "total_steps": TOTAL_STEPS,
    "num_envs": 4,
    "steps_per_iteration": 1,
    "updates_per_iteration": 1,
    "batch_size": 128,
    "buffer_size": 50_000,
    "learning_starts": 1_000,
    "learning_rate": 1e-3,
    "gamma": 0.99,
    "tau": 0.02,
    "num_critics": 2,
    "alpha": 0.1,
    "autotune": True,
    "target_entropy_scale": 0.5,
    "hidden_sizes": (64, 64),
    "activation": "relu",
    "max_grad_norm": 0.0,
}
PEER = {
    "env": "CartPole-v1",
    "total_timesteps": TOTAL_STEPS,
    "eval_freq": TOTAL_STEPS,
    "skip_initial_evaluation": True,
    "num_envs": 4,
    "num_epochs": 1,
    "batch_size": 128,
    "buffer_size": 50_000,
    "fill_buffer": 1_000,
    "learning_rate": 1e-3,
    "gamma": 0.99,
    "polyak": 1.0 - 0.02,
    "target_update_freq": 1,
    "num_critics": 2,
    "target_entropy_ratio": 0.5,
    "hidden_layer_sizes": (64, 64),
    "agent_kwargs": {"activation": "relu"},
}


def worker_jrl(seeds: int) -> dict:
    import numpy as np

    import jrl

    check_config("sac_discrete", "CartPole-v1", CONFIG, "this benchmark's CONFIG")
    res = jrl.train(
        "sac_discrete",
        "CartPole-v1",
        seeds=seeds,
        progress=False,
        compile_cache=False,
        num_reports=4,
        **CONFIG,
    )
    returns = res.final_returns()
    return worker_record(
        "jrl",
        seeds,
        compile=res.compile_seconds,
        run=res.run_seconds,
        steps_per_second=res.steps_per_second,
        final_return=float(np.mean(returns)),
        final_returns=[round(float(x), 1) for x in returns],
    )


def worker_rejax(seeds: int) -> dict:
    import jax
    import numpy as np
    from rejax import SAC

    algo = SAC.create(**PEER)
    train = jax.jit(jax.vmap(algo.train))
    keys = jax.random.split(jax.random.key(0), seeds)
    (_, (_, returns)), times = compile_and_run(train, keys)
    per_seed = np.asarray(returns)[:, -1].mean(axis=-1)  # [S]: the last evaluation's mean
    return worker_record(
        "rejax",
        seeds,
        compile=times["compile"],
        run=times["run"],
        steps_per_second=seeds * TOTAL_STEPS / times["run"],
        final_return=float(per_seed.mean()),
        final_returns=[round(float(x), 1) for x in per_seed],
        version=package_versions("rejax")["rejax"],
    )


def table(rows: list[dict]) -> str:
    lines = [
        "| library | seeds | compile s | run s | steps/s (all seeds) | x rejax steps/s "
        "| return per seed | mean |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    peer = {r["seeds"]: r for r in rows if r["library"] == "rejax"}
    for r in rows:
        other = peer.get(r["seeds"])
        ratio = f"{r['steps_per_second'] / other['steps_per_second']:.2f}" if other else "–"
        lines.append(
            f"| {r['library']} | {r['seeds']} | {r['compile']:.1f} | {r['run']:.1f} "
            f"| {rate(r['steps_per_second'])} | {ratio} "
            f"| {', '.join(f'{x:.0f}' for x in r['final_returns'])} "
            f"| {or_dash(r['final_return'])} |"
        )
    return "\n".join(lines)


def reading(rows: list[dict]) -> str:
    """The prose after the table: the speed ratio per seed count and the seeds that end below
    a return of 50."""
    lines = []
    for seeds in sorted({r["seeds"] for r in rows}):
        pair = {r["library"]: r for r in rows if r["seeds"] == seeds}
        if {"jrl", "rejax"} <= set(pair):
            j, x = pair["jrl"], pair["rejax"]
            lines.append(
                f"- {seeds} seed{'s' if seeds > 1 else ''}: jrl runs "
                f"{j['steps_per_second'] / x['steps_per_second']:.1f}x rejax's steps/s and "
                f"compiles in {j['compile'] / x['compile']:.2f} of its time."
            )
    for r in rows:
        low = sum(x < 50 for x in r["final_returns"])
        if low:
            lines.append(
                f"- {r['library']}, {r['seeds']} seeds: {low} of them end below 50 (an untrained "
                "policy returns about 20)."
            )
    return "\n".join(lines) or "One of the libraries did not run: no ratios."


WORKERS = {
    "jrl": lambda a: worker_jrl(int(a.seeds[0])),
    "rejax": lambda a: worker_rejax(int(a.seeds[0])),
}
"""``--worker LIBRARY`` -> the worker it runs, given the parsed arguments."""


def main(argv=None) -> None:
    p = comparison_parser(
        __doc__, seeds={"default": [1, 8]}, timeout={"default": 1800}, write=True, json=True
    )
    p.add_argument("--rejax-python", default="/tmp/peers/rejax/bin/python")
    a = p.parse_args(argv)
    if run_worker_if_asked(a, WORKERS):
        return
    schedule = [(0, lib, s) for s in a.seeds for lib in ("jrl", "rejax")]
    measured = side_by_side(
        __file__,
        a,
        schedule,
        {"rejax": a.rejax_python},
        lambda library, seeds: dict(seeds=seeds),
        lambda r: (
            f"compile {r['compile']:.1f} s, run {r['run']:.1f} s, return {r['final_return']:.1f}"
        ),
    )
    rows = [r for results in measured.values() for r in results if isinstance(r, dict)]
    versions = [f"rejax {r['version']}" for r in rows if "version" in r][:1]
    text = f"""{HEADING}

jrl's `sac_discrete` CartPole-v1 preset (5e4 env steps of 4 envs, one update of 128 per
iteration, Adam 1e-3, tau 0.02, 64-64 ReLU networks, two critics, target entropy 0.5 log 2)
against rejax's `SAC` with the same numbers, S seeds vmapped in one program each, one fresh
interpreter per row (cold compiles). The differences the peer's API leaves (initial
temperature 1, truncation taken as termination, Adam eps) are in the script's docstring.
Returns are each library's own sample of its stochastic policy: jrl's training episodes of
the last 5% of iterations, rejax's 128 evaluation episodes at the end. Reproduce with:

    python benchmarks/sac_discrete_rejax.py --rejax-python PEER_VENV/bin/python --write

{measured_on()} Peer: {", ".join(versions) or "did not run"}.

{table(rows)}

{reading(rows)}
"""
    publish(HEADING, text, a.write)


if __name__ == "__main__":
    main(sys.argv[1:])

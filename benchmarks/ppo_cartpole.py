"""PPO on CartPole-v1: compile time, run time, steps/s and time to a return of 475.

The configuration is PureJaxRL's well-known CartPole one, which is also
jrl's ``PPOConfig`` default (checked at start-up): 4 envs x 128 steps,
4 epochs x 4 minibatches, a 64x64 tanh actor and critic, Adam with
lr 2.5e-4 annealed linearly to 0, gamma 0.99, GAE lambda 0.95, clip 0.2,
entropy 0.01, value 0.5, gradient clip 0.5, 5e5 env steps (976 iterations
of 512 steps). It is run for 1 seed and for 16 and 64 seeds vmapped in one
program.

Measurements (each configuration in a fresh subprocess, so that every
compile starts cold):

- **jrl**: ``jrl.run.anakin.run`` on ``agents/actor_critic/ppo.py``'s ``build``;
  compile seconds and run seconds are the runner's own (``compile`` is the
  AOT ``lower().compile()`` of the chunk program, ``run`` executes the
  chunks; ``num_reports`` chunks, one host sync each). ``init`` (per-seed
  ``jit(init)`` outside the vmap, see anakin's docstring) is reported
  separately.
- **PureJaxRL** (its own ``purejaxrl/ppo.py``, from a checkout outside jrl,
  ``--purejaxrl``, its wrappers taken from gymnax, see
  ``common.import_purejaxrl``; run by ``--purejaxrl-python``, an interpreter with
  gymnax 0.0.x and distrax): ``jit(vmap(make_train(config)))`` with the
  configuration of its ``__main__`` (DEBUG off), compiled ahead of time,
  then called once; its per-iteration return is computed from its
  LogWrapper's ``returned_episode_returns``/``returned_episode`` the way jrl
  computes ``train/episode_return``.
- **rejax** (``rejax.PPO``, run by another interpreter with rejax installed,
  ``--rejax-python``): ``jit(vmap(algo.train))`` compiled ahead of time with
  ``lower().compile()``, then called once. Its init is inside ``train``.
  rejax has no training-return metric, so its env is wrapped in a small
  tracker (below) that sums the returns and counts the episodes finished
  per env, read by rejax's per-evaluation callback after every iteration
  (``eval_freq`` = one iteration); the per-iteration metric is then the
  mean return of the episodes that finished during the iteration (carried
  forward when none did), which is what jrl's ``train/episode_return`` is.
  The learning rate is a callable with jrl's per-iteration linear
  annealing.
- **time to 475**: the first iteration ``i`` at which the mean over seeds
  of the per-iteration return is >= 475, converted to wall time as
  ``compile + run_seconds * i / num_iterations`` (the run is one compiled
  program, so its per-iteration timing is taken as uniform).
- steps/s counts env steps summed over seeds; "per seed" is
  ``run_seconds / seeds``. Each configuration is run ``--repeats`` times
  (interleaving the libraries); compile and run are the best (lowest) over
  the repeats, taken separately. CPU seconds (``time.process_time`` of the
  worker) are also recorded: background load moves them much less than
  wall time.

The issue cites PureJaxRL on this configuration as measured earlier on the
same 2-core machine (~3.4 s compile, ~3.3 s run for 1 seed; ~2.3 s per seed
with 16 vmapped seeds). Those numbers are shown only when PureJaxRL is not
run side by side.

Usage::

    python benchmarks/ppo_cartpole.py             # full run, writes BENCHMARKS.md
    python benchmarks/ppo_cartpole.py --quick     # smoke run (fewer steps, 1 and 4 seeds),
                                                  #   prints only
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
import time
from pathlib import Path

from common import (
    best_rows,
    carried_returns,
    check_config,
    comparison_parser,
    compile_and_run,
    cores_note,
    cpu_model,
    first_reach,
    git_commit,
    import_purejaxrl,
    load_range,
    load_measured,
    mean_and_final,
    nan_to_none,
    or_dash,
    output_path,
    package_versions,
    purejaxrl_available,
    purejaxrl_ppo_config,
    purejaxrl_ppo_returns,
    rate,
    run_worker_if_asked,
    side_by_side,
    spread_cores,
    time_ratios,
    time_to_target,
    worker_record,
    write_result,
)

HEADING = "## PPO CartPole-v1"
DEFAULT_REJAX_PYTHON = "/work/venv-rejax/bin/python"

# PureJaxRL's CartPole-v1 PPO configuration (the fields jrl's PPOConfig must match).
CONFIG = {
    "total_steps": 500_000,
    "num_envs": 4,
    "num_steps": 128,
    "num_epochs": 4,
    "num_minibatches": 4,
    "learning_rate": 2.5e-4,
    "anneal_lr": True,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_eps": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "hidden_sizes": (64, 64),
    "activation": "tanh",
}

# PureJaxRL, same configuration, as cited by the issue ("measured earlier on this machine",
# seconds); shown only when PureJaxRL itself is not run side by side (--purejaxrl).
REFERENCE = {1: {"compile": 3.4, "run": 3.3}, 16: {"run_per_seed": 2.3}}


# --------------------------------------------------------------------------
# Workers (run in a subprocess; print one JSON line)
# --------------------------------------------------------------------------


def worker_jrl(seeds: int, total_steps: int, num_reports: int, seed: int) -> dict:
    import jax
    import jrl.agents
    import jrl.envs
    import numpy as np

    from jrl.core import parallel
    from jrl.run import anakin

    parallel.use_cpu_cores()  # as jrl train does: one CPU device per core

    t_start = time.perf_counter()
    config = check_config(
        "ppo",
        "CartPole-v1",
        {**CONFIG, "total_steps": total_steps},
        "PureJaxRL's",
        total_steps=total_steps,
    )
    env, env_params = jrl.envs.make("CartPole-v1")
    built = jrl.agents.get("ppo").build(config, env, env_params)
    keys = jax.random.split(jax.random.key(seed), seeds)

    t0, c0 = time.perf_counter(), time.process_time()
    states = jax.block_until_ready(
        anakin.init_runs(built.algorithm, keys)
    )  # per-seed jit(init), stacked
    init_s, init_cpu = time.perf_counter() - t0, time.process_time() - c0

    # anakin.run times its compile with perf_counter; also read the CPU seconds of the same calls.
    compile_cpu = [0.0]
    real_compile = jax.stages.Lowered.compile

    def compile_with_cpu_time(self, *args, **kwargs):
        start = time.process_time()
        try:
            return real_compile(self, *args, **kwargs)
        finally:
            compile_cpu[0] += time.process_time() - start

    jax.stages.Lowered.compile = compile_with_cpu_time
    try:
        res = anakin.run(
            built.algorithm,
            keys,
            config.num_iterations,
            num_reports=num_reports,
            initial_state=states,
        )
    finally:
        jax.stages.Lowered.compile = real_compile
    wall = time.perf_counter() - t_start
    mean, final = mean_and_final(np.asarray(res.metrics["train/episode_return"]))  # [R, iters]
    return worker_record(
        "jrl",
        seeds,
        cores=spread_cores(res.final_state),
        num_iterations=config.num_iterations,
        steps_per_run=res.env_steps_per_run,
        compile=res.compile_seconds,
        run=res.run_seconds,
        compile_cpu=compile_cpu[0],
        init=init_s,
        init_cpu=init_cpu,
        wall=wall,
        reached=first_reach(enumerate(mean.tolist(), start=1)),
        final_return=final,
        mean_return=nan_to_none(mean.tolist()),
        commit=git_commit(),
    )


def worker_purejaxrl(seeds: int, total_steps: int, seed: int, checkout: str) -> dict:
    """PureJaxRL's own ``purejaxrl/ppo.py`` (a checkout outside jrl), unchanged:
    ``jit(vmap(make_train(config)))`` with the configuration of its ``__main__``
    (DEBUG off), compiled ahead of time, then called once. Its init is inside."""
    import jax

    t_start = time.perf_counter()
    ppo = import_purejaxrl(checkout, "ppo")
    config = purejaxrl_ppo_config(CONFIG, "CartPole-v1", total_steps)
    batch = CONFIG["num_envs"] * CONFIG["num_steps"]
    num_iterations = total_steps // batch
    keys = jax.random.split(jax.random.PRNGKey(seed), seeds)
    train = jax.jit(jax.vmap(ppo.make_train(config)))

    out, times = compile_and_run(train, keys)
    wall = time.perf_counter() - t_start

    mean, final = mean_and_final(purejaxrl_ppo_returns(out["metrics"]))
    return worker_record(
        "PureJaxRL",
        seeds,
        num_iterations=num_iterations,
        steps_per_run=num_iterations * batch,
        **times,
        wall=wall,
        init=0.0,
        reached=first_reach(enumerate(mean.tolist(), start=1)),
        final_return=final,
        mean_return=nan_to_none(mean.tolist()),
        versions=package_versions("gymnax", "jax", "flax", "optax", "distrax"),
    )


def worker_rejax(
    seeds: int, total_steps: int, num_reports: int, seed: int, plain: bool = False
) -> dict:
    del num_reports
    import gymnax
    import jax
    import jax.numpy as jnp
    import numpy as np
    import rejax
    from flax import struct

    t_start = time.perf_counter()
    c = CONFIG
    batch = c["num_envs"] * c["num_steps"]
    num_iterations = total_steps // batch
    updates_per_iteration = c["num_epochs"] * c["num_minibatches"]

    @struct.dataclass
    class TrackerState:
        env_state: object
        episode_return: jax.Array  # return so far of the running episode
        finished_return_sum: jax.Array  # sum of the returns of all finished episodes
        finished_count: jax.Array  # number of finished episodes

    class ReturnTracker:
        """A gymnax env that also sums finished episodes' returns in its state."""

        def __init__(self, env):
            self._env = env

        def __getattr__(self, name):  # everything but reset/step is the wrapped env's
            if name == "_env":  # not set yet (copy/deepcopy)
                raise AttributeError(name)
            return getattr(self._env, name)

        def reset(self, key, params=None):
            obs, state = self._env.reset(key, params)
            z = jnp.zeros((), jnp.float32)
            return obs, TrackerState(state, z, z, jnp.zeros((), jnp.int32))

        def step(self, key, state, action, params=None):
            obs, env_state, reward, done, info = self._env.step(
                key, state.env_state, action, params
            )
            ret = state.episode_return + reward
            new = TrackerState(
                env_state,
                jnp.where(done, 0.0, ret),
                state.finished_return_sum + jnp.where(done, ret, 0.0),
                state.finished_count + done.astype(jnp.int32),
            )
            return obs, new, reward, done, info

    base_env, env_params = gymnax.make("CartPole-v1")
    lr0 = c["learning_rate"]

    def learning_rate(count):  # jrl's / PureJaxRL's per-iteration linear annealing
        return lr0 * (1.0 - (count // updates_per_iteration) / num_iterations)

    algo = rejax.PPO.create(
        env=base_env if plain else ReturnTracker(base_env),
        env_params=env_params,
        num_envs=c["num_envs"],
        num_steps=c["num_steps"],
        num_epochs=c["num_epochs"],
        num_minibatches=c["num_minibatches"],
        learning_rate=learning_rate,
        max_grad_norm=c["max_grad_norm"],
        gamma=c["gamma"],
        gae_lambda=c["gae_lambda"],
        clip_eps=c["clip_eps"],
        ent_coef=c["ent_coef"],
        vf_coef=c["vf_coef"],
        total_timesteps=num_iterations * batch,
        eval_freq=num_iterations * batch if plain else batch,
        skip_initial_evaluation=True,
        agent_kwargs={"activation": c["activation"], "hidden_layer_sizes": c["hidden_sizes"]},
    )
    if plain:
        callback = lambda algo, ts, rng: jnp.zeros((), jnp.float32)
    else:
        callback = lambda algo, ts, rng: (
            ts.env_state.finished_return_sum.sum(),
            ts.env_state.finished_count.sum(),
        )
    algo = algo.replace(eval_callback=callback)
    keys = jax.random.split(jax.random.PRNGKey(seed), seeds)
    train = jax.jit(jax.vmap(algo.train))

    (ts, evaluation), times = compile_and_run(train, keys)
    wall = time.perf_counter() - t_start

    reached, final, mean_list = None, float("nan"), []
    if not plain:
        sums, counts = (np.asarray(x, np.float64) for x in evaluation)  # [R, iters] cumulative
        mean, final = mean_and_final(
            carried_returns(
                np.diff(sums, axis=1, prepend=0.0), np.diff(counts, axis=1, prepend=0.0)
            )
        )
        reached = first_reach(enumerate(mean.tolist(), start=1))
        mean_list = nan_to_none(mean.tolist())
    return worker_record(
        "rejax (plain)" if plain else "rejax",
        seeds,
        num_iterations=num_iterations,
        steps_per_run=num_iterations * batch,
        **times,
        wall=wall,
        init=0.0,
        reached=reached,
        final_return=final,
        mean_return=mean_list,
        versions=package_versions("rejax", "gymnax", "jax", "flax", "optax", "distrax"),
    )


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------


def _ref_run(ref: dict, seeds: int) -> float:
    return ref["run"] if "run" in ref else ref["run_per_seed"] * seeds


PEERS = ("PureJaxRL", "rejax")
"""The libraries jrl is compared with, in the ratios table's order."""


def make_tables(rows: dict[tuple[str, int], dict], seeds_list: list[int], quick: bool) -> str:
    """The measurements table and the ratios table (markdown). PureJaxRL's cited
    reference is listed only for the seed counts where PureJaxRL was not run."""
    lines = [
        (
            "| library | seeds | compile s | compile CPU s | init s | run s | steps/s "
            "| run s / seed | time to 475 s (iteration) | final return |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    cited = {}
    for seeds in seeds_list:
        ref = (
            None
            if quick or isinstance(rows.get(("PureJaxRL", seeds)), dict)
            else REFERENCE.get(seeds)
        )
        if ref is not None:
            cited[seeds] = ref
            run_ref = _ref_run(ref, seeds)
            steps_per_s = rate(CONFIG["total_steps"] * seeds / run_ref, k_digits=0)
            lines.append(
                f"| PureJaxRL (cited reference) | {seeds} | {or_dash(ref.get('compile'))} "
                f"| – | – | {or_dash(ref.get('run'))} | ~{steps_per_s} | {run_ref / seeds:.2f} "
                "| – | – |"
            )
        for lib in ("jrl",) + PEERS + ("rejax (plain)",):
            r = rows.get((lib, seeds))
            if r is None:
                continue
            if isinstance(r, str):
                lines.append(f"| {lib} | {seeds} | failed: {r} | | | | | | | |")
                continue
            t = time_to_target(r)
            reach = (
                f"{t:.1f} ({r['reached']})"
                if t is not None
                else ("not reached" if r["mean_return"] else "–")
            )
            init = or_dash(r.get("init")) if lib == "jrl" else "(in compile)"
            steps_per_s = rate(r["steps_per_run"] * seeds / r["run"], k_digits=0)
            lines.append(
                f"| {lib} | {seeds} | {r['compile']:.1f} | {or_dash(r.get('compile_cpu'))} "
                f"| {init} | {r['run']:.1f} | {steps_per_s} | {r['run'] / seeds:.2f} | "
                f"{reach} | {or_dash(r.get('final_return'))} |"
            )

    ratio = [
        "| seeds | jrl vs | steps/s (> 1: jrl faster) | run s per seed "
        "| compile (jrl: compile + init) | compile + init + run | time to 475 |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for seeds in seeds_list:
        j = rows.get(("jrl", seeds))
        if not isinstance(j, dict):
            continue
        init = j.get("init") or 0.0  # the peers initialise inside their compiled program
        for peer in PEERS:
            x = rows.get((peer, seeds))
            if not isinstance(x, dict):
                continue
            t = time_ratios(j, x)
            ratio.append(
                f"| {seeds} | {peer} | {x['run'] / j['run']:.2f}x | {t['run']:.2f}x | "
                f"{t['compile']:.2f}x | {t['total']:.2f}x | {or_dash(t['to_target'], '{:.2f}x')} |"
            )
        ref = cited.get(seeds)
        if ref is not None:
            run_ref = _ref_run(ref, seeds)
            comp = f"{(j['compile'] + init) / ref['compile']:.2f}x" if "compile" in ref else "–"
            ratio.append(
                f"| {seeds} | PureJaxRL (cited) | {run_ref / j['run']:.2f}x "
                f"| {j['run'] / run_ref:.2f}x | "
                f"{comp} | – | – |"
            )
    return (
        "\n".join(lines)
        + (
            "\n\nRatios, jrl / peer for times (< 1: jrl takes less time) and peer / jrl for "
            "steps/s (> 1: jrl is faster):\n\n"
        )
        + "\n".join(ratio)
    )


WORKERS = {
    "jrl": lambda a: worker_jrl(a.seeds[0], a.total_steps, a.num_reports, a.seed),
    "purejaxrl": lambda a: worker_purejaxrl(a.seeds[0], a.total_steps, a.seed, a.purejaxrl),
    "rejax": lambda a: worker_rejax(a.seeds[0], a.total_steps, a.num_reports, a.seed),
    "rejax-plain": lambda a: worker_rejax(
        a.seeds[0], a.total_steps, a.num_reports, a.seed, plain=True
    ),
}
"""``--worker LIBRARY`` -> the worker it runs, given the parsed arguments."""


def parse_args(argv=None):
    parser = comparison_parser(
        __doc__,
        quick={"help": "smoke run: 1/10 of the steps, 1 and 4 seeds, 1 repeat"},
        seeds={"help": "seed counts (default 1 16 64; quick: 1 4)"},
        repeats={"help": "runs per configuration, best reported (default 3; quick: 1)"},
        total_steps={"help": "env steps per seed (default 500000; quick: 51200)"},
        num_reports={
            "default": 4,
            "help": "jrl chunks (host syncs) per run; metrics are per iteration regardless",
        },
        seed=True,
        purejaxrl={
            "help": "a PureJaxRL checkout (the folder holding purejaxrl/ppo.py) to run side by "
            "side; skipped if absent"
        },
        purejaxrl_python={
            "default": DEFAULT_REJAX_PYTHON,
            "help": "interpreter for PureJaxRL (needs gymnax 0.0.x, distrax; rejax's venv has "
            "them)",
        },
        timeout={"default": 1800},
        output=True,
        json=True,
    )
    parser.add_argument(
        "--rejax-python",
        default=DEFAULT_REJAX_PYTHON,
        help="interpreter with rejax installed (skipped if absent)",
    )
    parser.add_argument(
        "--rejax-plain",
        action="store_true",
        help="also time rejax without the return tracker and per-iteration callback",
    )
    parser.add_argument("--no-write", action="store_true", help="print the tables only")
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        help="measure nothing: render the tables from earlier --json dumps (merged in order)",
    )
    args = parser.parse_args(argv)
    args.total_steps = args.total_steps or (51_200 if args.quick else CONFIG["total_steps"])
    return args


def run_libraries(args) -> tuple[dict, str | None]:
    """Measures jrl and the peers found, side by side: ``(measured, rejax_note)``."""
    libraries, rejax_note = ["jrl"], None
    if purejaxrl_available(args.purejaxrl, "ppo", args.purejaxrl_python):
        libraries.append("purejaxrl")
    if Path(args.rejax_python).exists():
        libraries.append("rejax")
        if args.rejax_plain:
            libraries.append("rejax-plain")
    else:
        rejax_note = f"rejax skipped: {args.rejax_python} not found (see --rejax-python)"
        print(rejax_note, file=sys.stderr)
    measured = side_by_side(
        __file__,
        args,
        [(rep, lib, s) for s in args.seeds for rep in range(args.repeats) for lib in libraries],
        {
            "purejaxrl": args.purejaxrl_python,
            "rejax": args.rejax_python,
            "rejax-plain": args.rejax_python,
        },
        lambda lib, seeds: dict(
            seeds=seeds,
            total_steps=args.total_steps,
            num_reports=args.num_reports,
            seed=args.seed,
            purejaxrl=args.purejaxrl,
        ),
        lambda r: (
            f"compile {r['compile']:6.2f} s (cpu {or_dash(r.get('compile_cpu'), '{:.2f}')}) "
            f"run {r['run']:7.2f} s wall {r['wall']:6.1f} s reached {r['reached']} "
            f"load {r['load']:.2f}"
        ),
        names={"rejax-plain": "rejax (plain)", "purejaxrl": "PureJaxRL"},
    )
    return measured, rejax_note


def main(argv=None) -> None:
    args = parse_args(argv)
    if run_worker_if_asked(args, WORKERS):
        return

    args.repeats = args.repeats or (1 if args.quick else 3)
    rejax_note = None
    if args.from_json:
        measured = load_measured(args.from_json)
        args.seeds = args.seeds or sorted({s for _, s in measured})
        args.total_steps = next(
            r["steps_per_run"] for rs in measured.values() for r in rs if isinstance(r, dict)
        )
        args.repeats = max(len(rs) for rs in measured.values())
    else:
        args.seeds = args.seeds or ([1, 4] if args.quick else [1, 16, 64])
        measured, rejax_note = run_libraries(args)

    # the runs that did not finish (a timeout, an error) are named in the section
    rows = best_rows(measured)
    tables = make_tables(rows, args.seeds, args.quick)
    print(tables)
    output = output_path(args)
    if output is not None:
        text = section(rows, tables, args.repeats, args.total_steps, rejax_note)
        write_result(output, HEADING, text)


def section(rows, tables, repeats, total_steps, rejax_note) -> str:
    import jax

    rj = next((r for k, r in rows.items() if k[0] == "rejax" and isinstance(r, dict)), None)
    pj = next((r for k, r in rows.items() if k[0] == "PureJaxRL" and isinstance(r, dict)), None)
    load_txt = load_range(rows.values())
    versions = ""
    if rj is not None:
        versions = "; rejax's venv: " + ", ".join(f"{k} {v}" for k, v in rj["versions"].items())
    if pj is not None:
        versions += "; PureJaxRL's: " + ", ".join(f"{k} {v}" for k, v in pj["versions"].items())
    batch = CONFIG["num_envs"] * CONFIG["num_steps"]
    steps = (
        ""
        if total_steps // batch == CONFIG["total_steps"] // batch
        else f" --total-steps {total_steps}"
    )
    date = datetime.date.today().isoformat()
    counts = sorted(
        {
            (k[1], r["repeats"] + len(r.get("failures", [])))
            for k, r in rows.items()
            if isinstance(r, dict)
        }
    )
    distinct = sorted({n for _, n in counts})
    times = lambda n: "once" if n == 1 else f"{n} times"  # noqa: E731
    repeats_txt = (
        times(distinct[0])
        if len(distinct) == 1
        else ", ".join(f"{times(n)} with {s} seed{'s' if s > 1 else ''}" for s, n in counts)
    )
    rejax_line = f"\n{rejax_note}\n" if rejax_note else ""
    # the commit the jrl runs recorded (older JSON files have none: the checkout's now)
    commit = (
        next(
            (
                r["commit"]
                for k, r in rows.items()
                if k[0] == "jrl" and isinstance(r, dict) and r.get("commit")
            ),
            None,
        )
        or git_commit()
    )
    unfinished = [
        f"{k[0]} with {k[1]} seed{'s' if k[1] > 1 else ''}: {len(r['failures'])} of "
        f"{r['repeats'] + len(r['failures'])} runs did not finish, {r['failures'][0]}"
        for k, r in rows.items()
        if isinstance(r, dict) and r.get("failures")
    ]
    if unfinished:
        repeats_txt += " (" + "; ".join(unfinished) + ")"
    cores_txt = cores_note(
        [r for k, r in rows.items() if k[0] == "jrl" and isinstance(r, dict)],
        "PureJaxRL and rejax run on one device, as their own scripts run them",
    )
    return f"""{HEADING}

PPO with PureJaxRL's CartPole-v1 configuration, which is jrl's `PPOConfig`
default (the script checks it): 4 envs x 128 steps, 4 epochs x 4 minibatches,
64x64 tanh actor and critic, Adam, lr 2.5e-4 annealed, {total_steps // batch} iterations
of 512 env steps ({total_steps // batch * batch:,} steps per seed). The seeds are vmapped in one
program. To reproduce:

    python benchmarks/ppo_cartpole.py{steps}

Measured {date} on {cpu_model()} ({os.cpu_count()}-core CPU, shared),
Python {platform.python_version()}, jax {jax.__version__}{versions}. \
Other jobs were using the machine:
the 1-minute load average was {load_txt} during the runs (2 cores; the benchmark itself
accounts for about 1 to 2 of it), so the wall times are noisy. jrl at commit {commit}.
Each configuration ran {repeats_txt} in fresh processes, alternating the libraries. Compile and run
are each the best of those runs.
{rejax_line}
- **cores**: {cores_txt}
- **compile**: `lower().compile()` of the whole training program. CPU s is the
  CPU time of the compiling process; XLA compiles on both cores, so it can be higher
  than the wall time. jrl's runner compiles its CPU programs with XLA's LLVM backend at
  level 2 (`anakin.compiler_options()`; XLA's default, which PureJaxRL and rejax use, is 3):
  20-40% less compile time, and PPO's program is bitwise the same (ARCHITECTURE.md).
- **init** (jrl): `anakin.init_runs`, jit-compiling `init` and running it once per
  seed, outside the vmap. It is neither compile nor run, and time to 475 leaves it
  out. Most of it is tracing and the XLA compile of `init` (1.5-2 s here). PureJaxRL and
  rejax initialise inside their compiled programs, so "compile (jrl: compile + init)" is
  the fair compile comparison.
- **time to 475**: the first iteration at which the return averaged over seeds is
  >= 475, converted to wall time as `compile + run_seconds * iteration / num_iterations`.
  For jrl the return is `train/episode_return`, the mean return of the episodes that
  finished in that iteration's rollout, carried forward when none did. With 1 seed one
  long episode can reach 475 early, so that column is noisy. rejax has no training-return
  metric, so its env is wrapped in a tracker that sums the returns of finished episodes.
  rejax's evaluation callback reads it after every iteration, which gives the same
  per-iteration quantity.
- **PureJaxRL** is its own `purejaxrl/ppo.py` (github.com/luchris429/purejaxrl, commit
  146b485), run from a checkout outside this repository (`--purejaxrl`), in rejax's venv,
  whose gymnax 0.0.9 has the 5-value `step` PureJaxRL unpacks. Its init is inside its
  compiled program, like rejax's. It is the implementation jrl's defaults copy, so the two
  compute the same thing per step. The differences are that jrl bootstraps truncated
  episodes from their final observation and draws one key per env. One substitution:
  its `wrappers.py` is replaced by gymnax's copy of the same `LogWrapper` and
  `FlattenObservationWrapper` (`gymnax.wrappers.purerl`, which PureJaxRL's own dqn.py
  imports; the two differ only in type hints and `static_argnums` against
  `static_argnames`). With its own wrappers.py, the 16-seed run hung in all four
  attempts on jax {jax.__version__} CPU: every thread idle, the main thread waiting for the
  result. With gymnax's copy it ran. Which operation hung was not found. Each worker runs
  under `--timeout`, and a hung run counts as a failed repeat.
- **PureJaxRL (cited reference)**: the issue's numbers, measured earlier on this machine
  with another jax version. It is shown only when PureJaxRL is not run. Its "~2.3 s per
  seed with 16 seeds" is read as run seconds / 16. Run side by side here with jax
  {jax.__version__}, PureJaxRL itself takes longer than those numbers (table below).
- **rejax** is `rejax.PPO` 0.1.3 in a separate venv. It needs gymnax 0.0.9: rejax
  unpacks gymnax's old 5-value `step`, and gymnax 1.0.1 fails with "too many values to
  unpack". Configured to match: the lr is annealed per iteration by a callable learning
  rate, and the activation is tanh. rejax still differs in ways its API does not expose:
  gradients are clipped element-wise (`optax.clip(0.5)`), not by global norm; the actor
  and critic have separate Adam optimisers with eps 1e-8 (jrl: one, eps 1e-5); Dense
  layers use the default lecun-normal initialisation, not orthogonal; and GAE does not
  bootstrap truncated episodes. Learning curves therefore differ somewhat, but the
  computation per step is the same.

{tables}
"""


if __name__ == "__main__":
    main()

"""jrl against PureJaxRL in one process, as paired time ratios.

Separate runs on this shared 2-core machine disagree by 15-30%, more than
the differences the PPO and DQN benchmarks try to measure. Here one
interpreter builds both libraries' whole training programs for the same
configuration (``ppo_cartpole.CONFIG``, ``dqn_cartpole.CONFIG``; init
included in both, one compiled program each, ``--total-steps`` env steps per
seed, the seeds vmapped), compiles each once, runs each once to warm up,
then runs them back to back ``--rounds`` times, swapping which goes first
every round. Each round gives one ratio, PureJaxRL's time over jrl's (> 1:
jrl is faster); the median of those ratios, with its 10th and 90th
percentiles, is the result. A slow moment of the machine hits both runs of
a round, so the ratio of a pair is far steadier than either time.

- **jrl**: ``jit(lambda keys: chunk(init(keys)))``, ``init`` and ``chunk`` the runner's
  programs for the whole run as one chunk (``anakin.make_init``, ``anakin.make_chunk``), with
  the runner's compiler options (``anakin.compiler_options()``). As under ``jrl train``, the
  worker makes one CPU device per core (``parallel.use_cpu_cores``) and the runs are spread
  over them (``anakin.spread_mesh``); ``--one-core`` keeps one device, so that jrl's program
  runs on one core as PureJaxRL's does.
- **PureJaxRL**: its own ``make_train(config)`` from a checkout outside jrl
  (``--purejaxrl``), ``jit(vmap(make_train(config)))`` as its ``main()``
  builds it, through ``common.import_purejaxrl`` (which lists the few
  substitutions made to import it). For DQN its ``EPSILON_ANNEAL_TIME`` is
  half of the total steps, as in the full-length benchmark.
- **DQN, PureJaxRL's seeds independent** (``--agents dqn-independent``, seed
  counts above 1): the same two programs, except that PureJaxRL's DQN draws
  one random stream per seed; as published its vmapped seeds share one
  (``common.purejaxrl_independent_seeds`` says how and why).

The interpreter needs jrl and PureJaxRL's dependencies (gymnax 0.0.x with its
5-value ``step``, flashbax, distrax), e.g. a venv with rejax installed plus
``pip install --no-deps -e .`` of jrl and tyro.

Usage::

    /work/venv-rejax/bin/python benchmarks/paired.py            # both agents, prints only
    /work/venv-rejax/bin/python benchmarks/paired.py --write    # and puts the section in
                                                                #   BENCHMARKS.md
    /work/venv-rejax/bin/python benchmarks/paired.py --agents dqn --dqn-seeds 4 --rounds 20
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings

from common import (
    DEFAULT_PUREJAXRL,
    import_purejaxrl,
    mean_and_final,
    measured_on,
    publish,
    purejaxrl_independent_seeds,
    purejaxrl_ppo_returns,
)

HEADING = "## jrl and PureJaxRL in one process (paired)"
DEFAULT_STEPS = {"ppo": 102_400, "dqn": 100_000}
INDEPENDENT = "dqn-independent"
"""The DQN comparison with PureJaxRL's seeds given independent random streams
(``common.purejaxrl_independent_seeds``); jrl's program is the same as for "dqn"."""
LABELS = {"ppo": "PPO", "dqn": "DQN", INDEPENDENT: "DQN, PureJaxRL's seeds independent"}
ALGORITHM = {"ppo": "ppo", "dqn": "dqn", INDEPENDENT: "dqn"}
"""The algorithm (benchmark CONFIG, PureJaxRL module) each configuration runs."""


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank on the sorted list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@contextlib.contextmanager
def watchdog(seconds: float, what: str):
    """Ends the process (exit code 3, with a message and every thread's stack on
    stderr) if the block takes longer than ``seconds``: a hung XLA call cannot be
    interrupted from Python. PureJaxRL's PPO program hung this way here (every thread
    idle) at 2 seeds x 10,240 steps, reproducibly, on jax 0.10.2 CPU; other sizes ran."""

    def expire():
        print(
            f"\n{what} took more than {seconds:.0f} s (--timeout): taken as hung, stopping",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(all_threads=True)
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def jrl_program(agent: str, total_steps: int):
    """jrl's whole training program on CartPole-v1 for ``keys [R]``, with the benchmark's
    ``CONFIG`` for PPO and DQN (PureJaxRL's configurations) and the agent's own defaults for
    any other ``agent``: ``(train, steps_per_run, returns)``, ``train(keys)`` giving the final
    parameters and the training returns, ``returns(out)`` the ``[R, iterations]``
    training-return history."""
    import jrl.agents
    import jrl.envs

    from jrl.app.api import make_config
    from jrl.run import anakin

    overrides = {}
    if agent == "ppo":
        from ppo_cartpole import CONFIG as overrides
    elif agent == "dqn":
        from dqn_cartpole import CONFIG as overrides
    config = make_config(agent, "CartPole-v1", **{**overrides, "total_steps": total_steps})
    env, env_params = jrl.envs.make("CartPole-v1")
    algorithm = jrl.agents.get(agent).build(config, env, env_params).algorithm

    def train(keys):
        # spread over the CPU devices as jrl train's runner does (anakin.spread_mesh)
        cores = anakin.spread_mesh(keys.shape[0], algorithm)
        chunk = anakin.make_chunk(algorithm, config.num_iterations, spread=cores)
        states, metrics = chunk(anakin.make_init(algorithm, cores)(keys))
        return states.agent_state.params, metrics["train/episode_return"]  # [iterations, R]

    return train, config.num_iterations * algorithm.env_steps_per_iteration, lambda out: out[1].T


def purejaxrl_program(agent: str, checkout: str, total_steps: int):
    """PureJaxRL's ``make_train`` for the same run: ``(train, steps_per_run, returns)``;
    for :data:`INDEPENDENT`, its DQN with one random stream per seed."""
    import numpy as np

    if agent == "ppo":
        from common import purejaxrl_ppo_config
        from ppo_cartpole import CONFIG

        config = purejaxrl_ppo_config(CONFIG, "CartPole-v1", total_steps)
        steps = (
            total_steps
            // (config["NUM_ENVS"] * config["NUM_STEPS"])
            * config["NUM_ENVS"]
            * config["NUM_STEPS"]
        )

        def returns(out):
            return purejaxrl_ppo_returns(out["metrics"])
    else:
        from dqn_cartpole import PUREJAXRL_CONFIG

        config = {
            **PUREJAXRL_CONFIG,
            "TOTAL_TIMESTEPS": total_steps,
            "EPSILON_ANNEAL_TIME": total_steps // 2,
        }
        steps = total_steps // config["NUM_ENVS"] * config["NUM_ENVS"]

        def returns(out):  # per step: the mean over envs of each env's latest finished return
            return np.asarray(out["metrics"]["returns"], np.float64)

    train = import_purejaxrl(checkout, ALGORITHM[agent]).make_train(config)
    return (purejaxrl_independent_seeds(train) if agent == INDEPENDENT else train), steps, returns


def worker(
    agent: str, seeds: int, total_steps: int, rounds: int, checkout: str, timeout: float
) -> None:
    """One configuration, in its own process: compiles both programs for ``seeds`` vmapped
    seeds, then times ``rounds`` alternated pairs, printing one JSON line per event."""
    from jrl.core import parallel

    parallel.use_cpu_cores()  # as jrl train does: one CPU device per core (not with --one-core)
    import jax

    from jrl.run import anakin

    def emit(**fields):
        print(json.dumps(fields), flush=True)

    jrl_train, jrl_steps, jrl_returns = jrl_program(ALGORITHM[agent], total_steps)
    pjr_train, pjr_steps, pjr_returns = purejaxrl_program(agent, checkout, total_steps)
    if jrl_steps != pjr_steps:
        raise SystemExit(
            f"{agent}: jrl runs {jrl_steps} env steps per seed, PureJaxRL {pjr_steps}: "
            "choose a step count that is a multiple of both batch sizes"
        )
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    programs = {}
    for name, fn, options, returns in (
        ("jrl", jax.jit(jrl_train), anakin.compiler_options(), jrl_returns),
        ("PureJaxRL", jax.jit(jax.vmap(pjr_train)), None, pjr_returns),
    ):
        start = time.perf_counter()
        with (
            warnings.catch_warnings()
        ):  # flashbax asks for int64 indices, which jax truncates to int32
            warnings.simplefilter("ignore", UserWarning)
            programs[name] = fn.lower(keys).compile(options)
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        with watchdog(timeout, f"{name}'s first run"):
            out = jax.block_until_ready(programs[name](keys))
        emit(
            event="compiled",
            name=name,
            steps=jrl_steps,
            compile=compile_s,
            first=time.perf_counter() - start,
            final_return=mean_and_final(returns(out))[1],
        )
        del out
    order = ["jrl", "PureJaxRL"]
    for r in range(rounds):
        times = {}
        for name in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            with watchdog(timeout, f"{name}'s run in round {r + 1}"):
                jax.block_until_ready(programs[name](keys))
            times[name] = time.perf_counter() - start
        emit(event="round", round=r + 1, **times)


def attempt(
    agent: str,
    seeds: int,
    total_steps: int,
    rounds: int,
    checkout: str,
    timeout: float,
    done: int = 0,
) -> tuple[dict, list, str | None]:
    """Runs :func:`worker` in a fresh interpreter for ``rounds`` rounds and collects its
    lines: ``(entries, times, stopped)``. The rounds it finished count even when it
    stopped early (a hung program, ended by its watchdog); ``stopped`` then says why.
    ``done`` (rounds already measured) only numbers the progress lines."""
    cmd = [
        sys.executable,
        "-u",
        __file__,
        "--worker",
        agent,
        str(seeds),
        str(total_steps),
        str(rounds),
        "--purejaxrl",
        checkout,
        "--timeout",
        str(timeout),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    entries, times = {}, []
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event["event"] == "compiled":
            entries[event["name"]] = event
            print(
                f"  {agent} x{seeds} {event['name']}: compiled in {event['compile']:.1f} s, "
                "first run "
                f"{event['first']:.2f} s",
                flush=True,
            )
        else:
            times.append((event["jrl"], event["PureJaxRL"]))
            print(
                f"  {agent} x{seeds} round {done + event['round']}: jrl {event['jrl']:.2f} s, "
                "PureJaxRL "
                f"{event['PureJaxRL']:.2f} s, ratio {event['PureJaxRL'] / event['jrl']:.3f}",
                flush=True,
            )
    stderr = proc.stderr.read()
    stopped = None
    if proc.wait() != 0:
        lines = [
            x
            for x in stderr.splitlines()
            if x.strip() and "Warning" not in x and "warnings.warn" not in x
        ]
        hung = [x for x in lines if "taken as hung" in x]
        stopped = hung[0].strip() if hung else f"exit {proc.returncode}: " + " | ".join(lines[-3:])
        print(f"  {agent} x{seeds} stopped after {len(times)} rounds: {stopped}", flush=True)
    return entries, times, stopped


def measure(
    agent: str,
    seeds: int,
    total_steps: int,
    rounds: int,
    checkout: str,
    timeout: float,
    retries: int = 0,
) -> dict:
    """``rounds`` paired rounds of one configuration, in fresh interpreters (:func:`attempt`):
    when one stops early (a hang), up to ``retries`` new ones run the rounds still missing.
    The result lists every stop."""
    entries, times, stops = {}, [], []
    for _ in range(retries + 1):
        got, new_times, stopped = attempt(
            agent, seeds, total_steps, rounds - len(times), checkout, timeout, done=len(times)
        )
        entries.update(got)
        times += new_times
        if stopped:
            stops.append(f"{stopped} (after {len(times)} rounds in all)")
        if len(times) >= rounds or not stopped:
            break
    result = {
        "agent": agent,
        "seeds": seeds,
        "rounds": len(times),
        "asked": rounds,
        "entries": entries,
        "times": times,
        "stopped": "; ".join(stops) or None,
        "stops": len(stops),
        "load": os.getloadavg()[0],
    }
    if times:
        ratios = [p / j for j, p in times]
        result.update(
            ratio=statistics.median(ratios),
            p10=percentile(ratios, 0.1),
            p90=percentile(ratios, 0.9),
            jrl_faster=sum(x > 1 for x in ratios),
        )
    return result


SPREAD_NOTE = (
    "Both cores: as under `jrl train`, the workers make one CPU device per core and jrl's "
    "runs are spread over them (`anakin.spread_mesh`: with 16 seeds, 8 per core; with 4, 2), "
    "each core stepping its block with nothing exchanged; PureJaxRL's program runs on one "
    "device, as its own scripts run it, and XLA keeps the small kernels of either program on "
    "one thread. A one-run program is not spread (the 1-seed rows use one core on both "
    "sides). `--one-core` keeps one device in the workers, so jrl's runs share one core too."
)
ONE_CORE_NOTE = (
    "One core (`--one-core`): the workers keep one CPU device, so jrl's runs are not spread "
    "over the cores as `jrl train` spreads them; both programs run on one thread."
)


def section(results: list[dict], command: str, one_core: bool = False) -> str:
    from importlib.metadata import version

    spread = ONE_CORE_NOTE if one_core else SPREAD_NOTE

    rows, notes = [], []
    for r in results:
        j, p = r["entries"].get("jrl"), r["entries"].get("PureJaxRL")
        name = f"{LABELS[r['agent']]} | {r['seeds']}"
        if not r["times"]:
            rows.append(f"| {name} | – | 0 of {r['asked']} | – | – | – | – | – | – | – | – |")
        else:
            steps = j["steps"] * r["seeds"]
            tj = statistics.median(t for t, _ in r["times"])
            tp = statistics.median(t for _, t in r["times"])
            rows.append(
                f"| {name} | {j['steps']:,} | {r['rounds']} of {r['asked']} | {tj:.2f} "
                f"| {tp:.2f} | "
                f"{steps / tj / 1e3:.0f} k | {steps / tp / 1e3:.0f} k | **{r['ratio']:.2f}x** "
                f"({r['p10']:.2f}-{r['p90']:.2f}) | {r['jrl_faster']}/{r['rounds']} | "
                f"{j['compile']:.1f} / {p['compile']:.1f} "
                f"| {j['final_return']:.0f} / {p['final_return']:.0f} |"
            )
        if r["stopped"]:
            times = "once" if r["stops"] == 1 else f"{r['stops']} times"
            notes.append(
                f"- {LABELS[r['agent']]} with {r['seeds']} seed{'s' if r['seeds'] > 1 else ''}: "
                "a process "
                f"stopped {times}, {r['rounds']} of {r['asked']} rounds measured: {r['stopped']}"
            )
    versions = ", ".join(
        f"{m} {version(m)}" for m in ("gymnax", "flax", "optax", "flashbax", "distrax")
    )
    return (
        f"""{HEADING}

The PPO and DQN sections above compare fresh processes, one run each,
best of a few; on this shared machine such runs disagree by 15-30%. This
section runs jrl's and PureJaxRL's whole training programs (init included,
one compiled program each, seeds vmapped) in one process per configuration,
back to back, the order swapped every round, and reports the median over
rounds of the paired ratio PureJaxRL time / jrl time (> 1: jrl is faster),
with its 10th-90th percentile range. Configurations are the two sections'
(`ppo_cartpole.CONFIG`, `dqn_cartpole.CONFIG`; PureJaxRL's DQN anneals epsilon
over half the run, as there), for a shorter run per seed: the ratio is a
per-step cost, and the short run leaves time for many rounds. To reproduce
(an interpreter with jrl and PureJaxRL's dependencies; see the script's
docstring):

    {command}

{measured_on()} {versions}.

| agent | seeds | env steps per seed | rounds | jrl s (median) | PureJaxRL s (median) \
| jrl steps/s | PureJaxRL steps/s | speed ratio (p10-p90) | rounds jrl faster \
| compile s jrl / PureJaxRL | final return jrl / PureJaxRL |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
"""
        + "\n".join(rows)
        + f"""

- {spread}
- Steps/s count the env steps of all seeds. Compile is one cold `lower().compile()`
  of each whole program (jrl's at its CPU level 2, PureJaxRL's at XLA's default);
  being a single sample, it is not a paired figure.
- Final return: the mean training return over the last 5% of the warm-up run
  (jrl: `train/episode_return`; PureJaxRL: its logged returns), a check that both
  learn alike at this budget, not a learning result.
- "DQN, PureJaxRL's seeds independent": PureJaxRL's `dqn.py` rebinds its key to
  `jax.random.PRNGKey(0)` ("a dummy rng") inside `train` and keeps drawing from it,
  so its vmapped seeds share one random stream: the same initial network (checked:
  equal parameters across 4 seeds), the same exploration and replay draws, only the
  env resets differ; its program draws its random numbers once for all seeds. In
  this row that call returns `fold_in(key, 0)` of each seed's own key while
  PureJaxRL's `train` is traced (`common.purejaxrl_independent_seeds`, its code
  unchanged), so both programs draw one stream per seed, the work independent
  seeds need.
- A run that takes longer than `--timeout` is taken as hung: its process is
  ended and the rounds finished before count; a fresh process (up to `--retries`)
  then runs the rounds still missing. PureJaxRL's PPO program hangs
  on this jax 0.10.2 CPU build at some sizes and calls (every thread idle,
  the caller waiting for a result that never comes; seen at 2 seeds x 10,240
  steps on the first call, reproducibly, and at other sizes on a later call).
"""
        + "\n".join(notes)
        + "\n"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--agents",
        nargs="+",
        choices=list(LABELS),
        default=list(LABELS),
        help=f"{INDEPENDENT}: DQN against PureJaxRL's DQN with one random stream per seed "
        "(common.purejaxrl_independent_seeds); run for --dqn-seeds above 1 only",
    )
    parser.add_argument("--ppo-seeds", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--dqn-seeds", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=10, help="paired rounds per configuration")
    parser.add_argument(
        "--ppo-steps", type=int, default=DEFAULT_STEPS["ppo"], help="env steps per seed"
    )
    parser.add_argument(
        "--dqn-steps", type=int, default=DEFAULT_STEPS["dqn"], help="env steps per seed"
    )
    parser.add_argument("--purejaxrl", default=DEFAULT_PUREJAXRL, help="a PureJaxRL checkout")
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds one run may take before it is taken as hung (its process is ended)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help="fresh processes started, per configuration, for the rounds still missing after one "
        "stops early (a hang)",
    )
    parser.add_argument("--write", action="store_true", help="put the section in BENCHMARKS.md")
    parser.add_argument(
        "--one-core",
        action="store_true",
        help="one CPU device in the workers, so jrl's runs are not spread over the cores "
        "(jrl train makes one device per core)",
    )
    parser.add_argument(
        "--worker", nargs=4, metavar=("AGENT", "SEEDS", "STEPS", "ROUNDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.worker:
        agent, seeds, steps, rounds = args.worker
        worker(agent, int(seeds), int(steps), int(rounds), args.purejaxrl, args.timeout)
        return
    if args.rounds < 1 or min(args.ppo_seeds + args.dqn_seeds) < 1:
        parser.error("--rounds and the seed counts must be positive")
    if args.retries < 0:
        parser.error("--retries must be >= 0")
    if args.one_core:  # the workers inherit it; parallel.use_cpu_cores then leaves it alone
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1"
        ).strip()
    from importlib.metadata import PackageNotFoundError, version

    try:
        # jrl's distribution is jrl-jax (pyproject.toml); its import name is jrl
        found = {m: version(m) for m in ("jrl-jax", "gymnax", "flashbax", "distrax")}
    except PackageNotFoundError as e:
        raise SystemExit(
            f"{e.name} is not installed: run this with an interpreter that has jrl and PureJaxRL's "
            "dependencies (see the docstring)"
        ) from None
    if not found["gymnax"].startswith("0.0."):
        raise SystemExit(
            f"gymnax {found['gymnax']}: PureJaxRL needs gymnax 0.0.x (its 5-value step)"
        )
    results = []
    for agent in args.agents:
        counts = args.ppo_seeds if agent == "ppo" else args.dqn_seeds
        for seeds in counts if agent != INDEPENDENT else [s for s in counts if s > 1]:
            steps = args.ppo_steps if agent == "ppo" else args.dqn_steps
            print(
                f"{agent} x{seeds}, {steps:,} env steps per seed, {args.rounds} rounds", flush=True
            )
            results.append(
                measure(
                    agent, seeds, steps, args.rounds, args.purejaxrl, args.timeout, args.retries
                )
            )
            r = results[-1]
            if r["times"]:
                print(
                    f"{agent} x{seeds}: speed ratio {r['ratio']:.3f} "
                    f"({r['p10']:.3f}-{r['p90']:.3f}), jrl faster "
                    f"in {r['jrl_faster']}/{r['rounds']} rounds",
                    flush=True,
                )
    command = "python benchmarks/paired.py " + " ".join(sys.argv[1:] if argv is None else argv)
    publish(HEADING, section(results, command.strip(), args.one_core), args.write)


if __name__ == "__main__":
    main()

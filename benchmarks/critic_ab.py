"""Where the actor-critic's values are computed, A/B in one process: while acting, or in ``learn``.

``jrl.agents.actor_critic.common.make_actor_critic`` evaluates the critic on the rollout in
``learn``, one
batched pass over the ``[T, N]`` observations, instead of ``T`` small passes while acting
(the module docstring says why that computes the same values). This script measures what
that saved. It builds jrl's whole training program (one compiled program, init included,
``--seeds`` vmapped seeds) twice in one process:

- ``learn``: the agent as the working tree builds it;
- ``acting``: the same agent built with ``make_actor_critic`` as it was at ``--base`` (a git
  revision whose ``jrl/actor_critic.py``, now ``agents/actor_critic/common.py``, kept the
  critic's values from acting), read with ``git show`` and put in place of the current one in
  ``jrl.agents.actor_critic.common`` while that program is built; its imports of jrl's modules
  by their paths of that time (``from jrl import buffers``) are given the modules now at the
  new paths (``OLD_MODULES``). Nothing else differs.

Then it times the two in ``--rounds`` rounds, the order swapped every round, and reports the
median over rounds of acting time / learn time (> 1: computing the values in ``learn`` is
faster), with the 10th-90th percentile, and whether the final parameters are bitwise equal.

PPO runs PureJaxRL's CartPole configuration (``ppo_cartpole.CONFIG``, as in ``paired.py``);
A2C its CartPole-v1 defaults. Run it with jrl's interpreter, from a clone that has the history::

    python benchmarks/critic_ab.py --rounds 11
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import jax
import numpy as np
from common import machine
from paired import percentile

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BASE = "698ff8e"
"""The last commit whose ``make_actor_critic`` kept the critic's values from acting."""
STEPS = {"ppo": 204_800, "a2c": 100_000}


OLD_MODULES = {
    "jrl.agent": "jrl.parts.agent",
    "jrl.buffers": "jrl.parts.buffers",
    "jrl.config": "jrl.parts.agent_config",
    "jrl.learner": "jrl.parts.learner",
    "jrl.losses": "jrl.ops.losses",
    "jrl.networks": "jrl.parts.networks",
    "jrl.optim": "jrl.parts.optim",
    "jrl.parallel": "jrl.core.parallel",
    "jrl.returns": "jrl.ops.returns",
    "jrl.spaces": "jrl.core.spaces",
    "jrl.types": "jrl.core.types",
}
"""The jrl modules ``jrl/actor_critic.py`` imported at ``DEFAULT_BASE`` -> where they are now
(the folder tree of issue 42)."""


def old_make_actor_critic(base: str):
    """``make_actor_critic`` from ``jrl/actor_critic.py`` (now ``agents/actor_critic/common.py``)
    at git revision ``base``, its jrl imports served by the modules of :data:`OLD_MODULES`."""
    source = subprocess.check_output(
        ["git", "-C", str(REPO), "show", f"{base}:jrl/actor_critic.py"], text=True
    )
    module = types.ModuleType("jrl_actor_critic_at_base")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    aliases = [old for old in OLD_MODULES if old not in sys.modules]
    for old in aliases:
        sys.modules[old] = importlib.import_module(OLD_MODULES[old])
    try:
        exec(compile(source, f"{base}:jrl/actor_critic.py", "exec"), module.__dict__)
    finally:
        for old in aliases:
            del sys.modules[old]
    return module.make_actor_critic


def program(agent: str, steps: int):
    """``train(keys [R]) -> final params``: jrl's whole run (init and one chunk) for ``agent``
    on CartPole-v1, as ``paired.jrl_program`` builds it."""
    from paired import jrl_program

    train = jrl_program(agent, steps)[0]
    return lambda keys: train(keys)[0]


def measure(agent: str, seeds: int, steps: int, rounds: int, base: str) -> str:
    import jrl.agents.actor_critic.common
    from jrl.run import anakin

    current = jrl.agents.actor_critic.common.make_actor_critic
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    compiled, params = {}, {}
    for name, make in (("learn", current), ("acting", old_make_actor_critic(base))):
        jrl.agents.actor_critic.common.make_actor_critic = make
        try:
            compiled[name] = (
                jax.jit(program(agent, steps)).lower(keys).compile(anakin.compiler_options())
            )
        finally:
            jrl.agents.actor_critic.common.make_actor_critic = current
        params[name] = jax.block_until_ready(compiled[name](keys))
    times = {name: [] for name in compiled}
    for r in range(rounds):
        for name in ("learn", "acting") if r % 2 == 0 else ("acting", "learn"):
            start = time.perf_counter()
            jax.block_until_ready(compiled[name](keys))
            times[name].append(time.perf_counter() - start)
        print(
            f"  {agent} {seeds} seed(s) round {r + 1}: learn {times['learn'][-1]:.3f} s, "
            f"acting {times['acting'][-1]:.3f} s",
            flush=True,
        )
    ratios = [a / b for a, b in zip(times["acting"], times["learn"])]
    same = all(
        np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(params["learn"]), jax.tree.leaves(params["acting"]))
    )
    return (
        f"| {agent.upper()} | {seeds} | {steps:,} | {statistics.median(times['acting']):.3f} "
        f"| {statistics.median(times['learn']):.3f} | **{statistics.median(ratios):.2f}x** "
        f"({percentile(ratios, 0.1):.2f}-{percentile(ratios, 0.9):.2f}) "
        f"| {'yes' if same else 'no'} |"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", choices=sorted(STEPS), default=["ppo", "a2c"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--base", default=DEFAULT_BASE, help="git revision of the old module")
    args = parser.parse_args(argv)
    if args.rounds < 1 or min(args.seeds) < 1:
        parser.error("--rounds and --seeds must be positive")
    from jrl.core import parallel

    parallel.use_cpu_cores()  # as jrl train does: several seeds are spread over the cores
    rows = [
        measure(agent, seeds, STEPS[agent], args.rounds, args.base)
        for agent in args.agents
        for seeds in args.seeds
    ]
    print(f"\n{machine()}, {args.rounds} rounds, base {args.base}\n")
    print(
        "| agent | seeds | env steps per seed | values while acting, s | values in learn, s "
        "| speed (acting / learn, p10-p90) | parameters bitwise equal |\n"
        "|---|---:|---:|---:|---:|---:|---|"
    )
    print("\n".join(rows))


if __name__ == "__main__":
    main()

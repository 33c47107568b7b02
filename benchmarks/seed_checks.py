"""Learning tests on more seeds: the measurements behind the thresholds reset after the seed-pair
runs of 2026-12-04 (BENCHMARKS.md, "The learning tests on other seed pairs").

Each check runs one test's configuration, its seeds vmapped in one call, for every
``FIRST:COUNT`` group of seeds given, and prints each seed's number:

- ``c51``: c51 on CartPole-v1, 100k steps, final training return (tests/test_learning.py);
- ``r2d2``: DQN with a GRU on MemoryChain-v0, greedy return over 64 episodes, at each of
  ``--steps`` (tests/test_r2d2.py; default 24k and 48k);
- ``apex``: Ape-X's CartPole preset on gymnasium:CartPole-v1 with 2 actor threads (which a
  synchronous run with 2 Ray actors equals), greedy return over 10 episodes (tests/test_apex.py);
- ``impala-actors``: IMPALA on gymnasium:CartPole-v1, 500k steps, 2 actor threads (``--set
  actor_threads=1``: tests/test_sebulba.py's configuration), final training return;
- ``impala``: IMPALA on CartPole-v1 (Anakin), 600k steps, final training return
  (tests/test_impala.py);
- ``dqn-probe``: 3-step DQN on TruncationProbe-v0, 30k steps, the lowest and highest Q over
  the 20 states x 2 actions, target 10 (tests/test_dqn.py);
- ``cma-es``: separable CMA-ES's Pendulum-v1 preset, the mean's greedy return over 20
  episodes (tests/test_es.py);
- ``muzero``: MuZero's CartPole-v1 preset, ``jrl eval`` of the noise-free search, 8 episodes
  per seed (tests/test_muzero.py);
- ``ippo-coordination``, ``mappo-coordination``: Coordination-v0, 20k steps, greedy team
  return over 16 episodes, optimum 16 (tests/test_ippo.py);
- ``ippo-probe``: IPPO on TeamTruncationProbe-v0, 60k steps, the lowest and highest value
  over 20 steps x 2 agents, target 10 (tests/test_ippo.py);
- ``muzero-probe``: MuZero on TruncationProbe-v0, 8,192 steps, the lowest and highest value
  of the 20 states, target 10 (tests/test_muzero.py);
- ``muzero-tictactoe``: MuZero's TicTacToe-v0 preset, wins and losses in 100 games against
  the random player per seed, half as first player (tests/test_muzero.py);
- ``jaxmarl-spread``: IPPO on jaxmarl:MPE_simple_spread_v3, 250k steps, the team return of
  the last 5% of iterations (tests/test_jaxmarl.py; needs jrl[jaxmarl]);
- ``ray-kill``: PPO with 2 Ray actors on gymnasium:CartPole-v1, 150k steps, actor 0 killed
  after the first chunk, final training return (tests/test_ray_actors.py; needs jrl[ray]).

Usage::

    python benchmarks/seed_checks.py c51 --seeds 2000:16 26:4
    python benchmarks/seed_checks.py r2d2 --seeds 26:2 2000:8 --steps 24000 48000
    python benchmarks/seed_checks.py impala --seeds 3000:32 --set ent_coef=0.01
    python benchmarks/seed_checks.py cma-es --seeds 0:32 32:32 --set sigma_init=1.0
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from learning_reach import R2D2_MEMORY as _MEMORY_CHAIN  # a sibling script: one copy

R2D2_MEMORY = {**_MEMORY_CHAIN, "recurrent": "gru"}


def c51(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl

    res = jrl.train(
        "c51", "CartPole-v1", seeds=count, seed=first, total_steps=steps or 100_000,
        progress=False, num_reports=4, **overrides,
    )  # fmt: skip
    return res.final_returns().tolist()


def r2d2(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl
    from jrl.app import api

    with tempfile.TemporaryDirectory() as out:
        jrl.train(
            "dqn", "MemoryChain-v0", count, out=out + "/run", seed=first,
            total_steps=steps or 48_000, progress=False, **{**R2D2_MEMORY, **overrides},
        )  # fmt: skip
        stats = api.evaluate_run(out + "/run", episodes=64)
    return [r["mean"] for r in stats["runs"]]


def apex(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl.agents
    import jrl.envs
    from jrl.app import api
    from jrl.run import evaluation, sebulba

    env, params = jrl.envs.make("gymnasium:CartPole-v1")
    config = api.make_config("apex", "CartPole-v1", **overrides)
    built = jrl.agents.get("apex").build(config, env, params)
    keys = jax.vmap(jax.random.key)(np.arange(first, first + count))
    res = sebulba.run(
        built.agent, env, built.spec, keys, config.num_iterations, config.num_steps,
        config.num_envs, sebulba.SebulbaOptions(actor_threads=2), replay=built.replay,
        num_reports=4,
    )  # fmt: skip
    returns, _ = evaluation.host_evaluator(built.agent, env, 10)(res.final_state, jax.random.key(7))
    return returns.mean(axis=1).tolist()


def impala_actors(first: int, count: int, steps: int | None, **overrides) -> list:
    from jrl.app import api

    res = api.train(
        "impala", "gymnasium:CartPole-v1", seeds=count, seed=first, runner="sebulba",
        total_steps=steps or 500_000, progress=False, num_reports=4,
        **{"actor_threads": 2, **overrides},
    )  # fmt: skip
    return res.final_returns().tolist()


def impala(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl

    res = jrl.train(
        "impala", "CartPole-v1", seeds=count, seed=first, total_steps=steps or 600_000,
        progress=False, num_reports=4, **overrides,
    )  # fmt: skip
    return res.final_returns().tolist()


def dqn_probe(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl
    import jrl.envs
    from jrl.agents.value import dqn

    config = dict(
        learning_starts=1_000, n_step=3, gamma=0.9, learning_rate=5e-4,
        updates_per_iteration=4, buffer_size=20_000, target_update_interval=100,
        anneal_lr=True, loss="huber",
    )  # fmt: skip
    res = jrl.train(
        "dqn", "TruncationProbe-v0", seeds=count, seed=first, total_steps=steps or 30_000,
        progress=False, num_reports=2, **{**config, **overrides},
    )  # fmt: skip
    env, params = jrl.envs.make("TruncationProbe-v0")
    network = dqn.build(res.config, env, params).network
    obs = jnp.arange(20, dtype=jnp.float32)[:, None] / 20.0  # every state of an episode
    out = []
    for r in range(res.num_runs):
        q = np.asarray(network.apply(jax.tree.map(lambda x: x[r], res.final_params), obs))
        out.append(f"{q.min():.3f}..{q.max():.3f}")
    return out


def cma_es(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl
    import jrl.envs
    from jrl.run import evaluation

    res = jrl.train(
        "cma_es", "Pendulum-v1", seeds=count, seed=first, progress=False, num_reports=2,
        **({"total_steps": steps} if steps else {}), **overrides,
    )  # fmt: skip
    env, params = jrl.envs.make("Pendulum-v1")
    built = jrl.agents.get("cma_es").build(res.config, env, params)
    out = []
    for r in range(res.num_runs):  # the test's statistic: the mean's greedy return, 20 episodes
        p = jax.tree.map(lambda x: x[r], res.final_params)
        policy = lambda obs, key, p=p: built.agent.policy(p, obs, key)
        ret, _ = evaluation.episode_returns(policy, env, jax.random.key(r), 20, params)
        out.append(float(np.mean(ret)))
    return out


def muzero(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl
    from jrl.app import api

    with tempfile.TemporaryDirectory() as out:  # `jrl eval` of the noise-free search, 8 episodes
        jrl.train(
            "muzero", "CartPole-v1", count, out=out + "/run", seed=first, progress=False,
            **({"total_steps": steps} if steps else {}), **overrides,
        )  # fmt: skip
        stats = api.evaluate_run(out + "/run", episodes=8)
    return np.asarray(stats["returns"]).mean(axis=1).tolist()


def ray_kill(first: int, count: int, steps: int | None, **overrides) -> list:
    import os
    import signal

    import jrl.agents
    import jrl.envs
    from jrl.app import api
    from jrl.run import ray_actors, sebulba
    from jrl.run.anakin import RunHooks

    env, params = jrl.envs.make("gymnasium:CartPole-v1")
    config = api.make_config("ppo", "CartPole-v1", **{**RAY_KILL, **overrides})
    built = jrl.agents.get("ppo").build(config, env, params)
    killed = []

    def kill_one(states, done, metrics):  # actor 0, after the first chunk, as the test does
        if not killed:
            killed.append(sorted(ray_actors.pids().items())[0][1])
            os.kill(killed[0], signal.SIGKILL)

    keys = jax.vmap(jax.random.key)(np.arange(first, first + count))
    res = sebulba.run(
        built.agent, env, built.spec, keys, (steps or 150_000) // (8 * 64), config.num_steps,
        config.num_envs, sebulba.SebulbaOptions(actors="ray:2", transfer="bfloat16"),
        num_reports=4, hooks=RunHooks(on_chunk=kill_one),
    )  # fmt: skip
    return res.metrics["train/episode_return"][:, -1].tolist()


def coordination(agent: str, first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl

    res = jrl.train(
        agent, "Coordination-v0", seeds=count, seed=first, total_steps=steps or 20_000,
        eval_every=steps or 20_000, eval_episodes=16, num_reports=2, progress=False,
        compile_cache=False, **overrides,
    )  # fmt: skip
    return np.asarray(res.evals[-1]["returns"]).tolist()


def ippo_probe(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl
    import jrl.envs
    from jrl.agents.multi_agent import ippo
    from jrl.core.multi_agent_env import GLOBAL_STATE
    from jrl.core.types import OBSERVATION

    res = jrl.train(
        "ippo", "TeamTruncationProbe-v0", seeds=count, seed=first, total_steps=steps or 60_000,
        gamma=0.9, ent_coef=0.0, num_reports=2, progress=False, compile_cache=False,
        **overrides,
    )  # fmt: skip
    built = ippo.build(res.config, *jrl.envs.make("TeamTruncationProbe-v0"))
    t = jnp.arange(20, dtype=jnp.float32)[:, None, None] / 20.0
    obs = {OBSERVATION: jnp.broadcast_to(t, (20, 2, 1)), GLOBAL_STATE: jnp.zeros((20, 2))}
    out = []
    for r in range(res.num_runs):  # every agent's value at every step, target 10
        v = built.network.apply(
            jax.tree.map(lambda x: x[r], res.final_params), obs, method=built.network.value
        )
        out.append(f"{float(v.min()):.3f}..{float(v.max()):.3f}")
    return out


def muzero_probe(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl
    import jrl.envs
    from jrl.agents.search import muzero as muzero_agent
    from jrl.ops.return_distributions import two_hot_to_scalar

    config = dict(
        gamma=0.9, num_simulations=2, learning_starts=512, updates_per_iteration=8,
        learning_rate=3e-3, hidden_sizes=(32,), latent_size=16, support_size=5, td_steps=3,
        unroll_steps=3,
    )  # fmt: skip
    res = jrl.train(
        "muzero", "TruncationProbe-v0", count, seed=first, total_steps=steps or 8192,
        progress=False, compile_cache=False, **{**config, **overrides},
    )  # fmt: skip
    net = muzero_agent.build(res.config, *jrl.envs.make("TruncationProbe-v0")).network
    obs = jnp.arange(20, dtype=jnp.float32)[:, None] / 20.0
    out = []
    for r in range(res.num_runs):  # the value of each of the 20 states, target 10
        params = jax.tree.map(lambda x: x[r], res.final_params)
        latent = net.apply(params, obs, method=net.represent)
        _, logits = net.apply(params, latent, method=net.predict)
        v = two_hot_to_scalar(logits, res.config.support_size)
        out.append(f"{float(v.min()):.2f}..{float(v.max()):.2f}")
    return out


def muzero_tictactoe(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl
    from jrl.app import api

    with tempfile.TemporaryDirectory() as out:  # 100 games against random, half as first
        jrl.train(
            "muzero", "TicTacToe-v0", count, out=out + "/run", seed=first, progress=False,
            **({"total_steps": steps} if steps else {}), **overrides,
        )  # fmt: skip
        stats = api.evaluate_run(out + "/run", episodes=100)
    runs = stats["opponents"]["random"]["runs"]
    return [f"win {r['win']:.2f} loss {r['loss']:.2f}" for r in runs]


def jaxmarl_spread(first: int, count: int, steps: int | None, **overrides) -> list:
    import jrl

    res = jrl.train(
        "ippo", "jaxmarl:MPE_simple_spread_v3", seeds=count, seed=first,
        total_steps=steps or 250_000, num_reports=2, progress=False, **overrides,
    )  # fmt: skip
    team = np.asarray(res.metrics["train/episode_return"])  # the last 5% of iterations
    return team[:, -(team.shape[1] // 20) :].mean(axis=1).tolist()


RAY_KILL = dict(
    num_envs=8, num_steps=64, learning_rate=1e-3, num_minibatches=4, num_epochs=4,
    hidden_sizes=(64, 64),
)  # fmt: skip
"""tests/test_ray_actors.py's kill test: PPO on gymnasium:CartPole-v1, 2 Ray actors."""


CHECKS = {
    "c51": c51,
    "ippo-coordination": functools.partial(coordination, "ippo"),
    "mappo-coordination": functools.partial(coordination, "mappo"),
    "ippo-probe": ippo_probe,
    "muzero-probe": muzero_probe,
    "muzero-tictactoe": muzero_tictactoe,
    "jaxmarl-spread": jaxmarl_spread,
    "ray-kill": ray_kill,
    "cma-es": cma_es,
    "muzero": muzero,
    "r2d2": r2d2,
    "apex": apex,
    "impala-actors": impala_actors,
    "impala": impala,
    "dqn-probe": dqn_probe,
}


def seed_group(text: str) -> tuple[int, int]:
    first, _, count = text.partition(":")
    try:
        group = int(first), int(count or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST:COUNT, got {text!r}") from None
    if group[1] < 1:
        raise argparse.ArgumentTypeError(f"COUNT must be >= 1, got {text!r}")
    return group


def setting(text: str) -> tuple[str, object]:
    field, eq, value = text.partition("=")
    if not eq or not field.isidentifier():
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    try:
        return field, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise argparse.ArgumentTypeError(f"{text!r}: VALUE is not a Python literal") from None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("check", choices=sorted(CHECKS))
    p.add_argument("--seeds", type=seed_group, nargs="+", required=True, metavar="FIRST:COUNT")
    p.add_argument("--steps", type=int, nargs="+", default=[None], help="env steps per seed")
    p.add_argument(
        "--set", type=setting, nargs="+", default=[], metavar="FIELD=VALUE",
        help="config fields changed from the test's, e.g. ent_coef=0.01 (a Python literal)",
    )  # fmt: skip
    a = p.parse_args(argv)
    overrides = dict(a.set)
    for steps in a.steps:
        for first, count in a.seeds:
            start = time.perf_counter()
            values = CHECKS[a.check](first, count, steps, **overrides)
            shown = [v if isinstance(v, str) else round(float(v), 1) for v in values]
            print(
                f"{a.check} steps={steps or 'default'} {overrides or ''} "
                f"seeds {first}..{first + count - 1}: "
                f"{shown} ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])

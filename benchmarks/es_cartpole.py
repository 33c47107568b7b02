"""OpenAI-ES on CartPole-v1: jrl's population loop against evosax's own gymnax rollout.

Both sides run the same strategy (evosax's ``Open_ES``: mirrored noise of std 0.1,
centred ranks, Adam 0.03), the same policy (32-32 tanh MLP, 2 outputs, argmax action,
normalised observations), one 500-step episode per member (steps after the end computed
and masked on both sides), one seed, ``--generations`` generations compiled as one
``scan``. jrl: ``jrl.train``'s program (``jrl.run.anakin.make_chunk`` of the openai_es
algorithm) on jrl's CartPole-v1. evosax: its documented loop, ``GymnaxProblem`` (gymnax's
CartPole-v1) with ``Open_ES`` ask/eval/tell in a ``lax.scan``. Each side is compiled
first, then timed over ``--repeats`` calls (the best one counts). The ratio is jrl's
generations/s over evosax's.

    python benchmarks/es_cartpole.py --write          # BENCHMARKS.md, "OpenAI-ES CartPole-v1"
    python benchmarks/es_cartpole.py --quick          # a smoke run (populations 8 and 16)
"""

from __future__ import annotations

import argparse
import time

import common
import jax
import jax.numpy as jnp
import numpy as np

HEADING = "## OpenAI-ES CartPole-v1"
HIDDEN = (32, 32)
STEPS = 500
LR, SIGMA = 0.03, 0.1


def jrl_program(population: int, generations: int):
    """``(run, state)``: jrl's compiled chunk of ``generations`` generations and its input."""
    import jrl.agents
    import jrl.envs

    from jrl.app import api as experiment
    from jrl.run import anakin

    config = experiment.make_config(
        "openai_es",
        "CartPole-v1",
        population_size=population,
        episode_steps=STEPS,
        hidden_sizes=HIDDEN,
        learning_rate=LR,
        sigma_init=SIGMA,
        total_steps=population * STEPS * generations,
    )
    env, params = jrl.envs.make("CartPole-v1")
    algorithm = jrl.agents.get("openai_es").build(config, env, params).algorithm
    states = anakin.init_runs(algorithm, jax.random.key(0)[None])
    chunk = make_copying(anakin.make_chunk(algorithm, generations), states)
    return chunk, states


def make_copying(chunk, states):
    """The chunk donates its input: time it on fresh copies."""
    compiled = chunk.lower(states).compile(common_options())
    return lambda s: compiled(jax.tree.map(jnp.copy, s))


def common_options():
    from jrl.run import anakin

    return anakin.compiler_options()


def evosax_program(population: int, generations: int):
    """``(run, state)``: evosax's documented gymnax loop, ``generations`` steps of a scan."""
    import flax.linen as nn
    import optax
    from evosax.algorithms import Open_ES
    from evosax.problems import GymnaxProblem
    from evosax.problems.networks import MLP

    def argmax_output(x, key=None):
        return jnp.argmax(x, axis=-1)

    policy = MLP(layer_sizes=(*HIDDEN, 2), activation=nn.tanh, output_fn=argmax_output)
    problem = GymnaxProblem(
        "CartPole-v1", policy, episode_length=STEPS, num_rollouts=1, use_normalize_obs=True
    )
    key = jax.random.key(0)
    solution = policy.init(key, jnp.zeros((4,)), key)
    es = Open_ES(
        population,
        solution,
        optimizer=optax.adam(LR),
        std_schedule=optax.constant_schedule(SIGMA),
    )
    params = es.default_params
    state = (es.init(key, solution, params), problem.init(key))

    def generation(carry, key):
        es_state, problem_state = carry
        k_ask, k_eval, k_tell = jax.random.split(key, 3)
        members, es_state = es.ask(k_ask, es_state, params)
        fitness, problem_state, _ = problem.eval(k_eval, members, problem_state)
        es_state, _ = es.tell(k_tell, members, -fitness, es_state, params)
        return (es_state, problem_state), fitness.mean()

    @jax.jit
    def run(state):
        keys = jax.random.split(jax.random.key(1), generations)
        return jax.lax.scan(generation, state, keys)

    compiled = run.lower(state).compile()
    return compiled, state


def timed_best(run, state, repeats: int) -> float:
    jax.block_until_ready(run(state))  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run(state))
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--populations", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--generations", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.populations, a.generations, a.repeats = [8, 16], 2, 1
    from importlib.metadata import version

    rows = []
    for population in a.populations:
        out = {}
        for name, make in (("jrl", jrl_program), ("evosax", evosax_program)):
            t0 = time.perf_counter()
            run, state = make(population, a.generations)
            compile_s = time.perf_counter() - t0
            seconds = timed_best(run, state, a.repeats)
            out[name] = (compile_s, a.generations / seconds)
        steps = population * STEPS
        ratio = out["jrl"][1] / out["evosax"][1]
        rows.append(
            f"| {population} | {out['jrl'][1]:.2f} | {common.rate(out['jrl'][1] * steps)} | "
            f"{out['evosax'][1]:.2f} | {common.rate(out['evosax'][1] * steps)} | "
            f"{ratio:.2f} | {out['jrl'][0]:.1f} / {out['evosax'][0]:.1f} |"
        )
        print(rows[-1], flush=True)
    text = "\n".join(
        [
            HEADING,
            "",
            "OpenAI-ES (evosax's `Open_ES`: mirrored noise of std 0.1, centred ranks, Adam "
            "0.03) on CartPole-v1, a 32-32 tanh MLP with an argmax action and normalised "
            "observations, one 500-step episode per member, one seed: jrl's `openai_es` "
            "program against evosax's documented loop (`GymnaxProblem` with ask/eval/tell in "
            "a `lax.scan`), the same population and network, in one process. Env steps count "
            f"every computed step (population x 500), {a.generations} generations per timed "
            f"call, best of {a.repeats}. Reproduce with `python benchmarks/es_cartpole.py "
            "--write`.",
            "",
            common.measured_on() + f" evosax {version('evosax')}; commit {common.git_commit()}.",
            "",
            "| population | jrl gen/s | jrl env steps/s | evosax gen/s | evosax env steps/s "
            "| x evosax | compile s (jrl / evosax) |",
            "|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    common.publish(HEADING, text, a.write and not a.quick)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()

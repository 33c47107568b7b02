"""One seed: jrl and PureJaxRL against the networks' arithmetic alone.

With one seed, an RL program on this CPU spends its time in many small kernels that
run one after another, and neither library can spread one run over the cores. This
script asks how much faster any implementation could be. It builds a *floor* program
for each agent: the same networks doing the same passes as the agent's real program
at ``ppo_cartpole.CONFIG`` / ``dqn_cartpole.CONFIG``, and nothing else.

- **PPO floor**, per iteration:
  - ``num_steps`` sequential actor forward passes on ``[num_envs, obs]`` (acting);
  - one critic forward pass on the rollout's ``[num_steps * num_envs, obs]`` observations
    and the ``[num_envs, obs]`` last ones (the values and the bootstrap: an actor-critic
    need not evaluate its critic while acting, and jrl's does not, see
    ``jrl.agents.actor_critic.common``);
  - ``num_epochs x num_minibatches`` forward and backward passes of both networks on
    minibatches of the rollout;
  - gradient clipping and Adam.

  The loss is a mean square of the outputs.
- **DQN floor**, per iteration:
  - one forward pass on ``[num_envs, obs]`` (acting);
  - after ``learning_starts``: the online network's forward and backward pass and the
    target network's forward pass on ``[batch_size, obs]``, then Adam;
  - the target copy every ``target_update_interval`` iterations.

The floors leave out everything else: no environment, no random numbers, no replay
buffer, no GAE, no losses beyond a mean square. Every program drawing the same
actions through the same networks must do at least this work (PureJaxRL's PPO does more:
it runs the critic at every acting step). Each floor is compiled
with the runner's options (``anakin.compiler_options()``) and carries a data
dependency from step to step, so XLA can neither hoist nor drop the passes.

jrl's and PureJaxRL's programs are ``paired.jrl_program`` and
``paired.purejaxrl_program``: whole runs, init included. The three programs run in
one process, one device, in rounds with the order rotated. The result is each
program's time over the floor's, and ``PureJaxRL / floor``: the largest speed ratio
over PureJaxRL that a program doing only the floor's work would reach.

Run it with the interpreter ``paired.py`` uses (jrl and PureJaxRL's dependencies)::

    /work/venv-rejax/bin/python benchmarks/floor.py --write --purejaxrl /work/purejaxrl
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

from common import DEFAULT_PUREJAXRL, measured_on, publish
from paired import percentile, purejaxrl_program, watchdog

HEADING = "## One seed against the networks' arithmetic (floor)"
DEFAULT_STEPS = {"ppo": 204_800, "dqn": 100_000}
TARGETS = {"ppo": 1.3, "dqn": 1.5}
"""The one-seed speed ratios over PureJaxRL that issue #25 asks for."""
NAMES = ("floor", "jrl", "PureJaxRL")


def _mlp(layers, x, activation):
    """``layers``: ``[(w [in, out], b [out])]``; the activation after every layer but
    the last."""
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        if i < len(layers) - 1:
            x = activation(x)
    return x


def _layers(key, sizes):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(key, len(sizes) - 1)
    return [
        (jax.random.normal(k, (a, b)) / a**0.5, jnp.zeros(b))
        for k, a, b in zip(keys, sizes[:-1], sizes[1:])
    ]


def _activation(name: str):
    import jax
    import jax.numpy as jnp

    return {"tanh": jnp.tanh, "relu": jax.nn.relu}[name]


def ppo_floor(config: dict, obs_dim: int, num_actions: int, total_steps: int):
    """``(program, iterations)``; ``program(key) -> params`` runs ``iterations`` PPO
    iterations of the floor (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import optax

    n, t = config["num_envs"], config["num_steps"]
    epochs, mbs = config["num_epochs"], config["num_minibatches"]
    hidden, act = list(config["hidden_sizes"]), _activation(config["activation"])
    iterations = total_steps // (n * t)
    opt = optax.chain(
        optax.clip_by_global_norm(config["max_grad_norm"]), optax.adam(config["learning_rate"])
    )

    def program(key):
        k_pi, k_v, k_obs = jax.random.split(key, 3)
        params = {
            "pi": _layers(k_pi, [obs_dim, *hidden, num_actions]),
            "v": _layers(k_v, [obs_dim, *hidden, 1]),
        }

        def iteration(carry, _):
            params, opt_state, obs = carry

            def act_step(o, _):  # [n, obs]: the actor only
                logits = _mlp(params["pi"], o, act)
                return o + 1e-3 * jnp.tanh(logits[:, :1]), o

            obs, rollout = jax.lax.scan(act_step, obs, None, length=t)  # [t, n, obs]
            seen = jnp.concatenate([rollout.reshape(t * n, obs_dim), obs])  # [(t + 1) n, obs]
            values = _mlp(params["v"], seen, act)  # one batched pass: values and bootstrap
            data = rollout.reshape(t * n, obs_dim) + 1e-6 * values[: t * n]  # keeps the pass
            data = data.reshape(mbs, n * t // mbs, obs_dim)

            def sgd_step(c, x):  # x [n * t / mbs, obs]
                p, s = c

                def loss(p):
                    return jnp.mean(_mlp(p["pi"], x, act) ** 2) + jnp.mean(
                        _mlp(p["v"], x, act) ** 2
                    )

                updates, s = opt.update(jax.grad(loss)(p), s, p)
                return (optax.apply_updates(p, updates), s), None

            def epoch(c, _):
                return jax.lax.scan(sgd_step, c, data)[0], None

            (params, opt_state), _ = jax.lax.scan(epoch, (params, opt_state), None, length=epochs)
            return (params, opt_state, obs), None

        obs = jax.random.normal(k_obs, (n, obs_dim))
        carry = (params, opt.init(params), obs)
        return jax.lax.scan(iteration, carry, None, length=iterations)[0][0]

    return program, iterations


def dqn_floor(config: dict, obs_dim: int, num_actions: int, total_steps: int):
    """``(program, iterations)``; ``program(key) -> params`` runs ``iterations`` DQN
    iterations of the floor (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import optax

    n, batch = config["num_envs"], config["batch_size"]
    hidden, act = list(config["hidden_sizes"]), _activation(config["activation"])
    iterations = total_steps // n
    starts = config["learning_starts"] // n
    interval = config["target_update_interval"]
    opt = optax.adam(config["learning_rate"])
    if config["max_grad_norm"]:
        opt = optax.chain(optax.clip_by_global_norm(config["max_grad_norm"]), opt)

    def program(key):
        k_q, k_obs = jax.random.split(key)
        params = _layers(k_q, [obs_dim, *hidden, num_actions])

        def iteration(carry, i):
            params, target, opt_state, obs = carry  # obs [batch, obs]
            greedy = jnp.argmax(_mlp(params, obs[:n], act), -1)  # [n]: acting

            def learn(c):
                p, tp, s = c

                def loss(p):
                    q = _mlp(p, obs, act)[:, greedy[0]]
                    q_next = jnp.max(_mlp(tp, obs + 1.0, act), -1)
                    return jnp.mean((q - jax.lax.stop_gradient(q_next)) ** 2)

                updates, s = opt.update(jax.grad(loss)(p), s, p)
                p = optax.apply_updates(p, updates)
                return p, jax.lax.cond(i % interval == 0, lambda: p, lambda: tp), s

            params, target, opt_state = jax.lax.cond(
                i >= starts, learn, lambda c: c, (params, target, opt_state)
            )
            return (params, target, opt_state, obs + 1e-3 * greedy.sum()), None

        obs = jax.random.normal(k_obs, (batch, obs_dim))
        carry = (params, params, opt.init(params), obs)
        return jax.lax.scan(iteration, carry, jnp.arange(iterations))[0][0]

    return program, iterations


def programs(agent: str, total_steps: int, checkout: str):
    """The three programs for one seed, ``{name: (jitted fn, compiler options, keys [1])}``,
    and the env steps each runs."""
    import jax
    from paired import jrl_program

    from jrl.run import anakin

    if agent == "ppo":
        from ppo_cartpole import CONFIG

        floor, iterations = ppo_floor(CONFIG, *_spec(), total_steps)
        steps = iterations * CONFIG["num_envs"] * CONFIG["num_steps"]
    else:
        from dqn_cartpole import CONFIG

        floor, iterations = dqn_floor(CONFIG, *_spec(), total_steps)
        steps = iterations * CONFIG["num_envs"]
    jrl_train, jrl_steps, _ = jrl_program(agent, total_steps)
    pjr_train, pjr_steps, _ = purejaxrl_program(agent, checkout, total_steps)
    if not steps == jrl_steps == pjr_steps:
        raise SystemExit(
            f"{agent}: the floor runs {steps} env steps, jrl {jrl_steps}, PureJaxRL {pjr_steps}: "
            "choose a step count that is a multiple of both batch sizes"
        )
    options = anakin.compiler_options()
    one = jax.random.split(jax.random.PRNGKey(0), 1)
    return {
        "floor": (jax.jit(lambda keys: floor(keys[0])), options, one),
        "jrl": (jax.jit(jrl_train), options, one),
        "PureJaxRL": (jax.jit(jax.vmap(pjr_train)), None, one),
    }, steps


def _spec():
    """CartPole-v1's observation size and action count, from jrl's env."""
    import jrl.envs

    env, params = jrl.envs.make("CartPole-v1")
    return env.observation_space(params).shape[0], env.action_space(params).n


def worker(agent: str, total_steps: int, rounds: int, checkout: str, timeout: float) -> dict:
    """Compiles the three programs for ``agent``, runs each once, then ``rounds`` rounds
    with the order rotated; returns ``{"steps", "compile": {name: s}, "times": [{name:
    s}]}``."""
    import jax

    built, steps = programs(agent, total_steps, checkout)
    compiled, compile_s = {}, {}
    for name, (fn, options, keys) in built.items():
        start = time.perf_counter()
        with warnings.catch_warnings():  # flashbax asks for int64 indices
            warnings.simplefilter("ignore", UserWarning)
            compiled[name] = fn.lower(keys).compile(options)
        compile_s[name] = time.perf_counter() - start
        with watchdog(timeout, f"{agent} {name}'s first run"):
            jax.block_until_ready(compiled[name](keys))
        print(f"  {agent} {name}: compiled in {compile_s[name]:.1f} s", flush=True)
    times = []
    for r in range(rounds):
        order = NAMES[r % 3 :] + NAMES[: r % 3]
        got = {}
        for name in order:
            keys = built[name][2]
            start = time.perf_counter()
            with watchdog(timeout, f"{agent} {name}'s run in round {r + 1}"):
                jax.block_until_ready(compiled[name](keys))
            got[name] = time.perf_counter() - start
        times.append(got)
        print(
            f"  {agent} round {r + 1}: "
            + ", ".join(f"{n} {got[n]:.3f} s" for n in NAMES)
            + f"; PureJaxRL / jrl {got['PureJaxRL'] / got['jrl']:.3f}",
            flush=True,
        )
    return {"agent": agent, "steps": steps, "compile": compile_s, "times": times}


def summary(result: dict) -> dict:
    """Medians of the times and of the per-round ratios (10th-90th percentiles too)."""
    times = result["times"]
    out = {name: statistics.median(t[name] for t in times) for name in NAMES}
    for label, num, den in (
        ("jrl_floor", "jrl", "floor"),
        ("pjr_floor", "PureJaxRL", "floor"),
        ("pjr_jrl", "PureJaxRL", "jrl"),
    ):
        ratios = [t[num] / t[den] for t in times]
        out[label] = (
            statistics.median(ratios),
            percentile(ratios, 0.1),
            percentile(ratios, 0.9),
        )
    return out


def section(results: list[dict], command: str) -> str:
    rows, needs = [], []
    for r in results:
        s = summary(r)
        target = TARGETS[r["agent"]]
        needed = s["pjr_floor"][0] / target
        needs.append(
            f"- {r['agent'].upper()}: a {target:.1f}x lead over PureJaxRL needs jrl within "
            f"{needed:.2f}x of the floor (PureJaxRL / floor {s['pjr_floor'][0]:.2f}x, divided by "
            f"{target:.1f}); jrl is at {s['jrl_floor'][0]:.2f}x, so "
            + (
                "jrl meets it."
                if needed >= s["jrl_floor"][0]
                else f"its work outside the networks would have to shrink from "
                f"{(s['jrl_floor'][0] - 1) * 100:.0f}% to {max(needed - 1, 0) * 100:.0f}% of the "
                "floor's time."
            )
        )

        def fmt(x):
            return f"{x[0]:.2f}x ({x[1]:.2f}-{x[2]:.2f})"

        rows.append(
            f"| {r['agent'].upper()} | {r['steps']:,} | {len(r['times'])} | {s['floor']:.2f} "
            f"| {s['jrl']:.2f} | {s['PureJaxRL']:.2f} | {fmt(s['jrl_floor'])} "
            f"| {fmt(s['pjr_floor'])} | {fmt(s['pjr_jrl'])} | {TARGETS[r['agent']]:.1f}x |"
        )
    return (
        f"""{HEADING}

One seed, one device: jrl's and PureJaxRL's whole programs (as in the paired section)
next to a *floor* program per agent (`benchmarks/floor.py`). The floor is the least
work of the agent's networks, and nothing else:

- PPO: the actor's acting forward pass for every env step, one batched critic pass per
  iteration over the rollout's observations and the last ones (the values and the
  bootstrap; an actor-critic need not run its critic while acting, and jrl's does not),
  the minibatch forward and backward passes of every epoch, gradient clipping and Adam;
- DQN: the acting forward pass per iteration, then, after the warm-up, the online
  network's forward and backward pass, the target network's forward pass and Adam, and
  the periodic target copy.

No environment, random numbers, replay buffer or return computation; the loss is a mean
square. Any program that acts and learns through these networks does at least this work,
so `PureJaxRL / floor` is the largest speed ratio over PureJaxRL such a program could
reach on this CPU with XLA's kernels. The three programs run in one process, in rounds,
the order rotated every round; ratios are medians over rounds of per-round ratios
(10th-90th percentile). To reproduce:

    {command}

{measured_on()}

| agent | env steps | rounds | floor s | jrl s | PureJaxRL s | jrl / floor | PureJaxRL / floor \
| PureJaxRL / jrl | target over PureJaxRL |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
"""
        + "\n".join(rows)
        + "\n\n"
        + "\n".join(needs)
        + "\n"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", choices=["ppo", "dqn"], default=["ppo", "dqn"])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per agent")
    parser.add_argument("--ppo-steps", type=int, default=DEFAULT_STEPS["ppo"])
    parser.add_argument("--dqn-steps", type=int, default=DEFAULT_STEPS["dqn"])
    parser.add_argument("--purejaxrl", default=DEFAULT_PUREJAXRL, help="a PureJaxRL checkout")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds before a run is taken as hung"
    )
    parser.add_argument("--write", action="store_true", help="put the section in BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.rounds < 1 or min(args.ppo_steps, args.dqn_steps) < 1:
        parser.error("--rounds and the step counts must be positive")
    # one device, as a one-seed run has under jrl train (a single run is never spread)
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1"
    ).strip()
    results = []
    for agent in args.agents:
        steps = args.ppo_steps if agent == "ppo" else args.dqn_steps
        print(f"{agent}: {steps:,} env steps, {args.rounds} rounds", flush=True)
        results.append(worker(agent, steps, args.rounds, args.purejaxrl, args.timeout))
    command = "python benchmarks/floor.py " + " ".join(sys.argv[1:] if argv is None else argv)
    publish(HEADING, section(results, command.strip()), args.write)


if __name__ == "__main__":
    main()

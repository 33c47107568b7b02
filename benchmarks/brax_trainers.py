"""SAC and PPO on brax:inverted_pendulum: jrl side by side with brax's own trainers.

The env is brax's ``inverted_pendulum`` on the MJX backend for both libraries: of brax's
envs it is the one that learns to balance within a budget this benchmark's 2-core CPU
machine runs in a few minutes (the locomotion envs need 1e6-1e7 steps). jrl trains on
``brax:inverted_pendulum`` (the bare brax env under jrl's TimeLimit(1000), AutoReset and
VmapEnv); brax trains on ``brax.envs.get_environment("inverted_pendulum", backend="mjx")``
under its own training wrappers (``episode_length=1000``).

Measurements, each in a fresh interpreter so that every compile starts cold, alternated
(jrl, brax, jrl, brax, ...) for ``--repeats`` rounds:

- **jrl**: ``jrl.train(agent, "brax:inverted_pendulum", ...)``; compile and run seconds are
  the runner's own (``TrainResult.compile_seconds`` / ``run_seconds``); the greedy policy
  is built from ``TrainResult.final_state`` as ``jrl.app.api.LoadedRun.policy`` does.
  No run folder is written (its checkpoint and plots would be timed on jrl's side only).
- **brax**: ``brax.training.agents.sac.train.train`` / ``...ppo.train.train`` with
  ``num_evals=1`` (one training epoch holds the whole budget). brax times its training
  itself (``training/walltime``: SAC's replay prefill plus the epoch, PPO's epoch), and the
  first call of each program compiles it inside that time. Run seconds are that walltime
  less the compile inside it: the union of jax's trace, lowering and backend-compile time
  spans (``jax.monitoring``) that end within ``walltime`` before training ends (when
  brax's evaluator or ``progress_fn`` is first entered, whichever comes first). brax's SAC
  cannot skip its own final evaluation: it runs on ``num_eval_envs=1`` env, outside
  ``training/walltime``, and is not counted. PPO runs with ``run_evals=False``. brax 0.14
  calls ``jax.device_put_replicated``, which jax 0.10 removed; ``replicate_for_brax`` puts
  back its one-device behaviour.
- **steps/s**: env steps of training per run second (compile excluded), per seed.
- **return**: both libraries' final policies, greedy (the mean action, squashed), are
  evaluated by the same code (``evaluate`` below): ``--eval-episodes`` episodes of the bare
  brax env from fresh resets, up to 1000 steps, return = steps before the pole falls.

SAC (jrl's ``brax:inverted_pendulum`` preset, 2e4 env steps on 1 env) with brax's arguments:

| setting | jrl | brax ``sac.train`` |
|---|---|---|
| env steps | ``total_steps=20_000`` | ``num_timesteps=20_000`` |
| envs | ``num_envs=1`` | ``num_envs=1`` |
| batch, updates per step | 256, 1 | ``batch_size=256``, ``grad_updates_per_step=1`` |
| replay | ``buffer_size=20_000`` | ``max_replay_size=20_000`` |
| steps before updates | ``learning_starts=1_000`` | ``min_replay_size=1_000`` |
| learning rate (actor, critic) | ``1e-3`` | ``learning_rate=1e-3`` |
| gamma, tau | 0.99, 0.005 | ``discounting=0.99``, ``tau=0.005`` |
| temperature | from 1.0, target entropy ``-0.5 * |A|`` | from 1.0, target ``-0.5 * |A|`` (fixed) |
| networks | ReLU 64-64, 2 critics | ``hidden_layer_sizes=(64, 64)``, ReLU, 2 critics |
| reward scale, obs normalisation | 1, off | ``reward_scaling=1``, off |

Not matched (the APIs do not allow it): brax tunes the temperature with Adam 3e-4 whatever
``learning_rate`` is, jrl with ``learning_rate`` (1e-3); brax fills its first 1,000 replay
steps with its (initial, stochastic) policy, jrl with uniform random actions; brax drops
time-limit transitions from the critic loss, jrl bootstraps them from the final
observation; brax's actor has a state-independent std, jrl's a state-dependent one.

PPO (``PPO`` below; no jrl preset for this env): brax's own published settings for
``inverted_pendulum`` (its training colab's table of per-env hyperparameters), mapped to jrl:

| setting | jrl | brax ``ppo.train`` (published) |
|---|---|---|
| env steps | ``total_steps`` = 13 iterations | ``num_timesteps`` 2e6, rounded up to 13 iterations |
| envs | ``num_envs=2048`` | ``num_envs=2048`` |
| one iteration | 80 steps of each env (163,840) | 32 x 1024 unrolls of 5 steps (163,840) |
| minibatches per epoch | 16: 5 steps x 2048 envs | ``num_minibatches=32`` of ``batch_size=1024`` |
| epochs | ``num_epochs=4`` | ``num_updates_per_batch=4`` |
| learning rate | 3e-4, ``anneal_lr=False`` | ``learning_rate=3e-4``, no schedule |
| gamma, GAE lambda | 0.97, 0.95 | ``discounting=0.97``, ``gae_lambda=0.95`` (default) |
| clip, value clip | ``clip_eps=0.3``, ``clip_value=False`` | ``clipping_epsilon=0.3``, none |
| value loss coefficient | ``vf_coef=0.5`` | ``vf_loss_coefficient=0.5`` (default) |
| entropy bonus | ``ent_coef=0.01`` | ``entropy_cost=1e-2`` |
| advantages | normalised per minibatch | ``normalize_advantage=True`` (default) |
| grad clip | none (``max_grad_norm=0``) | none (default) |
| observations | ``normalize_observations=True`` | ``normalize_observations=True`` |
| reward scale | 1 (jrl has no reward scale) | ``reward_scaling=10`` |
| policy | tanh-squashed Normal, std 1 at start | ``tanh_normal``, ``init_noise_std=1`` |
| networks | swish 32x4 actor and critic | swish 32x4 policy and value (policy: the default) |

Not matched: the networks are not brax's defaults (a swish 256x5 value network): jrl's PPO has
one ``hidden_sizes``, so both run brax's default policy shape for both networks. brax's reward
scale of 10 has no jrl counterpart; with advantages normalised per minibatch, separate
networks, no gradient clipping and Adam (invariant to a gradient's scale up to its epsilon) it
changes only the value network's target scale. jrl's minibatches are time slices of all envs,
brax's are shuffled 5-step unrolls, so jrl takes 64 gradient steps of 10,240 samples per
iteration where brax takes 128 of 5,120 (the same samples per epoch). brax's value loss on a
truncated step is masked out (``bootstrap_on_timeout=False``, its default), jrl bootstraps
from the final observation; brax's policy std is a learned scale parameter, jrl's a learned
log-std; brax's observation normaliser is updated in the learner from each rollout, jrl's is
an env wrapper updated on every step (both running means and variances of all observations
seen); brax resets a finished env to the state of its first reset
(brax's ``AutoResetWrapper``), jrl draws a fresh reset.

Actions: brax's ``inverted_pendulum`` maps an action in [-1, 1] onto the motor's range
[-3, 3] itself (``step`` rescales it), and both libraries act in [-1, 1] as that env means
(jrl's adapter declares brax's [-1, 1] action space; the policies squash with tanh).

Usage::

    python benchmarks/brax_trainers.py --write
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from pathlib import Path

from common import (
    comparison_parser,
    measured_on,
    or_dash,
    publish,
    rate,
    run_worker,
    run_worker_if_asked,
)

HEADING = "## brax trainers side by side"
ENV = "inverted_pendulum"
EPISODE_LENGTH = 1000

SAC = {
    "total_steps": 20_000,
    "num_envs": 1,
    "batch_size": 256,
    "updates_per_iteration": 1,
    "buffer_size": 20_000,
    "learning_starts": 1_000,
    "learning_rate": 1e-3,
    "gamma": 0.99,
    "tau": 0.005,
    "hidden_sizes": (64, 64),
}
SAC_JRL = {**SAC, "target_entropy_scale": -0.5}
SAC_BRAX = {
    "num_timesteps": SAC["total_steps"],
    "num_envs": SAC["num_envs"],
    "batch_size": SAC["batch_size"],
    "grad_updates_per_step": SAC["updates_per_iteration"],
    "max_replay_size": SAC["buffer_size"],
    "min_replay_size": SAC["learning_starts"],
    "learning_rate": SAC["learning_rate"],
    "discounting": SAC["gamma"],
    "tau": SAC["tau"],
    "reward_scaling": 1.0,
    "normalize_observations": False,
}

# brax's published PPO settings for inverted_pendulum (the brax training colab's table, which
# mujoco_playground's and other repositories' configs repeat): 2e6 steps, 2048 envs, unrolls of
# 5, 32 minibatches of 1024 unrolls, 4 passes, discount 0.97, Adam 3e-4, entropy 1e-2, reward
# scaling 10, observation normalisation; the clip (0.3), GAE lambda (0.95), value-loss
# coefficient (0.5), no gradient clipping and no bootstrap on timeouts are brax's defaults that
# the table leaves as they are. The networks are not the table's (brax's default policy is
# swish 32x4, its value network swish 256x5): jrl's PPO has one hidden_sizes for both, so both
# libraries run brax's policy network, swish 32x4, for policy and value.
PPO = {
    "total_steps": 13 * 5 * 1024 * 32,  # the table's 2e6, rounded up to whole iterations
    "num_envs": 2048,
    "unroll_length": 5,
    "unrolls_per_update": 1024,
    "num_minibatches": 32,
    "num_epochs": 4,
    "learning_rate": 3e-4,
    "gamma": 0.97,
    "gae_lambda": 0.95,
    "clip_eps": 0.3,
    "vf_coef": 0.5,
    "ent_coef": 1e-2,
    "reward_scaling": 10.0,
    "hidden_sizes": (32, 32, 32, 32),
}
PPO_ROLLOUT: int = PPO["unroll_length"] * PPO["unrolls_per_update"] * PPO["num_minibatches"]
"""Env steps per PPO iteration, both libraries: 5 x 1024 x 32 = 163,840 (80 steps of each of
the 2048 envs)."""
PPO_JRL = {
    "total_steps": PPO["total_steps"],
    "num_envs": PPO["num_envs"],
    # jrl's minibatches are time slices of every env: 80 steps in 16 slices of 5 steps of the
    # 2048 envs (10,240 steps each) pass the same 163,840 steps per epoch as brax's 32
    # minibatches of 1024 5-step unrolls (5,120 steps each), in half as many, twice as large
    # gradient steps (the same samples through the networks per epoch)
    "num_steps": PPO_ROLLOUT // PPO["num_envs"],
    "num_minibatches": 16,
    "num_epochs": PPO["num_epochs"],
    "learning_rate": PPO["learning_rate"],
    "gamma": PPO["gamma"],
    "gae_lambda": PPO["gae_lambda"],
    "clip_eps": PPO["clip_eps"],
    "vf_coef": PPO["vf_coef"],
    "ent_coef": PPO["ent_coef"],
    "max_grad_norm": 0.0,
    "hidden_sizes": PPO["hidden_sizes"],
    "anneal_lr": False,
    "clip_value": False,
    "activation": "silu",
    "continuous": "tanh_normal",
    "init_log_std": 0.0,
    "normalize_advantages": True,
    "normalize_observations": True,
    "normalize_rewards": False,
}
PPO_BRAX = {
    "num_timesteps": PPO["total_steps"],
    "num_envs": PPO["num_envs"],
    "unroll_length": PPO["unroll_length"],
    "batch_size": PPO["unrolls_per_update"],
    "num_minibatches": PPO["num_minibatches"],
    "num_updates_per_batch": PPO["num_epochs"],
    "learning_rate": PPO["learning_rate"],
    "discounting": PPO["gamma"],
    "gae_lambda": PPO["gae_lambda"],
    "clipping_epsilon": PPO["clip_eps"],
    "vf_loss_coefficient": PPO["vf_coef"],
    "entropy_cost": PPO["ent_coef"],
    "reward_scaling": PPO["reward_scaling"],
    "normalize_observations": True,
    "normalize_advantage": True,
}
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def brax_env():
    """brax's bare ``inverted_pendulum`` (MJX); mujoco's warp notice goes to stderr."""
    with contextlib.redirect_stdout(sys.stderr):
        from brax import envs

    return envs.get_environment(ENV, backend="mjx")


def evaluate(policy, episodes: int, seed: int = 123) -> float:
    """Mean return of ``policy(obs [E, O]) -> actions [E, A]`` over ``episodes`` episodes of
    the bare brax env from fresh resets, each up to 1000 steps (the return is the number of
    steps before the pole falls: the reward is 1 per step)."""
    import jax
    import jax.numpy as jnp

    env = brax_env()

    @jax.jit
    def run(key):
        state = jax.vmap(env.reset)(jax.random.split(key, episodes))

        def step(carry, _):
            state, alive, total = carry
            state = jax.vmap(env.step)(state, policy(state.obs))
            total = total + alive * state.reward
            return (state, alive * (1.0 - state.done), total), None

        ones = jnp.ones(episodes)
        (_, _, total), _ = jax.lax.scan(
            step, (state, ones, jnp.zeros(episodes)), None, EPISODE_LENGTH
        )
        return total

    return float(jnp.mean(run(jax.random.key(seed))))


def worker_jrl(agent: str, seeds: int, episodes: int) -> dict:
    import jax

    import jrl
    from jrl.run import evaluation

    config = SAC_JRL if agent == "sac" else PPO_JRL
    res = jrl.train(
        agent, "brax:" + ENV, seeds=seeds, progress=False, compile_cache=False, **config
    )
    # each run's greedy policy, as jrl's LoadedRun.policy builds it from a run folder (none is
    # written here, see the docstring)
    env, env_params = jrl.envs.make("brax:" + ENV)
    built = jrl.agents.get(agent).build(res.config, env, env_params, num_devices=1)
    key, returns = jax.random.key(0), []
    for r in range(seeds):
        one = jax.tree.map(lambda x, r=r: x[r], res.final_state)
        policy = evaluation.run_policy(built.agent, built.env, one.agent_state, one.env_state, True)
        returns.append(evaluate(lambda obs, p=policy: p(obs, key), episodes))
    return {
        "library": "jrl",
        "agent": agent,
        "seeds": seeds,
        "compile": res.compile_seconds,
        "run": res.run_seconds,
        "env_steps": int(res.env_steps[-1]),
        "eval_return": returns,
        "load": os.getloadavg()[0],
    }


def replicate_for_brax() -> None:
    """brax 0.14's trainers call ``jax.device_put_replicated``, which jax 0.10 removed (its
    migration guide points to ``jax.device_put``); it is given back here as what it did for
    one device: the pytree with a new leading axis of 1, on that device."""
    import jax
    import jax.numpy as jnp

    if "device_put_replicated" in vars(jax):
        return

    def device_put_replicated(x, devices):
        if len(devices) != 1:  # this benchmark runs brax on one device
            raise NotImplementedError("replicate_for_brax covers one device")
        return jax.tree.map(lambda a: jax.device_put(jnp.stack([a]), devices[0]), x)

    jax.device_put_replicated = device_put_replicated


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``(start, end)`` spans (a jit traced inside another's
    trace reports a span inside the outer one)."""
    total, reach = 0.0, float("-inf")
    for b, e in sorted(spans):
        if e > reach:
            total += e - max(b, reach)
            reach = e
    return total


def worker_brax(agent: str, episodes: int) -> dict:
    import warnings

    import jax
    from flax import linen

    replicate_for_brax()
    progress: list[dict] = []

    # compile spans (jax.monitoring, time.time() clock) and when training ended: the first
    # entry into brax's evaluator or progress_fn, whichever comes first
    spans: list[tuple[float, float]] = []
    ended: list[float] = []

    def on_span(event, start, end, **kw):
        if event in COMPILE_EVENTS:
            spans.append((start, end))

    jax.monitoring.register_event_time_span_listener(on_span)
    from brax.training import acting

    run_evaluation = acting.Evaluator.run_evaluation

    def timed_evaluation(self, *args, **kw):
        ended.append(time.time())
        return run_evaluation(self, *args, **kw)

    acting.Evaluator.run_evaluation = timed_evaluation

    def progress_fn(step, metrics):
        ended.append(time.time())
        progress.append({"step": step, **metrics})

    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = brax_env()
        if agent == "sac":
            from brax.training.agents.sac import networks as nets
            from brax.training.agents.sac import train as trainer

            factory = functools.partial(
                nets.make_sac_networks, hidden_layer_sizes=SAC["hidden_sizes"]
            )
            kwargs = {**SAC_BRAX, "num_evals": 1, "num_eval_envs": 1}
        else:
            from brax.training.agents.ppo import networks as nets
            from brax.training.agents.ppo import train as trainer

            factory = functools.partial(
                nets.make_ppo_networks,
                policy_hidden_layer_sizes=PPO["hidden_sizes"],
                value_hidden_layer_sizes=PPO["hidden_sizes"],
                activation=linen.swish,
            )
            kwargs = {**PPO_BRAX, "num_evals": 1, "run_evals": False}
    t0 = time.perf_counter()
    make_policy, params, _ = trainer.train(
        environment=env,
        episode_length=EPISODE_LENGTH,
        seed=0,
        network_factory=factory,
        progress_fn=progress_fn,
        **kwargs,
    )
    total = time.perf_counter() - t0
    last = progress[-1]
    walltime = float(last["training/walltime"])
    # the compiles inside brax's timed training (it times replay prefill and epochs, the
    # first call of each compiling it): those that ended within walltime before training ended
    start = ended[0] - walltime
    inside = [(max(b, start), e) for b, e in spans if start <= e <= ended[0]]
    compile_s = covered(inside)
    act = make_policy(params, deterministic=True)
    key = jax.random.key(0)
    from importlib.metadata import version

    return {
        "library": "brax",
        "agent": agent,
        "seeds": 1,
        "compile": compile_s,
        "run": walltime - compile_s,
        "walltime": walltime,
        "train_call": total,
        "compiles_counted": len(inside),
        "env_steps": int(last["step"]),
        "eval_return": [evaluate(lambda obs: act(obs, key)[0], episodes)],
        "version": version("brax"),
        "load": os.getloadavg()[0],
    }


def best(results: list[dict]) -> dict:
    """The repeat with the lowest run seconds, with every repeat's run and return kept."""
    out = dict(min(results, key=lambda r: r["run"]))
    out["all_run"] = [round(r["run"], 1) for r in results]
    out["all_return"] = [round(sum(r["eval_return"]) / len(r["eval_return"])) for r in results]
    out["loads"] = [round(r["load"], 1) for r in results]
    return out


def table(rows: list[dict]) -> str:
    lines = [
        "| agent | library | seeds | compile s | run s (repeats) | steps/s per seed "
        "| x brax | greedy return per seed (repeats) | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        sps = r["env_steps"] / r["run"]
        ref = next((b for b in rows if b["library"] == "brax" and b["agent"] == r["agent"]), None)
        ratio = or_dash(sps / (ref["env_steps"] / ref["run"]) if ref else None, "{:.2f}")
        per_seed = ", ".join(f"{x:.0f}" for x in r["eval_return"])
        lines.append(
            f"| {r['agent'].upper()} | {r['library']} | {r['seeds']} | {r['compile']:.1f} "
            f"| {r['run']:.1f} ({', '.join(map(str, r['all_run']))}) | {rate(sps)} | {ratio} "
            f"| {per_seed} ({', '.join(map(str, r['all_return']))}) "
            f"| {', '.join(map(str, r['loads']))} |"
        )
    return "\n".join(lines)


WORKERS = {
    "jrl": lambda a: worker_jrl(a.agent, a.seeds, a.eval_episodes),
    "brax": lambda a: worker_brax(a.agent, a.eval_episodes),
}
"""``--worker LIBRARY`` -> the worker it runs, given the parsed arguments."""


def main(argv=None) -> None:
    p = comparison_parser(
        __doc__,
        seeds={"nargs": None, "default": 1},
        repeats={"default": 2},
        timeout={"default": 900},
        write=True,
    )
    p.add_argument("--agent", default="sac", choices=("sac", "ppo"))
    p.add_argument("--agents", nargs="*", default=["sac", "ppo"])
    p.add_argument("--eval-episodes", type=int, default=8)
    p.add_argument(
        "--jrl-seeds", type=int, default=0, help="also jrl with this many vmapped seeds (0: no)"
    )
    p.add_argument("--save", default=None, help="JSON file the measurements go to as they come")
    p.add_argument("--load", default=None, help="make the section from a --save file, no runs")
    a = p.parse_args(argv)
    if run_worker_if_asked(a, WORKERS):
        return
    measured: dict[tuple[str, str, int], list[dict]] = {}
    if a.load:
        for r in json.loads(Path(a.load).read_text()):
            measured.setdefault((r["agent"], r["library"], r["seeds"]), []).append(r)
    schedule = [
        (agent, lib, 1) for _ in range(a.repeats) for agent in a.agents for lib in ("jrl", "brax")
    ]
    if a.jrl_seeds > 1:
        schedule += [(agent, "jrl", a.jrl_seeds) for agent in a.agents]
    for agent, lib, seeds in [] if a.load else schedule:
        flags = {"agent": agent, "eval_episodes": a.eval_episodes}
        if lib == "jrl":
            flags["seeds"] = seeds
        r = run_worker(__file__, sys.executable, lib, a.timeout, **flags)
        print(f"{agent} {lib} seeds={seeds}: {r}", file=sys.stderr)
        if isinstance(r, dict):
            measured.setdefault((agent, lib, seeds), []).append(r)
            if a.save:
                Path(a.save).write_text(json.dumps([x for v in measured.values() for x in v]))
    rows = [best(results) for results in measured.values()]
    version = next((r["version"] for r in rows if "version" in r), "not run")
    ppo = (
        f"brax's published inverted_pendulum settings: {PPO['total_steps']:,} env steps, "
        f"{PPO['num_envs']} envs, {PPO_ROLLOUT:,} steps per iteration in {PPO['num_epochs']} "
        f"epochs, discount {PPO['gamma']:g}, Adam {PPO['learning_rate']:g}, entropy "
        f"{PPO['ent_coef']:g}, observation normalisation, swish 32x4 policy and value"
    )
    text = f"""{HEADING}

SAC and PPO on brax's ``inverted_pendulum`` (MJX backend, 1000-step episodes): jrl's
``brax:inverted_pendulum`` against brax's own ``brax.training.agents.sac`` / ``ppo`` trainers
with the same hyperparameters as far as the two APIs allow (the mapping, and what cannot be
matched, is in the script's docstring). SAC: jrl's preset, 2e4 env steps on 1 env, one update
of 256 per step. PPO: {ppo}. One fresh interpreter per measurement (cold compiles), the
libraries alternated, {a.repeats} repeats; the row is the repeat with the lowest run seconds
(its compile seconds too), the other repeats' run seconds and returns in brackets. brax's
run seconds are its ``training/walltime`` less the compile inside it. "x brax" divides
steps/s per seed by brax's. Returns: both libraries' final greedy policies, evaluated by the
same code on {a.eval_episodes} fresh episodes of the bare brax env (1000 is the maximum). The
machine has 2 cores shared with other jobs, so the timings are noisy; the load column is the
1-minute load average at the end of each repeat. Reproduce with:

    python benchmarks/brax_trainers.py --write

{measured_on()} brax {version}.

{table(rows)}
"""
    publish(HEADING, text, a.write)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Evaluation rollouts: whole episodes of a fixed policy on fresh environments.

The run layer (``jrl/run``, next to the loops): uses the env API, wrappers and the agent
contract. The policy is any function ``policy(obs [E, ...], key) ->
actions [E]``, e.g. an agent's greedy ``policy`` with its parameters bound.

A trained run is evaluated as it acts, minus what only training needs:
:func:`evaluation_env` takes the per-env environment under the training
env's :class:`~jrl.core.wrappers.VmapEnv` (time limit and action wrappers such
as ``ClipAction`` kept; no auto-reset, statistics or normalisers), and
:func:`run_policy` normalises observations with the training env's
``NormalizeObservation`` statistics, frozen at their values in the train
state, before calling the agent's greedy ``policy`` (or its behaviour
policy ``act`` when ``greedy=False``). Rewards are the env's own.

A policy with memory (an agent with :class:`jrl.parts.agent.Recurrent`) is a
:class:`StatefulPolicy`: every evaluation episode starts from its initial state
and carries it from step to step.

A trained policy as users get it (``jrl.app.api.load_run(DIR).policy()``,
``jrl.load_policy(DIR)``) is :func:`batch_optional`: it takes one observation or a
batch, and its key is optional::

    policy(obs [...], key=None) -> action [...]              # one observation
    policy(obs [B, ...], key=None) -> actions [B, ...]       # a batch of B
    # with memory, a StatefulPolicy; state and observation batched alike:
    policy.initial_state() -> state [...]                    # policy.initial_state(B): [B, ...]
    policy.step(state, obs, key=None) -> (action, state)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core.env import Environment, Wrapper
from jrl.core.spaces import zeros_like_space
from jrl.core.types import PyTree
from jrl.core.normalization import NormalizeObservation
from jrl.core.wrappers import TimeLimit, VmapEnv
from jrl.parts.agent import Agent

__all__ = [
    "StatefulPolicy",
    "as_stateful",
    "batch_optional",
    "episode_returns",
    "evaluate",
    "evaluation_env",
    "host_evaluator",
    "observation_normalizer",
    "observation_spec",
    "run_policy",
]


class StatefulPolicy(NamedTuple):
    """A policy with memory: ``initial_state(num)`` is the state ``[num, ...]`` of ``num``
    fresh episodes, ``step(state, obs [num, ...], key) -> (actions [num], state)``."""

    initial_state: Callable[[int], PyTree]
    step: Callable[[PyTree, Any, jax.Array], tuple[jax.Array, PyTree]]


def as_stateful(policy) -> StatefulPolicy:
    """``policy`` as a :class:`StatefulPolicy`; a plain ``policy(obs, key)`` gets an empty
    state."""
    if isinstance(policy, StatefulPolicy):
        return policy
    return StatefulPolicy(lambda num: (), lambda state, obs, key: (policy(obs, key), state))


def _default_key(key: jax.Array | None) -> jax.Array:
    return jax.random.key(0) if key is None else key


def _as_batch(obs: Any, observation: PyTree) -> tuple[Any, bool]:
    """``(obs as a batch [B, ...], whether it was one already)``: ``obs`` is one observation,
    every leaf shaped as in ``observation`` (``jax.ShapeDtypeStruct`` leaves, no batch axis),
    or a batch of them (one leading axis more on every leaf); its leaves are cast to
    ``observation``'s dtypes. ``ValueError`` for anything else."""
    leaves, tree = jax.tree.flatten(obs)
    specs, spec_tree = jax.tree.flatten(observation)
    want = ", ".join(f"{s.dtype}{list(s.shape)}" for s in specs)
    if tree != spec_tree:
        raise ValueError(
            f"the policy takes observations structured as {spec_tree} (leaves {want}), got {tree}"
        )
    batched = set()
    for x, s in zip(leaves, specs):
        shape = tuple(np.shape(x))
        if shape[1:] == tuple(s.shape) and len(shape) == len(s.shape) + 1:
            batched.add(True)
        elif shape == tuple(s.shape):
            batched.add(False)
        else:
            got = ", ".join(str(list(np.shape(x))) for x in leaves)
            raise ValueError(
                f"the policy takes one observation ({want}) or a batch of them (a leading "
                f"batch axis on every array), got shapes {got}"
            )
    if len(batched) > 1:
        raise ValueError("some observation arrays have a leading batch axis and others not")
    leaves = [jnp.asarray(x, s.dtype) for x, s in zip(leaves, specs)]  # e.g. bool images
    if batched != {True}:
        leaves = [x[None] for x in leaves]
    return jax.tree.unflatten(tree, leaves), batched == {True}


def batch_optional(policy, observation: PyTree):
    """``policy`` (batched: ``policy(obs [B, ...], key) -> actions [B, ...]``, or a
    :class:`StatefulPolicy` whose ``step`` takes and returns ``[B, ...]``) as one that takes
    one observation or a batch of them, with an optional key (default ``key(0)``):

    - ``policy(obs, key=None) -> action``: ``obs`` one observation (every leaf shaped as in
      ``observation``, a pytree of ``jax.ShapeDtypeStruct`` without batch axis) gives one
      action (no batch axis); ``obs [B, ...]`` gives ``actions [B, ...]``;
    - a :class:`StatefulPolicy` stays one: ``initial_state(num=None)`` is one episode's state
      (no batch axis) or, given ``num``, ``[num, ...]``; ``step(state, obs, key=None) ->
      (action, state)`` takes ``state`` batched as ``obs`` is.

    Observation leaves are cast to ``observation``'s dtypes. Jittable (the batch axis is
    read from the shapes)."""
    if isinstance(policy, StatefulPolicy):
        first = lambda tree: jax.tree.map(lambda x: x[0], tree)  # noqa: E731

        def initial_state(num: int | None = None):
            return first(policy.initial_state(1)) if num is None else policy.initial_state(num)

        def step(state, obs, key: jax.Array | None = None):
            obs, batched = _as_batch(obs, observation)
            if not batched:
                state = jax.tree.map(lambda x: jnp.asarray(x)[None], state)
            action, state = policy.step(state, obs, _default_key(key))
            return (action, state) if batched else (first(action), first(state))

        return StatefulPolicy(initial_state, step)

    def act(obs, key: jax.Array | None = None):
        obs, batched = _as_batch(obs, observation)
        actions = policy(obs, _default_key(key))
        return actions if batched else jax.tree.map(lambda x: x[0], actions)

    return act


def observation_spec(train_env: Environment, env_params: PyTree, on_host: bool = False) -> PyTree:
    """One observation (``jax.ShapeDtypeStruct`` leaves, no batch axis) as the training env's
    evaluation env (:func:`evaluation_env`) produces it, e.g. a team env's
    ``{"observation": [A, ...], "global_state": [S]}`` even when the learner leaves the
    global state out; a host env's (``on_host``: Sebulba runs) is its observation space's.
    Nothing runs."""
    env = evaluation_env(train_env)
    if on_host:  # a host env cannot be traced: its space says it all
        return jax.eval_shape(lambda: zeros_like_space(env.observation_space(env_params)))
    _, ts = jax.eval_shape(env.reset, jax.random.key(0), env_params)
    return ts.observation


def evaluation_env(train_env: Environment) -> Environment:
    """The unbatched env a training env steps in each of its slots (the env
    inside its VmapEnv); an unbatched training env is returned as is."""
    env = train_env
    while isinstance(env, Wrapper):
        if isinstance(env, VmapEnv):
            return env.env
        env = env.env
    return train_env


def observation_normalizer(train_env: Environment, env_state: PyTree) -> Callable[[Any], Any]:
    """``obs -> obs`` applying the training env's NormalizeObservation wrappers (inner
    first) with their statistics as they are in ``env_state`` (frozen)."""
    if env_state is None:  # a host-env run (Sebulba): no normaliser (its runner refuses them)
        return lambda obs: obs
    found = []
    env, state = train_env, env_state
    while isinstance(env, Wrapper) and not isinstance(env, VmapEnv):
        if isinstance(env, NormalizeObservation):
            found.append((env, state.stats))
        state, env = env.inner_state(state), env.env

    def normalize(obs):
        for wrapper, stats in reversed(found):
            obs = wrapper._normalize(stats, obs)
        return obs

    return normalize


def run_policy(
    agent: Agent,
    train_env: Environment,
    agent_state: PyTree,
    env_state: PyTree,
    greedy: bool = True,
) -> Callable[[Any, jax.Array], jax.Array]:
    """The evaluation policy of one trained run: ``policy(obs [E, ...], key) -> actions [E]``.

    ``greedy``: the agent's ``policy`` (e.g. the mode of the action
    distribution, the argmax of Q); otherwise its behaviour policy ``act``
    (sampled actions; epsilon-greedy at the schedule's current epsilon).
    """
    normalize = observation_normalizer(train_env, env_state)
    if agent.recurrent is not None and agent.recurrent.stateful(greedy):
        return _recurrent_policy(agent, agent_state, normalize, greedy)
    if greedy and agent.policy is None:
        raise ValueError("this agent has no greedy policy; evaluate it with greedy=False")

    def policy(obs, key):
        obs = normalize(obs)
        if greedy:
            return agent.policy(agent_state.params, obs, key)
        return agent.act(agent_state, obs, key)[0]

    return policy


def _recurrent_policy(agent: Agent, agent_state: PyTree, normalize, greedy: bool):
    """:func:`run_policy` of an agent with memory: a :class:`StatefulPolicy`."""
    rec = agent.recurrent

    def step(hidden, obs, key):
        obs = normalize(obs)
        if greedy:
            return rec.policy(agent_state.params, hidden, obs, key)
        action, _, hidden = rec.act(agent_state, hidden, obs, key)
        return action, hidden

    return StatefulPolicy(rec.initial_state, step)


def evaluate(
    agent: Agent,
    train_env: Environment,
    train_state: PyTree,
    key: jax.Array,
    num_episodes: int,
    env_params: PyTree | None = None,
    greedy: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """Returns and lengths ``[num_episodes]`` of one trained run (``train_state`` of
    one run, with ``agent_state`` and ``env_state``), on fresh envs; jittable and
    vmappable over runs."""
    policy = run_policy(agent, train_env, train_state.agent_state, train_state.env_state, greedy)
    return episode_returns(policy, evaluation_env(train_env), key, num_episodes, env_params)


def episode_returns(
    policy: Callable[[Any, jax.Array], jax.Array],
    env: Environment,
    key: jax.Array,
    num_episodes: int,
    env_params: PyTree | None = None,
    max_steps: int = 100_000,
) -> tuple[jax.Array, jax.Array]:
    """Returns and lengths (``[num_episodes]`` float32, int32) of one episode per env, played
    by ``policy(obs, key) -> actions`` or a :class:`StatefulPolicy`.

    ``env`` is unbatched and not auto-resetting (as :func:`jrl.envs.make`
    returns it, time limit included); ``num_episodes`` copies start from
    independent resets and run until every one has finished (a
    ``while_loop``, jittable), each stopped at ``max_steps`` steps if it has
    no time limit of its own.
    """
    if env.num_envs is not None:
        raise ValueError(
            "episode_returns takes an unbatched env; it batches num_episodes copies itself"
        )
    if int(num_episodes) <= 0:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    env = VmapEnv(
        TimeLimit(env, max_steps) if not any(w is TimeLimit for w in env.wrappers) else env,
        int(num_episodes),
    )
    params = env.default_params if env_params is None else env_params
    k_reset, key = jax.random.split(key)
    state, ts = env.reset(k_reset, params)
    zeros = jnp.zeros((int(num_episodes),), jnp.float32)
    done = jnp.zeros((int(num_episodes),), bool)
    policy = as_stateful(policy)

    def body(carry):
        (state, memory), obs, key, ret, length, done = carry
        key, k_act, k_step = jax.random.split(key, 3)
        action, memory = policy.step(memory, obs, k_act)
        state, ts = env.step(k_step, state, action, params)
        running = ~done
        ret = ret + jnp.where(running, ts.reward, 0.0)
        length = length + running.astype(jnp.int32)
        return (state, memory), ts.observation, key, ret, length, done | ts.done

    memory = policy.initial_state(int(num_episodes))
    carry = ((state, memory), ts.observation, key, zeros, zeros.astype(jnp.int32), done)
    _, _, _, ret, length, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[-1]), body, carry)
    return ret, length


def host_evaluator(agent: Agent, host_env, num_episodes: int, greedy: bool = True):
    """``evaluate(train_states [R], key) -> (returns, lengths)`` ``[R, num_episodes]`` on a host
    env (:mod:`jrl.envs.host`): every run plays one episode on each of ``num_episodes`` fresh
    envs, stepped on the host with the jitted, vmapped policy (greedy: the agent's ``policy``;
    else its ``act``) until all have ended. Env seeds derive from ``key``."""
    if int(num_episodes) <= 0:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    if greedy and agent.policy is None:  # before any training, not at the first evaluation
        raise ValueError("this agent has no greedy policy; evaluate it with greedy=False")

    def one(agent_state, obs, key):  # a host-env run has no normaliser state
        return run_policy(agent, host_env, agent_state, None, greedy)(obs, key)

    policy = jax.jit(jax.vmap(one, in_axes=(0, 0, None)))
    E = int(num_episodes)

    def evaluate(train_states, key):
        runs = jax.tree.leaves(train_states.agent_state)[0].shape[0]
        seed = int(jax.random.randint(key, (), 0, 2**30))
        batches = [host_env.make_batch(E, seed + r * E) for r in range(runs)]
        try:
            obs = np.stack([b.reset() for b in batches])
            returns = np.zeros((runs, E), np.float32)
            lengths = np.zeros((runs, E), np.int32)
            ended = np.zeros((runs, E), bool)
            t = 0
            while not ended.all():
                actions = np.asarray(
                    policy(train_states.agent_state, obs, jax.random.fold_in(key, t))
                )
                for r, b in enumerate(batches):
                    step = b.step(actions[r])
                    new = step.done & ~ended[r]
                    returns[r] = np.where(new, step.episode_return, returns[r])
                    lengths[r] = np.where(new, step.episode_length, lengths[r])
                    ended[r] |= step.done
                    obs[r] = step.observation
                t += 1
        finally:
            for b in batches:
                b.close()
        return returns, lengths

    return evaluate

"""The population loop: one iteration is one generation of an evolution strategy.

Beside :func:`jrl.run.loops.on_policy` and :func:`jrl.run.loops.off_policy`, this loop serves the
derivative-free agents of :mod:`jrl.agents.evolution.strategies`. A generation

1. asks the strategy for ``P`` genomes (network parameter trees, ``[P, ...]`` per leaf);
2. plays ``E`` fresh episodes with each member, all ``P x E`` episodes batched, each for
   ``episode_steps`` steps with the steps after its end masked out (a ``scan``, so every
   generation computes the same number of env steps); a member's fitness is the mean of
   its episodes' returns;
3. tells the strategy the fitness, and folds the observations the members acted on into
   the running observation statistics (frozen while the generation played).

On ``D`` devices (``--devices D``) every device asks for the whole population from the same
key and state, plays its ``P / D`` members, and the fitness vector is gathered on every
device (a sum of zero-padded vectors, exact), so every device tells the same update and the
states stay identical. Each member's episode keys are that member's alone, whatever ``D``:
a generation on ``D`` devices equals one on one device up to the float summation order of
the observation statistics.

The train state has no env state between generations (episodes start fresh); its
``env_state`` is ``()`` for the evaluation code, which reads the field.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jrl.agents.evolution.strategies import ES, ESState, make_es

from jrl.core import parallel
from jrl.core.env import Environment
from jrl.core.types import PRNGKey, PyTree
from jrl.core.normalization import RunningMeanStd
from jrl.core.wrappers import VmapEnv
from jrl.parts.agent import Agent, EnvSpec
from jrl.run.builders import Built
from jrl.run.loops import Algorithm

__all__ = ["PopulationState", "play_members", "population"]


@struct.dataclass
class PopulationState:
    """Everything a population run carries from one generation to the next."""

    agent_state: ESState  # the search distribution, its mean's params and obs statistics
    env_state: PyTree  # () : episodes start fresh every generation
    key: PRNGKey  # the loop's key; split every generation
    iteration: jax.Array  # [] int32 generations done
    env_steps: jax.Array  # [] int32 env steps computed (all members, masked steps included)


def play_members(
    es: ES,
    env: Environment,
    env_params: PyTree,
    genomes: PyTree,
    obs_stats: RunningMeanStd,
    keys: jax.Array,
    episode_steps: int,
) -> tuple[jax.Array, jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    """Plays one episode per key for each member.

    Args:
      genomes: ``[M, ...]`` per leaf, the members' network parameters.
      keys: ``[M, E]`` keys, episode ``e`` of member ``m`` is played from ``keys[m, e]``.
      env: unbatched (time limit included, as :func:`jrl.envs.make` gives it).

    Returns ``(returns [M, E], lengths [M, E] int32, (count [], sum [*obs], sum_sq [*obs]))``:
    each episode's return and length over its first ``episode_steps`` steps (rewards after
    the episode's end are not counted) and the moments of the observations the members
    acted on while their episodes ran.
    """

    def episode(genome, key):
        k_reset, k_steps = jax.random.split(key)
        env_state, ts = env.reset(k_reset, env_params)
        obs0 = jnp.asarray(ts.observation, jnp.float32)
        zeros = jnp.zeros_like(obs0)

        def body(carry, k):
            env_state, obs, alive, ret, length, moments = carry
            (action,) = es.member_action(genome, obs_stats, obs[None])  # the batch of one
            env_state, ts = env.step(k, env_state, action, env_params)
            count, total, total_sq = moments
            obs = jnp.asarray(obs, jnp.float32)
            moments = (
                count + alive.astype(jnp.float32),
                total + jnp.where(alive, obs, 0.0),
                total_sq + jnp.where(alive, jnp.square(obs), 0.0),
            )
            ret = ret + jnp.where(alive, ts.reward, 0.0)
            length = length + alive.astype(jnp.int32)
            alive = alive & ~ts.done
            next_obs = jnp.asarray(ts.observation, jnp.float32)
            return (env_state, next_obs, alive, ret, length, moments), None

        carry = (
            env_state,
            obs0,
            jnp.ones((), bool),
            jnp.zeros((), jnp.float32),
            jnp.zeros((), jnp.int32),
            (jnp.zeros((), jnp.float32), zeros, zeros),
        )
        carry, _ = jax.lax.scan(body, carry, jax.random.split(k_steps, episode_steps))
        return carry[3], carry[4], carry[5]

    per_member = jax.vmap(episode, in_axes=(None, 0))
    returns, lengths, moments = jax.vmap(per_member)(genomes, keys)
    moments = jax.tree.map(lambda x: x.sum(axis=(0, 1)), moments)
    return returns, lengths, moments


def _fold_moments(stats: RunningMeanStd, count, total, total_sq) -> RunningMeanStd:
    """``stats`` with a sample of ``count`` observations (their sum and sum of squares)
    folded in; unchanged when ``count`` is 0."""
    n = jnp.maximum(count, 1.0)
    mean = total / n
    var = jnp.maximum(total_sq / n - jnp.square(mean), 0.0)
    new = stats.merge(mean, var, count)
    return jax.tree.map(lambda old, upd: jnp.where(count > 0, upd, old), stats, new)


def _gather(local: jax.Array, offset: jax.Array, size: int) -> jax.Array:
    """``[size]``: every device's ``local [size / D]`` values at its ``offset``; each device
    puts its own values in place and zeros elsewhere, so the sum over devices (exact: every
    other term is 0) is the gathered vector, the same on every device."""
    padded = jax.lax.dynamic_update_slice(jnp.zeros((size,), local.dtype), local, (offset,))
    return parallel.psum(padded)


def _check_population(env: Environment, size, devices, episodes, steps) -> None:
    """Refuses a batched ``env``, a population of ``size`` that ``devices`` do not divide, and
    no episodes or no steps."""
    if env.num_envs is not None:
        raise ValueError("population plays its own batch of episodes: give it an unbatched env")
    size, devices = int(size), int(devices)
    if devices < 1 or size % devices:
        raise ValueError(f"population_size = {size} is not divisible by {devices} devices")
    if int(episodes) <= 0 or int(steps) <= 0:
        raise ValueError("episodes_per_member and episode_steps must be positive")


def _population_init(es: ES, spec: EnvSpec):
    """``init(key) -> PopulationState``: the strategy's state from the key's first half, the
    loop's key the second."""

    def init(key: PRNGKey) -> PopulationState:
        k_agent, k_loop = jax.random.split(key)
        zero = jnp.zeros((), jnp.int32)
        return PopulationState(es.init(k_agent, spec), (), k_loop, zero, zero)

    return init


def _with_es_hparams(es: ES):
    """``with_hparams(state, values)``: the population state with the strategy's swept
    hyperparameters set to ``values``."""

    def with_hparams(state: PopulationState, values):
        return state.replace(agent_state=es.with_hparams(state.agent_state, values))

    return with_hparams


def population(
    es: ES,
    env: Environment,
    episodes_per_member: int,
    episode_steps: int,
    env_params: PyTree = None,
    num_devices: int = 1,
) -> Algorithm:
    """One generation per iteration (see the module docstring).

    ``env`` is unbatched and not auto-resetting (:func:`jrl.envs.make`'s env, its time limit
    included). With ``num_devices > 1`` each device plays ``population_size / num_devices``
    members and ``step`` must run inside a sharded trace (:mod:`jrl.run.anakin`).
    """
    _check_population(env, es.population_size, num_devices, episodes_per_member, episode_steps)
    size, devices = int(es.population_size), int(num_devices)
    local, episodes, steps = size // devices, int(episodes_per_member), int(episode_steps)
    params = env.default_params if env_params is None else env_params
    spec = EnvSpec.from_env(env, params)
    per_iteration = size * episodes * steps

    def step(state: PopulationState):
        key, k_ask, k_play, k_tell = jax.random.split(state.key, 4)
        genomes, agent_state = es.ask(state.agent_state, k_ask)
        offset = parallel.axis_index() * local
        mine = jax.tree.map(lambda g: jax.lax.dynamic_slice_in_dim(g, offset, local), genomes)
        member_keys = jax.random.split(k_play, size)
        member_keys = jax.lax.dynamic_slice_in_dim(member_keys, offset, local)
        keys = jax.vmap(lambda k: jax.random.split(k, episodes))(member_keys)  # [local, E]
        stats = agent_state.params["obs_stats"]
        returns, lengths, moments = play_members(es, env, params, mine, stats, keys, steps)
        fitness = _gather(returns.mean(1), offset, size)
        length = _gather(lengths.mean(1).astype(jnp.float32), offset, size)
        if es.normalize_observations:
            stats = _fold_moments(stats, *parallel.psum(moments))
        agent_state, metrics = es.tell(agent_state, genomes, fitness, stats, k_tell)
        new_state = state.replace(
            agent_state=agent_state,
            key=key,
            iteration=state.iteration + 1,
            env_steps=state.env_steps + per_iteration,
        )
        metrics = {
            **metrics,
            "train/episode_return": fitness.mean(),
            "train/best_return": fitness.max(),
            "train/worst_return": fitness.min(),
            "train/episode_length": length.mean(),
            "train/episodes": jnp.asarray(size * episodes, jnp.int32),
            "train/env_steps": new_state.env_steps,
        }
        return new_state, metrics

    init, with_hparams = _population_init(es, spec), _with_es_hparams(es)
    return Algorithm(init, step, per_iteration, with_hparams)


def build_population(config, env, env_params, num_devices: int = 1):
    """Assembles an evolution strategy (:class:`jrl.agents.evolution.strategies.ESConfig`) on
    ``env`` (a jrl env
    as :func:`jrl.envs.make` returns it): the strategy and its network
    (:func:`jrl.agents.evolution.strategies.make_es`) and the population loop. The returned
    :class:`~jrl.run.builders.Built`'s ``agent`` acts with the mean's policy (evaluation,
    rendering and export use it) and its ``env`` is ``env`` batched for the population."""
    config.validate()
    spec = EnvSpec.from_env(env, env_params)
    es, network = make_es(config, spec)
    algorithm = population(
        es, env, config.episodes_per_member, config.episode_steps, env_params, num_devices
    )

    def act(agent_state, obs, key):
        return es.policy(agent_state.params, obs, key), {}

    def learn(agent_state, batch, key):
        raise TypeError("an evolution strategy learns in its population loop, not from batches")

    agent = Agent(es.init, act, learn, es.policy, es.with_hparams)
    batched = VmapEnv(env, config.population_size // num_devices)
    return Built(algorithm, agent, batched, env_params, spec, network)

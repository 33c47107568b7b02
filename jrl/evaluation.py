"""Evaluation rollouts: whole episodes of a fixed policy on fresh environments.

Layer 6 (next to the loops): uses the env API and wrappers only. The policy
is any function ``policy(obs [E, ...], key) -> actions [E]``, e.g. an
agent's greedy ``policy`` with its parameters bound.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from jrl.env import Environment
from jrl.types import PyTree
from jrl.wrappers import TimeLimit, VmapEnv

__all__ = ["episode_returns"]


def episode_returns(policy: Callable[[Any, jax.Array], jax.Array], env: Environment, key: jax.Array,
                    num_episodes: int, env_params: PyTree | None = None,
                    max_steps: int = 100_000) -> tuple[jax.Array, jax.Array]:
    """Returns and lengths (``[num_episodes]`` float32, int32) of one episode per env.

    ``env`` is unbatched and not auto-resetting (as :func:`jrl.envs.make`
    returns it, time limit included); ``num_episodes`` copies start from
    independent resets and run until every one has finished (a
    ``while_loop``, jittable), each stopped at ``max_steps`` steps if it has
    no time limit of its own.
    """
    if env.num_envs is not None:
        raise ValueError("episode_returns takes an unbatched env; it batches num_episodes copies itself")
    if int(num_episodes) <= 0:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    env = VmapEnv(TimeLimit(env, max_steps) if not any(w is TimeLimit for w in env.wrappers) else env,
                  int(num_episodes))
    params = env.default_params if env_params is None else env_params
    k_reset, key = jax.random.split(key)
    state, ts = env.reset(k_reset, params)
    zeros = jnp.zeros((int(num_episodes),), jnp.float32)
    done = jnp.zeros((int(num_episodes),), bool)

    def body(carry):
        state, obs, key, ret, length, done = carry
        key, k_act, k_step = jax.random.split(key, 3)
        state, ts = env.step(k_step, state, policy(obs, k_act), params)
        running = ~done
        ret = ret + jnp.where(running, ts.reward, 0.0)
        length = length + running.astype(jnp.int32)
        return state, ts.observation, key, ret, length, done | ts.done

    carry = (state, ts.observation, key, zeros, zeros.astype(jnp.int32), done)
    _, _, _, ret, length, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[-1]), body, carry)
    return ret, length

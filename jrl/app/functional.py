"""The whole training run as one pure function of a key: :func:`make_train`.

``jrl.train`` (and ``jrl train``) run an agent's :class:`~jrl.run.algorithm.Algorithm`
chunk by chunk, with progress, checkpoints and a run folder between the chunks.
:func:`make_train` hands out the same algorithm without any of that: ``train(key)`` is
``init`` followed by a ``lax.scan`` of ``step`` over every iteration, so a user can
``jax.jit`` it, ``jax.vmap`` it over seeds and over hyperparameters, and put it inside
programs of their own::

    train = jrl.make_train("ppo", "CartPole-v1", total_steps=100_000)
    keys = jax.vmap(jax.random.key)(jnp.arange(8))
    lrs = jnp.geomspace(1e-4, 1e-2, 8)
    state, metrics = jax.jit(jax.vmap(train))(keys, {"learning_rate": lrs})
    metrics["train/episode_return"]  # [8, iterations]

Run ``key(s)`` computes what ``jrl.train(..., seed=s)`` computes for its first run (the same
``init`` and ``step``; up to float rounding, since the runner compiles the iterations in
chunks). Hyperparameters are the agent's sweepable fields (``jrl agents`` lists them), set
after ``init`` as ``--sweep`` sets them.
"""

from __future__ import annotations

from typing import Any, Callable

import jax

import jrl.agents
import jrl.envs
from jrl.app.run_options import make_config
from jrl.core.types import PyTree
from jrl.envs.host import host_env_of

__all__ = ["make_train"]


def make_train(
    agent: str,
    env: str = "CartPole-v1",
    *,
    env_overrides: dict[str, Any] | None = None,
    num_iterations: int | None = None,
    **config: Any,
) -> Callable[..., tuple[PyTree, dict[str, jax.Array]]]:
    """``train(key, hparams=None) -> (final train state, metrics)`` of ``agent`` on ``env``.

    Args:
      agent: a registered agent (``jrl agents``).
      env: a registered pure-JAX env id (``jrl envs``; host envs, which step outside the
        program, cannot be scanned).
      env_overrides: the env's parameters to change (as ``--env-overrides``).
      num_iterations: iterations to scan; default the config's (``total_steps`` divided by
        the env steps of one iteration).
      **config: the agent's config fields (defaults, then the env's preset, then these).

    Returns:
      ``train``, pure: ``key`` a JAX PRNG key; ``hparams`` None or a dict of the agent's
      sweepable fields (scalars, or batched under ``vmap``). It returns the train state after
      the last iteration and every iteration's metrics (``name -> [num_iterations, ...]``).
      ``train.config`` is the agent's config, ``train.built`` what the agent built.
    """
    env_obj, params = jrl.envs.make(env, **(env_overrides or {}))
    if host_env_of(env_obj) is not None:
        raise ValueError(
            f"{env} steps on the host, outside a compiled program: make_train scans pure-JAX "
            "envs; train host envs with jrl.train(..., runner='sebulba')"
        )
    cfg = make_config(agent, env, **config)
    entry = jrl.agents.get(agent)
    built = entry.build(cfg, env_obj, params)
    if built.algorithm is None:
        raise ValueError(f"{agent} has no algorithm to scan on {env}")
    algorithm = built.algorithm
    length = int(cfg.num_iterations if num_iterations is None else num_iterations)
    if length < 1:
        raise ValueError(f"num_iterations must be >= 1, got {length}")
    sweepable = set(entry.sweepable)

    def train(key: jax.Array, hparams: dict[str, Any] | None = None):
        """One run of ``length`` iterations from ``key`` (see :func:`make_train`)."""
        state = algorithm.init(key)
        if hparams:
            unknown = sorted(set(hparams) - sweepable)
            if unknown:
                raise ValueError(
                    f"{agent} cannot set {unknown} after init: its sweepable fields are "
                    f"{sorted(sweepable)}"
                )
            state = algorithm.with_hparams(state, dict(hparams))
        step = lambda s, _: algorithm.step(s)
        return jax.lax.scan(step, state, None, length=length)

    train.config, train.built = cfg, built
    return train

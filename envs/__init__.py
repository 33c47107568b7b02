"""Pure-JAX environments and the registry.

``jrl.envs.make(id, **overrides) -> (env, params)``, ``jrl.envs.register``,
``jrl.envs.names()`` (registered ids), ``jrl.envs.entry(id)`` (a registry entry);
``"gymnax:<name>"`` ids adapt gymnax environments.
"""

from jrl.envs.registry import (
    EnvEntry,
    UnknownEnvError,
    entry,
    make,
    names,
    register,
    register_object,
)

__all__ = [
    "EnvEntry",
    "UnknownEnvError",
    "entry",
    "make",
    "names",
    "register",
    "register_object",
    "to_gymnasium",
]


def to_gymnasium(
    env_id: str, render_mode: str | None = None, num_envs: int | None = None, **param_overrides
):
    """A ``gymnasium.Env`` stepping the registered jrl env ``env_id``, or with ``num_envs=N`` a
    ``gymnasium.vector.VectorEnv`` of N copies stepped as one jitted batch
    (:mod:`jrl.envs.gymnasium_adapter`; needs the ``gymnasium`` package)."""
    from jrl.envs.gymnasium_adapter import to_gymnasium as make_gymnasium

    return make_gymnasium(env_id, render_mode, num_envs, **param_overrides)

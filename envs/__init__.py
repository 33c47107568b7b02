"""Pure-JAX environments and the registry.

``jrl.envs.make(id, **overrides) -> (env, params)``, ``jrl.envs.register``,
``jrl.envs.names()`` (registered ids), ``jrl.envs.entry(id)`` (a registry entry);
``"gymnax:<name>"`` ids adapt gymnax environments; ``jrl.envs.to_gymnasium(id)`` gives a
registered env as a ``gymnasium.Env`` (needs the ``gymnasium`` package).
"""

from jrl.envs.entries import EnvEntry, UnknownEnvError
from jrl.envs.gymnasium_adapter import to_gymnasium
from jrl.envs.registry import entry, make, names, register, register_object

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

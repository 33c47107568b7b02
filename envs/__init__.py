"""Pure-JAX environments and the registry.

``jrl.envs.make(id, **overrides) -> (env, params)``, ``jrl.envs.register``,
``jrl.envs.names()`` (registered ids), ``jrl.envs.entry(id)`` (a registry entry);
``"gymnax:<name>"`` ids adapt gymnax environments.
"""

from jrl.envs.registry import EnvEntry, UnknownEnvError, entry, make, names, register

__all__ = ["EnvEntry", "UnknownEnvError", "entry", "make", "names", "register"]

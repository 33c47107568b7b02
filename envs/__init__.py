"""Pure-JAX environments and the registry.

``jrl.envs.make(id, **overrides) -> (env, params)``, ``jrl.envs.register``,
``jrl.envs.list()``; ``"gymnax:<name>"`` ids adapt gymnax environments.
"""

from jrl.envs.registry import EnvSpec, UnknownEnvError, make, register, spec
from jrl.envs.registry import list  # noqa: A004 - part of the public API

__all__ = ["EnvSpec", "UnknownEnvError", "list", "make", "register", "spec"]

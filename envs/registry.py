"""The environment registry: ``make``, ``register``, ``names``, ``entry``.

An id maps to a factory (a class or a ``"module:attr"`` string, imported on
first use) and a time limit. :func:`make` returns ``(env, params)``: the
environment wrapped in its :class:`~jrl.core.wrappers.TimeLimit` (no auto-reset,
no batching; see :func:`jrl.core.wrappers.wrap_for_training`) and its default
parameters with any overrides applied. Ids prefixed ``gymnax:`` adapt a
gymnax environment on the fly, ``brax:`` a brax one (the optional ``brax`` extra).

The registry imports the adapters and hands each prefixed id to its own; the adapters build
their entries and errors from :mod:`jrl.envs.entries` and never import the registry.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from jrl.core.env import Environment
from jrl.core.wrappers import CheckActions, TimeLimit
from jrl.envs.brax_adapter import brax_entry
from jrl.envs.craftax_adapter import craftax_entry
from jrl.envs.entries import (
    BRAX_PREFIX,
    CRAFTAX_PREFIX,
    ENVPOOL_PREFIX,
    GYMNASIUM_PREFIX,
    GYMNAX_PREFIX,
    JAXMARL_PREFIX,
    JUMANJI_PREFIX,
    PGX_PREFIX,
    PREFIXES,
    XMINIGRID_PREFIX,
    EnvEntry,
    UnknownEnvError,
)
from jrl.envs.gymnax_adapter import gymnax_entry
from jrl.envs.host import envpool_entry, gymnasium_entry
from jrl.envs.jaxmarl_adapter import jaxmarl_entry
from jrl.envs.jumanji_adapter import jumanji_entry
from jrl.envs.pgx_adapter import pgx_entry
from jrl.envs.xminigrid_adapter import xminigrid_entry

_REGISTRY: dict[str, EnvEntry] = {}


def register(
    id: str,
    entry_point: Callable[..., Environment] | str,
    max_episode_steps: int | None = None,
    source: str = "user",
    overwrite: bool = False,
    **kwargs: Any,
) -> EnvEntry:
    """Registers an environment under ``id``; ``make(id)`` then builds it."""
    if not isinstance(id, str) or not id or id.startswith(PREFIXES):
        raise ValueError(
            f"invalid env id {id!r} (non-empty, not starting with one of the adapters' "
            f"prefixes {', '.join(map(repr, PREFIXES))})"
        )
    if id in _REGISTRY and not overwrite:
        raise ValueError(f"env id {id!r} is already registered (pass overwrite=True to replace it)")
    if max_episode_steps is not None and int(max_episode_steps) <= 0:
        raise ValueError(f"max_episode_steps must be positive, got {max_episode_steps}")
    new = EnvEntry(id, entry_point, max_episode_steps, source, tuple(sorted(kwargs.items())))
    _REGISTRY[id] = new
    return new


def names() -> list[str]:
    """Registered ids, sorted (gymnax and brax ids are available on top, as ``gymnax:<name>``
    and ``brax:<name>``)."""
    return sorted(_REGISTRY)


def entry(id: str) -> EnvEntry:
    """The :class:`EnvEntry` of ``id``; unknown ids raise with the closest matches."""
    if id.startswith(GYMNAX_PREFIX):
        return gymnax_entry(id[len(GYMNAX_PREFIX) :])
    if id.startswith(BRAX_PREFIX):
        return brax_entry(id[len(BRAX_PREFIX) :])
    if id.startswith(PGX_PREFIX):
        return pgx_entry(id[len(PGX_PREFIX) :])
    if id.startswith(JAXMARL_PREFIX):
        return jaxmarl_entry(id[len(JAXMARL_PREFIX) :])
    if id.startswith(CRAFTAX_PREFIX):
        return craftax_entry(id[len(CRAFTAX_PREFIX) :])
    if id.startswith(JUMANJI_PREFIX):
        return jumanji_entry(id[len(JUMANJI_PREFIX) :])
    if id.startswith(XMINIGRID_PREFIX):
        return xminigrid_entry(id[len(XMINIGRID_PREFIX) :])
    if id.startswith(GYMNASIUM_PREFIX):
        return gymnasium_entry(id[len(GYMNASIUM_PREFIX) :])
    if id.startswith(ENVPOOL_PREFIX):
        return envpool_entry(id[len(ENVPOOL_PREFIX) :])
    if id not in _REGISTRY:
        raise UnknownEnvError(id, sorted(_REGISTRY))
    return _REGISTRY[id]


def make(
    id: str, *, max_episode_steps: int | None = None, check: bool = False, **param_overrides: Any
):
    """Builds a registered environment: returns ``(env, params)``.

    Args:
      id: a registered id (``jrl.envs.names()``), ``"gymnax:<name>"`` or ``"brax:<name>"``
        (the ``brax`` extra).
      max_episode_steps: replaces the registered time limit.
      check: wrap in :class:`~jrl.core.wrappers.CheckActions` (actions outside the
        action space raise; slow, for debugging).
      **param_overrides: fields of the env's params to replace, e.g.
        ``make("CartPole-v1", gravity=12.0)``; unknown fields raise.
    """
    s = entry(id)
    env = s.build()
    params = env.default_params
    if param_overrides:
        if not dataclasses.is_dataclass(params):
            raise TypeError(f"{id} has no parameters to override (got {sorted(param_overrides)})")
        fields = {f.name for f in dataclasses.fields(params)}
        unknown = sorted(set(param_overrides) - fields)
        if unknown:
            raise TypeError(
                f"{id}: unknown parameter(s) {unknown}; its parameters are {sorted(fields)}"
            )
        params = params.replace(**param_overrides)
    limit = s.max_episode_steps if max_episode_steps is None else max_episode_steps
    if limit is not None:
        env = TimeLimit(env, limit)
    if check:
        env = CheckActions(env)
    return env, params


def register_object(env: Any) -> tuple[str, dict[str, Any]]:
    """``(registered id, parameter overrides)`` of an env given to ``jrl.train``: an id as it is;
    an :class:`~jrl.core.env.Environment` (or ``(env, params)``) is registered under its ``id``
    (its class name when it has none) for this process, its params' fields that differ from
    the defaults becoming overrides (numbers and booleans only, as the run record is JSON)."""
    if isinstance(env, str):
        return env, {}
    env_obj, params = env if isinstance(env, tuple) and len(env) == 2 else (env, None)
    if not isinstance(env_obj, Environment):
        raise TypeError(
            f"env must be a registered id, an Environment or (Environment, params), got {env!r}"
        )
    env_id = env_obj.id if env_obj.id != Environment.id else type(env_obj).__name__
    try:
        registered = entry(env_id)
    except UnknownEnvError:
        registered = None
    if registered is not None and registered.source != "object":
        if type(registered.build()) is not type(env_obj):
            raise ValueError(
                f"an env object's id {env_id!r} is registered for another env; give your env "
                "class another id, or register it with jrl.envs.register"
            )
    else:  # the registered env of that id (its time limit included) is this one's class
        register(env_id, lambda: env_obj, source="object", overwrite=True)
    overrides: dict[str, Any] = {}
    if params is not None and dataclasses.is_dataclass(params):
        default = env_obj.default_params
        for f in dataclasses.fields(params):
            value, base = getattr(params, f.name), getattr(default, f.name)
            if np.asarray(value).shape == () and value != base:
                if not isinstance(np.asarray(value).item(), (bool, int, float)):
                    raise TypeError(f"env parameter {f.name} = {value!r} is not a number")
                overrides[f.name] = np.asarray(value).item()
    return env_id, overrides


def _register_builtins() -> None:
    builtins = [
        ("CartPole-v1", "jrl.envs.cartpole:CartPole", 500),
        ("Acrobot-v1", "jrl.envs.acrobot:Acrobot", 500),
        ("MountainCar-v0", "jrl.envs.mountain_car:MountainCar", 200),
        ("MountainCarContinuous-v0", "jrl.envs.mountain_car:MountainCarContinuous", 999),
        ("Pendulum-v1", "jrl.envs.pendulum:Pendulum", 200),
        ("TruncationProbe-v0", "jrl.envs.probes:TruncationProbe", 20),
        ("ContinuousTruncationProbe-v0", "jrl.envs.probes:ContinuousTruncationProbe", 20),
        ("MaskedProbe-v0", "jrl.envs.probes:MaskedProbe", None),
        ("MemoryChain-v0", "jrl.envs.memory:MemoryChain", None),
        ("CartPoleNoVel-v1", "jrl.envs.memory:CartPoleNoVel", 500),
        ("TicTacToe-v0", "jrl.envs.tictactoe:TicTacToe", None),
        ("Coordination-v0", "jrl.envs.coordination:Coordination", None),
        ("TeamTruncationProbe-v0", "jrl.envs.coordination:TeamTruncationProbe", 20),
    ]
    for id, entry, limit in builtins:
        register(id, entry, max_episode_steps=limit, source="jrl")


_register_builtins()

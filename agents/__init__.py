"""Agents built from jrl's parts, and their registry.

An agent is one module with a frozen config dataclass and a ``build``
function, registered under a name (see ``docs/extending/writing-an-agent.md``):

- the config class extends a base of :mod:`jrl.parts.agent_config` (``AgentConfig``,
  ``RolloutConfig``, ``ReplayConfig``) and carries ``PRESETS`` (env id ->
  overrides) and ``HPARAMS`` (its traced hyperparameter dataclass, whose
  fields are the sweepable config fields);
- ``build(config, env, env_params, num_devices=1) -> jrl.run.builders.Built``.

One module may serve several names with config subclasses that only change
defaults (``c51``, ``qrdqn`` and ``rainbow`` are DQN configs). Built-in
agents are listed in :data:`BUILTIN` as ``"module:ConfigClass"`` and
imported when first used; :func:`register` adds an agent from user code.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any, Callable

from jrl.parts.agent_config import AgentConfig
from jrl.util import names as _names

__all__ = [
    "AgentEntry",
    "BUILTIN",
    "UnknownAgentError",
    "check_action_space",
    "check_kind",
    "env_kind",
    "env_kinds",
    "fitting",
    "get",
    "names",
    "register",
    "summary",
]

BUILTIN: dict[str, str] = {
    "ppo": "jrl.agents.actor_critic.ppo:PPOConfig",
    "a2c": "jrl.agents.actor_critic.a2c:A2CConfig",
    "dqn": "jrl.agents.value.dqn:DQNConfig",
    "c51": "jrl.agents.value.dqn:C51Config",
    "qrdqn": "jrl.agents.value.dqn:QRDQNConfig",
    "rainbow": "jrl.agents.value.dqn:RainbowConfig",
    "apex": "jrl.agents.value.apex:ApexConfig",
    "pqn": "jrl.agents.value.pqn:PQNConfig",
    "reinforce": "jrl.agents.actor_critic.reinforce:REINFORCEConfig",
    "sac": "jrl.agents.continuous.sac:SACConfig",
    "sac_discrete": "jrl.agents.continuous.sac_discrete:SACDiscreteConfig",
    "td3": "jrl.agents.continuous.td3:TD3Config",
    "ddpg": "jrl.agents.continuous.ddpg:DDPGConfig",
    "alphazero": "jrl.agents.search.alphazero:AlphaZeroConfig",
    "muzero": "jrl.agents.search.muzero:MuZeroConfig",
    "openai_es": "jrl.agents.evolution.es:OpenAIESConfig",
    "cma_es": "jrl.agents.evolution.es:CMAESConfig",
    "snes": "jrl.agents.evolution.es:SNESConfig",
    "ippo": "jrl.agents.multi_agent.ippo:IPPOConfig",
    "mappo": "jrl.agents.multi_agent.mappo:MAPPOConfig",
    "impala": "jrl.agents.actor_critic.impala:IMPALAConfig",
    "bc": "jrl.agents.offline.bc:BCConfig",
    "cql": "jrl.agents.offline.cql:CQLConfig",
    "iql": "jrl.agents.offline.iql:IQLConfig",
}
"""Built-in agent name -> ``"module:ConfigClass"``; the module defines ``build``."""


@dataclasses.dataclass(frozen=True)
class AgentEntry:
    """A registered agent: its config class and its ``build`` function."""

    name: str
    config_cls: type
    build: Callable[..., Any]

    @property
    def sweepable(self) -> tuple[str, ...]:
        """Config fields that can take several values in one compiled program."""
        return self.config_cls.sweepable()


_ENTRIES: dict[str, AgentEntry] = {}


class UnknownAgentError(KeyError, ValueError):
    """An agent name that is not registered; the message lists close matches."""

    def __init__(self, name: str):
        hint = _names.did_you_mean(name, names(), cutoff=0.4)
        self.message = f"unknown agent {name!r}.{hint} Available: {', '.join(names())}."
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


def register(
    name: str, config_cls: type, build: Callable[..., Any], overwrite: bool = False
) -> AgentEntry:
    """Registers an agent under ``name`` (``jrl train NAME`` and ``jrl.train(NAME, ...)``).

    ``config_cls`` is a frozen dataclass extending :class:`jrl.parts.agent_config.AgentConfig`;
    ``build(config, env, env_params, num_devices=1)`` returns a :class:`jrl.run.builders.Built`.
    Refuses a name already taken unless ``overwrite``."""
    if not (isinstance(config_cls, type) and issubclass(config_cls, AgentConfig)):
        raise TypeError(
            "config_cls must be a subclass of jrl.parts.agent_config.AgentConfig, "
            f"got {config_cls!r}"
        )
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{config_cls.__name__} must be a dataclass")
    if not callable(build):
        raise TypeError(f"build must be callable, got {build!r}")
    if not overwrite and name in names():
        raise ValueError(
            f"agent {name!r} is already registered (pass overwrite=True to replace it)"
        )
    entry = AgentEntry(name, config_cls, build)
    _ENTRIES[name] = entry
    return entry


def get(name: str) -> AgentEntry:
    """The registered agent ``name`` (built-in agents are imported on first use)."""
    if name in _ENTRIES:
        return _ENTRIES[name]
    if name not in BUILTIN:
        raise UnknownAgentError(name)
    module_name, config_name = BUILTIN[name].split(":")
    module = importlib.import_module(module_name)
    entry = AgentEntry(name, getattr(module, config_name), module.build)
    _ENTRIES[name] = entry
    return entry


def summary(name: str) -> str:
    """One line describing the agent: its module's docstring for the first name registered
    with that module's ``build``, else its config class's docstring."""
    entry = get(name)
    module = entry.build.__module__
    order = list(BUILTIN) + [n for n in _ENTRIES if n not in BUILTIN]
    first = next(n for n in order if _module_of(n) == module)
    doc = sys.modules[module].__doc__ if name == first else entry.config_cls.__doc__
    return (doc or name).strip().splitlines()[0]


def _module_of(name: str) -> str:
    """The module defining ``name``'s build, without importing a built-in agent."""
    if name in _ENTRIES:
        return _ENTRIES[name].build.__module__
    return BUILTIN[name].split(":")[0]


def env_kind(config_cls) -> str:
    """The kind of env an agent's config trains on: "game" (two-player turn-based,
    ``TURN_BASED``), "team" (multi-agent, ``MULTI_AGENT``) or "single" (single-agent)."""
    if getattr(config_cls, "TURN_BASED", False):
        return "game"
    return "team" if getattr(config_cls, "MULTI_AGENT", False) else "single"


def env_kinds(config_cls) -> tuple[str, ...]:
    """Every kind of env an agent's config trains on: its ``ENV_KINDS`` where it declares
    several (MuZero: single-agent envs and games), else :func:`env_kind`'s one."""
    return tuple(getattr(config_cls, "ENV_KINDS", None) or (env_kind(config_cls),))


def fitting(space: Any, kind: str = "single") -> list[str]:
    """The registered agents whose config declares they act in ``space``'s class
    (``ACTION_SPACES``; agents that declare nothing are left out), among the agents for
    ``kind`` envs (:func:`env_kind`)."""
    out = []
    for name in names():
        cls = get(name).config_cls
        accepted = cls.ACTION_SPACES
        if accepted is not None and isinstance(space, accepted) and kind in env_kinds(cls):
            out.append(name)
    return out


def check_action_space(name: str, space: Any, env_id: str) -> None:
    """``ValueError`` (one line) when agent ``name`` does not act in ``space``, the action
    space of ``env_id``: it names the space and the agents for the same kind of env that do
    (the env's kind is the agent's once :func:`check_kind` passed)."""
    cls = get(name).config_cls
    accepted = cls.ACTION_SPACES
    if accepted is None or isinstance(space, accepted):
        return
    kinds = " or ".join(c.__name__ for c in accepted)
    fit = fitting(space, env_kind(cls))
    raise ValueError(
        f"{name} needs a {kinds} action space, but {env_id} has {space!r}; "
        f"agents for a {type(space).__name__} action space: {', '.join(fit) or 'none'}"
    )


_KIND_ENVS = {
    "single": "a single-agent env",
    "game": "a two-player turn-based game",
    "team": "a multi-agent env",
}
_KIND_AGENTS = {
    "single": "is a single-agent agent",
    "game": "plays two-player turn-based games",
    "team": "trains a team of agents",
}
_KIND_FITS = {"single": "single-agent envs", "game": "games", "team": "multi-agent envs"}


def check_kind(name: str, kind: str, env_id: str) -> None:
    """``ValueError`` (one line) when agent ``name`` trains on another kind of env than
    ``env_id``'s ``kind`` ("single", "game" or "team", see :func:`env_kind`), naming the
    agents for that kind."""
    own = env_kinds(get(name).config_cls)
    if kind in own:
        return
    fit = [n for n in names() if kind in env_kinds(get(n).config_cls)]
    what = " and ".join(_KIND_FITS[k] for k in own)
    trains = _KIND_AGENTS[own[0]] if len(own) == 1 else f"trains on {what}"
    raise ValueError(
        f"{name} {trains}, but {env_id} is {_KIND_ENVS[kind]}; "
        f"agents for {_KIND_FITS[kind]}: {', '.join(fit) or 'none'}"
    )


def names() -> list[str]:
    """Registered agent names."""
    return sorted(set(BUILTIN) | set(_ENTRIES))

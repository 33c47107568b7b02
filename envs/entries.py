"""What the registry hands out, below the registry and its adapters: :class:`EnvEntry` (a
registered environment), :class:`UnknownEnvError` and the id prefixes of the adapters.

The registry (:mod:`jrl.envs.registry`) dispatches an id with a prefix to its adapter
(``gymnax_adapter``, ``brax_adapter``, ``pgx_adapter``, ``jaxmarl_adapter``,
``craftax_adapter``, ``jumanji_adapter``, ``xminigrid_adapter``, ``host``), and
every adapter builds its entries and errors from this module, so neither imports the other
both ways.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from jrl.core.env import Environment
from jrl.util import names as _names

__all__ = [
    "BRAX_PREFIX",
    "CRAFTAX_PREFIX",
    "ENVPOOL_PREFIX",
    "EnvEntry",
    "ExtraMissingError",
    "GYMNASIUM_PREFIX",
    "GYMNAX_PREFIX",
    "JAXMARL_PREFIX",
    "JUMANJI_PREFIX",
    "PGX_PREFIX",
    "PREFIXES",
    "UnknownEnvError",
    "XMINIGRID_PREFIX",
    "import_extra",
    "install_hint",
]

GYMNAX_PREFIX = "gymnax:"
BRAX_PREFIX = "brax:"
PGX_PREFIX = "pgx:"
JAXMARL_PREFIX = "jaxmarl:"
CRAFTAX_PREFIX = "craftax:"
JUMANJI_PREFIX = "jumanji:"
XMINIGRID_PREFIX = "xminigrid:"
GYMNASIUM_PREFIX = "gymnasium:"  # host envs (envs/host.py): the Sebulba runner steps them
ENVPOOL_PREFIX = "envpool:"
PREFIXES = (
    GYMNAX_PREFIX,
    BRAX_PREFIX,
    PGX_PREFIX,
    JAXMARL_PREFIX,
    CRAFTAX_PREFIX,
    JUMANJI_PREFIX,
    XMINIGRID_PREFIX,
    GYMNASIUM_PREFIX,
    ENVPOOL_PREFIX,
)


@dataclasses.dataclass(frozen=True)
class EnvEntry:
    """A registered environment (what ``jrl.envs.entry(id)`` returns; the spaces an agent
    sees are :class:`jrl.EnvSpec`)."""

    id: str  # registry id, e.g. "CartPole-v1"
    entry_point: Any  # a callable returning an Environment, or "module:attr"
    max_episode_steps: int | None  # time limit applied by make (None: no limit)
    source: str = "jrl"  # where the implementation comes from ("jrl", "gymnax", a user package)
    kwargs: tuple[tuple[str, Any], ...] = ()  # constructor arguments

    def build(self) -> Environment:
        fn = self.entry_point
        if isinstance(fn, str):
            module, _, attr = fn.partition(":")
            fn = getattr(importlib.import_module(module), attr)
        return fn(**dict(self.kwargs))


class ExtraMissingError(ImportError, ValueError):
    """An adapter's optional package cannot be imported: a user error (``jrl`` exits with 2)
    whose message names the extra to install. Each adapter raises its own subclass
    (``BraxMissingError``, ``CraftaxMissingError``, ...)."""


def install_hint(extra: str) -> str:
    """The command that installs jrl's optional ``extra``: ``pip install jrl-jax[<extra>]``."""
    return f"pip install jrl-jax[{extra}]"


def import_extra(
    module: str, extra: str, what: str, error: type[ExtraMissingError] = ExtraMissingError
) -> Any:
    """Imports ``module`` (dotted) of the optional ``extra``; where it cannot be imported,
    raises ``error`` with the one-line message "<what> need the optional <extra> extra: pip
    install jrl-jax[<extra>] (<the ImportError>)", without the ImportError's traceback."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        message = f"{what} need the optional {extra} extra: {install_hint(extra)} ({e})"
        raise error(" ".join(message.split())) from None


class UnknownEnvError(KeyError, ValueError):
    """An env id that is not registered; the message lists the closest ids.

    ``prefix`` namespaces the suggestions (``"gymnax:"`` for the gymnax ids,
    matched on their bare names) and ``listing`` replaces the default list of
    registered ids in the message.
    """

    def __init__(self, id: str, known: list[str], prefix: str = "", listing: str | None = None):
        hint = _names.did_you_mean(id, known, prefix=prefix)
        if listing is None:
            listing = (
                f"Registered: {', '.join(known)}; gymnax envs as '{GYMNAX_PREFIX}<name>', "
                f"brax envs as '{BRAX_PREFIX}<name>', pgx games as '{PGX_PREFIX}<name>', "
                f"JaxMARL envs as '{JAXMARL_PREFIX}<name>', Craftax as '{CRAFTAX_PREFIX}<name>', "
                f"Jumanji as '{JUMANJI_PREFIX}<name>', XLand-MiniGrid as "
                f"'{XMINIGRID_PREFIX}<name>'; host envs (--runner sebulba) as "
                f"'{GYMNASIUM_PREFIX}<id>' and '{ENVPOOL_PREFIX}<id>'."
            )
        self.message = f"unknown environment {prefix + id!r}.{hint} {listing}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

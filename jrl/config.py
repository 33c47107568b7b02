"""Helpers shared by the agents' frozen config dataclasses.

A config's ``validate()`` lists ``(condition, message)`` pairs and hands them
to :func:`check`, which raises ``ValueError`` with the first failing
message; :func:`common_checks` holds the checks of the fields every agent
config has. :func:`hparams_from` builds an agent's traced hyperparameter
dataclass from the config fields of the same names, and
:func:`envs_per_device` splits the envs over devices.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import jax.numpy as jnp

from jrl import networks

__all__ = ["check", "common_checks", "envs_per_device", "hparams_from"]

Check = tuple[bool, str]


def check(checks: Iterable[Check]) -> None:
    """Raises ``ValueError(message)`` for the first ``(ok, message)`` with ``ok`` false."""
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def common_checks(config: Any) -> list[Check]:
    """Checks of the fields shared by every agent config: ``num_envs``,
    ``learning_rate``, ``gamma``, ``max_grad_norm``, ``hidden_sizes``, ``activation``."""
    c = config
    return [
        (c.num_envs > 0, f"num_envs must be positive, got {c.num_envs}"),
        (c.learning_rate > 0, f"learning_rate must be positive, got {c.learning_rate}"),
        (0.0 <= c.gamma <= 1.0, f"gamma must lie in [0, 1], got {c.gamma}"),
        (
            c.max_grad_norm >= 0,
            f"max_grad_norm must be >= 0 (0: no clipping), got {c.max_grad_norm}",
        ),
        (
            len(c.hidden_sizes) > 0 and all(h > 0 for h in c.hidden_sizes),
            f"hidden_sizes must be positive, got {c.hidden_sizes}",
        ),
        (
            c.activation in networks.ACTIVATIONS,
            f"activation must be one of {sorted(networks.ACTIVATIONS)}, got {c.activation!r}",
        ),
    ]


def hparams_from(config: Any, cls: type) -> Any:
    """``cls`` (a dataclass of [] float32 fields) filled from the config's fields of the same names."""
    return cls(
        **{
            f.name: jnp.asarray(getattr(config, f.name), jnp.float32)
            for f in dataclasses.fields(cls)
        }
    )


def envs_per_device(num_envs: int, num_devices: int) -> int:
    """``num_envs / num_devices``; ``ValueError`` unless it divides evenly."""
    if num_devices < 1 or num_envs % num_devices:
        raise ValueError(f"num_envs = {num_envs} is not divisible by {num_devices} devices")
    return num_envs // num_devices

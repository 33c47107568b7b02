"""Close-match suggestions for mistyped names (envs, agents, config fields, commands)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.5) -> list[str]:
    """Up to ``n`` names in ``known`` closest to ``name``: exact-case matches first,
    else case-insensitive ones (returned in their registered spelling)."""
    known = list(known)
    close = difflib.get_close_matches(name, known, n=n, cutoff=cutoff)
    if not close:
        lower = {k.lower(): k for k in known}
        close = [
            lower[k]
            for k in difflib.get_close_matches(name.lower(), list(lower), n=n, cutoff=cutoff)
        ]
    return close


def did_you_mean(name: str, known: Iterable[str], prefix: str = "", **kwargs) -> str:
    """`` Did you mean 'a', 'b'?`` (each with ``prefix``), or an empty string when nothing
    is close."""
    close = closest(name, known, **kwargs)
    return f" Did you mean {', '.join(repr(prefix + c) for c in close)}?" if close else ""

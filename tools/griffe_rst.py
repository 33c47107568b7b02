"""A griffe extension for the documentation site (mkdocs.yml): jrl's docstrings use Sphinx's
cross-reference roles (:func:`jrl.envs.make`) and ``::`` before literal blocks, which Markdown
would show as they are. The roles become inline code (``~a.b.c`` shortened to ``c``, as
Sphinx shows it) and a line-ending ``::`` a single colon; the docstrings themselves are
untouched."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:func|mod|class|meth|attr|data|exc|obj|const|py:\w+):`(~?)([^`]+)`")
LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.MULTILINE)


def _role(match: re.Match) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def plain_markdown(text: str) -> str:
    """``text`` with the Sphinx roles as inline code and ``::`` ends as ``:``."""
    return LITERAL_BLOCK.sub(":", ROLE.sub(_role, text))


class SphinxRoles(griffe.Extension):
    """Rewrites each loaded object's docstring with :func:`plain_markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_markdown(obj.docstring.value)

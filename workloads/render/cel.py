"""CEL text shared by the admission rules of the team namespaces (``render.admission``)."""

from __future__ import annotations

from collections.abc import Iterable


def cel_list(values: Iterable[str]) -> str:
    """A CEL list literal of the strings ``values``."""
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"

"""The stack schema: what a stack file may say (``stack``), the pinned versions (``versions``), the
benchmark's fault kinds the stack creates templates for (``faults``) and how stack files are found and
read (``files``). Validation only: nothing here creates a resource.

The names below are loaded from ``stack`` on first use, so that importing a light submodule
(``base``, ``labels``) does not import ``stack`` and, through ``StackConfigError``, ``pulumi``."""

from __future__ import annotations

import importlib

__all__ = ["CONFIG_KEY", "Pool", "Role", "StackConfig", "StackConfigError", "load_stack"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(".stack", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The control-plane tier's platforms: one per stack (and node shape) per test session, stopped when the
session ends. A test leaves its platform as it found it (its runs deleted and gone), so the order of the
tests does not matter."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from analysis.mocks import Graph

from controlplane.platform import Platform, deploy
from controlplane.stacks import built, variant

STACK_DIR = Path(tempfile.mkdtemp(prefix="moe-rl-stacks-"))
"""The session's built stack files (``controlplane.stacks``): what the platforms deploy and the commands read."""
_PLATFORMS: dict[tuple, Platform] = {}


def platform_of(stack: str, record: Callable[[object], Graph], proven: bool = True,
                counts: dict[str, int] | None = None) -> Platform:
    """The built ``stack`` deployed on a control plane of its own (its graph from ``record(cfg)``), shared by
    the session's tests."""
    key = (stack, proven, tuple(sorted((counts or {}).items())))
    if key not in _PLATFORMS:
        cfg = built(stack, STACK_DIR)
        _PLATFORMS[key] = deploy(cfg, record(cfg), proven, counts)
    return _PLATFORMS[key]


def variant_platform_of(stack: str, name: str, change: Callable[[dict], None],
                        record: Callable[[object], Graph]) -> Platform:
    """The test stack ``name`` (``stack`` changed by ``change``: ``controlplane.stacks.variant``) deployed once
    per session, like ``platform_of``."""
    if (name,) not in _PLATFORMS:
        cfg = variant(stack, name, change, STACK_DIR)
        _PLATFORMS[(name,)] = deploy(cfg, record(cfg))
    return _PLATFORMS[(name,)]


@atexit.register
def _stop_all() -> None:
    keep = os.environ.get("MOE_RL_CONTROLPLANE_KEEP")
    for platform in _PLATFORMS.values():
        platform.stop()
        if keep:
            print(f"control plane files kept at {platform.cp.root}")
        else:  # etcd's data and the logs: over 100 MiB a platform, left behind by every session otherwise
            shutil.rmtree(platform.cp.root, ignore_errors=True)
    if not keep:
        shutil.rmtree(STACK_DIR, ignore_errors=True)


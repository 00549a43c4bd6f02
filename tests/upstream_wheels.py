"""Upstream wheels the tests read (never install): downloaded once into a cache the tests fill
themselves, under a file lock so parallel test workers do not download the same wheel twice."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

WHEEL_CACHE = Path(os.environ.get("SGLANG_WHEEL_DIR") or
                   Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "moe-rl-platform" / "wheels")


@functools.cache
def wheel_path(dist: str, version: str) -> tuple[Path | None, str]:
    """The wheel of ``dist==version`` for CPython 3.11 on x86_64 Linux; or (None, why not)."""
    pattern = f"{dist.replace('-', '_')}-{version}-*.whl"
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(WHEEL_CACHE / ".lock"), timeout=900):
        if not sorted(WHEEL_CACHE.glob(pattern)):
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                 "--python-version", "3.11", "--platform", "manylinux_2_34_x86_64", "--platform",
                 "manylinux_2_28_x86_64", "-d", str(WHEEL_CACHE), f"{dist}=={version}"],
                check=False, capture_output=True, text=True, timeout=600)
            if done.returncode:
                return None, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "pip download failed"
    found = sorted(WHEEL_CACHE.glob(pattern))
    return (found[0], "") if found else (None, f"no {pattern} in {WHEEL_CACHE}")

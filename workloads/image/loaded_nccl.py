"""The NCCL this process runs: the one ``libnccl.so`` mapped into it, as that library reports itself
(``ncclGetVersion``). Not ``torch.cuda.nccl.version()``, which returns the NCCL_VERSION_CODE torch was
compiled with (torch csrc/cuda/nccl.cpp ``version()``): an image that replaces torch's nvidia-nccl wheel
(the DeepEP V2 profile's 2.31.2 under torch 2.13, built with 2.29.7) runs another NCCL than torch says.

Installed by both image recipes at /usr/local/lib/rl-platform/loaded_nccl.py; the recipes' last checks,
the pods' preflight and fabric_bench read it. Run as a script it imports torch (which maps the NCCL it
links) and prints ``major.minor.patch``, or exits non-zero naming what is wrong. Standard library only.
"""

from __future__ import annotations

import ctypes
import re
import sys

LIBRARY = re.compile(r"\s(/\S*/libnccl\.so(?:\.\d+)*)$", re.M)
"""A mapped NCCL in /proc/self/maps (not the aws-ofi-nccl plugin, ``libnccl-net-ofi.so``)."""


def mapped(maps: str) -> list[str]:
    """The NCCL libraries in a /proc/<pid>/maps text, each once."""
    return sorted(set(LIBRARY.findall(maps)))


def version_text(code: int) -> str:
    """``major.minor.patch`` of an NCCL version code: ``NCCL_VERSION(X,Y,Z)`` is X*1000+Y*100+Z up to 2.8
    and X*10000+Y*100+Z from 2.9 (nvidia-nccl-cu13 2.31.2 include/nccl.h:26)."""
    major, rest = divmod(code, 10000 if code >= 10000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def version() -> str:
    """The version of the one NCCL mapped into this process; RuntimeError when none or several are."""
    with open("/proc/self/maps") as f:
        libraries = mapped(f.read())
    if len(libraries) != 1:
        raise RuntimeError(f"{len(libraries)} NCCL libraries mapped ({', '.join(libraries) or 'none'}); one expected")
    code = ctypes.c_int()
    status = ctypes.CDLL(libraries[0]).ncclGetVersion(ctypes.byref(code))
    if status != 0:
        raise RuntimeError(f"ncclGetVersion of {libraries[0]} returned {status}")
    return version_text(code.value)


if __name__ == "__main__":
    import torch  # noqa: F401  (maps the libnccl torch links)
    try:
        print(version())
    except RuntimeError as err:
        sys.exit(f"loaded NCCL: {err}")

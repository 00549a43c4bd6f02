"""``fabric_bench`` under ``torchrun`` on the node, for the burn-in's NCCL step and its check with a
neighbour (standard library only: it ships to the node beside ``agent.py``)."""

from __future__ import annotations

import subprocess

try:  # in the pod: the ConfigMap puts it beside this file
    import fabric_bench
except ImportError:
    from workloads.pod import fabric_bench


def torchrun(launch: list[str], bench: list[str], left: float, what: str) -> tuple[subprocess.CompletedProcess | None, str]:
    """``torchrun <launch> fabric_bench.py <bench>`` within ``left`` seconds: (the finished run, "") or
    (None, why it did not finish: ``what`` named)."""
    try:
        return subprocess.run(["torchrun", *launch, fabric_bench.__file__, *bench], capture_output=True, text=True,
                              timeout=max(1.0, left)), ""
    except subprocess.TimeoutExpired:
        return None, f"{what} did not finish within {left:.0f} s"
    except FileNotFoundError:
        return None, "torchrun not found in the image"

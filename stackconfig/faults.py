"""The benchmark's fault kinds (``faults.yaml``), typed: what an experiment arm's ``faults[].kind`` may name,
the AWS FIS action each is (``components.faults`` creates its templates, ``bench.faults`` starts them),
the RayJob worker group it hits and what ``bench simulate`` assumes it does.

Guarantees: every kind has one of the engine's actions, a group and a simulated effect (unknown keys
refused); ``fault_kind`` refuses a name the file lacks, listing the allowed ones. Light: no Pulumi, so
``bench report`` reads experiments without loading the components.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field

from .base import SchemaModel

DATA = Path(__file__).resolve().parent / "faults.yaml"
POD_DELETE, TERMINATE_INSTANCE = "pod-delete", "terminate-instance"


class Simulated(SchemaModel):
    """What ``bench simulate`` assumes the fault does (stated, not measured)."""
    detected_after_seconds: float = Field(gt=0)
    recovery: Literal["in-place", "resubmit"]
    """in-place: the rollout engine restarts and the job survives; resubmit: the job fails and the next
    attempt resumes from the last complete checkpoint."""


class FaultKind(SchemaModel):
    """One fault kind of ``faults.yaml``: an experiment's ``faults[].kind``."""
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,40}[a-z0-9]$")
    summary: str
    action: Literal["pod-delete", "terminate-instance"]
    group: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    """The RayJob worker group (``groupName``) whose pod, or whose pod's node, it hits."""
    simulated: Simulated

    @property
    def per_team(self) -> bool:
        """A pod fault: one template per team namespace, started with the team's bench policy."""
        return self.action == POD_DELETE

    @property
    def removes_node(self) -> bool:
        return self.action == TERMINATE_INSTANCE


@cache
def fault_kinds() -> dict[str, FaultKind]:
    """The fault kinds of ``DATA`` (as it is when first called), by name."""
    rows = yaml.safe_load(DATA.read_text())
    return {name: FaultKind.model_validate({"name": name, **row}) for name, row in rows.items()}


def fault_kind(name: str) -> FaultKind:
    """The fault kind ``name``; ValueError listing the allowed ones."""
    found = fault_kinds().get(name)
    if found is None:
        raise ValueError(f"{name!r} is not a fault kind ({DATA.name}); allowed: {', '.join(fault_kinds())}")
    return found

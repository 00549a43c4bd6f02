"""The workloads' part of a stack file: the stack's run (``schema.run``), the services around it
(``schema.services``), teams, priorities, network tiers and how runs are submitted.

Lives under ``workloads:`` in the stack's ``platform`` config (``program.ProgramConfig``). Same
conventions as the platform schema: camelCase keys, unknown keys rejected, frozen models, and a
model-level check names its field first ("run.parallel.tensor: ...; allowed: ...").

Everything pool-shaped (how many trainer and rollout pods, GPUs, EFA devices) is NOT here: it is
derived from the pools. What is here is what a user chooses per run: model, data, GRPO settings,
Megatron parallelism, rollout engine size, DeepEP mode, and whether the stack submits the run itself.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from stackconfig.base import SchemaModel

from workloads.schema.run import RunFile, RunSpec
from workloads.schema.services import (CapacityBlockEndSettings, ImageSettings, PreprocessSettings, RaySettings,
                                       RewardSettings, StorageSettings)
from workloads.schema.teams import TeamSettings


class Submission(StrEnum):
    RAYCLUSTER = "raycluster"
    """A long-lived RayCluster holds the GPU nodes; runs are RayJobs (or ``ray job submit``) on it."""
    TORCHX = "torchx"
    """No RayCluster: each run is a TorchX Volcano Job that brings up its own Ray cluster."""
    RUNS = "runs"
    """No RayCluster: teams submit runs (``runs/*.yaml``, ``workloads.runs``) to their Volcano queues;
    each is a RayJob that brings up its own Ray cluster as one gang and releases it at the end."""


DEFAULT_PRIORITY_CLASSES = {"low": 1000, "normal": 10000, "high": 100000}


class NetworkTiers(SchemaModel):
    """The AWS network below the GPU pools, as Volcano's HyperNodes see it (tier 1 = nodes under one
    layer-3 network node, the closest; tier 3 = one layer-1 node)."""

    tier_nodes: dict[int, int] = {}
    """Tier -> the most GPU nodes one HyperNode of that tier holds (``aws ec2 describe-instance-topology``
    of the reservation). Empty: the offline plan cannot choose tiers; the run command reads the live
    HyperNodes instead."""

    @field_validator("tier_nodes")
    @classmethod
    def _tiers(cls, tiers: dict[int, int]) -> dict[int, int]:
        for tier, nodes in tiers.items():
            if tier not in (1, 2, 3) or nodes < 1:
                raise ValueError(f"{tier}: {nodes}: allowed: tiers 1..3 (EKS network-node-layer-3..1), nodes >= 1")
        ordered = [tiers[t] for t in sorted(tiers)]
        if ordered != sorted(ordered):
            raise ValueError(f"{tiers}: a wider tier holds at least as many nodes as a narrower one")
        return tiers


class WorkloadSettings(SchemaModel):
    submit: Submission = Submission.RAYCLUSTER
    """How runs reach the GPU nodes. The two never coexist: both take whole GPU nodes."""
    run: RunSpec = RunSpec()
    ray: RaySettings = RaySettings()
    reward: RewardSettings = RewardSettings()
    preprocess: PreprocessSettings = PreprocessSettings()
    storage: StorageSettings = StorageSettings()
    images: ImageSettings = ImageSettings()
    capacity_block_end: CapacityBlockEndSettings = CapacityBlockEndSettings()
    teams: list[TeamSettings] = []
    """Teams sharing the GPU pools: a namespace, a Volcano queue and quotas each (``workloads.teams``)."""
    priority_classes: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))
    """Run priorities: name -> value of the PriorityClass ``rl-<name>`` (Volcano orders and preempts
    by it). A run names one (``priority``)."""
    network: NetworkTiers = NetworkTiers()
    runs: list[RunFile] = []
    """Runs declared in the stack (same schema as ``runs/*.yaml``), for those who want them in the graph."""
    fault_injection: bool = False
    """AWS FIS experiment templates, their role and the bench policies for the benchmark's fault arms
    (``components.faults``, ``bench.faults``); needs ``submit: runs`` and teams."""
    efa_devices: dict[str, int] = {}
    """Per pool: EFA devices the device plugin advertises, when fewer than the type has (p5en nodes
    have been seen advertising 15, not 16). Pods request exactly this many."""

    @model_validator(mode="after")
    def _faults_need_teams(self) -> "WorkloadSettings":
        if self.fault_injection and (self.submit is not Submission.RUNS or not self.teams):
            raise ValueError("faultInjection: the fault templates target team namespaces; allowed: with "
                             "submit: runs and at least one team")
        return self

    @property
    def digests_required(self) -> bool:
        """``images.requireDigest``, by default on exactly when teams share the stack."""
        required = self.images.require_digest
        return bool(self.teams) if required is None else required

    @field_validator("priority_classes")
    @classmethod
    def _priority_values(cls, classes: dict[str, int]) -> dict[str, int]:
        for name, value in classes.items():
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", name) or not 0 <= value < 1_000_000_000:
                raise ValueError(f"{name}: {value}: allowed: a DNS label name and a value 0..999999999 "
                                 f"(1000000000 is the platform's own pods', larger ones system PriorityClasses')")
        return classes

    @field_validator("efa_devices")
    @classmethod
    def _positive(cls, counts: dict[str, int]) -> dict[str, int]:
        for pool, n in counts.items():
            if n < 1:
                raise ValueError(f"{pool}: must be >= 1, got {n}")
        return counts

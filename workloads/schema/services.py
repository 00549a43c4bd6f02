"""The services around the runs: the Ray cluster's head and shares, the reward service, the
preprocessing Job, the checkpoint file system, the utility images and the Capacity Block end trigger."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from stackconfig.base import SchemaModel

class RaySettings(SchemaModel):
    head_pool: str | None = None
    """Pool of the Ray head. Default: the cpu pool. Never a GPU or Spot pool."""
    head_cpu: int = Field(8, ge=1)
    head_memory_gib: int = Field(32, ge=4)
    gpu_shm_gib: int = Field(256, ge=1)
    """/dev/shm (memory-backed) of every GPU pod; holds Ray's object store; counts against memory."""
    cpu_shm_fraction: float = Field(0.3, gt=0, lt=1)
    """/dev/shm of buffer and preprocessing pods, as a fraction of their memory."""
    preprocess_node_fraction: float = Field(0.25, gt=0, le=1)
    """Share of a cpu-pool node one preprocessing Ray worker takes (the head and Job share the pool)."""


class RewardSettings(SchemaModel):
    enabled: bool | None = None
    """Default: on when the stack has a reward pool."""
    pool: str | None = None
    """Default: the reward pool, else the cpu pool."""
    replicas: int = Field(2, ge=1)
    gpus: int = Field(0, ge=0)
    """0: CPU service. >0: GPUs per replica, on a GPU reward pool."""
    cpu: int = Field(4, ge=1)
    memory_gib: int = Field(16, ge=1)
    port: int = Field(8000, ge=1024, le=65535)
    command: list[str] | None = None
    """Default: the rule-based server shipped in workloads/pod/reward_server.py (ConfigMap)."""
    max_body_kib: int = Field(1024, ge=1, le=64 * 1024)
    """Largest request body a replica reads (``413`` above it, answered from the headers alone)."""
    queue_per_team: int = Field(1024, ge=0, le=4096)
    """Requests of one team a replica holds waiting for one of the team's grading slots; the next is
    answered ``429`` at once (``workloads/pod/reward_server.py``). A team run's rollout step
    (``rolloutBatchSize x nSamplesPerPrompt`` samples) must fit ``replicas x (1 + queuePerTeam)``: Miles
    fails the step on the first refusal. Each waiting request holds a thread and its unread body in the
    kernel's socket buffers (at most ``maxBodyKib``), charged to the replica's memory."""

    def team_ports(self, teams: list[str]) -> dict[str, int]:
        """Team name -> the port its Ray pods reach the service on: ``port + 1 + i`` for the stack's
        i-th team (``port`` is the platform namespace's own). The service tells teams apart by port, and
        only the team's namespace may reach its port (``render.network_policies``)."""
        if self.port + len(teams) > 65535:
            raise ValueError(f"workloads.reward.port: {self.port} leaves no port for each of {len(teams)} teams; "
                             f"allowed: 1024..{65535 - len(teams)}")
        return {t: self.port + 1 + i for i, t in enumerate(teams)}


class PreprocessSettings(SchemaModel):
    enabled: bool = True
    cpu: int = Field(2, ge=1)
    memory_gib: int = Field(8, ge=1)


class StorageSettings(SchemaModel):
    """FSx for Lustre file system that holds models, data and checkpoints; checkpoints sync to S3."""

    capacity_gib: int = Field(4800, ge=1200)
    throughput_per_tib: Literal[125, 250, 500, 1000] = 250
    mount_path: str = Field("/mnt/fsx", pattern=r"^/[\w/.-]+$")
    dataset_gib: int = Field(10, ge=1)
    """Prompt data staged beside the model, for the capacity check."""

    @field_validator("capacity_gib")
    @classmethod
    def _lustre_sizes(cls, gib: int) -> int:
        if gib != 1200 and gib % 2400:
            raise ValueError(f"{gib}: PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB")
        return gib


IMAGE_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
"""An image reference pinned by content: ``name[:tag]@sha256:<64 hex>``."""


class ImageSettings(SchemaModel):
    """Images the workloads reference besides ``versions.software.images`` / ``rewardImage``."""

    require_digest: bool | None = None
    """Refuse every image reference of the workloads that is not pinned by ``@sha256:`` digest
    (``versions.software.images``, ``versions.software.rewardImage``, ``checkpointTrigger``).
    Default: on for a stack with teams (a tag can be moved to other content under their runs),
    off otherwise (``WorkloadSettings.digests_required``)."""
    checkpoint_trigger: str = Field("public.ecr.aws/docker/library/busybox:1.37.0", pattern=r"^\S+$")
    """Small image with a POSIX shell, ``date``, ``mkdir`` and ``touch``: the Capacity Block end
    CronJob and the team-directories Job (``render.common.file_system_task``). Not the training
    image, which is tens of GB and would have to be pulled first."""


CAPACITY_BLOCK_DRAIN_MINUTES = 40
"""EKS scales a Capacity Block's managed node group to zero this long before the block ends."""


class CapacityBlockEndSettings(SchemaModel):
    """Checkpoint a run before the Capacity Block under its GPU pools ends (``capacity.endTime``).

    A CronJob creates ``<checkpoint dir>/SAVE_NOW`` ``leadMinutes`` before the earliest end time;
    Miles (``--save-trigger-sentinel``) checks that file once per rollout step, after training, then
    saves synchronously and removes it. The drain starts 40 minutes before the end, so the lead
    must cover 40 minutes plus ``checkpointMinutes``: the longest a step plus a save can take.
    """

    lead_minutes: int = Field(90, ge=1, le=24 * 60)
    checkpoint_minutes: int = Field(30, ge=1)
    """Longest time from the sentinel appearing to a complete checkpoint on FSx: one rollout step
    (generation + training; the sentinel is read once per step) plus one synchronous save."""

    @model_validator(mode="after")
    def _lead_covers_drain_and_checkpoint(self) -> "CapacityBlockEndSettings":
        floor = CAPACITY_BLOCK_DRAIN_MINUTES + self.checkpoint_minutes
        if self.lead_minutes <= floor:
            raise ValueError(f"leadMinutes: {self.lead_minutes} leaves no margin: EKS drains a Capacity Block "
                             f"{CAPACITY_BLOCK_DRAIN_MINUTES} minutes before its end and a step plus a save take "
                             f"up to checkpointMinutes = {self.checkpoint_minutes}; allowed: > {floor}")
        return self

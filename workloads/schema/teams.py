"""Teams (schema): GPU quota, a Volcano queue and an isolated namespace per team sharing the
cluster's GPU pools; the objects are rendered by ``render/teams.py``.

A team (``workloads.teams[]``) gets:

- a Namespace ``team-<name>`` labelled ``rl.platform/team=<name>``;
- a cluster-scoped Volcano Queue ``team-<name>``: priority, whether other teams may reclaim what it
  uses beyond its deserved share (``reclaimable``), and its guarantee, deserved share and capability
  in GPUs, read by Volcano's ``capacity`` plugin (docs/design/scheduling.md, "Scheduling rules");
- a ResourceQuota ``gpu-quota`` in its namespace: GPUs, the EFA devices and huge pages of the nodes they
  span, CPU and memory, ephemeral storage, and counts of RayJobs, Ray clusters, pods and Services; a
  LimitRange giving every container an ephemeral-storage limit;
- NetworkPolicies: default deny, DNS, and every TCP port between the team's own pods.

Quotas are given per GPU pool (``gpus: {<pool>: {guarantee, deserved, cap}}``) and checked against
each pool's GPUs at its desired size (``workloads.checks.teams``). Volcano and ResourceQuota only count resources
(``nvidia.com/gpu``), not pools, so both sum over the team's pools: a team's per-pool split is an
admission-time check here, not something the scheduler enforces.

- a service account whose EKS Pod Identity role reaches only ``checkpoints/teams/<name>/`` in the bucket;
- its directory on the file system (``team_directory``) and its checkpoint directory
  (``team_checkpoint_directory``), mounted alone in its namespace (fileset PVs/PVCs), so its pods see
  no other team's files and only its checkpoints are exported to the bucket;
- the scripts its runs' pods use. Runs are submitted into the queue with ``moe-rl runs``;
- a Role for that command in its namespace, bound to the Kubernetes group ``rl-team-<name>`` that
  its members' EKS access entries carry.
"""

from __future__ import annotations

import re
import zlib

from pydantic import Field, field_validator, model_validator

from stackconfig.base import SchemaModel


TEAM_NAME = r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"
TEAM_LABEL = "rl.platform/team"
PART_OF_LABEL = "app.kubernetes.io/part-of"
QUOTA_NAME = "gpu-quota"


class GpuQuota(SchemaModel):
    """GPUs of one pool a team is guaranteed, deserves and may use at most: guarantee <= deserved <= cap,
    the order Volcano's queue webhook requires (volcano v1.15.1
    pkg/webhooks/admission/queues/validate/validate_queue.go:242-290)."""

    guarantee: int = Field(0, ge=0)
    """Never reclaimed from the team: the capacity plugin keeps a victim's queue at or above it."""
    deserved: int = Field(0, ge=0)
    """The team's share: it may reclaim up to it from teams above theirs, and above it its runs may be
    reclaimed. Default: the guarantee."""
    cap: int = Field(ge=1)
    """The most it may use (Queue capability and namespace ResourceQuota), borrowing idle GPUs."""

    @model_validator(mode="before")
    @classmethod
    def _deserved_defaults_to_guarantee(cls, data: object) -> object:
        if isinstance(data, dict) and "deserved" not in data:
            return {**data, "deserved": data.get("guarantee", 0)}
        return data

    @model_validator(mode="after")
    def _ordered(self) -> GpuQuota:
        if self.guarantee > self.cap:
            raise ValueError(f"guarantee: {self.guarantee} exceeds cap {self.cap}; allowed: 0..{self.cap}")
        if not self.guarantee <= self.deserved <= self.cap:
            raise ValueError(f"deserved: {self.deserved} is outside guarantee..cap; allowed: "
                             f"{self.guarantee}..{self.cap}")
        return self


class TeamSettings(SchemaModel):
    """One team: its name, GPU quota per pool, and its queue's scheduling knobs."""

    name: str = Field(pattern=TEAM_NAME)
    """DNS label of at most 40 characters: the namespace and queue are ``team-<name>``."""
    gpus: dict[str, GpuQuota] = {}
    """Pool name -> quota; GPU pools only (checked by ``validate_teams``)."""
    reclaimable: bool = True
    """Other teams may reclaim what this team uses beyond its deserved share."""
    priority: int = Field(0, ge=0)
    """Queue priority: Volcano's capacity plugin serves a higher one first (capacity.go:1183-1193)."""
    max_runs: int = Field(3, ge=1, le=64)
    """RayJobs the team may hold at once (ResourceQuota ``count/rayjobs.ray.io``) and head slots
    (``requests.rl.platform/head-slot``): each run's head requests one, and the quota counts a stopping
    head until its grace ends, so the team's heads, a deleted run's included, take at most this many of the
    head pool; pods and Services follow from it. The teams' together may not exceed the heads the head
    pool holds at its desired size (``checks.teams.validate_head_room``): two teams at the default fit two
    c7i.16xlarge (six heads)."""
    ephemeral_storage_gib: int = Field(50, ge=1, le=4096)
    """Local ephemeral storage (container layer, logs, emptyDir on disk) each container may use: the
    LimitRange's default request and limit, and its maximum. The kubelet evicts a pod over its own limit
    (Kubernetes docs, "Local ephemeral storage"), so a team filling a node's disk loses its own pod instead
    of the node's other pods going first by priority."""
    file_system_gib: int | None = Field(None, ge=1)
    """GiB the team's directories on the FSx file system (``team_directory`` and
    ``team_checkpoint_directory``) may hold together: a Lustre project quota (hard block limit) that the
    team-directories Job sets (``render.teams.team_directories_job``). Default: an equal share of
    ``workloads.storage.capacityGib`` among the teams. The teams' quotas together may not exceed the
    file system, so one team's full directory never stops another's saves."""
    members: list[str] = []
    """IAM role or user ARNs whose sessions submit the team's runs: each gets an EKS access entry in
    the Kubernetes group ``rl-team-<name>``, which may run ``moe-rl runs`` in the team's
    namespace and nowhere else."""

    @model_validator(mode="before")
    @classmethod
    def _no_weight(cls, data: object) -> object:
        if isinstance(data, dict) and "weight" in data:
            raise ValueError("weight: the capacity plugin the scheduler runs does not read queue weights; "
                             "allowed: gpus.<pool>.deserved, the team's share in GPUs")
        return data

    @field_validator("members")
    @classmethod
    def _arns(cls, arns: list[str]) -> list[str]:
        for arn in arns:
            if not re.fullmatch(r"arn:aws[\w-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+", arn) or "/aws-service-role/" in arn:
                raise ValueError(f"{arn!r}: allowed: an IAM role or user ARN (arn:aws:iam::<account>:role/<name>), "
                                 f"not a service-linked role")
        return arns


def team_directory(team: str) -> str:
    """The team's directory on the file system, mounted as its pods' file system root: what its runs
    stage (models, data). Outside the exported ``checkpoints/``, so none of it goes to the bucket."""
    return f"teams/{team}"


def team_checkpoint_directory(team: str) -> str:
    """The team's checkpoints on the file system, mounted over its pods' ``<mount>/checkpoints``: under
    the exported ``checkpoints/``, so the association exports them to the team's bucket prefix
    (``render.teams.team_checkpoint_prefix``) and nothing else of the team's."""
    return f"checkpoints/teams/{team}"


def team_group(team: str) -> str:
    """The Kubernetes group of the team's members (their EKS access entries)."""
    return f"rl-team-{team}"


def team_project_id(team: str) -> int:
    """The Lustre project ID of the team's directories: stable across reorderings of the stack's teams
    (CRC-32 of the name, above the IDs below 1000 a site may use by hand); ``team_file_system_quotas``
    refuses two teams with one ID."""
    return 1000 + zlib.crc32(team.encode()) % (2 ** 31 - 1000)


def team_file_system_quotas(teams: list[TeamSettings], capacity_gib: int) -> dict[str, int]:
    """GiB per team (``fileSystemGib``, else an equal share of what the explicit ones leave); ValueError
    naming the field when they add up to more than the file system or two teams share a project ID."""
    explicit = {t.name: t.file_system_gib for t in teams if t.file_system_gib is not None}
    rest = [t.name for t in teams if t.file_system_gib is None]
    left = capacity_gib - sum(explicit.values())
    quotas = {**explicit, **{n: left // len(rest) for n in rest}} if rest else explicit
    if left < 0:
        raise ValueError(f"workloads.teams[].fileSystemGib: the teams' quotas add up to {sum(explicit.values())} GiB, "
                         f"more than the {capacity_gib} GiB file system (workloads.storage.capacityGib); allowed: at "
                         f"most {capacity_gib} GiB together")
    if rest and left // len(rest) < 1:
        raise ValueError(f"workloads.teams[].fileSystemGib: the quotas given leave {left} GiB of the {capacity_gib} GiB "
                         f"file system for team(s) {', '.join(rest)}; allowed: a fileSystemGib for each of them, or less "
                         f"for the others")
    ids: dict[int, str] = {}
    for t in teams:
        other = ids.setdefault(team_project_id(t.name), t.name)
        if other != t.name:
            raise ValueError(f"workloads.teams[{t.name}].name: its Lustre project ID {team_project_id(t.name)} is "
                             f"team {other}'s too; allowed: another name")
    return {t.name: quotas[t.name] for t in teams}

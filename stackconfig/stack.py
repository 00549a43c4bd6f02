"""The stack schema: one typed model for a whole stack, validated before any resource exists.

A stack file reads like eksctl's ClusterConfig: region, the one Availability Zone that holds every
EFA and reserved node, and a few lines per pool. Invariants live in the types (Karpenter-style):
an instance type outside the catalog, EFA on a type without EFA, Spot for training, a reservation
id without CAPACITY_BLOCK/ODCR cannot be expressed. ``load_stack`` turns every violation into one
message naming the stack, the field and what is allowed.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Mapping

import pulumi
from pydantic import (Field, GetJsonSchemaHandler, ValidationError, field_validator,
                      model_validator)
from pydantic.json_schema import SkipJsonSchema
from pydantic.alias_generators import to_camel

from catalog import CATALOG, GPU_TYPES, InstanceType, not_in_catalog
from .base import SCHEMA_VERSION, SchemaModel
from .errors import PROJECT, describe_errors
from .burn_in import BurnInSettings
from .cluster import ClusterSettings
from .deploy import DeploySettings
from .labels import LABEL_PREFIX, POOL_LABEL, ROLE_LABEL
from .network import NetworkSettings
from .registries import RegistrySettings
from .versions import Versions

CONFIG_KEY = "platform"
"""Stack files hold the whole schema under ``<project>:platform``."""


class Role(StrEnum):
    TRAIN = "train"
    ROLLOUT = "rollout"
    REWARD = "reward"
    CPU = "cpu"
    MEMORY = "memory"
    SYSTEM = "system"


GPU_ROLES = frozenset({Role.TRAIN, Role.ROLLOUT})
CPU_ROLES = frozenset({Role.CPU, Role.MEMORY, Role.SYSTEM})
REQUIRED_ROLES = (Role.SYSTEM, Role.TRAIN, Role.ROLLOUT)


class CapacityType(StrEnum):
    ON_DEMAND = "ON_DEMAND"
    SPOT = "SPOT"
    CAPACITY_BLOCK = "CAPACITY_BLOCK"
    ODCR = "ODCR"


RESERVED = frozenset({CapacityType.CAPACITY_BLOCK, CapacityType.ODCR})


class Taint(SchemaModel):
    key: str
    value: str
    effect: str = "NoSchedule"


_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
"""Kubernetes label syntax: optional DNS-subdomain prefix, name and value of at most 63 characters."""
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"

GPU_TAINT = Taint(key="nvidia.com/gpu", value="true")
SPOT_TAINT = Taint(key=f"{LABEL_PREFIX}/spot", value="true")


class Capacity(SchemaModel):
    """How a pool's nodes are bought."""

    type: CapacityType = CapacityType.ON_DEMAND
    reservation_id: str | None = Field(None, pattern=r"^(cr-[0-9a-f]{8,17}|arn:aws[\w-]*:resource-groups:.+)$")
    """Capacity Block or ODCR id (``cr-...``); for ODCR also a resource-group ARN."""
    hourly_price: float | None = Field(None, gt=0)
    """USD per node-hour when it differs from the catalog's on-demand price (Spot, reservation)."""
    end_time: datetime | None = None
    """Capacity Block end (UTC). EKS drains the block's nodes 40 minutes before; the workloads
    trigger a checkpoint ahead of that."""

    @model_validator(mode="after")
    def _reservation_matches_type(self) -> "Capacity":
        if self.reservation_id and self.type not in RESERVED:
            raise ValueError(f"reservationId: only allowed with type CAPACITY_BLOCK or ODCR, not {self.type}")
        if self.type in RESERVED and not self.reservation_id:
            raise ValueError(f"reservationId: required when type is {self.type}")
        if self.type is CapacityType.CAPACITY_BLOCK and self.reservation_id.startswith("arn:"):
            raise ValueError("reservationId: a Capacity Block is targeted by its cr-... id")
        if self.end_time and self.type is not CapacityType.CAPACITY_BLOCK:
            raise ValueError(f"endTime: only a Capacity Block has an end time, not {self.type}")
        if self.end_time and self.end_time.tzinfo is None:
            raise ValueError("endTime: give a time zone, e.g. 2026-12-14T11:30:00Z")
        return self


class NodeCounts(SchemaModel):
    """``nodes: N`` is a fixed size (min = desired = max = N), except on a Capacity Block pool, where it
    is min 0 (``Pool``)."""

    min: int = Field(ge=0)
    desired: int = Field(ge=0)
    max: int = Field(ge=1, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _fixed_size(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "desired": value, "max": value}
        return value

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        """The mapping, or ``nodes: N`` with N within the bounds of ``max`` (an editor accepts what the model does)."""
        mapping = handler(core_schema)
        bound = handler.resolve_ref_schema(mapping)["properties"]["max"]
        return {"anyOf": [{k: bound[k] for k in ("type", "minimum", "maximum")}, mapping]}

    @model_validator(mode="after")
    def _ordered(self) -> "NodeCounts":
        if not self.min <= self.desired <= self.max:
            raise ValueError(f"must satisfy min <= desired <= max, got {self.min}/{self.desired}/{self.max}")
        return self


class Pool(SchemaModel):
    """One managed node group: a role, an instance type from the catalog, a size, a capacity mode."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,23}$")
    role: Role
    instance_type: str
    nodes: NodeCounts
    capacity: Capacity = Capacity()
    efa: bool | None = None
    """Attach every EFA interface the type has. Default: on for every GPU type with EFA."""
    max_pods: int | None = Field(None, ge=8, le=250)
    """Pods per node. Above the catalog's VPC CNI limit this turns on prefix delegation."""
    root_volume_gib: int = Field(200, ge=20, le=16384)
    labels: dict[str, str] = {}
    spot_alternatives: list[str] = Field([], max_length=19)
    """Spot only: further instance types the node group may launch (EKS recommends several Spot types
    so one reclaimed capacity pool does not starve the group). Each must be a drop-in: same
    architecture, GPUs, EFA layout, and at least the vCPUs and memory of ``instanceType``."""

    @model_validator(mode="before")
    @classmethod
    def _capacity_block_may_reach_zero(cls, data: Any) -> Any:
        """``nodes: N`` on a Capacity Block pool is ``{min: 0, desired: N, max: N}``: EKS scales the
        group to 0 forty minutes before the block ends, and a node group update needs its desired
        size at 0 (EKS User Guide, capacity-blocks-mng: "When upgrading managed node groups with
        Capacity Blocks, make sure that the desired size of the node group is set to 0"), which a
        minimum of N forbids. Written as a mapping, the counts are taken as written."""
        if not isinstance(data, Mapping):
            return data
        nodes, capacity = data.get("nodes"), data.get("capacity")
        kind = capacity.get("type") if isinstance(capacity, Mapping) else getattr(capacity, "type", None)
        if kind == CapacityType.CAPACITY_BLOCK and isinstance(nodes, int) and not isinstance(nodes, bool):
            return {**data, "nodes": {"min": 0, "desired": nodes, "max": nodes}}
        return data

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if key.startswith(f"{LABEL_PREFIX}/"):
                raise ValueError(f"{key!r}: {LABEL_PREFIX}/ labels are set from the pool's role and name")
            if not LABEL_KEY.fullmatch(key) or not LABEL_VALUE.fullmatch(value):
                raise ValueError(f"{key!r}: {value!r} is not a valid Kubernetes label (key [prefix/]name, "
                                 f"name and value up to 63 of A-Z a-z 0-9 - _ .)")
        return labels

    @field_validator("instance_type")
    @classmethod
    def _in_catalog(cls, name: str) -> str:
        if name not in CATALOG:
            raise ValueError(not_in_catalog(name))
        return name

    @model_validator(mode="after")
    def _spot_alternatives(self) -> "Pool":
        if self.spot_alternatives and self.capacity.type is not CapacityType.SPOT:
            raise ValueError(f"spotAlternatives: only for capacity type SPOT, not {self.capacity.type}")
        it = self.instance
        for name in self.spot_alternatives:
            if name not in CATALOG:
                raise ValueError(f"spotAlternatives: {not_in_catalog(name)}")
            alt = CATALOG[name]
            same = (alt.arch, alt.gpus, alt.gpu_model, alt.efa_max if self.efa_enabled else 0,
                    alt.card0_takes_efa or not self.efa_enabled)
            want = (it.arch, it.gpus, it.gpu_model, it.efa_max if self.efa_enabled else 0,
                    it.card0_takes_efa or not self.efa_enabled)
            if same != want or alt.vcpu < it.vcpu or alt.memory_gib < it.memory_gib or name == it.name:
                raise ValueError(f"spotAlternatives: {name} is not a drop-in for {it.name} (architecture, GPUs, "
                                 f"EFA layout equal; vCPUs and memory at least {it.vcpu} and {it.memory_gib} GiB)")
        return self

    @property
    def instance_types(self) -> list[str]:
        return [self.instance_type, *self.spot_alternatives]

    @model_validator(mode="after")
    def _invariants(self) -> "Pool":
        it = self.instance
        if self.efa and not it.has_efa:
            allowed = ", ".join(n for n in GPU_TYPES if CATALOG[n].efa_max > 1)
            raise ValueError(f"efa: {it.name} has no EFA; multi-EFA GPU types: {allowed}")
        if self.efa_enabled and not it.efa_layout_known:
            raise ValueError(f"efa: which network cards of {it.name} carry EFA is not known to the catalog "
                             f"(catalog/data/gpu-facts.json: families.<family>.types); set efa: false or add the "
                             f"type's layout there")
        if it.arch != "amd64" and self.role is not Role.SYSTEM:
            raise ValueError(f"instanceType: {it.name} is {it.arch}; role {self.role} runs the workloads' amd64 "
                             f"images, so only the system pool may use {it.arch} types")
        if self.role in GPU_ROLES and not it.is_gpu:
            raise ValueError(f"instanceType: role {self.role} needs a GPU type, not {it.name}")
        if self.role in CPU_ROLES and it.is_gpu:
            raise ValueError(f"instanceType: role {self.role} takes a CPU type, not {it.name}")
        if self.role is Role.TRAIN and self.capacity.type is CapacityType.SPOT:
            allowed = ", ".join(c for c in CapacityType if c is not CapacityType.SPOT)
            raise ValueError(f"capacity.type: SPOT is not allowed for the training pool; allowed: {allowed}")
        if self.capacity.type is CapacityType.CAPACITY_BLOCK and not it.is_gpu:
            raise ValueError(f"capacity.type: Capacity Blocks are sold for GPU types only, not {it.name}")
        return self

    @property
    def instance(self) -> InstanceType:
        return CATALOG[self.instance_type]

    @property
    def efa_enabled(self) -> bool:
        return self.instance.has_efa if self.efa is None else self.efa

    @property
    def efa_devices(self) -> int:
        return self.instance.efa_max if self.efa_enabled else 0

    @property
    def reserved(self) -> bool:
        return self.capacity.type in RESERVED

    @property
    def single_az(self) -> bool:
        """EFA traffic cannot cross zones and a reservation lives in one zone."""
        return self.efa_enabled or self.reserved

    @property
    def placement_group(self) -> bool:
        """Cluster placement for EFA, except where a reservation already fixes placement."""
        return self.efa_enabled and not self.reserved

    @property
    def hourly_price(self) -> float | None:
        """USD per node-hour: the stack's, else the catalog's on-demand price, else unknown (None)."""
        return self.capacity.hourly_price or self.instance.on_demand_hourly_usd

    @property
    def taints(self) -> tuple[Taint, ...]:
        taints = [GPU_TAINT] if self.instance.is_gpu else []
        if self.capacity.type is CapacityType.SPOT:
            taints.append(SPOT_TAINT)
        return tuple(taints)

    @property
    def node_labels(self) -> dict[str, str]:
        labels = {ROLE_LABEL: self.role.value, POOL_LABEL: self.name, **self.labels}
        if self.instance.is_gpu:
            labels["nvidia.com/gpu.present"] = "true"
        return labels


class CheckpointSettings(SchemaModel):
    retain_on_destroy: bool = True
    """``pulumi destroy`` leaves the bucket and its data in place unless a stack opts out."""
    noncurrent_version_days: int = Field(30, ge=1, le=3650)
    """Days S3 keeps a noncurrent version, and the daily backup keeps a recovery point."""
    backup_vault_lock: Literal["governance", "compliance"] = "governance"
    """Mode of the backup vault's lock: governance can be removed by an IAM principal allowed to;
    compliance becomes immutable 3 days after it is set (see components/checkpoint_backup.py)."""
    namespace: str = Field("rl", pattern=DNS_LABEL)
    service_account: str = Field("checkpoint-writer", pattern=DNS_SUBDOMAIN)


class StackConfig(SchemaModel):
    stack: SkipJsonSchema[str] = ""
    """The stack's name: ``load_stack`` sets it from the file name (``Pulumi.<stack>.yaml``), never the file."""
    schema_version: Literal[1] = SCHEMA_VERSION
    """The schema version the file is written for (CHANGELOG.md); a file without one is read as this release's."""
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    availability_zone: str
    """The one zone for every EFA pool and every reservation."""
    secondary_availability_zone: str
    """Second zone that EKS requires for control-plane subnets; non-EFA pools span both."""
    cluster: ClusterSettings = ClusterSettings()
    network: NetworkSettings = NetworkSettings()
    pools: list[Pool] = Field(min_length=1)
    versions: Versions = Versions()
    checkpoints: CheckpointSettings = CheckpointSettings()
    burn_in: BurnInSettings = BurnInSettings()
    deploy: DeploySettings = DeploySettings()
    registries: RegistrySettings = RegistrySettings()

    @model_validator(mode="after")
    def _invariants(self) -> "StackConfig":
        for field in ("availability_zone", "secondary_availability_zone"):
            zone = getattr(self, field)
            if not (zone.startswith(self.region) and len(zone) == len(self.region) + 1):
                raise ValueError(f"{to_camel(field)}: {zone!r} is not a zone of {self.region} (e.g. {self.region}a)")
        if self.availability_zone == self.secondary_availability_zone:
            raise ValueError("secondaryAvailabilityZone: must differ from availabilityZone")
        problem = self.cluster.problem(self.stack) or self.registries.problem(self.region)
        if problem:
            raise ValueError(problem)
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pools: names must be unique, got {names}")
        roles = [p.role for p in self.pools]
        for role in set(roles):
            if roles.count(role) > 1:
                raise ValueError(f"pools: one pool per role, {roles.count(role)} have role {role}")
        missing = [r.value for r in REQUIRED_ROLES if r not in roles]
        if missing:
            raise ValueError(f"pools: a pool with role {', '.join(missing)} is required; roles: "
                             f"{', '.join(r.value for r in Role)}")
        return self

    def pool(self, role: Role) -> Pool | None:
        return next((p for p in self.pools if p.role is role), None)

    @property
    def cluster_name(self) -> str:
        return f"rl-{self.stack}" if self.stack else "rl-platform"


class StackConfigError(pulumi.RunError):
    """A stack file that does not validate; the message names stack, field and what is allowed."""


def load_stack(stack: str, raw: Mapping[str, Any] | None, model: type[StackConfig] = StackConfig) -> StackConfig:
    """Validate a stack's ``platform`` config as ``model`` (StackConfig or a program's extension of
    it); raise StackConfigError before anything is built."""
    if not isinstance(raw, Mapping):
        what = "missing" if raw is None else f"a {type(raw).__name__}, not a mapping"
        raise StackConfigError(f"stack {stack!r}: config.{PROJECT}:{CONFIG_KEY}: {what}; allowed: a mapping of the "
                               f"stack's settings (docs/reference/stack.md)")
    try:
        return model.model_validate({**raw, "stack": stack})
    except ValidationError as err:
        lines = [f"  {line}" for line in describe_errors(raw, err)]
        raise StackConfigError(f"stack {stack!r}: invalid configuration\n" + "\n".join(lines)) from None

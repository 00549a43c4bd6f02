"""Components for Pulumi programs in any language, with typed args (schema inferred from these
annotations by Pulumi's source-based component provider; see ``provider/PulumiPlugin.yaml``).

Each wraps a Python component of this package and keeps its guarantees:
- ``GpuNodePool``: a managed node group with every EFA interface of its type, placement by
  capacity mode, taints and labels (``NodePool``), validated by the same schema as stack files;
- ``EfaPeerSecurityGroup``: the all-traffic self-referencing EFA group (``EfaSecurityGroup``);
- ``CheckpointStore``: the versioned, encrypted, TLS-only bucket and its writer role
  (``CheckpointBucket``);
- ``GpuDevicePlugins``: the pinned NVIDIA and EFA device plugins tolerating the GPU pools' taints
  (``DevicePlugins``), on a cluster given by its kubeconfig.
"""

from typing import NotRequired, Optional, TypedDict

import pulumi
from pydantic import ValidationError

import pulumi_kubernetes as k8s

from stackconfig.stack import GPU_TAINT, SPOT_TAINT, CheckpointSettings, Pool
from stackconfig.versions import Charts

from .checkpoints import CheckpointBucket
from .device_plugins import DevicePlugins, eks_addon_registry
from .efa import EfaSecurityGroup
from .node_pool import NodePool, PoolNetwork

PACKAGE = "rlplatform"


def _validated(model, values: dict, what: str):
    try:
        return model.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
                             for e in err.errors())
        raise pulumi.RunError(f"{what}: {problems}") from None


class GpuNodePoolArgs(TypedDict):
    pool_name: str
    """Pool name (lowercase, digits, dashes)."""
    role: str
    """train, rollout, reward, cpu, memory or system."""
    instance_type: str
    """A type of the instance catalog, e.g. p5en.48xlarge."""
    min_nodes: int
    desired_nodes: int
    max_nodes: int
    capacity_type: NotRequired[str]
    """ON_DEMAND (default), SPOT (never for train), CAPACITY_BLOCK or ODCR."""
    reservation_id: NotRequired[str]
    """Capacity Block / ODCR id, required with CAPACITY_BLOCK or ODCR."""
    cluster_name: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    node_subnet_id: pulumi.Input[str]
    """The single-AZ subnet that holds EFA and reserved nodes."""
    spread_subnet_ids: pulumi.Input[list[str]]
    """Subnets in two zones for pools without EFA or reservation."""
    cluster_security_group_id: pulumi.Input[str]
    efa_security_group_id: pulumi.Input[str]


class GpuNodePool(pulumi.ComponentResource):
    """EKS managed node group with the full EFA layout of its instance type."""

    node_group_name: pulumi.Output[str]
    launch_template_id: pulumi.Output[str]
    efa_devices_per_node: pulumi.Output[int]
    gpus_per_node: pulumi.Output[int]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(f"{PACKAGE}:index:GpuNodePool", name, {}, opts)
        pool = _validated(Pool, {
            "name": args["pool_name"], "role": args["role"], "instance_type": args["instance_type"],
            "nodes": {"min": args["min_nodes"], "desired": args["desired_nodes"], "max": args["max_nodes"]},
            "capacity": {"type": args.get("capacity_type") or "ON_DEMAND",
                         "reservation_id": args.get("reservation_id")},
        }, f"GpuNodePool {name}")
        net = PoolNetwork(node_subnet_id=args["node_subnet_id"], spread_subnet_ids=args["spread_subnet_ids"],
                          cluster_security_group_id=args["cluster_security_group_id"],
                          efa_security_group_id=args["efa_security_group_id"])
        inner = NodePool(name, pool, args["cluster_name"], args["node_role_arn"], net,
                         opts=pulumi.ResourceOptions(parent=self))
        self.node_group_name = inner.node_group.node_group_name
        self.launch_template_id = inner.launch_template.id
        self.efa_devices_per_node = pulumi.Output.from_input(pool.efa_devices)
        self.gpus_per_node = pulumi.Output.from_input(pool.instance.gpus)
        self.register_outputs({"nodeGroupName": self.node_group_name, "launchTemplateId": self.launch_template_id,
                               "efaDevicesPerNode": self.efa_devices_per_node, "gpusPerNode": self.gpus_per_node})


class EfaPeerSecurityGroupArgs(TypedDict):
    vpc_id: pulumi.Input[str]


class EfaPeerSecurityGroup(pulumi.ComponentResource):
    """Security group allowing all protocols in and out between its members (EFA/NCCL)."""

    security_group_id: pulumi.Output[str]

    def __init__(self, name: str, args: EfaPeerSecurityGroupArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(f"{PACKAGE}:index:EfaPeerSecurityGroup", name, {}, opts)
        self.security_group_id = EfaSecurityGroup(name, args["vpc_id"], opts=pulumi.ResourceOptions(parent=self)).id
        self.register_outputs({"securityGroupId": self.security_group_id})


class CheckpointStoreArgs(TypedDict):
    cluster_name: pulumi.Input[str]
    namespace: NotRequired[str]
    service_account: NotRequired[str]
    retain_on_destroy: NotRequired[bool]
    """Keep the bucket on `pulumi destroy` (default true)."""
    noncurrent_version_days: NotRequired[int]
    backup_vault_lock: NotRequired[str]
    """"governance" (default) or "compliance": mode of the backup vault's lock (kept buckets only)."""


class CheckpointStore(pulumi.ComponentResource):
    """Versioned, KMS-encrypted, private, TLS-only S3 bucket and a Pod Identity writer role."""

    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    writer_role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: CheckpointStoreArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(f"{PACKAGE}:index:CheckpointStore", name, {}, opts)
        settings = _validated(CheckpointSettings, {k: args.get(k) for k in (
            "namespace", "service_account", "retain_on_destroy", "noncurrent_version_days",
            "backup_vault_lock")},
            f"CheckpointStore {name}")
        inner = CheckpointBucket(name, settings, args["cluster_name"], opts=pulumi.ResourceOptions(parent=self))
        self.bucket_name, self.bucket_arn, self.writer_role_arn = inner.name, inner.arn, inner.writer.arn
        self.register_outputs({"bucketName": self.bucket_name, "bucketArn": self.bucket_arn,
                               "writerRoleArn": self.writer_role_arn})


class GpuDevicePluginsArgs(TypedDict):
    kubeconfig: pulumi.Input[str]
    """Kubeconfig (JSON or YAML) of the cluster the GPU pools joined."""
    region: str
    """AWS region of that cluster: the EFA device plugin's image comes from its EKS add-on registry."""
    spot_gpu_pools: NotRequired[bool]
    """Tolerate the Spot taint too (a GPU pool with capacity type SPOT)."""


class GpuDevicePlugins(pulumi.ComponentResource):
    """NVIDIA and EFA device plugins (Helm, pinned), tolerating the GPU pools' taints."""

    def __init__(self, name: str, args: GpuDevicePluginsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        try:
            eks_addon_registry(args["region"])  # an unknown region fails before anything is registered
        except ValueError as err:
            raise pulumi.RunError(f"GpuDevicePlugins {name}: {err}") from None
        super().__init__(f"{PACKAGE}:index:GpuDevicePlugins", name, {}, opts)
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=args["kubeconfig"], opts=pulumi.ResourceOptions(parent=self))
        taints = [GPU_TAINT, SPOT_TAINT] if args.get("spot_gpu_pools") else [GPU_TAINT]
        DevicePlugins(name, taints, Charts(), provider, args["region"], opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})


COMPONENTS = [GpuNodePool, EfaPeerSecurityGroup, CheckpointStore, GpuDevicePlugins]

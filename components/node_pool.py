"""NodePool: one EKS managed node group per pool, with a launch template we can prove.

Guarantees, all derived from the pool's config and its catalog row:
- AL2023 NVIDIA AMI on GPU pools, AL2023 standard elsewhere; IMDSv2 required, one hop (pods
  reach AWS through Pod Identity, not the node's role); encrypted gp3 root volume;
- instance-store NVMe assembled as RAID0 by nodeadm for kubelet and containerd;
- on EFA pools every EFA interface of the type (see ``efa``), the cluster and EFA security groups
  on every interface and none at template level, and a cluster placement group unless a Capacity
  Block or ODCR already fixes placement;
- Capacity Block: ``capacity-block`` market type, reservation target and instance type in the
  template, node group capacity type CAPACITY_BLOCK; ODCR: reservation target, ON_DEMAND;
- single-AZ pools (EFA or reserved) only get the one node subnet;
- on EFA pools containerd, and so every container, runs with an unlimited memlock (``memlock_script``);
- role labels on every node; GPU and Spot pools tainted; rolling updates one node at a time;
- EKS node auto-repair on (the node monitoring agent reports GPU, EFA/network, kubelet faults).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, replace
from typing import Sequence

import pulumi
import pulumi_aws as aws

from stackconfig.stack import CapacityType, Pool
from .efa import efa_interfaces
from .gpu_node_boot import SHELLSCRIPT, GdrcopySource, GpuNodeSetup, user_data_parts
from .gpu_node_setup import registration_taints
from .gpu_runtime import toolkit_script
from .network import pods_per_node

NODEADM_BOUNDARY = "==NODEADM=="
EKS_TAINT_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE",
                    "PreferNoSchedule": "PREFER_NO_SCHEDULE"}


def ami_type(pool: Pool) -> str:
    """EKS AMI types (NodeGroup amiType): AL2023, NVIDIA variant on GPU types, by architecture."""
    arch = {"amd64": "x86_64", "arm64": "ARM_64"}[pool.instance.arch]
    return f"AL2023_{arch}_{'NVIDIA' if pool.instance.is_gpu else 'STANDARD'}"


def node_config(pool: Pool) -> str:
    """The nodeadm NodeConfig EKS merges into its own bootstrap for this pool."""
    lines = ["apiVersion: node.eks.aws/v1alpha1", "kind: NodeConfig", "spec:"]
    if pool.instance.nvme_disks:
        lines += ["  instance:", "    localStorage:", "      strategy: RAID0"]
    if pool.max_pods:
        lines += ["  kubelet:", "    config:", f"      maxPods: {pods_per_node(pool)}"]
    if lines[-1] == "spec:":
        lines[-1] = "spec: {}"
    return "\n".join(lines) + "\n"


CONTAINERD_MEMLOCK_DROPIN = "/etc/systemd/system/containerd.service.d/50-rl-memlock.conf"


def memlock_script() -> str:
    """The ``text/x-shellscript`` part of every EFA pool: a systemd drop-in giving containerd
    ``LimitMEMLOCK=infinity``, so RDMA memory registration (libfabric/EFA, NCCL) in any container may pin
    memory without ``CAP_IPC_LOCK`` (the limit ``workloads.pod.preflight.check_memlock`` accepts).

    Why containerd's own limit: a container gets only the rlimits its OCI spec lists (runc's
    ``setupRlimits`` calls prlimit for each listed one, opencontainers/runc libcontainer) and inherits
    the rest from runc, the shim and containerd. nodeadm writes CRI's ``base_runtime_spec``
    (awslabs/amazon-eks-ami@81fec2e:nodeadm/internal/containerd/config.template.toml:25) with
    ``RLIMIT_NOFILE`` alone (nodeadm/internal/containerd/base-runtime-spec.json:159-165); the AMI's
    only containerd drop-in sets the slice (templates/al2023/runtime/rootfs/etc/systemd/system/
    containerd.service.d/00-runtime-slice.conf) and containerd's unit sets no LimitMEMLOCK
    (containerd/containerd:containerd.service), so containers get the kernel's 8 MiB default (a
    /etc/security/limits.d entry, read by pam_limits, reaches login sessions, not systemd services).

    Why not nodeadm's ``containerd.baseRuntimeSpec``: nodeadm merges it through ``map[string]interface{}``
    (nodeadm/internal/util/merge.go; containerd/base_runtime_spec.go:22-35), where JSON numbers become
    float64: RLIM_INFINITY (2^64-1) comes back as 18446744073709552000, which does not fit the spec's
    uint64, and mergo's override replaces the whole ``rlimits`` list, dropping the NOFILE default.

    When: cloud-init runs the part once per instance in its final stage; ``nodeadm-run.service`` is
    ``After=cloud-final.service`` (templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service)
    and restarts containerd before it starts kubelet (nodeadm/cmd/nodeadm/init/init.go:104-106,234;
    internal/containerd/daemon.go ``EnsureRunning``). nodeadm does not reload unit files
    (internal/daemon/systemd.go), so the script does. The drop-in stays in /etc for later boots."""
    return ("#!/bin/sh\n# rl.platform: unlimited memlock for containers on EFA nodes (components/node_pool.py).\n"
            "set -eu\n"
            f"mkdir -p {CONTAINERD_MEMLOCK_DROPIN.rsplit('/', 1)[0]}\n"
            f"printf '[Service]\\nLimitMEMLOCK=infinity\\n' > {CONTAINERD_MEMLOCK_DROPIN}\n"
            "systemctl daemon-reload\n")


def user_data(pool: Pool, gpu_setup: GpuNodeSetup = GpuNodeSetup()) -> str:
    """MIME multi-part user data: ``node_config`` for nodeadm, the memlock drop-in on EFA pools, then
    the GPU node setup's parts (``components.gpu_node_setup``: gdrdrv, driver options, capability
    labels) where the pool has one; base64 as launch templates want it."""
    memlock = [(SHELLSCRIPT, memlock_script())] if pool.efa_enabled else []
    runtime = [(SHELLSCRIPT, toolkit_script())] if pool.instance.is_gpu else []  # components.gpu_runtime
    parts = [("application/node.eks.aws", node_config(pool)), *memlock, *runtime, *user_data_parts(gpu_setup)]
    body = "".join(f"--{NODEADM_BOUNDARY}\nContent-Type: {kind}\n\n{text}\n" for kind, text in parts)
    mime = (f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{NODEADM_BOUNDARY}"\n\n'
            f"{body}--{NODEADM_BOUNDARY}--\n")
    return base64.b64encode(mime.encode()).decode()


def update_config(pool: Pool) -> aws.eks.NodeGroupUpdateConfigArgs:
    """Reserved pools are sized to their reservation: the DEFAULT strategy launches new nodes first,
    which a full Capacity Block or ODCR cannot hold; MINIMAL terminates old nodes first and never
    exceeds the group's size (EKS managed node group update behaviour). Others surge one at a time."""
    if pool.reserved:
        return aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1, update_strategy="MINIMAL")
    return aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1)


DRAIN_MINUTES = 15
"""EKS gives each node of an update 15 minutes to evict its pods before the update fails with
PodEvictionFailure (EKS user guide, "Understand each phase of node updates", upgrade phase)."""
NODE_READY_MINUTES = 15
"""An estimate, not a measurement: a GPU instance's boot, nodeadm and the GPU node setup
(``gpu_node_setup``) before the kubelet reports Ready."""
NODE_GROUP_DEFAULT_MINUTES = 60
"""terraform-provider-aws ``internal/service/eks/node_group.go``: create, update and delete 60 min."""


def node_group_timeouts(pool: Pool) -> pulumi.CustomTimeouts:
    """Provider timeouts a real operation fits in: an update replaces ``max_unavailable`` (1) node
    at a time, each drained then replaced, so a 32-node reserved pool takes hours where the
    provider's default gives up after one (and leaves the stack failed mid-update)."""
    batches = math.ceil(pool.nodes.max / update_config(pool).max_unavailable)
    update = max(NODE_GROUP_DEFAULT_MINUTES, batches * (DRAIN_MINUTES + NODE_READY_MINUTES))
    create = NODE_GROUP_DEFAULT_MINUTES + NODE_READY_MINUTES
    return pulumi.CustomTimeouts(create=f"{create}m", update=f"{update}m", delete=f"{NODE_GROUP_DEFAULT_MINUTES + DRAIN_MINUTES}m")


def node_group_capacity_type(pool: Pool) -> str:
    return {CapacityType.ODCR: "ON_DEMAND"}.get(pool.capacity.type, pool.capacity.type.value)


@dataclass(frozen=True)
class PoolNetwork:
    """Where a pool's nodes go and which security groups they carry."""

    node_subnet_id: pulumi.Input[str]
    spread_subnet_ids: Sequence[pulumi.Input[str]]
    cluster_security_group_id: pulumi.Input[str]
    efa_security_group_id: pulumi.Input[str]


class NodePool(pulumi.ComponentResource):
    """Launch template, optional placement group and managed node group for one pool."""

    def __init__(self, name: str, pool: Pool, cluster_name: pulumi.Input[str],
                 node_role_arn: pulumi.Input[str], net: PoolNetwork,
                 after: Sequence[pulumi.Resource] = (), gpu_setup: GpuNodeSetup = GpuNodeSetup(),
                 burn_in: bool = False, gdrcopy_source: "pulumi.Input[GdrcopySource] | None" = None,
                 opts: pulumi.ResourceOptions | None = None):
        """``after``: what the node group must wait for (VPC CNI add-on, node role policies, NAT
        egress); stated on the node group itself so the dependency is explicit in the graph.
        ``burn_in``: GPU nodes register with the burn-in taint (``gpu_node_setup.registration_taints``).
        ``gdrcopy_source``: where nodes that build gdrdrv fetch the staged GDRCopy tarball."""
        super().__init__("rlplatform:nodes:NodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.placement_group = (
            aws.ec2.PlacementGroup(name, strategy="cluster", opts=child) if pool.placement_group else None)
        template = self._template_args(name, pool, net, gpu_setup)
        if gpu_setup.gdrcopy and gdrcopy_source is not None:
            template["user_data"] = pulumi.Output.from_input(gdrcopy_source).apply(
                lambda src: user_data(pool, replace(gpu_setup, source=src)))
        if self.placement_group:
            template["placement"] = aws.ec2.LaunchTemplatePlacementArgs(group_name=self.placement_group.name)
        self.launch_template = aws.ec2.LaunchTemplate(name, **template, opts=child)
        self.node_group = aws.eks.NodeGroup(
            name,
            cluster_name=cluster_name,
            node_group_name=name,
            node_role_arn=node_role_arn,
            subnet_ids=[net.node_subnet_id] if pool.single_az else list(net.spread_subnet_ids),
            ami_type=ami_type(pool),
            capacity_type=node_group_capacity_type(pool),
            # Several Spot types: listed on the node group, none in the launch template.
            instance_types=pool.instance_types if pool.spot_alternatives else None,
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=pool.nodes.min, desired_size=pool.nodes.desired, max_size=pool.nodes.max),
            update_config=update_config(pool),
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=True),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=self.launch_template.id, version=self.launch_template.latest_version.apply(str)),
            labels=pool.node_labels,
            taints=[aws.eks.NodeGroupTaintArgs(key=t.key, value=t.value, effect=EKS_TAINT_EFFECT[t.effect])
                    for t in registration_taints(pool, burn_in)],
            tags={"Name": name},
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(after),
                                        ignore_changes=["scalingConfig.desiredSize"],
                                        custom_timeouts=node_group_timeouts(pool)),
        )
        self.register_outputs({"nodeGroup": self.node_group.node_group_name})

    @staticmethod
    def _template_args(name: str, pool: Pool, net: PoolNetwork, gpu_setup: GpuNodeSetup) -> dict:
        args: dict = dict(
            instance_type=None if pool.spot_alternatives else pool.instance_type,
            user_data=user_data(pool, gpu_setup),
            update_default_version=True,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=pool.root_volume_gib, volume_type="gp3", encrypted="true",
                    delete_on_termination="true"))],
            tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(
                resource_type="instance", tags={"Name": name, "rl.platform/pool": pool.name})],
        )
        if pool.efa_enabled:
            args["network_interfaces"] = efa_interfaces(
                pool.instance, [net.cluster_security_group_id, net.efa_security_group_id])
        if pool.reserved:
            args["capacity_reservation_specification"] = (
                aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                    capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                        **_reservation_target(pool.capacity.reservation_id))))
        if pool.capacity.type is CapacityType.CAPACITY_BLOCK:
            args["instance_market_options"] = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
                market_type="capacity-block")
        return args


def _reservation_target(reservation: str) -> dict:
    if reservation.startswith("arn:"):
        return {"capacity_reservation_resource_group_arn": reservation}
    return {"capacity_reservation_id": reservation}

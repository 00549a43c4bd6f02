"""Platform: the whole AWS side of a stack as one typed dependency graph.

Network -> cluster (control plane, pre-node add-ons) -> EFA security group and node role -> one
NodePool per pool -> add-ons that need nodes (CoreDNS, node monitoring, CloudWatch) and the device
plugins; the checkpoint bucket and the image registry (ECR repository, pull-through caches of the
public registries, ECR interface endpoints so image pulls skip the NAT, the node role's pulls scoped
to the platform's repositories). Everything is derived
from one validated StackConfig; nothing is registered for a config that does not validate.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from .checkpoint_backup import backup_opt_in
from .checkpoints import CheckpointBucket
from .cluster import Cluster
from stackconfig.deploy import DeployPhase
from stackconfig.stack import Role, StackConfig
from .device_plugins import DevicePlugins, gpu_taints
from .efa import EfaSecurityGroup
from .gdrcopy_source import GdrcopyTarball
from .gpu_node_boot import GdrcopySource, GpuNodeSetup
from .iam import service_role
from .network import Network, plan_subnets
from .registry import ImageRegistry
from .node_pool import NodePool, PoolNetwork

NODE_POLICIES = ["AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly"]
"""The node role's managed policies. EKS refuses CreateNodegroup for a node role without
AmazonEC2ContainerRegistryReadOnly ("The provided role doesn't have the Amazon EKS Managed Policies
associated with it": aws/containers-roadmap#1610; EKS user guide, "Amazon EKS node IAM role";
terraform-aws-eks v21 and pulumi-eks attach it always). It allows every ECR read on ``*``; the
registry's ``node_pull_policy`` denies the pull actions outside the platform's repositories, so the
scoping holds. The CNI gets its own Pod Identity role."""


class Platform(pulumi.ComponentResource):
    """VPC, EKS, node pools with full EFA, device plugins and the checkpoint bucket for one stack."""

    def __init__(self, cfg: StackConfig, gpu_setups: Mapping[str, GpuNodeSetup] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        """``gpu_setups``: per pool name, what its GPU nodes install at boot for the kernels the
        workloads run (``components.gpu_node_setup``); none by default."""
        name = cfg.cluster_name
        subnets = plan_subnets(cfg)  # fails before any resource when the subnets cannot hold the pools
        super().__init__("rlplatform:index:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.config = cfg
        namespace = name.lower()  # ECR names are lowercase
        repository_name = f"{namespace}/workloads"
        images = {"repository_name": repository_name, "cache_namespace": namespace,
                  "credentials": cfg.registries.credentials}
        if cfg.checkpoints.retain_on_destroy and cfg.deploy.backup_opt_in:
            backup_opt_in(name, self)
        if cfg.deploy.phase is DeployPhase.BOOTSTRAP:
            # The repository alone (same name and parent as in the full phase: same URN), so the
            # images can be pushed before anything that pulls them exists (stackconfig.deploy).
            self.registry = ImageRegistry(f"{name}-images", cfg.region, **images, opts=child)
            self.register_outputs({})
            return
        self.network = Network(name, cfg, subnets, opts=child)
        self.cluster = Cluster(name, cfg, self.network.cluster_subnet_ids, opts=child)
        efa_sg = EfaSecurityGroup(f"{name}-efa", self.network.vpc.id, opts=child)
        node_role = service_role(f"{name}-node", "ec2.amazonaws.com", NODE_POLICIES, self)
        net = PoolNetwork(node_subnet_id=self.network.node_subnet_id,
                          spread_subnet_ids=self.network.private_subnet_ids,
                          cluster_security_group_id=self.cluster.security_group_id,
                          efa_security_group_id=efa_sg.id)
        self.registry = ImageRegistry(f"{name}-images", cfg.region, self.network.vpc.id,
                                      self.network.private_subnet_ids, self.cluster.security_group_id,
                                      puller_role_name=node_role.role.name, **images, opts=child)
        after = [*self.cluster.node_addons, *node_role.attachments, self.registry.pull_policy,
                 *self.network.egress]
        setups = gpu_setups or {}
        self.checkpoints = CheckpointBucket(f"{name}-checkpoints", cfg.checkpoints, self.cluster.name,
                                            cluster_arn=self.cluster.eks.arn, opts=child)
        # gdrdrv's source, staged once in the bucket (nodes no longer fetch it from GitHub at boot).
        self.gdrcopy = GdrcopyTarball(f"{name}-gdrcopy", self.checkpoints.bucket.id, self.checkpoints.arn,
                                      self.checkpoints.key_arn, node_role.role.name, cfg.region,
                                      opts=pulumi.ResourceOptions(parent=self, depends_on=[self.checkpoints])) \
            if any(s.gdrcopy for s in setups.values()) else None
        source = None if self.gdrcopy is None else pulumi.Output.from_input(self.gdrcopy.bucket).apply(
            lambda bucket: GdrcopySource(bucket=bucket, region=cfg.region))
        staged = [] if self.gdrcopy is None else [self.gdrcopy.object, self.gdrcopy.read]
        self.pools = {p.name: NodePool(f"{name}-{p.name}", p, self.cluster.name, node_role.role.arn, net,
                                       after=[*after, *(staged if setups.get(p.name, GpuNodeSetup()).gdrcopy else [])],
                                       gpu_setup=setups.get(p.name, GpuNodeSetup()),
                                       burn_in=cfg.burn_in.enabled, gdrcopy_source=source, opts=child)
                      for p in cfg.pools}
        system = self.pools[cfg.pool(Role.SYSTEM).name].node_group
        self.node_addons = self.cluster.add_node_addons(after=[system])
        self.device_plugins = DevicePlugins(f"{name}-device-plugins", gpu_taints(cfg.pools), cfg.versions.charts,
                                            self.cluster.provider, cfg.region, self.registry.repository_url,
                                            after=[system], opts=child)
        self.network.limit_s3_endpoint([self.checkpoints.arn])
        self.register_outputs({})

    def outputs(self) -> dict:
        """What `pulumi stack output` shows: names, kubeconfig, and the figures users check first
        (in the bootstrap phase only the repository the images are pushed to)."""
        if self.config.deploy.phase is DeployPhase.BOOTSTRAP:
            return {"imageRepository": self.registry.repository_url, "deployPhase": DeployPhase.BOOTSTRAP.value}
        return {
            "clusterName": self.cluster.name,
            "kubeconfig": self.cluster.kubeconfig,
            "checkpointBucket": self.checkpoints.name,
            "checkpointWriterRoleArn": self.checkpoints.writer.arn,
            "imageRepository": self.registry.repository_url,
            "availabilityZone": self.config.availability_zone,
            "pools": {p.name: {
                "nodeGroup": self.pools[p.name].node_group.node_group_name,
                "instanceType": p.instance_type,
                "capacity": p.capacity.type.value,
                "nodes": p.nodes.model_dump(),
                "gpusPerNode": p.instance.gpus,
                "gpusAtDesired": p.instance.gpus * p.nodes.desired,
                "efaDevicesPerNode": p.efa_devices,
            } for p in self.config.pools},
        }

"""Typical create times per resource type: the table behind the plan's modelled deploy path.

These are planning figures, not measurements of this project: what a create of each type
usually takes on AWS as provider waiters see it (the provider returns when the resource is
usable, e.g. an EKS cluster ACTIVE, a managed node group ACTIVE with its nodes joined, a Helm
release with ``atomic`` once its pods are ready). Sources and reasoning per row:

- EKS control plane: AWS gave ~15 min as the average provisioning time
  (aws/containers-roadmap#1227) and has shortened it since; 10 min is used.
- Managed node group: ACTIVE only once the desired nodes have joined; 2-5 min for CPU nodes
  (EC2 boot + nodeadm join). GPU nodes (NVIDIA AMI) take longer: large instances, driver and
  EFA initialisation, instance-store RAID0 assembly; 8 min is used.
- EKS add-ons: the API waits until the add-on is ACTIVE; ~1 min, CoreDNS ~2 min because its
  pods must become ready on nodes.
- NAT gateway ~2 min (pending -> available); KMS key ~15 s; gateway VPC endpoint ~10 s; IAM
  roles and attachments a few seconds (the provider retries through IAM propagation).
- AWS Backup vault, vault lock and plan: synchronous API calls, a few seconds (estimates); a
  backup selection ~10 s, as AWS Backup rejects a role IAM has not propagated yet and the
  provider retries.
- Helm release with ``atomic`` (device plugins): chart fetch plus DaemonSet rollout, ~1 min.
- Kubernetes objects without await logic (custom resources such as a RayCluster,
  ConfigMaps, ServiceAccounts) ~2 s; Deployments/StatefulSets/Jobs are awaited until ready.
- Component resources and providers are bookkeeping: 0 s.

Replace a row with a measured figure after a real ``pulumi up`` (``pulumi stack history`` /
``--debug`` timings) and the plan's critical path follows.
"""

from __future__ import annotations

from typing import Any, Mapping

SECONDS: dict[str, int] = {
    # Network
    "aws:ec2/vpc:Vpc": 3,
    "aws:ec2/vpcIpv4CidrBlockAssociation:VpcIpv4CidrBlockAssociation": 5,
    "aws:ec2/subnet:Subnet": 2,
    "aws:ec2/internetGateway:InternetGateway": 2,
    "aws:ec2/eip:Eip": 2,
    "aws:ec2/natGateway:NatGateway": 120,
    "aws:ec2/routeTable:RouteTable": 2,
    "aws:ec2/routeTableAssociation:RouteTableAssociation": 1,
    "aws:ec2/vpcEndpoint:VpcEndpoint": 10,
    "aws:ec2/vpcEndpointPolicy:VpcEndpointPolicy": 2,
    "aws:ec2/securityGroup:SecurityGroup": 3,
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": 1,
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": 1,
    "aws:ec2/securityGroupRule:SecurityGroupRule": 1,
    # Image registry
    "aws:ecr/repository:Repository": 2,
    "aws:ecr/lifecyclePolicy:LifecyclePolicy": 1,
    "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": 1,
    # Nodes
    "aws:ec2/launchTemplate:LaunchTemplate": 2,
    "aws:ec2/placementGroup:PlacementGroup": 2,
    "aws:eks/nodeGroup:NodeGroup": 240,
    # Control plane and its add-ons
    "aws:kms/key:Key": 15,
    "aws:kms/keyPolicy:KeyPolicy": 2,
    "aws:eks/cluster:Cluster": 600,
    "aws:eks/addon:Addon": 60,
    "aws:eks/accessEntry:AccessEntry": 2,
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": 2,
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": 3,
    # IAM
    "aws:iam/role:Role": 3,
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": 2,
    "aws:iam/rolePolicy:RolePolicy": 2,
    # Storage
    "aws:s3/bucket:Bucket": 3,
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": 2,
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": 2,
    "aws:s3/bucketVersioning:BucketVersioning": 2,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": 2,
    "aws:s3/bucketPolicy:BucketPolicy": 2,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": 5,
    "aws:s3/bucketObjectv2:BucketObjectv2": 5,  # the GDRCopy source tarball: one fetch, one PutObject
    # AWS Backup: vault, lock, plan and selection are synchronous API calls (estimates); the
    # selection's create is retried while IAM propagates its new role, ~10 s.
    "aws:backup/vault:Vault": 3,
    "aws:backup/vaultLockConfiguration:VaultLockConfiguration": 2,
    "aws:backup/plan:Plan": 2,
    "aws:backup/selection:Selection": 10,
    "aws:backup/regionSettings:RegionSettings": 2,  # UpdateRegionSettings: one synchronous call (estimate)
    # FSx for Lustre (checkpoint file system): creation to AVAILABLE is typically 5-10 min for
    # PERSISTENT_2; a data repository association with a metadata import a few minutes.
    "aws:fsx/lustreFileSystem:LustreFileSystem": 600,
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": 180,
    # Kubernetes
    "kubernetes:helm.sh/v3:Release": 60,
    "kubernetes:apps/v1:Deployment": 60,
    "kubernetes:apps/v1:StatefulSet": 60,
    "kubernetes:apps/v1:DaemonSet": 60,
    "kubernetes:batch/v1:Job": 60,
}

GPU_NODE_GROUP_SECONDS = 480
"""Managed node group on an NVIDIA AMI (GPU nodes); see the module notes."""

COREDNS_SECONDS = 120

BY_PROVIDER: dict[str, int] = {"kubernetes": 2, "aws": 5}
"""Types missing from the table: a short create, by provider package."""
UNKNOWN_SECONDS = 5


def create_seconds(type_: str, inputs: Mapping[str, Any] | None = None, custom: bool = True) -> int:
    """Typical seconds from the start of a create until the provider reports it done."""
    if not custom or type_.startswith("pulumi:providers:"):
        return 0
    inputs = inputs or {}
    if type_ == "aws:eks/nodeGroup:NodeGroup" and "NVIDIA" in str(inputs.get("amiType", "")):
        return GPU_NODE_GROUP_SECONDS
    if type_ == "aws:eks/addon:Addon" and inputs.get("addonName") == "coredns":
        return COREDNS_SECONDS
    if type_ in SECONDS:
        return SECONDS[type_]
    return BY_PROVIDER.get(type_.split(":", 1)[0], UNKNOWN_SECONDS)

"""Network: a VPC whose EFA and reserved nodes all sit in ONE subnet of ONE Availability Zone.

Guarantees:
- the single-AZ node subnet is sized for every single-AZ pool at its maximum node count with all
  pod IPs (EFA-only interfaces take none); a stack that cannot fit fails before anything is built;
- private subnets in two zones for the EKS control plane and the pools that may span zones;
- nodes are private and reach out through a NAT gateway in the EFA zone;
- S3 traffic (checkpoints) goes through a gateway endpoint, not the NAT; once the platform's
  buckets exist (``limit_s3_endpoint``) the endpoint reaches only them and two AWS-owned buckets the
  nodes read: ECR's layer bucket (the platform's repository, its pull-through caches and the EKS
  registry all serve layers from it; every image a node pulls is in one of them,
  ``stackconfig.images``) and the Amazon Linux 2023 package repositories, so a pod cannot copy data
  to another bucket of the region through it (other regions' buckets are not routed through a
  gateway endpoint at all). No public registry's bucket is needed: quay.io, for one, answers pulls
  from AWS addresses with presigned URLs into its own S3 bucket (quay/quay ``storage/cloud.py``,
  ``CloudFrontedS3Storage.get_direct_download_url``), which this policy would refuse.
- no internet-facing load balancer lands in the public subnets unless the stack asks for one.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from stackconfig.stack import Pool, StackConfig, StackConfigError

AWS_RESERVED_PER_SUBNET = 5
MIN_PRIVATE_PREFIX = 24
PUBLIC_PREFIX = 26
WARM_PREFIX_IPS = 16
"""With prefix delegation the CNI keeps one /28 (16 addresses) warm per node."""
ECR_LAYER_BUCKET = "prod-{region}-starport-layer-bucket"
"""Where ECR serves image layers from; a restrictive S3 gateway endpoint policy must allow
s3:GetObject on it (ECR user guide, "Amazon ECR interface VPC endpoints", "Create the Amazon S3
gateway endpoint": minimum Amazon S3 bucket permissions)."""
AL2023_REPOSITORY_BUCKET = "al2023-repos-{region}-de612dc2"
"""The Amazon Linux 2023 package repositories nodes install from with dnf (GPU node setup's kernel
headers): AL2023 user guide, "Amazon Linux 2023 ... repositories ... through a VPC endpoint"
(the bucket ARN an S3 gateway endpoint policy must allow)."""


CLUSTER_SUBNETS = ("private-a", "private-b")
"""The subnets the EKS cluster is given (``Cluster``'s ``subnet_ids``), one per zone: "Amazon EKS creates
cross-account elastic network interfaces in these subnets to allow communication between your nodes and the
Kubernetes control plane" (EKS API reference, ``VpcConfigRequest.subnetIds``)."""


def pods_per_node(pool: Pool) -> int:
    return pool.max_pods or pool.instance.max_pods


def prefix_delegation(cfg: StackConfig) -> bool:
    """On when any pool asks for more pods per node than card 0's secondary IPs allow."""
    return any(pods_per_node(p) > p.instance.max_pods for p in cfg.pools)


def node_ip_demand(pool: Pool, delegated: bool) -> int:
    """Addresses one node can hold at most: its own plus every pod IP (or /28 prefixes)."""
    pods = pods_per_node(pool)
    if delegated:
        return 1 + math.ceil(pods / 16) * 16 + WARM_PREFIX_IPS
    return 1 + pods


def pool_ip_demand(pool: Pool, delegated: bool) -> int:
    return pool.nodes.max * node_ip_demand(pool, delegated)


PUBLIC_ELB_TAG = "kubernetes.io/role/elb"
INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"
NO_LOAD_BALANCER_TAG = "kubernetes.io/cluster/_no-load-balancers"
"""A cluster tag for a name no EKS cluster can have (names start with a letter or digit).

Removing ``kubernetes.io/role/elb`` alone does not keep internet-facing load balancers out of a
subnet routed to an internet gateway:
- cloud-provider-aws v1.35.2 (EKS's Service controller), ``pkg/providers/v1/aws.go`` findSubnets
  and findELBSubnets: candidates are the VPC's subnets with this cluster's tag or with no
  ``kubernetes.io/cluster/`` tag at all (``tags.go`` hasNoClusterPrefixTag); an internet-facing
  load balancer takes every public candidate, the role tag only breaks ties within a zone;
- AWS Load Balancer Controller v2.17.1, ``docs/deploy/subnet_discovery.md``: without a subnet
  carrying the role tag, candidates are the subnets whose reachability matches the scheme (since
  v2.12.1); subnets tagged for another cluster only are filtered out.
A ``kubernetes.io/cluster/<other>`` tag is what both skip."""


def load_balancer_tags(cfg: StackConfig, subnet: "SubnetPlan") -> dict[str, str]:
    """Private subnets take internal load balancers. Public subnets take internet-facing ones only
    when the stack asks (``network.publicLoadBalancers``); otherwise they hold the NAT gateway alone
    and are tagged out of both controllers' discovery."""
    if not subnet.public:
        return {INTERNAL_ELB_TAG: "1"}
    if cfg.network.public_load_balancers:
        return {PUBLIC_ELB_TAG: "1"}
    return {NO_LOAD_BALANCER_TAG: "shared"}


@dataclass(frozen=True)
class SubnetPlan:
    name: str
    zone: str
    cidr: str
    public: bool
    demand: int
    """Addresses the pools placed here can take at maximum size."""

    @property
    def capacity(self) -> int:
        return ipaddress.IPv4Network(self.cidr).num_addresses - AWS_RESERVED_PER_SUBNET


def _prefix_for(demand: int, floor: int) -> int:
    bits = max(0, math.ceil(math.log2(demand + AWS_RESERVED_PER_SUBNET)))
    return min(floor, 32 - bits)


def plan_subnets(cfg: StackConfig) -> list[SubnetPlan]:
    """Carve the VPC (and the optional EFA CIDR) into subnets; fail clearly if they cannot fit."""
    delegated = prefix_delegation(cfg)
    zone_a, zone_b = cfg.availability_zone, cfg.secondary_availability_zone
    efa_demand = sum(pool_ip_demand(p, delegated) for p in cfg.pools if p.single_az)
    spread_demand = sum(pool_ip_demand(p, delegated) for p in cfg.pools if not p.single_az)
    wanted = [
        ("nodes", zone_a, _prefix_for(efa_demand, MIN_PRIVATE_PREFIX), False, efa_demand),
        # Either zone may have to hold the whole spread pool when the other has no capacity.
        ("private-a", zone_a, _prefix_for(spread_demand, MIN_PRIVATE_PREFIX), False, spread_demand),
        ("private-b", zone_b, _prefix_for(spread_demand, MIN_PRIVATE_PREFIX), False, spread_demand),
        ("public-a", zone_a, PUBLIC_PREFIX, True, 0),
        ("public-b", zone_b, PUBLIC_PREFIX, True, 0),
    ]
    order = [w[0] for w in wanted]
    efa_cidr = cfg.network.efa_cidr
    planned = []
    if efa_cidr:
        planned += _carve(cfg, efa_cidr, wanted[:1], "network.efaCidr")
        wanted = wanted[1:]
    planned += _carve(cfg, cfg.network.vpc_cidr, wanted, "network.vpcCidr")
    return sorted(planned, key=lambda s: order.index(s.name))


def _carve(cfg: StackConfig, cidr: str, wanted: list[tuple], field: str) -> list[SubnetPlan]:
    space = ipaddress.IPv4Network(cidr)
    cursor = int(space.network_address)
    out = []
    for name, zone, prefix, public, demand in sorted(wanted, key=lambda w: w[2]):
        if prefix < space.prefixlen:
            cursor = int(space.broadcast_address) + 1
        size = 2 ** (32 - prefix)
        if cursor + size - 1 > int(space.broadcast_address):
            need = sum(2 ** (32 - w[2]) for w in wanted)
            raise StackConfigError(
                f"stack {cfg.stack!r}: {field}: {cidr} holds {space.num_addresses:,} addresses but the "
                f"subnets need {need:,} (subnet '{name}' alone needs /{prefix} for {demand:,} node and pod "
                f"IPs at maximum pool sizes); allowed: a larger CIDR (up to /16), network.efaCidr for the "
                f"EFA subnet, or smaller pools")
        out.append(SubnetPlan(name, zone, str(ipaddress.IPv4Network((cursor, prefix))), public, demand))
        cursor += size
    return out


def api_server_cidrs(cfg: StackConfig) -> list[str]:
    """Where a pod's packet to the API server can be headed when the VPC CNI's policy agent judges it: the
    ``kubernetes`` Service's ClusterIP (/32), as the pod sends it, and the CIDRs of ``CLUSTER_SUBNETS``,
    where the Service's endpoints, the control plane's cross-account interfaces, are once kube-proxy has
    translated it. Derived from the stack's own subnet plan, as ``Network`` creates it."""
    subnets = [s.cidr for s in plan_subnets(cfg) if s.name in CLUSTER_SUBNETS]
    return [f"{cfg.network.kubernetes_service_ip}/32", *subnets]


class Network(pulumi.ComponentResource):
    """VPC, single-AZ EFA node subnet, two-zone private and public subnets, NAT, S3 endpoint."""

    def __init__(self, name: str, cfg: StackConfig, plan: list[SubnetPlan] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        plan = plan or plan_subnets(cfg)
        super().__init__("rlplatform:network:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {"Name": name}
        self.vpc = aws.ec2.Vpc(name, cidr_block=cfg.network.vpc_cidr, enable_dns_hostnames=True,
                               enable_dns_support=True, tags=tags, opts=child)
        after_cidr = child
        if cfg.network.efa_cidr:
            extra = aws.ec2.VpcIpv4CidrBlockAssociation(
                f"{name}-efa-cidr", vpc_id=self.vpc.id, cidr_block=cfg.network.efa_cidr, opts=child)
            after_cidr = pulumi.ResourceOptions(parent=self, depends_on=[extra])
        self.subnets = {
            s.name: aws.ec2.Subnet(
                f"{name}-{s.name}", vpc_id=self.vpc.id, cidr_block=s.cidr, availability_zone=s.zone,
                map_public_ip_on_launch=False,
                tags={"Name": f"{name}-{s.name}", **load_balancer_tags(cfg, s)},
                opts=after_cidr if s.name == "nodes" else child)
            for s in plan
        }
        igw = aws.ec2.InternetGateway(name, vpc_id=self.vpc.id, tags=tags, opts=child)
        eip = aws.ec2.Eip(f"{name}-nat", domain="vpc", tags=tags, opts=child)
        nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.allocation_id,
                                 subnet_id=self.subnets["public-a"].id, tags=tags,
                                 opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]))
        public_rt = self._route_table(f"{name}-public", gateway_id=igw.id)
        private_rt = self._route_table(f"{name}-private", nat_gateway_id=nat.id)
        associations = [
            aws.ec2.RouteTableAssociation(f"{name}-{s.name}", subnet_id=self.subnets[s.name].id,
                                          route_table_id=(public_rt if s.public else private_rt).id,
                                          opts=child)
            for s in plan]
        self.egress = [nat, private_rt, *associations]
        """Nodes need these to pull images and reach AWS APIs: node groups wait for them."""
        self.region = cfg.region
        self.s3_endpoint = aws.ec2.VpcEndpoint(f"{name}-s3", vpc_id=self.vpc.id, vpc_endpoint_type="Gateway",
                                               service_name=f"com.amazonaws.{cfg.region}.s3",
                                               route_table_ids=[private_rt.id], tags=tags, opts=child)
        self.plan = plan
        self.node_subnet_id = self.subnets["nodes"].id
        self.private_subnet_ids = [self.subnets["private-a"].id, self.subnets["private-b"].id]
        self.cluster_subnet_ids = [self.subnets[name].id for name in CLUSTER_SUBNETS]
        self.register_outputs({"vpcId": self.vpc.id, "nodeSubnetId": self.node_subnet_id})

    def limit_s3_endpoint(self, bucket_arns: Sequence[pulumi.Input[str]]) -> aws.ec2.VpcEndpointPolicy:
        """The S3 gateway endpoint's policy: ``bucket_arns`` (the platform's buckets) and what nodes
        need from S3 (``s3_endpoint_policy``)."""
        policy = pulumi.Output.all(*bucket_arns).apply(lambda arns: s3_endpoint_policy(self.region, arns))
        return aws.ec2.VpcEndpointPolicy(self.s3_endpoint._name, vpc_endpoint_id=self.s3_endpoint.id,
                                         policy=policy, opts=pulumi.ResourceOptions(parent=self.s3_endpoint))

    def _route_table(self, name: str, **route) -> aws.ec2.RouteTable:
        return aws.ec2.RouteTable(name, vpc_id=self.vpc.id,
                                  routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", **route)],
                                  opts=pulumi.ResourceOptions(parent=self))


def s3_endpoint_policy(region: str, bucket_arns: Sequence[str]) -> str:
    """An endpoint policy bounds every request through the endpoint, whoever's credentials sign it
    (AWS PrivateLink guide, "Control access to VPC endpoints using endpoint policies")."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "PlatformBuckets", "Effect": "Allow", "Principal": "*", "Action": "s3:*",
         "Resource": [r for arn in bucket_arns for r in (arn, f"{arn}/*")]},
        {"Sid": "EcrLayers", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{ECR_LAYER_BUCKET.format(region=region)}/*"},
        {"Sid": "AmazonLinuxRepositories", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{AL2023_REPOSITORY_BUCKET.format(region=region)}/*"},
    ]})

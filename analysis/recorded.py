"""What the program registered, indexed by domain: pools, their node groups, launch templates,
placement groups and subnets, read from a recorded graph (``mocks.Graph``).

Everything here reads resource inputs/outputs as the engine received them (camelCase wire
names), so the plan and the rules judge the graph that ``pulumi up`` would create, not the
config that was meant to produce it. Policies (CrossGuard) see the same inputs.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

from stackconfig.stack import POOL_LABEL, Pool, StackConfig
from .mocks import Graph, Registered
from components.network import AWS_RESERVED_PER_SUBNET, node_ip_demand

CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"
VPC = "aws:ec2/vpc:Vpc"
CIDR_ASSOCIATION = "aws:ec2/vpcIpv4CidrBlockAssociation:VpcIpv4CidrBlockAssociation"
ADDON = "aws:eks/addon:Addon"
BUCKET = "aws:s3/bucket:Bucket"
NAT_GATEWAY = "aws:ec2/natGateway:NatGateway"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS_RULE = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def resource_id(r: Registered) -> str:
    return r.outputs.get("id", "")


@dataclass(frozen=True)
class PoolResources:
    """One configured pool and the resources registered for it (None where nothing was)."""

    pool: Pool
    node_group: Registered | None
    launch_template: Registered | None
    placement_group: Registered | None

    @property
    def subnet_ids(self) -> list[str]:
        return list(self.node_group.inputs.get("subnetIds", [])) if self.node_group else []

    @property
    def instance_type(self) -> str:
        lt = self.launch_template.inputs if self.launch_template else {}
        return lt.get("instanceType") or self.pool.instance_type

    @property
    def scaling(self) -> dict:
        return self.node_group.inputs.get("scalingConfig", {}) if self.node_group else {}

    @property
    def interfaces(self) -> list[dict]:
        return list(self.launch_template.inputs.get("networkInterfaces", [])) if self.launch_template else []

    @property
    def efa_attached(self) -> int:
        return sum(1 for i in self.interfaces if i.get("interfaceType") in ("efa", "efa-only"))

    @property
    def capacity_mode(self) -> str:
        """CAPACITY_BLOCK, ODCR, ON_DEMAND or SPOT as the node group and template express it."""
        kind = self.node_group.inputs.get("capacityType", "ON_DEMAND") if self.node_group else ""
        lt = self.launch_template.inputs if self.launch_template else {}
        if kind == "ON_DEMAND" and "capacityReservationSpecification" in lt:
            return "ODCR"
        return kind

    @property
    def reservation_target(self) -> str | None:
        lt = self.launch_template.inputs if self.launch_template else {}
        target = lt.get("capacityReservationSpecification", {}).get("capacityReservationTarget", {})
        return target.get("capacityReservationId") or target.get("capacityReservationResourceGroupArn")


def pool_resources(cfg: StackConfig, graph: Graph) -> list[PoolResources]:
    """Each configured pool with its node group (by the pool label it sets on its nodes), the
    launch template that node group references (by id) and that template's placement group."""
    groups = {ng.inputs.get("labels", {}).get(POOL_LABEL): ng for ng in graph.of_type(NODE_GROUP)}
    templates = {resource_id(lt): lt for lt in graph.of_type(LAUNCH_TEMPLATE)}
    placement = {pg.outputs.get("name"): pg for pg in graph.of_type(PLACEMENT_GROUP)}
    out = []
    for pool in cfg.pools:
        ng = groups.get(pool.name)
        lt = templates.get(ng.inputs.get("launchTemplate", {}).get("id")) if ng else None
        pg_name = lt.inputs.get("placement", {}).get("groupName") if lt else None
        out.append(PoolResources(pool, ng, lt, placement.get(pg_name) if pg_name else None))
    return out


def subnets_in_address_order(graph: Graph) -> list[Registered]:
    """Recorded subnets by CIDR (registration order varies from run to run)."""
    return sorted(graph.of_type(SUBNET), key=lambda s: (ipaddress.IPv4Network(s.inputs.get("cidrBlock", "0.0.0.0/32")),
                                                        s.name))


def subnets_by_id(graph: Graph) -> dict[str, Registered]:
    return {resource_id(s): s for s in subnets_in_address_order(graph)}


def vpc_blocks(graph: Graph) -> list[str]:
    """The VPC's primary CIDR and every associated secondary CIDR."""
    return ([v.inputs["cidrBlock"] for v in graph.of_type(VPC) if "cidrBlock" in v.inputs]
            + [a.inputs["cidrBlock"] for a in graph.of_type(CIDR_ASSOCIATION) if "cidrBlock" in a.inputs])


def cluster_security_group_id(graph: Graph) -> str | None:
    clusters = graph.of_type(CLUSTER)
    return clusters[0].outputs.get("vpcConfig", {}).get("clusterSecurityGroupId") if clusters else None


def prefix_delegation_enabled(graph: Graph) -> bool:
    """Whether the recorded VPC CNI add-on turns on prefix delegation."""
    for addon in graph.of_type(ADDON):
        if addon.inputs.get("addonName") == "vpc-cni":
            env = json.loads(addon.inputs.get("configurationValues") or "{}").get("env", {})
            return str(env.get("ENABLE_PREFIX_DELEGATION", "")).lower() == "true"
    return False


def short_name(cfg: StackConfig, name: str) -> str:
    """A resource name without the cluster prefix every resource of the stack carries."""
    return name.removeprefix(f"{cfg.cluster_name}-")


@dataclass(frozen=True)
class SubnetBudget:
    """Addresses a recorded subnet holds vs what the node groups placed in it take at max size."""

    name: str
    zone: str
    cidr: str
    capacity: int
    demand: int
    pools: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return self.demand <= self.capacity


def subnet_budgets(cfg: StackConfig, graph: Graph) -> list[SubnetBudget]:
    """Per recorded subnet: its usable addresses (AWS keeps 5) vs node + pod IPs of every pool
    whose node group lists it, at the pool's max size. A pool spread over several subnets is
    counted whole in each, since one zone may have to take all of it when the other has no
    capacity. Prefix delegation is read from the recorded VPC CNI add-on."""
    delegated = prefix_delegation_enabled(graph)
    pools = pool_resources(cfg, graph)
    out = []
    for subnet in subnets_in_address_order(graph):
        sid = resource_id(subnet)
        users = [r for r in pools if sid in r.subnet_ids]
        demand = sum(int(r.scaling.get("maxSize", r.pool.nodes.max)) * node_ip_demand(r.pool, delegated)
                     for r in users)
        cidr = subnet.inputs["cidrBlock"]
        out.append(SubnetBudget(short_name(cfg, subnet.name), subnet.inputs.get("availabilityZone", ""),
                                cidr, ipaddress.IPv4Network(cidr).num_addresses - AWS_RESERVED_PER_SUBNET,
                                demand, tuple(r.pool.name for r in users)))
    return out

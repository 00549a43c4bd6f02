"""Rules a stack's recorded graph must satisfy before `pulumi up` may spend money on it.

Each rule reads what the program registered (launch templates, node groups, subnets, security
group rules) and compares it with what the catalog and the stack's config require. The
``*_problems`` functions judge one resource's inputs and return plain sentences, so a resource
policy (CrossGuard) can call them with the inputs it receives; the ``check_*`` functions apply
them to a whole recorded graph and return ``Violation`` lines for the plan.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from catalog import CATALOG, InstanceType
from stackconfig.stack import CapacityType, StackConfig
from components.efa import EFA_ONLY, efa_layout
from analysis.mocks import Graph
from analysis.rules.iam_lint import POLICY_NAME as IAM_LINT, problems as iam_problems
from analysis.recorded import (CLUSTER, EGRESS_RULE, INGRESS_RULE, PoolResources, SubnetBudget,
                       cluster_security_group_id, pool_resources, short_name, subnet_budgets,
                       subnets_by_id, vpc_blocks)

EFA_LAYOUT = "efa-layout"
SINGLE_AZ = "single-az"
PLACEMENT = "placement-vs-reservation"
EFA_PEERS = "efa-security-group"
IP_BUDGET = "ip-budget"
UNSCHEDULABLE = "unschedulable-pod"
POOL_MISSING = "pool-not-registered"

FORBIDDEN_ON_INTERFACE = ("subnetId", "associatePublicIpAddress", "ipv4Addresses", "ipv4AddressCount",
                          "ipv4Prefixes", "ipv4PrefixCount", "privateIpAddress")
"""The node group supplies the subnet; EFA-only interfaces take no address or prefix."""
FORBIDDEN_WITH_INTERFACES = ("vpcSecurityGroupIds", "securityGroupNames")
"""With interfaces in the template, security groups go on every interface, none at top level."""


@dataclass(frozen=True)
class Violation:
    rule: str
    subject: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.subject}: {self.message}"

    def to_json(self) -> dict:
        return {"rule": self.rule, "subject": self.subject, "message": self.message}


# --- one resource ---------------------------------------------------------------------------

def efa_interface_problems(template: Mapping[str, Any], instance: InstanceType,
                           security_group_ids: Sequence[str] = ()) -> list[str]:
    """What is wrong with a launch template's interfaces for full EFA on ``instance``."""
    interfaces = list(template.get("networkInterfaces") or [])
    if not interfaces:
        return [f"no network interfaces: 0 of {instance.efa_max} EFA devices attached"]
    expected = [(i.card, i.device, i.kind) for i in efa_layout(instance)]
    actual = [(int(i.get("networkCardIndex", 0)), int(i.get("deviceIndex", 0)),
               i.get("interfaceType", "interface")) for i in interfaces]
    problems = []
    attached = sum(1 for *_, kind in actual if kind in ("efa", EFA_ONLY))
    if attached != instance.efa_max:
        problems.append(f"{attached} of {instance.efa_max} EFA devices attached")
    if actual != expected:
        wrong = [f"card {c}/device {d}: {k} (want {w[2]})" if (c, d) == w[:2] else f"card {c}/device {d}: {k}"
                 for (c, d, k), w in zip(actual, expected) if (c, d, k) != w]
        missing = [f"card {c}/device {d}: {k}" for c, d, k in expected[len(actual):]]
        extra = [f"card {c}/device {d}: {k}" for c, d, k in actual[len(expected):]]
        detail = "; ".join(wrong + [f"missing {m}" for m in missing] + [f"unexpected {e}" for e in extra])
        problems.append(f"interfaces differ from the {instance.name} EFA layout ({detail})")
    for n, iface in enumerate(interfaces):
        bad = [k for k in FORBIDDEN_ON_INTERFACE if iface.get(k) not in (None, [], "")]
        if bad:
            problems.append(f"interface {n} sets {', '.join(bad)}")
        groups = list(iface.get("securityGroups") or [])
        lacking = [g for g in security_group_ids if g not in groups]
        if lacking:
            problems.append(f"interface {n} lacks security group(s) {', '.join(lacking)}")
    top = [k for k in FORBIDDEN_WITH_INTERFACES if template.get(k)]
    if top:
        problems.append(f"template-level {', '.join(top)} set alongside network interfaces")
    return problems


def placement_problems(res: PoolResources, placement_strategy: str | None = None) -> list[str]:
    """Placement group iff EFA without a reservation; reservation targeted as configured."""
    pool, lt, ng = res.pool, res.launch_template.inputs, res.node_group.inputs
    problems = []
    group = lt.get("placement", {}).get("groupName")
    if pool.placement_group and not group:
        problems.append("EFA pool without a reservation has no cluster placement group")
    elif pool.placement_group and placement_strategy != "cluster":
        problems.append(f"placement group {group!r} has strategy {placement_strategy!r}, not 'cluster'")
    elif group and pool.reserved:
        problems.append(f"placement group {group!r} on a {pool.capacity.type} pool: a forced placement "
                        f"group blocks or shrinks launches into a reservation")
    elif group and not pool.efa_enabled:
        problems.append(f"placement group {group!r} on a pool without EFA")
    if res.capacity_mode != pool.capacity.type.value:
        problems.append(f"registered as {res.capacity_mode}, configured as {pool.capacity.type}")
    if pool.reserved and res.reservation_target != pool.capacity.reservation_id:
        problems.append(f"launch template targets reservation {res.reservation_target!r}, "
                        f"configured {pool.capacity.reservation_id!r}")
    if not pool.reserved and res.reservation_target:
        problems.append(f"launch template targets reservation {res.reservation_target!r} on a "
                        f"{pool.capacity.type} pool")
    block = lt.get("instanceMarketOptions", {}).get("marketType") == "capacity-block"
    if (pool.capacity.type is CapacityType.CAPACITY_BLOCK) != block:
        problems.append("instanceMarketOptions.marketType must be 'capacity-block' exactly when the "
                        "pool runs in a Capacity Block")
    if pool.capacity.type is CapacityType.CAPACITY_BLOCK and ng.get("instanceTypes"):
        problems.append("a Capacity Block node group takes its instance type from the launch template only")
    return problems


def subnet_outside_vpc(cidr: str, blocks: Iterable[str]) -> bool:
    net = ipaddress.IPv4Network(cidr)
    return not any(net.subnet_of(ipaddress.IPv4Network(b)) for b in blocks)


# --- the whole graph ------------------------------------------------------------------------

def check_pools_registered(cfg: StackConfig, pools: list[PoolResources]) -> list[Violation]:
    return [Violation(POOL_MISSING, f"pool {r.pool.name}",
                      "no node group with launch template registered for this pool")
            for r in pools if r.node_group is None or r.launch_template is None]


def check_efa_layout(cfg: StackConfig, graph: Graph, pools: list[PoolResources]) -> list[Violation]:
    """Every EFA pool's launch template carries the full interface layout of its instance type,
    with the cluster security group (or nodes never join) and EFA peers' group on each."""
    cluster_sg = cluster_security_group_id(graph)
    out = []
    for r in pools:
        if not r.launch_template:
            continue
        subject = f"pool {r.pool.name} (launch template {r.launch_template.name})"
        instance = CATALOG.get(r.instance_type)
        if instance is None:
            out.append(Violation(EFA_LAYOUT, subject, f"instance type {r.instance_type!r} is not in the catalog"))
            continue
        if r.pool.efa_enabled:
            required = [cluster_sg] if cluster_sg else []
            out += [Violation(EFA_LAYOUT, subject, p)
                    for p in efa_interface_problems(r.launch_template.inputs, instance, required)]
        elif r.efa_attached:
            out.append(Violation(EFA_LAYOUT, subject, f"{r.efa_attached} EFA interfaces on a pool configured without EFA"))
    return out


def check_single_az(cfg: StackConfig, graph: Graph, pools: list[PoolResources]) -> list[Violation]:
    """All single-AZ node groups (EFA or reserved) share one subnet, in the stack's zone; the
    control plane spans two zones; every subnet lies inside a VPC CIDR block."""
    subnets = subnets_by_id(graph)
    out = []
    single = [r for r in pools if r.node_group and r.pool.single_az]
    used = {tuple(r.subnet_ids) for r in single}
    for r in single:
        subject = f"pool {r.pool.name} (node group {r.node_group.name})"
        if len(r.subnet_ids) != 1:
            out.append(Violation(SINGLE_AZ, subject, f"spans {len(r.subnet_ids)} subnets; EFA traffic and "
                                 f"reservations need exactly one"))
        for sid in r.subnet_ids:
            zone = subnets[sid].inputs.get("availabilityZone") if sid in subnets else None
            if zone != cfg.availability_zone:
                out.append(Violation(SINGLE_AZ, subject, f"subnet {sid} is in {zone}, not the stack's zone "
                                     f"{cfg.availability_zone}"))
    if len(used) > 1:
        out.append(Violation(SINGLE_AZ, "single-AZ pools", f"use {len(used)} different subnet sets "
                             f"{sorted(used)}: EFA peers must share one subnet"))
    for cluster in graph.of_type(CLUSTER):
        zones = {subnets[s].inputs.get("availabilityZone") for s in cluster.inputs.get("vpcConfig", {})
                 .get("subnetIds", []) if s in subnets}
        if len(zones) < 2:
            out.append(Violation(SINGLE_AZ, f"EKS cluster {cluster.name}",
                                 f"control-plane subnets span {len(zones)} zone(s); EKS requires two"))
    blocks = vpc_blocks(graph)
    for s in subnets.values():
        if blocks and s.inputs.get("cidrBlock") and subnet_outside_vpc(s.inputs["cidrBlock"], blocks):
            out.append(Violation(IP_BUDGET, f"subnet {short_name(cfg, s.name)}",
                                 f"{s.inputs['cidrBlock']} is outside the VPC's CIDR blocks {blocks}"))
    return out


def check_placement(cfg: StackConfig, graph: Graph, pools: list[PoolResources]) -> list[Violation]:
    out = []
    for r in pools:
        if r.node_group and r.launch_template:
            strategy = r.placement_group.inputs.get("strategy") if r.placement_group else None
            out += [Violation(PLACEMENT, f"pool {r.pool.name}", p) for p in placement_problems(r, strategy)]
    return out


def check_efa_security_group(cfg: StackConfig, graph: Graph, pools: list[PoolResources]) -> list[Violation]:
    """EFA interfaces carry a group that admits all traffic from itself AND to itself (without
    the egress rule NCCL fails with "Unreachable remote")."""
    cluster_sg = cluster_security_group_id(graph)

    def self_rule(rule_type: str, group: str) -> bool:
        return any(r.inputs.get("securityGroupId") == group and r.inputs.get("ipProtocol") == "-1"
                   and r.inputs.get("referencedSecurityGroupId") == group for r in graph.of_type(rule_type))

    out = []
    for r in pools:
        if not (r.pool.efa_enabled and r.interfaces):
            continue
        groups = {g for i in r.interfaces for g in i.get("securityGroups", []) if g != cluster_sg}
        peers = [g for g in groups if self_rule(INGRESS_RULE, g) and self_rule(EGRESS_RULE, g)]
        if not peers:
            out.append(Violation(EFA_PEERS, f"pool {r.pool.name}",
                                 f"no security group on its EFA interfaces ({', '.join(sorted(groups)) or 'none'}) "
                                 f"allows all protocols both in from and out to itself"))
    return out


def check_iam_documents(graph: Graph) -> list[Violation]:
    """Every IAM document the program registered passes the IAM lint as its kind (``iam_lint``)."""
    return [Violation(IAM_LINT, f"{r.type.rsplit(':', 1)[-1]} {r.name}", p)
            for r in graph.resources if r.custom for p in iam_problems(r.type, r.name, r.inputs)]


def check_ip_budget(budgets: Iterable[SubnetBudget]) -> list[Violation]:
    return [Violation(IP_BUDGET, f"subnet {b.name} ({b.cidr}, {b.zone})",
                      f"pools {', '.join(b.pools)} need {b.demand:,} node and pod IPs at max size; "
                      f"the subnet holds {b.capacity:,}")
            for b in budgets if not b.fits]


def check_recorded_graph(cfg: StackConfig, graph: Graph) -> list[Violation]:
    """Every graph rule above, in a stable order."""
    pools = pool_resources(cfg, graph)
    out = check_pools_registered(cfg, pools)
    for check in (check_efa_layout, check_single_az, check_placement, check_efa_security_group):
        out += check(cfg, graph, pools)
    return out + check_iam_documents(graph) + check_ip_budget(subnet_budgets(cfg, graph))


def check_placements(placements: Iterable[Any]) -> list[Violation]:
    """One violation per pod template the schedulability check cannot place."""
    return [Violation(UNSCHEDULABLE, f"pod {p.pod}" + (f" on pool {p.pool}" if p.pool else ""),
                      "; ".join(p.problems) or "does not fit")
            for p in placements if not p.fits]

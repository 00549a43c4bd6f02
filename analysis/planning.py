"""The offline plan of a stack: pool figures, EFA bandwidth, cost, IP budget, workload placement,
resource counts, the modelled deploy path and every rule violation, from one recorded graph.

Pure functions of (config, recorded graph, placements): the plan CLI runs the program under
mocks and hands the graph here; tests and benchmarks do the same with their own graphs.
Figures come from what was registered (instance type and EFA interfaces from the launch
template, node counts from the node group's scaling config, subnets from the recorded CIDRs);
the catalog adds per-type facts (GPUs, EFA maximum and bandwidth, on-demand price) and the
stack's config adds only what the graph cannot carry (a Spot/reservation price).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from catalog import CATALOG
from stackconfig.stack import CapacityType, StackConfig
from .deploy_order import Schedule, inherited_waits, schedule
from .mocks import Graph
from .recorded import PoolResources, SubnetBudget, pool_resources, prefix_delegation_enabled, subnet_budgets
from analysis.rules.plan import Violation, check_placements, check_recorded_graph


@dataclass(frozen=True)
class PoolFigures:
    name: str
    role: str
    instance_type: str
    capacity: str
    nodes_min: int
    nodes_desired: int
    nodes_max: int
    gpus_per_node: int
    efa_attached: int
    efa_max: int
    efa_gbps_per_node: float
    usd_per_node_hour: float
    price_basis: str
    """``on-demand`` (catalog) or ``stack`` (the pool's capacity.hourlyPrice)."""

    @property
    def gpus_desired(self) -> int:
        return self.gpus_per_node * self.nodes_desired

    @property
    def gpus_max(self) -> int:
        return self.gpus_per_node * self.nodes_max

    @property
    def efa_gbps_total(self) -> float:
        return self.efa_gbps_per_node * self.nodes_desired

    @property
    def usd_per_hour(self) -> float:
        return self.usd_per_node_hour * self.nodes_desired

    @property
    def usd_per_hour_max(self) -> float:
        return self.usd_per_node_hour * self.nodes_max

    @property
    def usd_per_gpu_hour(self) -> float | None:
        return self.usd_per_node_hour / self.gpus_per_node if self.gpus_per_node else None

    def to_json(self) -> dict:
        return {**asdict(self), "gpus_desired": self.gpus_desired, "gpus_max": self.gpus_max,
                "efa_gbps_total": self.efa_gbps_total, "usd_per_hour": round(self.usd_per_hour, 4),
                "usd_per_hour_max": round(self.usd_per_hour_max, 4),
                "usd_per_gpu_hour": None if self.usd_per_gpu_hour is None else round(self.usd_per_gpu_hour, 4)}


def pool_figures(res: PoolResources) -> PoolFigures:
    """A pool's figures as registered; price from the stack when set, else the catalog's."""
    pool = res.pool
    row = CATALOG.get(res.instance_type, pool.instance)
    scaling = res.scaling
    per_node = row.efa_gbps * res.efa_attached / row.efa_max if row.efa_max else 0.0
    price = pool.capacity.hourly_price or row.on_demand_hourly_usd or 0.0
    basis = "stack" if pool.capacity.hourly_price else "on-demand"
    if pool.capacity.type is CapacityType.SPOT and not pool.capacity.hourly_price:
        basis = "on-demand (no Spot price set)"
    if not price:
        basis = "none: no catalog price; set capacity.hourlyPrice (counted as $0)"
    return PoolFigures(
        name=pool.name, role=pool.role.value, instance_type=res.instance_type,
        capacity=res.capacity_mode or pool.capacity.type.value,
        nodes_min=int(scaling.get("minSize", pool.nodes.min)),
        nodes_desired=int(scaling.get("desiredSize", pool.nodes.desired)),
        nodes_max=int(scaling.get("maxSize", pool.nodes.max)),
        gpus_per_node=row.gpus, efa_attached=res.efa_attached, efa_max=row.efa_max,
        efa_gbps_per_node=per_node, usd_per_node_hour=price, price_basis=basis)


@dataclass(frozen=True)
class Totals:
    nodes_desired: int
    nodes_max: int
    gpu_nodes_desired: int
    gpus_desired: int
    gpus_max: int
    efa_gbps_total: float
    usd_per_hour: float
    usd_per_hour_max: float

    @property
    def usd_per_gpu_hour(self) -> float | None:
        """Everything the stack runs at desired size, per GPU: CPU pools included."""
        return self.usd_per_hour / self.gpus_desired if self.gpus_desired else None


def totals(pools: Sequence[PoolFigures]) -> Totals:
    return Totals(
        nodes_desired=sum(p.nodes_desired for p in pools), nodes_max=sum(p.nodes_max for p in pools),
        gpu_nodes_desired=sum(p.nodes_desired for p in pools if p.gpus_per_node),
        gpus_desired=sum(p.gpus_desired for p in pools), gpus_max=sum(p.gpus_max for p in pools),
        efa_gbps_total=sum(p.efa_gbps_total for p in pools),
        usd_per_hour=sum(p.usd_per_hour for p in pools), usd_per_hour_max=sum(p.usd_per_hour_max for p in pools))


@dataclass
class Plan:
    config: StackConfig
    stack: str
    region: str
    zone: str
    cluster: str
    kubernetes: str
    pools: list[PoolFigures]
    totals: Totals
    prefix_delegation: bool
    ip_budget: list[SubnetBudget]
    placements: list[Any] | None
    """The schedulability check's Placements; None when the workloads module is absent."""
    placements_note: str
    resource_counts: dict[str, int]
    components: int
    schedule: Schedule
    inherited: list[tuple[Any, float]]
    unheld_seconds: float
    """The critical path if no component's depends_on held its children back."""
    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What only a real deploy can judge and will refuse if it is still so (``deploy_warnings``)."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        s = self.schedule
        return {
            "stack": self.stack, "region": self.region, "availabilityZone": self.zone,
            "cluster": self.cluster, "kubernetes": self.kubernetes,
            "pools": [p.to_json() for p in self.pools],
            "totals": {**asdict(self.totals), "usd_per_gpu_hour": self.totals.usd_per_gpu_hour},
            "ipBudget": {"prefixDelegation": self.prefix_delegation,
                         "subnets": [{**asdict(b), "pools": list(b.pools), "fits": b.fits}
                                     for b in self.ip_budget]},
            "workloadPlacement": None if self.placements is None else [
                {"pod": p.pod, "pool": p.pool, "fits": p.fits, "problems": list(p.problems)}
                for p in self.placements],
            "workloadPlacementNote": self.placements_note,
            "resources": {"custom": sum(self.resource_counts.values()), "components": self.components,
                          "byType": dict(sorted(self.resource_counts.items()))},
            "deploy": {
                "criticalPathSeconds": s.critical_seconds, "serialSeconds": s.serial_seconds,
                "parallelism": round(s.parallelism, 3),
                "criticalPath": [{"type": p.step.type, "name": p.step.name, "start": p.step.start,
                                  "seconds": p.step.seconds, "via": p.via} for p in s.path],
                "heldByComponentDependsOn": [{"type": st.type, "name": st.name, "delaySeconds": d}
                                             for st, d in self.inherited],
                "criticalPathSecondsWithoutComponentHolds": self.unheld_seconds,
            },
            "violations": [v.to_json() for v in self.violations],
            "warnings": list(self.warnings),
            "ok": self.ok,
        }


def deploy_warnings(cfg: StackConfig) -> list[str]:
    """What ``pulumi up`` refuses offline (``program.deploy_problems``: the image inventory's
    placeholders and foreign registries, example principals) and every reservation id (looked up at
    preview, never offline)."""
    import program
    lines = program.deploy_problems(cfg)
    lines += [f"pools[{p.name}].capacity.reservationId: {p.capacity.reservation_id} is not checked offline; "
              f"pulumi preview looks it up and refuses it unless AWS holds it in {cfg.availability_zone} "
              f"for {p.instance_type}" for p in cfg.pools if p.reserved]
    return lines


def make_plan(cfg: StackConfig, graph: Graph, placements: Sequence[Any] | None = None,
              placements_note: str = "") -> Plan:
    """The plan for ``cfg`` from the graph its program registered."""
    pools = [pool_figures(r) for r in pool_resources(cfg, graph) if r.node_group]
    sched = schedule(graph)
    violations = check_recorded_graph(cfg, graph)
    if placements is not None:
        violations += check_placements(placements)
    return Plan(
        config=cfg, stack=cfg.stack, region=cfg.region, zone=cfg.availability_zone, cluster=cfg.cluster_name,
        kubernetes=cfg.versions.kubernetes, pools=pools, totals=totals(pools),
        prefix_delegation=prefix_delegation_enabled(graph), ip_budget=subnet_budgets(cfg, graph),
        placements=None if placements is None else list(placements), placements_note=placements_note,
        resource_counts=dict(Counter(r.type for r in graph.resources if r.custom)),
        components=sum(1 for r in graph.resources if not r.custom),
        schedule=sched, inherited=sorted(inherited_waits(graph, sched), key=lambda h: (h[0].type, h[0].name)),
        unheld_seconds=schedule(graph, component_depends_on=False).critical_seconds, violations=violations,
        warnings=deploy_warnings(cfg))

"""Proof that every workload pod fits its pool: run before anything is registered.

``check(model)`` reads the pod templates the program emits (``render.pod_templates``) and checks,
per template, against one node of the pool its node selector picks (allocatable from
``resources.allocatable``, minus the DaemonSet reserve):

- the node selector matches the pool's node labels, and the tolerations cover the pool's taints;
- GPUs, EFA devices, CPU, memory and 2-MiB huge pages requested fit one node;
- every memory-backed volume (/dev/shm) has a size limit within the pod's memory limit;

and then, per pool, that all replicas of all templates placed there pack (first-fit decreasing)
onto the pool's desired node count. A pod that cannot is reported with the pool and the resource.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stackconfig.stack import Pool

from workloads.derive.model import WorkloadModel
from workloads.render import pod_templates
from workloads.derive.resources import EFA, GPU, HUGEPAGES, MI, allocatable, effective_requests, parse_quantity, usable

RESOURCES = ("cpu", "memory", GPU, EFA, HUGEPAGES)


@dataclass
class Placement:
    pod: str
    """Pod template name (e.g. ``ray-trainer``)."""
    pool: str
    fits: bool
    problems: list[str] = field(default_factory=list)
    replicas: int = 1
    requests: dict[str, float] = field(default_factory=dict)
    """Per pod: millicores for cpu, bytes for memory and huge pages, counts for devices."""


def _fmt(resource: str, value: float) -> str:
    if resource == "cpu":
        return f"{value / 1000:g} CPU"
    if resource in ("memory", HUGEPAGES):
        return f"{value / 1024 ** 3:.1f} GiB {resource}"
    return f"{value:g} {resource}"


def pod_requests(template: dict) -> dict[str, float]:
    """Sum of the containers' effective requests (cpu in millicores)."""
    total = {r: 0.0 for r in RESOURCES}
    for c in template["spec"]["containers"]:
        for k, v in effective_requests(c.get("resources") or {}).items():
            total[k] = total.get(k, 0.0) + v
    total["cpu"] *= 1000
    return total


def _memory_limit(template: dict) -> float:
    return sum(parse_quantity((c.get("resources") or {}).get("limits", {}).get("memory", 0))
               for c in template["spec"]["containers"])


def _pool_of(m: WorkloadModel, template: dict) -> list[Pool]:
    selector = template["spec"].get("nodeSelector") or {}
    return [p for p in m.pools if all(m.node_labels(p).get(k) == v for k, v in selector.items())]


def _template_problems(name: str, pool: Pool, labels: dict[str, str], template: dict,
                       capacity: dict[str, float]) -> list[str]:
    problems = []
    selector = template["spec"].get("nodeSelector") or {}
    for k, v in selector.items():
        if labels.get(k) != v:
            problems.append(f"pod {name}: node selector {k}={v} does not match pool {pool.name}")
    tolerated = {(t.get("key"), t.get("value"), t.get("effect")) for t in template["spec"].get("tolerations", [])
                 if t.get("operator", "Equal") == "Equal"}
    tolerated_keys = {(t.get("key"), t.get("effect")) for t in template["spec"].get("tolerations", [])
                      if t.get("operator") == "Exists"}
    for taint in pool.taints:
        if (taint.key, taint.value, taint.effect) not in tolerated and (taint.key, taint.effect) not in tolerated_keys:
            problems.append(f"pod {name}: does not tolerate taint {taint.key}={taint.value}:{taint.effect} "
                            f"of pool {pool.name}")
    req = pod_requests(template)
    for r in RESOURCES:
        if req.get(r, 0) > capacity.get(r, 0):
            problems.append(f"pod {name}: requests {_fmt(r, req[r])}, a node of pool {pool.name} "
                            f"({pool.instance_type}) has {_fmt(r, capacity.get(r, 0))} allocatable for pods")
    limit = _memory_limit(template)
    for v in template["spec"].get("volumes", []):
        ed = v.get("emptyDir")
        if ed is None or ed.get("medium") != "Memory":
            continue
        if "sizeLimit" not in ed:
            problems.append(f"pod {name}: memory-backed volume {v['name']} has no sizeLimit (pool {pool.name})")
        elif parse_quantity(ed["sizeLimit"]) >= limit:
            problems.append(f"pod {name}: /dev/shm volume {v['name']} of {ed['sizeLimit']} does not fit in the "
                            f"memory limit of {_fmt('memory', limit)} (pool {pool.name})")
    return problems


def node_capacity(m: WorkloadModel, pool: Pool) -> dict[str, float]:
    alloc = allocatable(pool, m.settings.efa_devices)
    mcpu, mem = usable(alloc)
    return {"cpu": mcpu, "memory": mem, GPU: alloc.gpus, EFA: alloc.efa, HUGEPAGES: alloc.hugepages}


def _pack(pool: Pool, pods: list[tuple[str, dict[str, float]]], capacity: dict[str, float]) -> list[str]:
    """First-fit decreasing of (name, requests) onto ``pool.nodes.desired`` nodes; names left over."""
    nodes = [dict(capacity) for _ in range(pool.nodes.desired)]
    left = []
    order = sorted(pods, key=lambda p: tuple(-p[1].get(r, 0) / (capacity.get(r) or 1) for r in
                                             (GPU, EFA, "cpu", "memory")))
    for name, req in order:
        for node in nodes:
            if all(req.get(r, 0) <= node[r] for r in RESOURCES):
                for r in RESOURCES:
                    node[r] -= req.get(r, 0)
                break
        else:
            left.append(name)
    return left


def check(m: WorkloadModel) -> list[Placement]:
    """One Placement per pod template; ``fits`` is False with the reasons when it would stay Pending."""
    placements: list[Placement] = []
    per_pool: dict[str, list[tuple[str, dict[str, float]]]] = {}
    for name, pool, template, replicas in pod_templates(m):
        matches = _pool_of(m, template)
        target = matches[0] if len(matches) == 1 else pool
        problems = []
        if len(matches) != 1:
            problems.append(f"pod {name}: node selector matches {len(matches)} pools, expected pool {pool.name}")
        capacity = node_capacity(m, target)
        problems += _template_problems(name, target, m.node_labels(target), template, capacity)
        req = pod_requests(template)
        placements.append(Placement(name, target.name, not problems, problems, replicas, req))
        if not problems:
            per_pool.setdefault(target.name, []).extend((f"{name}", req) for _ in range(replicas))
    by_name = {p.name: p for p in m.pools}
    for pool_name, pods in per_pool.items():
        pool = by_name[pool_name]
        left = _pack(pool, pods, node_capacity(m, pool))
        for p in placements:
            n = left.count(p.pod)
            if p.pool == pool_name and n:
                p.fits = False
                p.problems.append(
                    f"pod {p.pod}: {n} of {p.replicas} replicas do not fit on the {pool.nodes.desired} desired "
                    f"nodes of pool {pool_name} ({pool.instance_type}) next to the other workload pods "
                    f"(cpu/memory/GPU/EFA per node: {_fmt('cpu', node_capacity(m, pool)['cpu'])}, "
                    f"{node_capacity(m, pool)['memory'] / MI / 1024:.1f} GiB, "
                    f"{node_capacity(m, pool)[GPU]:g} GPU, {node_capacity(m, pool)[EFA]:g} EFA)")
    return placements


def unschedulable(placements: list[Placement]) -> list[str]:
    return [msg for p in placements if not p.fits for msg in p.problems]


@dataclass(frozen=True)
class PoolClaim:
    """Everything the workloads claim on one pool at desired size, against what it offers."""

    pool: str
    nodes: int
    claimed: dict[str, float]
    capacity: dict[str, float]
    """Per resource: allocatable for pods on one node (DaemonSet reserve taken off) x desired nodes."""

    @property
    def over(self) -> list[str]:
        return [r for r in RESOURCES if self.claimed.get(r, 0) > self.capacity.get(r, 0)]


def pool_claims(m: WorkloadModel, placements: list[Placement]) -> list[PoolClaim]:
    """Sum of every consumer per pool (all replicas of every pod template placed there)."""
    out = []
    for pool in m.pools:
        mine = [p for p in placements if p.pool == pool.name]
        if not mine:
            continue
        per_node = node_capacity(m, pool)
        claimed = {r: sum(p.requests.get(r, 0) * p.replicas for p in mine) for r in RESOURCES}
        out.append(PoolClaim(pool.name, pool.nodes.desired, claimed,
                             {r: per_node[r] * pool.nodes.desired for r in RESOURCES}))
    return out

"""The network tier each part of a run is held to: the narrowest Volcano HyperNode tier that holds it.

Tiers come from the EKS network labels (``render.operators.hypernode_discovery``): tier 1 is the
nodes under one layer-3 network node, tier 3 those under one layer-1 node. How many nodes one
HyperNode of a tier holds is read either from the stack (``workloads.network.tierNodes``, for the
offline plan) or from the cluster's HyperNodes (``tier_sizes_from_hypernodes``, at submit).

What is constrained, and how it reaches the pods (KubeRay v1.7.0, Volcano v1.15.1): inter-pod
affinity on the EKS label of the tier's layer (``render.runs.network_affinity``), which KubeRay
passes through in the pod templates:

- every GPU pod of the run's attempt under one network node of the gang's tier;
- the trainers under one network node of theirs.

Not the PodGroup's ``networkTopology`` (which KubeRay would copy from RayJob labels): the head runs
on CPU nodes, which carry no network labels and so belong to no HyperNode, so a hard constraint
could never place it; and Volcano's preempt action skips every job that has one
(actions/preempt/preempt.go:131-137). Not a PodGroup ``subGroupPolicy``: KubeRay cannot write one
and rewrites the PodGroup with its copy of the type from volcano.sh/apis v1.13.0 (ray-operator/
go.mod), which has none (volcano_scheduler.go:186-189). Not the rollout engines one by one: Miles
forms each engine from placement-group bundles sorted by node IP at run time, so no pod label names
an engine's members before the run starts; they are held by the gang's tier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from workloads.schema.run import RunFile, TopologyMode

EKS_NETWORK_LAYERS = tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3))
"""EKS labels each node of supported types with its place in the AWS network, layer 3 the closest
(EKS user guide, "Place distributed AI/ML workloads with network topology labels")."""


def tier_label(tier: int) -> str:
    """The EKS node label of a Volcano tier: discovery lists the layers top down, so layer 3 is tier 1."""
    return EKS_NETWORK_LAYERS[len(EKS_NETWORK_LAYERS) - tier]


TIERS = (1, 2, 3)


@dataclass(frozen=True)
class TierChoice:
    part: str
    """``run`` (the whole gang) or ``trainer``."""
    nodes: int
    tier: int | None
    """The narrowest tier that holds ``nodes``; None when none does or tiers are unknown."""
    mode: TopologyMode
    known: bool = True
    """False when no tier sizes are known (offline, without ``workloads.network.tierNodes``)."""

    @property
    def constrained(self) -> bool:
        return self.tier is not None and self.mode is not TopologyMode.NONE

    def describe(self) -> str:
        if self.mode is TopologyMode.NONE:
            return f"{self.part} ({self.nodes} nodes): no network constraint"
        if not self.known:
            return f"{self.part} ({self.nodes} nodes): tier chosen at submit from the cluster's HyperNodes"
        if self.tier is None:
            return f"{self.part} ({self.nodes} nodes): no tier holds it"
        return (f"{self.part} ({self.nodes} nodes): tier {self.tier} ({self.mode.value}; pod affinity on "
                f"{tier_label(self.tier)})")


def narrowest_tier(nodes: int, tier_nodes: Mapping[int, int]) -> int | None:
    """The lowest tier one of whose HyperNodes holds ``nodes`` nodes, or None."""
    return next((t for t in TIERS if tier_nodes.get(t, 0) >= nodes), None)


def run_tiers(run: RunFile, train_pool: str, tier_nodes: Mapping[int, int],
              train_tier_nodes: Mapping[int, int] | None = None) -> tuple[TierChoice, TierChoice]:
    """The tier of the whole gang (every node of the run) and of its training group (sizes counted
    over the training pool's nodes when given, else the same as the gang's)."""
    total = sum(run.nodes.values())
    train = run.nodes[train_pool]
    trainer_tiers = tier_nodes if train_tier_nodes is None else train_tier_nodes
    return (TierChoice("run", total, narrowest_tier(total, tier_nodes), run.topology, bool(tier_nodes)),
            TierChoice("trainer", train, narrowest_tier(train, trainer_tiers), run.topology, bool(trainer_tiers)))


def unplaceable(run: RunFile, choices: Iterable[TierChoice], tier_nodes: Mapping[int, int]) -> str | None:
    """Why a hard-constrained run can never be placed (a part larger than every tier), or None."""
    if run.topology is not TopologyMode.HARD or not tier_nodes:
        return None
    for c in choices:
        if c.tier is None:
            widest = max(tier_nodes)
            return (f"run {run.name}: {c.part}: {c.nodes} nodes, more than one HyperNode of the widest tier "
                    f"({widest}) holds ({tier_nodes[widest]}); allowed: topology soft or none, or fewer nodes")
    return None


def tier_sizes_from_hypernodes(hypernodes: Iterable[Mapping], needs: Iterable[tuple[set[str], int]]) -> dict[int, int]:
    """Per tier, the most nodes of a gang one HyperNode holds, from ``topology.volcano.sh`` HyperNode objects
    (tier-1 members are Nodes by exact name, higher tiers' are HyperNodes). ``needs`` pairs each pool's node
    names with the nodes the gang takes there: a HyperNode holds, per pool, at most what the gang needs, so a
    gang of train and rollout nodes counts as fitting a tier only where one HyperNode has enough of both
    (a HyperNode of 16 train nodes holds 1 of a gang of 1 train and 2 rollout nodes, not 3: the gang's hard
    pod affinity at that tier could never be met, as the control-plane tier showed)."""
    by_name, needs = {h["metadata"]["name"]: h for h in hypernodes}, list(needs)

    def members(name: str) -> set[str]:
        spec = by_name[name]["spec"]
        out: set[str] = set()
        for m in spec.get("members", []):
            exact = m.get("selector", {}).get("exactMatch", {}).get("name")
            if m.get("type") == "Node" and exact:
                out.add(exact)
            elif m.get("type") == "HyperNode" and exact in by_name:
                out |= members(exact)
        return out

    sizes: dict[int, int] = {}
    for name, h in by_name.items():
        tier, held = int(h["spec"]["tier"]), members(name)
        sizes[tier] = max(sizes.get(tier, 0), sum(min(len(held & nodes), need) for nodes, need in needs))
    return {t: n for t, n in sizes.items() if n}

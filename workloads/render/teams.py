"""A team's Kubernetes objects: namespace, Volcano queue, ResourceQuota, NetworkPolicies."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from stackconfig.stack import Pool

from ..resources import EFA, GPU
from ..teams import PART_OF_LABEL, QUOTA_NAME, TEAM_LABEL, TeamSettings
from .common import PART_OF
from .network_policies import _all_tcp, baseline, policy


def namespace_of(team: TeamSettings) -> str:
    """The team's namespace (and queue) name."""
    return f"team-{team.name}"


def team_labels(team: TeamSettings, component: str | None = None) -> dict[str, str]:
    """Labels of every object of the team."""
    out = {PART_OF_LABEL: PART_OF, TEAM_LABEL: team.name}
    if component:
        out["app.kubernetes.io/name"] = component
    return out


def _sum_caps(team: TeamSettings) -> int:
    """GPUs the team may use at most, over all its pools."""
    return sum(q.cap for q in team.gpus.values())


def _sum_guarantees(team: TeamSettings) -> int:
    """GPUs the team is guaranteed, over all its pools."""
    return sum(q.guarantee for q in team.gpus.values())


def team_efa(team: TeamSettings, pools: Iterable[Pool]) -> int:
    """EFA devices that go with the team's GPU caps: per pool cap / GPUs per node x EFA per node, rounded up."""
    by_name = {p.name: p for p in pools}
    return sum(math.ceil(q.cap * by_name[n].efa_devices / by_name[n].instance.gpus) for n, q in team.gpus.items())


def team_namespace(team: TeamSettings) -> dict:
    """The team's Namespace ``team-<name>``."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace_of(team), "labels": team_labels(team)}}


def team_queue(team: TeamSettings, pools: Iterable[Pool]) -> dict:
    """The team's Volcano Queue: guarantee/deserved = sum of guarantees, capability = sum of caps (in GPUs).

    Volcano quotas are per resource (``nvidia.com/gpu``), not per pool: a team with quota on two GPU
    pools gets one GPU total here; the per-pool split is checked by ``validate_teams`` only.
    """
    guarantee, cap = _sum_guarantees(team), _sum_caps(team)
    spec: dict[str, Any] = {"weight": team.weight, "reclaimable": team.reclaimable, "priority": team.priority,
                            "capability": {GPU: cap}}
    if guarantee:
        spec["guarantee"] = {"resource": {GPU: guarantee}}
        spec["deserved"] = {GPU: guarantee}
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": namespace_of(team), "labels": team_labels(team, "volcano-queue")},
            "spec": spec}


def team_resource_quota(team: TeamSettings, pools: Iterable[Pool]) -> dict:
    """The team namespace's ResourceQuota ``gpu-quota``: GPUs (sum of caps) and the EFA devices with them."""
    hard = {f"requests.{GPU}": str(_sum_caps(team))}
    efa = team_efa(team, pools)
    if efa:
        hard[f"requests.{EFA}"] = str(efa)
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": QUOTA_NAME, "namespace": namespace_of(team),
                         "labels": team_labels(team, "resource-quota")},
            "spec": {"hard": hard}}


def team_network_policies(team: TeamSettings) -> list[dict]:
    """The workloads' baseline (default deny, DNS), and all TCP between the team namespace's own pods."""
    def md(name: str) -> dict:
        return {"name": name, "namespace": namespace_of(team), "labels": team_labels(team, "network-policy")}
    ns_pods = {"podSelector": {}}  # every pod of the policy's own namespace
    return [*baseline(md),
            policy(md("allow-team-tcp"), None, "the team's pods <-> the team's pods on every TCP port",
                   ingress=[{"from": [ns_pods], "ports": _all_tcp()}], egress=[{"to": [ns_pods], "ports": _all_tcp()}])]


TEAM_SERVICE_ACCOUNT = "checkpoint-writer"


def team_checkpoint_prefix(team: TeamSettings) -> str:
    """The team's part of the bucket (and of the file system's exported ``checkpoints/`` folder)."""
    return f"checkpoints/teams/{team.name}/"


def team_service_account(team: TeamSettings) -> dict:
    """The service account the team's Pod Identity role (its checkpoint prefix only) is bound to."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": TEAM_SERVICE_ACCOUNT, "namespace": namespace_of(team),
                         "labels": team_labels(team, "checkpoint-writer")}}


def team_objects(team: TeamSettings, pools: Iterable[Pool]) -> list[dict]:
    """Every object of one team, namespace first."""
    pools = list(pools)
    return [team_namespace(team), team_queue(team, pools), team_resource_quota(team, pools),
            team_service_account(team), *team_network_policies(team)]

"""A team's Kubernetes objects: namespace, Volcano queue, ResourceQuota, NetworkPolicies."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from components.faults import team_fault_leases
from stackconfig.labels import HEAD_SLOT_RESOURCE, pool_gpu_resource
from stackconfig.stack import Pool

from workloads.derive.layout import Group
from workloads.derive.resources import EFA, GI, GPU, HUGEPAGES, allocatable
from workloads.schema.teams import PART_OF_LABEL, QUOTA_NAME, TEAM_LABEL, TeamSettings, team_checkpoint_directory, team_directory, team_group
from workloads.derive.argv import REWARD_SERVICE
from workloads.derive.model import WorkloadModel
from workloads.render.common import (RAY_NODE_TYPE_LABEL, DASHBOARD_PORT, FSX_CLAIM, KUBERAY_NAMESPACE, PART_OF, RAY_PODS, SCRIPTS,
                     file_system_container, file_system_pod, labels, meta)
from workloads.render.network_policies import ANYWHERE, POD_IDENTITY_AGENT, _all_tcp, _namespace, _pods, _tcp, baseline, policy
from workloads.render.services import fsx_pv, fsx_pvc, scripts_configmap
from workloads.render.team_quotas import quota_containers


def namespace_of(team: str) -> str:
    """The namespace (and queue) name of the team called ``team``."""
    return f"team-{team}"


def team_labels(team: TeamSettings, component: str | None = None) -> dict[str, str]:
    """Labels of every object of the team."""
    out = {PART_OF_LABEL: PART_OF, TEAM_LABEL: team.name}
    if component:
        out["app.kubernetes.io/name"] = component
    return out


def _sum_caps(team: TeamSettings) -> int:
    """GPUs the team may use at most, over all its pools."""
    return sum(q.cap for q in team.gpus.values())


def team_efa(team: TeamSettings, pools: Iterable[Pool]) -> int:
    """EFA devices that go with the team's GPU caps: per pool cap / GPUs per node x EFA per node, rounded up."""
    by_name = {p.name: p for p in pools}
    return sum(math.ceil(q.cap * by_name[n].efa_devices / by_name[n].instance.gpus) for n, q in team.gpus.items())


def team_namespace(team: TeamSettings) -> dict:
    """The team's Namespace ``team-<name>``."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace_of(team.name), "labels": team_labels(team)}}


def team_queue(team: TeamSettings, pools: Iterable[Pool]) -> dict:
    """The team's Volcano Queue for the ``capacity`` plugin: guarantee <= deserved <= capability on each of the
    team's GPU pools, in that pool's own resource (``stackconfig.labels.pool_gpu_resource``), and no
    ``nvidia.com/gpu`` dimension: the plugin judges every dimension on its own (enqueue, reclaimer, victims,
    guarantees: docs/design/scheduling.md, "Per-pool guarantees"), where a sum would let one pool's share
    stand for another's. Volcano's queue webhook (failurePolicy Fail) refuses a guarantee without a deserved at
    least as large, and a deserved above the capability (volcano v1.15.1
    pkg/webhooks/admission/queues/validate/validate_queue.go:242-290); no parent, so its hierarchy checks pass
    (:373-376, :531-571). A zero deserved or guarantee is left out: the plugin reads an absent one as empty
    (capacity.go:1060, :1078-1080), and a dimension the deserved lacks makes the team's pods there immediate
    victims once its guarantee is kept (:1855-1871)."""
    gpus = {pool_gpu_resource(p): q for p, q in team.gpus.items()}
    spec: dict[str, Any] = {"reclaimable": team.reclaimable, "priority": team.priority,
                            "capability": {r: q.cap for r, q in gpus.items()}}
    deserved = {r: q.deserved for r, q in gpus.items() if q.deserved}
    guarantee = {r: q.guarantee for r, q in gpus.items() if q.guarantee}
    if deserved:
        spec["deserved"] = deserved
    if guarantee:
        spec["guarantee"] = {"resource": guarantee}
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": namespace_of(team.name), "labels": team_labels(team, "volcano-queue")},
            "spec": spec}


def team_resource_quota(team: TeamSettings, pools: Iterable[Pool], head: Group) -> dict:
    """The team namespace's ResourceQuota ``gpu-quota``:

    - GPUs: the sum of caps, and each GPU pool's cap in its own resource (``pool_gpu_quota``); and the EFA devices and huge pages of the whole GPU nodes those caps span (a
      team's share, not the stack's; admission refuses either without GPUs, ``render.admission``);
    - CPU and memory: those GPU nodes plus one run head (``head``) per such node. A pod that states no
      CPU or memory request is then refused. This does not bound what a team puts on the head pool (its
      CPU figure is the GPU nodes'): admission lets only a run's head onto it, at most the platform's head;
    - head slots: ``maxRuns`` of ``stackconfig.labels.HEAD_SLOT_RESOURCE``, which every team pod on the head
      pool requests exactly one of (admission, ``render.pod_limits.one_head_slot``). Unlike ``count/rayjobs``,
      which frees when a RayJob is deleted, this counts a head until it is gone: the quota charges a
      Terminating pod until its grace period has passed (kubernetes pkg/quota/v1/evaluator/core/pods.go
      ``QuotaV1Pod``: a pod with ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` is not counted only
      once ``now`` is past their sum), so a deleted run's head stopping for up to its grace (1800 s, the
      save on stop) takes this team's ``maxRuns``, never the head room ``validate_head_room`` keeps for the others;
    - counts: ``maxRuns`` RayJobs and Ray clusters, two Services per run (KubeRay's head Service and the
      RayJob's stable one), twice the pods of ``maxRuns`` heads and every GPU node (an attempt's pods
      terminating while the next starts), the pod-fault Leases (``components.faults.team_fault_leases``, which
      ``render.faults.fault_leases`` renders: the quota admits them and no other Lease);
    - ephemeral storage: the LimitRange's per-container figure (``team_limit_range``) for each pod.

    (Kubernetes docs, "Resource Quotas": extended resources and hugepages-<size> as ``requests.``,
    object counts as ``count/<resource>.<group>``.)"""
    pools = list(pools)
    caps = _cap_nodes(team, pools)
    heads = sum(n for _, n in caps)
    hard = {f"requests.{GPU}": str(_sum_caps(team)), **pool_gpu_quota(team, pools),
            "requests.cpu": str(sum(p.instance.vcpu * n for p, n in caps) + head.cpu * heads)}
    memory = sum(p.instance.memory_gib * GI * n for p, n in caps) + head.memory_bytes * heads
    hard["requests.memory"] = hard["limits.memory"] = str(memory)
    efa = team_efa(team, pools)
    if efa:
        hard[f"requests.{EFA}"] = str(efa)
    hugepages = sum(allocatable(p).hugepages * n for p, n in caps)
    hard[f"requests.{HUGEPAGES}"] = str(hugepages)
    pods = 2 * (team.max_runs + heads)
    hard[f"requests.{HEAD_SLOT_RESOURCE}"] = str(team.max_runs)
    hard.update({"count/rayjobs.ray.io": str(team.max_runs), "count/rayclusters.ray.io": str(team.max_runs),
                 "pods": str(pods), "services": str(2 * team.max_runs),
                 "count/leases.coordination.k8s.io": str(len(team_fault_leases()))})
    hard["requests.ephemeral-storage"] = hard["limits.ephemeral-storage"] = str(team.ephemeral_storage_gib * GI * pods)
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": QUOTA_NAME, "namespace": namespace_of(team.name),
                         "labels": team_labels(team, "resource-quota")},
            "spec": {"hard": hard}}


def team_limit_range(team: TeamSettings) -> dict:
    """Every container of the team gets an ephemeral-storage request and limit (``ephemeralStorageGib``)
    and may state no more: the LimitRanger admission plugin sets and enforces them (Kubernetes docs,
    "Limit Ranges"), so the quota's ``limits.ephemeral-storage`` never refuses a run's pods for lack of one."""
    size = {"ephemeral-storage": f"{team.ephemeral_storage_gib}Gi"}
    return {"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "ephemeral-storage", "namespace": namespace_of(team.name),
                         "labels": team_labels(team, "limit-range")},
            "spec": {"limits": [{"type": "Container", "default": dict(size), "defaultRequest": dict(size),
                                 "max": dict(size)}]}}


def pool_gpu_quota(team: TeamSettings, pools: Iterable[Pool]) -> dict[str, str]:
    """``requests.<pool GPU resource>``: the team's cap on each GPU pool of the stack, 0 on one it has no quota
    on (a ResourceQuota constrains only the resources it lists). Every team GPU pod requests its pool's
    resource as much as its GPUs (admission: ``render.pod_limits.one_pools_gpus``), so no set of a team's pods
    holds more of a pool than its cap there, whatever their sum (docs/design/scheduling.md, "Per-pool
    guarantees")."""
    return {f"requests.{pool_gpu_resource(p.name)}": str(team.gpus[p.name].cap if p.name in team.gpus else 0)
            for p in pools if p.instance.is_gpu}


def _cap_nodes(team: TeamSettings, pools: Iterable[Pool]) -> list[tuple[Pool, int]]:
    """(pool, whole nodes the team's cap on it spans) for each of the team's GPU pools."""
    by_name = {p.name: p for p in pools}
    return [(by_name[n], math.ceil(q.cap / by_name[n].instance.gpus)) for n, q in team.gpus.items()]


def team_network_policies(team: TeamSettings, platform_namespace: str, reward_port: int | None) -> list[dict]:
    """The workloads' baseline (default deny, DNS); all TCP between the team namespace's own pods;
    what a run's Ray pods reach outside it (HTTPS for staging, the Pod Identity agent, the platform's
    reward service); the KubeRay operator polling the run's head (RayJob status)."""
    def md(name: str) -> dict:
        return {"name": name, "namespace": namespace_of(team.name), "labels": team_labels(team, "network-policy")}
    ns_pods = {"podSelector": {}}  # every pod of the policy's own namespace
    egress = [{"to": [{"ipBlock": {"cidr": ANYWHERE}}], "ports": _tcp(443)},
              {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(80)}]
    if reward_port is not None:
        egress.append({"to": [{**_namespace(platform_namespace), **_pods(labels(REWARD_SERVICE))}],
                       "ports": _tcp(reward_port)})
    return [*baseline(md),
            policy(md("allow-team-tcp"), None, "the team's pods <-> the team's pods on every TCP port",
                   ingress=[{"from": [ns_pods], "ports": _all_tcp()}], egress=[{"to": [ns_pods], "ports": _all_tcp()}]),
            policy(md("ray-external"), RAY_PODS,
                   "a run's Ray pods -> HTTPS 443 (Hugging Face staging, S3), the Pod Identity agent "
                   f"169.254.170.23:80 and the reward service of namespace {platform_namespace}", egress=egress),
            policy(md("ray-head-operator"), {RAY_NODE_TYPE_LABEL: "head"},
                   f"Ray head dashboard/job API {DASHBOARD_PORT}/TCP <- the KubeRay operator (RayJob status)",
                   ingress=[{"from": [_namespace(KUBERAY_NAMESPACE)], "ports": _tcp(DASHBOARD_PORT)}])]


TEAM_SERVICE_ACCOUNT = "checkpoint-writer"


def team_checkpoint_prefix(team: TeamSettings) -> str:
    """The team's part of the bucket (and of the file system's exported ``checkpoints/`` folder)."""
    return f"checkpoints/teams/{team.name}/"


def team_service_account(team: TeamSettings) -> dict:
    """The service account the team's Pod Identity role (its checkpoint prefix only) is bound to."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": TEAM_SERVICE_ACCOUNT, "namespace": namespace_of(team.name),
                         "labels": team_labels(team, "checkpoint-writer")}}


RUN_SUBMITTER = "rl-run-submitter"
SUBMITTER_RULES = [
    {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["deletecollection"]},
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
]
"""What ``python -m workloads.cli.runs`` does in a team's namespace (``runs.client.RunClient``): ``patch`` on
RayJobs to suspend one (``cancel``); ``delete`` to remove old attempts by hand. No PodDisruptionBudgets: a budget of maxUnavailable 0 holds every
node drain and node group update of the cluster; the platform renders the runs' one budget per team
(``render.runs.team_run_budget``). Every write passes the admission policies (``render.admission``)."""
CLUSTER_READ_RULES = [
    {"apiGroups": ["topology.volcano.sh"], "resources": ["hypernodes"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
]
"""What it reads cluster-wide: the HyperNodes and the pools' nodes, for the network tiers
(``runs.client.RunClient.tier_sizes`` maps each pool's node names onto the HyperNodes). Not narrowed: RBAC
grants whole objects, not fields, and node names are not known when the Role is made, so a member also
sees every node's ``status.images`` (the images pulled there, other teams' included). Image references
are not secrets on this platform (the stack file pins its own); a team that needs its image names kept
from other teams needs its own nodes."""


def team_rbac(team: TeamSettings) -> list[dict]:
    """The team's members may submit, watch and cancel runs in its namespace, and nowhere else."""
    ns, group = namespace_of(team.name), team_group(team.name)
    md = {"name": RUN_SUBMITTER, "namespace": ns, "labels": team_labels(team, "rbac")}
    subject = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group}]
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": md, "rules": SUBMITTER_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": md, "subjects": subject,
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RUN_SUBMITTER}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": f"{RUN_SUBMITTER}-{team.name}", "labels": team_labels(team, "rbac")},
             "subjects": subject,
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RUN_SUBMITTER}}]


def run_submitter_cluster_role() -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": RUN_SUBMITTER, "labels": {PART_OF_LABEL: PART_OF}}, "rules": CLUSTER_READ_RULES}


def team_objects(team: TeamSettings, pools: Iterable[Pool], platform_namespace: str,
                 reward_port: int | None, head: Group) -> list[dict]:
    """Every object of one team that needs no file system, namespace first; ``head`` is a run's head group."""
    pools = list(pools)
    return [team_namespace(team), team_queue(team, pools), team_resource_quota(team, pools, head),
            team_limit_range(team), team_service_account(team), *team_network_policies(team, platform_namespace, reward_port),
            *team_rbac(team)]


# --- the team's directory on the file system ---------------------------------------------------

TEAM_CHECKPOINT_CLAIM = "fsx-checkpoints"


def team_volumes(team: TeamSettings) -> list[tuple[str, str]]:
    """(claim, directory) of the team's file system volumes: its directory, the pods' file system root
    (``FSX_CLAIM``), and its checkpoint directory, mounted over ``<mount>/checkpoints``
    (``TEAM_CHECKPOINT_CLAIM``, ``render.runs``): staged models and data stay out of the bucket."""
    return [(FSX_CLAIM, team_directory(team.name)), (TEAM_CHECKPOINT_CLAIM, team_checkpoint_directory(team.name))]


def team_fsx_pv(m: WorkloadModel, team: TeamSettings, claim: str, file_system_id: Any, dns_name: Any,
                mount_name: Any) -> dict:
    """A static PV of one of the team's directories only (``team_volumes``): a Lustre fileset mount
    (``<dns>@tcp:/<mountname>/<dir>``; FSx for Lustre user guide, "Mounting specific filesets"; the CSI
    driver v1.9.0 builds the source as ``dnsname@tcp:/mountname``, pkg/driver/node.go:119). Pre-bound to
    the team's claim, so no other namespace can claim it; the team's pods see nothing outside it."""
    pv = fsx_pv(m, file_system_id, dns_name, mount_name)
    pv["metadata"] = {"name": f"{namespace_of(team.name)}-{claim}", "labels": team_labels(team, "fsx")}
    pv["spec"]["claimRef"] = {"namespace": namespace_of(team.name), "name": claim}
    directory = dict(team_volumes(team))[claim]
    pv["spec"]["csi"]["volumeAttributes"]["mountname"] = _joined(mount_name, "/", directory)
    # Its own handle: the kubelet names a CSI volume by driver and handle, and a pod with two PVs of
    # one handle never starts (kubernetes/kubernetes#91556); the driver only checks it is not empty
    # (node.go:102-105) and, with no controller, never deletes by it.
    pv["spec"]["csi"]["volumeHandle"] = _joined(file_system_id, "::", directory)
    return pv


def _joined(value: Any, sep: str, suffix: str) -> Any:
    if isinstance(value, str):
        return f"{value}{sep}{suffix}"
    return value.apply(lambda v: f"{v}{sep}{suffix}")  # a Pulumi Output at deployment


def team_fsx_pvc(m: WorkloadModel, team: TeamSettings, claim: str) -> dict:
    pvc = fsx_pvc(m)
    pvc["metadata"] = {"name": claim, "namespace": namespace_of(team.name), "labels": team_labels(team, "fsx")}
    pvc["spec"]["volumeName"] = f"{namespace_of(team.name)}-{claim}"
    return pvc


def team_scripts(m: WorkloadModel, team: TeamSettings) -> dict:
    """The scripts ConfigMap (preflight, staging) in the team's namespace, for its runs' pods."""
    cm = scripts_configmap(m)
    cm["metadata"] = {"name": SCRIPTS, "namespace": namespace_of(team.name), "labels": team_labels(team, "scripts")}
    return cm


TEAM_DIRS = "team-directories"


def team_directories_job(m: WorkloadModel) -> dict:
    """A Job in the workloads' namespace (which mounts the whole file system) that creates every
    team's directories (init containers: a fileset mount fails with ENOENT until it exists, Lustre
    mdt_lookup_fileset), then sets each team's project quota on them (``render.team_quotas``)."""
    tops: dict[str, list[str]] = {}
    for d in (d for t in m.settings.teams for _, d in team_volumes(t)):
        tops.setdefault(d.split("/", 1)[0], []).append(f"{m.paths.mount}/{d}")
    # One container per top-level directory, each mounting only that one (file_system_container).
    template = file_system_pod(m, TEAM_DIRS, quota_containers(m))
    template["spec"]["initContainers"] = [
        file_system_container(m, f"{TEAM_DIRS}-{top}", ["mkdir", "-p", *dirs], sub_path=top)
        for top, dirs in sorted(tops.items())]
    md = meta(m, TEAM_DIRS)
    # Pulumi waits for the Job (the team volumes need the directories); a failed or timed-out Job is
    # replaced by the next `pulumi up` instead of failing it again (pulumi-kubernetes 4.34.2
    # batch/v1/Job.py: "pulumi.com/replaceUnready").
    md["annotations"] = {"pulumi.com/replaceUnready": "true"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": md,
            "spec": {"backoffLimit": 4, "activeDeadlineSeconds": 600,
                     "template": template}}

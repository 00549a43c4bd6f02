"""Every Kubernetes object of the workloads, rendered from the workload model by pure functions.

The Pulumi component registers exactly these (typed resources, CustomResources, Helm values); the
tests validate them against the Kubernetes and CRD schemas; the schedulability check reads the pod
templates; the TorchX component takes its pod placement, resources and env from the same groups.

Invariants: a pod's node selector is exactly ``rl.platform/pool: <pool>`` and its tolerations
exactly its pool's taints; GPU pods request all GPUs and every EFA device the node advertises,
2-MiB huge pages, a memory-backed /dev/shm inside their memory limit and IPC_LOCK; requests equal
limits (Guaranteed QoS) for every Ray pod.

Hardening (reviewed against checkov in ``policy/checkov-justifications.yaml``): every pod runs
with the runtime's default seccomp profile, every container with ``allowPrivilegeEscalation:
false`` and all capabilities dropped (GPU pods add back IPC_LOCK only, for RDMA memory
registration), no pod uses the host's network, PID or IPC namespaces or a hostPath. Containers
that run no Miles/SGLang/Megatron code at run time (reward server, staging, the Capacity Block
end trigger) also get a read-only root filesystem with an emptyDir ``/tmp``. A default-deny
NetworkPolicy covers the namespace and one policy per workload states what it may reach.
"""

from __future__ import annotations

from typing import Any

from stackconfig.stack import Pool

from workloads.derive.model import WorkloadModel
from workloads.render.block_end import CHECKPOINT_TRIGGER, checkpoint_trigger_cronjob, trigger_script, trigger_template
from workloads.render.common import FSX_CLAIM, KUBERAY_NAMESPACE, RAY_PODS, SHM_VOLUME, VOLCANO_NAMESPACE, placement
from workloads.render.network_policies import network_policies
from workloads.render.operators import fsx_csi_values, kuberay_values, platform_priority_class, volcano_queue, volcano_values
from workloads.render.ray import (RAY_CLUSTER_LABEL, RAY_GROUP_LABEL, RAY_HEAD_GROUP, RAY_NODE_TYPE_LABEL, ray_pdbs, ray_pod_labels,
                  ray_pod_template, raycluster, rayjob)
from workloads.render.runs import priority_classes, run_rayjob
from workloads.render.services import (fsx_pv, fsx_pvc, namespace, preprocess_job, reward_deployment, reward_pdb, reward_service,
                       reward_template, scripts_configmap, service_account, stage_template)
from workloads.render.teams import team_directories_job

__all__ = [
    "CHECKPOINT_TRIGGER", "FSX_CLAIM", "KUBERAY_NAMESPACE", "RAY_CLUSTER_LABEL", "RAY_GROUP_LABEL", "RAY_HEAD_GROUP",
    "RAY_NODE_TYPE_LABEL", "RAY_PODS", "SHM_VOLUME", "VOLCANO_NAMESPACE", "checkpoint_trigger_cronjob",
    "custom_resources", "fsx_csi_values", "fsx_pv", "fsx_pvc", "k8s_objects", "kuberay_values", "namespace",
    "network_policies", "placement", "platform_priority_class", "pod_templates", "preprocess_job", "priority_classes", "ray_pdbs", "ray_pod_labels",
    "ray_pod_template", "raycluster", "rayjob", "reward_deployment", "reward_pdb", "reward_service",
    "reward_template", "run_rayjob", "scripts_configmap", "service_account", "stage_template",
    "team_directories_job", "trigger_script", "trigger_template", "volcano_queue", "volcano_values",
]


# --- everything ------------------------------------------------------------------------------

def pod_templates(m: WorkloadModel) -> list[tuple[str, Pool, dict, int]]:
    """(name, pool, pod template, replicas) of every pod that claims a node: the RayCluster's, or
    with TorchX submission the run's Volcano Job (same groups, same requests: ``torchx_miles``), or
    with ``submit: runs`` the largest run's own cluster (every GPU node)."""
    prefix = {"raycluster": "ray", "torchx": "torchx", "runs": "run"}[m.settings.submit.value]
    out = [(f"{prefix}-head", m.head_pool, ray_pod_template(m, m.head, head=True), 1)]
    for g in m.workers:
        if g.gpus or not m.runs:  # a run's own cluster: the head and its GPU groups
            out.append((f"{prefix}-{g.name}", g.pool, ray_pod_template(m, g), g.replicas))
    if m.reward:
        out.append(("reward", m.reward.pool, reward_template(m), m.reward.replicas))
    if m.stage and not m.runs:
        out.append(("stage", m.stage.pool, stage_template(m), 1))
    if m.block_end:
        out.append((CHECKPOINT_TRIGGER, m.utility_pool, trigger_template(m), 1))
    return out


def k8s_objects(m: WorkloadModel, fs: tuple[Any, Any, Any] = ("fs-0", "fs-0.fsx", "mount")) -> list[dict]:
    """Every core Kubernetes object, in creation order (CRs and Helm values apart)."""
    objs = [namespace(m), *network_policies(m), service_account(m), scripts_configmap(m),
            fsx_pv(m, *fs), fsx_pvc(m), *(ray_pdbs(m) if m.raycluster else [])]
    if m.reward:
        objs += [reward_deployment(m), reward_service(m), reward_pdb(m)]
    if m.stage and not m.runs:  # with runs, each run's head stages its own model
        objs.append(preprocess_job(m))
    if m.settings.teams:
        objs.append(team_directories_job(m))
    objs += [platform_priority_class(), *priority_classes(m)]
    if m.block_end:
        objs.append(checkpoint_trigger_cronjob(m))
    return objs


def custom_resources(m: WorkloadModel) -> list[dict]:
    crs = [raycluster(m)] if m.raycluster else []
    crs.append(volcano_queue(m))
    if m.settings.run.ray_job:
        crs.append(rayjob(m))
    return crs

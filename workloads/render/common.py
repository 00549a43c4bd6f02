"""Shared pieces of every rendered object: labels, metadata, placement on a pool, container
resources, volumes and the hardening every pod and container gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stackconfig.labels import HEAD_SLOT_RESOURCE, pool_gpu_resource
from stackconfig.stack import POOL_LABEL, Pool

from workloads.derive import layout as L
from workloads.derive.paths import CHECKPOINT_DIR
from workloads.derive.model import WorkloadModel
from workloads.derive.resources import EFA, GI, GPU, HUGEPAGES

PART_OF = "moe-rl-platform"
FSX_CLAIM = "fsx"
FSX_VOLUME = "fsx"
SHM_VOLUME = "dshm"
SCRIPTS = "workload-scripts"
KUBERAY_NAMESPACE = "kuberay-system"
VOLCANO_NAMESPACE = "volcano-system"
VOLCANO_QUEUE = "miles"
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080}
DASHBOARD_PORT = HEAD_PORTS["dashboard"]
HERE = Path(__file__).resolve().parent.parent / "pod"
TMP_VOLUME = "tmp"
HF_TOKEN_DIR = "/var/run/secrets/huggingface"

# KubeRay's pod labels (ray-operator/controllers/ray/utils/constant.go, v1.7.0): set by the
# operator on every pod of a RayCluster, not overridable from the template.
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
"""``head`` or ``worker``."""
RAY_GROUP_LABEL = "ray.io/group"
"""The worker group's ``groupName``; ``headgroup`` on the head."""
RAY_HEAD_GROUP = "headgroup"

COMPONENT_LABEL = "app.kubernetes.io/component"
RAY_COMPONENT = "ray"
RAY_PODS = {"app.kubernetes.io/part-of": PART_OF, COMPONENT_LABEL: RAY_COMPONENT}
"""Every Ray pod of the stack, KubeRay's or TorchX's: one trust domain (same image, same service
account), the selector of the Ray NetworkPolicy."""


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": PART_OF}


def ray_labels(component: str) -> dict[str, str]:
    return {**labels(component), **RAY_PODS}


def meta(m: WorkloadModel, name: str, component: str | None = None) -> dict:
    return {"name": name, "namespace": m.namespace, "labels": labels(component or name)}


def tolerations(pool: Pool) -> list[dict]:
    """Exactly the pool's taints, nothing more."""
    return [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in pool.taints]


def placement(pool: Pool, capabilities: dict[str, str] | None = None) -> dict:
    """The pool's label (and the node capabilities the pod needs, e.g. ``rl.platform/gdrcopy``) as
    the node selector; exactly the pool's taints as tolerations."""
    spec: dict[str, Any] = {"nodeSelector": {POOL_LABEL: pool.name, **(capabilities or {})}}
    if pool.taints:
        spec["tolerations"] = tolerations(pool)
    return spec


def env_list(env: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in env.items()]


def container_resources(g: L.Group) -> dict:
    """requests == limits: whole cores, decimal gigabytes, all GPUs and as many of the pool's own GPU
    resource (``stackconfig.labels.pool_gpu_resource``: what the team Queues and ResourceQuotas count per
    pool, docs/design/scheduling.md "Per-pool guarantees"), all EFA, huge pages; a run's head its one head slot
    (``stackconfig.labels.HEAD_SLOT_RESOURCE``: what a team's quota bounds at ``maxRuns``)."""
    r: dict[str, str] = {"cpu": str(g.cpu), "memory": f"{g.memory_g}G"}
    if g.head_slots:
        r[HEAD_SLOT_RESOURCE] = str(g.head_slots)
    if g.gpus:
        r[GPU] = str(g.gpus)
        r[pool_gpu_resource(g.pool.name)] = str(g.gpus)
    if g.efa:
        r[EFA] = str(g.efa)
    if g.hugepages_mi:
        r[HUGEPAGES] = f"{g.hugepages_mi}Mi"
    return {"requests": dict(r), "limits": dict(r)}


def shm_volume(g: L.Group) -> dict:
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{g.shm_bytes // GI}Gi"}}


def fsx_volume() -> dict:
    return {"name": FSX_VOLUME, "persistentVolumeClaim": {"claimName": FSX_CLAIM}}


def pod_security_context() -> dict:
    """Every pod: the container runtime's default seccomp profile."""
    return {"seccompProfile": {"type": "RuntimeDefault"}}


def security_context(g: L.Group | None = None, read_only: bool = False) -> dict:
    """No privilege escalation and no capabilities, except IPC_LOCK on EFA/GPU pods (libfabric and
    NCCL pin host and GPU memory for RDMA). ``read_only``: read-only root filesystem."""
    caps: dict[str, list[str]] = {"drop": ["ALL"]}
    if g is not None and g.ipc_lock:
        caps["add"] = ["IPC_LOCK"]
    sc: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": caps}
    if read_only:
        sc["readOnlyRootFilesystem"] = True
    return sc


def tmp_volume(size: str = "1Gi") -> dict:
    """Writable /tmp (and $HOME) of a container with a read-only root filesystem."""
    return {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": size}}


TMP_MOUNT = {"name": TMP_VOLUME, "mountPath": "/tmp"}
TMP_HOME_ENV = {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}


def scripts_volume() -> dict:
    return {"name": "scripts", "configMap": {"name": SCRIPTS}}


def file_system_container(m: WorkloadModel, name: str, command: list[str],
                          sub_path: str = CHECKPOINT_DIR) -> dict:
    """A container of a small task on the file system that sees only ``sub_path`` of it (mounted at
    its usual place under the mount path), with the small shell image.

    It runs as root with no capability: the directories it writes in belong to root (the file
    system's, and those the training image creates); it can therefore not drop to another user.
    Its reach is bounded by the mount instead: the kubelet opens ``subPath`` one component at a
    time with O_NOFOLLOW inside the volume and bind-mounts that open directory
    (kubernetes/kubernetes pkg/volume/util/subpath/subpath_linux.go, doBindSubPath and
    safeOpenSubPath), so the container sees that directory alone and a link below it resolves
    within it or the container's own read-only root."""
    return {"name": name, "image": m.settings.images.checkpoint_trigger, "imagePullPolicy": "IfNotPresent",
            "command": command,
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
            "securityContext": security_context(read_only=True),
            "volumeMounts": [{"name": FSX_VOLUME, "mountPath": f"{m.paths.mount}/{sub_path}", "subPath": sub_path}]}


def file_system_pod(m: WorkloadModel, name: str, containers: list[dict]) -> dict:
    """Pod template of small file-system tasks: on the utility pool, no API token, the default
    seccomp profile, a read-only root filesystem."""
    spec = {"restartPolicy": "OnFailure", "automountServiceAccountToken": False,
            "securityContext": pod_security_context(), "containers": containers, "volumes": [fsx_volume()],
            **placement(m.utility_pool)}
    return {"metadata": {"labels": labels(name)}, "spec": spec}


def file_system_task(m: WorkloadModel, name: str, command: list[str]) -> dict:
    """Pod template of one small task under ``checkpoints/`` (the Capacity Block end trigger of a
    stack's own run, the team directories)."""
    return file_system_pod(m, name, [file_system_container(m, name, command)])

"""Every Kubernetes object of the workloads, rendered as plain dicts by pure functions.

The Pulumi component registers exactly these (typed resources, CustomResources, Helm values); the
tests validate them against the Kubernetes and CRD schemas; the schedulability check reads the pod
templates; the TorchX component takes its pod placement, resources and env from the same groups.

Invariants: a pod's node selector is exactly ``rl.platform/pool: <pool>`` and its tolerations
exactly its pool's taints; GPU pods request all GPUs and every EFA device the node advertises,
2-MiB huge pages, a memory-backed /dev/shm inside their memory limit and IPC_LOCK; requests equal
limits (Guaranteed QoS) for every Ray pod.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from components.config import POOL_LABEL, Pool, Role

from . import layout as L
from .argv import REWARD_SERVICE, miles_argv
from .env import gpu_env, runtime_env
from .resources import EFA, GPU, GI, HUGEPAGES

if TYPE_CHECKING:  # pragma: no cover
    from program import ProgramConfig

PART_OF = "moe-rl-platform"
FSX_CLAIM = "fsx"
FSX_VOLUME = "fsx"
SHM_VOLUME = "dshm"
SCRIPTS = "workload-scripts"
KUBERAY_NAMESPACE = "kuberay-system"
VOLCANO_NAMESPACE = "volcano-system"
VOLCANO_QUEUE = "miles"
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080}
HERE = Path(__file__).resolve().parent


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": PART_OF}


def meta(cfg: "ProgramConfig", name: str, component: str | None = None) -> dict:
    return {"name": name, "namespace": cfg.checkpoints.namespace, "labels": labels(component or name)}


def tolerations(pool: Pool) -> list[dict]:
    """Exactly the pool's taints, nothing more."""
    return [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in pool.taints]


def placement(pool: Pool) -> dict:
    spec: dict[str, Any] = {"nodeSelector": {POOL_LABEL: pool.name}}
    if pool.taints:
        spec["tolerations"] = tolerations(pool)
    return spec


def env_list(env: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in env.items()]


def container_resources(g: L.Group) -> dict:
    """requests == limits: whole cores, decimal gigabytes, all GPUs, all EFA, huge pages."""
    r: dict[str, str] = {"cpu": str(g.cpu), "memory": f"{g.memory_g}G"}
    if g.gpus:
        r[GPU] = str(g.gpus)
    if g.efa:
        r[EFA] = str(g.efa)
    if g.hugepages_mi:
        r[HUGEPAGES] = f"{g.hugepages_mi}Mi"
    return {"requests": dict(r), "limits": dict(r)}


def shm_volume(g: L.Group) -> dict:
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{g.shm_bytes // GI}Gi"}}


def fsx_volume() -> dict:
    return {"name": FSX_VOLUME, "persistentVolumeClaim": {"claimName": FSX_CLAIM}}


def security_context(g: L.Group) -> dict:
    return {"capabilities": {"add": ["IPC_LOCK"]}} if g.ipc_lock else {}


def pod_env(cfg: "ProgramConfig", g: L.Group) -> dict[str, str]:
    if g.gpus and g.pool.role in (Role.TRAIN, Role.ROLLOUT):
        return gpu_env(g.pool, g.efa, L.resolve_deepep(cfg))
    return {}


# --- Ray -------------------------------------------------------------------------------------

def ray_start_params(g: L.Group, head: bool = False) -> dict[str, str]:
    params = {"num-cpus": "0" if head else str(g.cpu), "num-gpus": str(g.gpus),
              "object-store-memory": str(g.object_store_bytes)}
    if head:
        params["dashboard-host"] = "0.0.0.0"
    if g.ray_resources:
        # KubeRay passes the value to `ray start --resources` through a shell: quoted JSON.
        params["resources"] = '"' + json.dumps(g.ray_resources).replace('"', '\\"') + '"'
    return params


def ray_pod_template(cfg: "ProgramConfig", g: L.Group, head: bool = False) -> dict:
    c: dict[str, Any] = {
        "name": "ray-head" if head else "ray-worker",
        "image": cfg.versions.software.image,
        "imagePullPolicy": "IfNotPresent",
        "resources": container_resources(g),
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"},
                         {"name": FSX_VOLUME, "mountPath": L.paths(cfg).mount}],
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }
    env = pod_env(cfg, g)
    if env:
        c["env"] = env_list(env)
    if head:
        c["ports"] = [{"name": n, "containerPort": p} for n, p in HEAD_PORTS.items()]
    sc = security_context(g)
    if sc:
        c["securityContext"] = sc
    spec = {"serviceAccountName": cfg.checkpoints.service_account, "containers": [c],
            "volumes": [shm_volume(g), fsx_volume()], **placement(g.pool)}
    return {"metadata": {"labels": labels("ray-head" if head else f"ray-{g.name}")}, "spec": spec}


def raycluster(cfg: "ProgramConfig") -> dict:
    head = L.ray_head(cfg)
    workers = []
    for g in L.ray_workers(cfg):
        workers.append({
            "groupName": g.name, "replicas": g.replicas, "minReplicas": g.replicas,
            "maxReplicas": g.replicas, "rayStartParams": ray_start_params(g),
            "template": ray_pod_template(cfg, g),
        })
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": meta(cfg, L.RAY_CLUSTER, "ray"),
        "spec": {
            "rayVersion": cfg.versions.software.ray,
            "enableInTreeAutoscaling": False,
            "headGroupSpec": {"serviceType": "ClusterIP", "rayStartParams": ray_start_params(head, head=True),
                              "template": ray_pod_template(cfg, head, head=True)},
            "workerGroupSpecs": workers,
        },
    }


def entrypoint_resources() -> dict[str, float]:
    """Miles' driver needs libcuda: a sliver of the training nodes' custom resource."""
    return {L.GPU_NODE_RESOURCE: 0.001}


def submitter_template(cfg: "ProgramConfig") -> dict:
    pool = L.head_pool(cfg)
    c = {"name": "ray-job-submitter", "image": cfg.versions.software.image,
         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}}
    return {"metadata": {"labels": labels("ray-job-submitter")},
            "spec": {"restartPolicy": "Never", "containers": [c], **placement(pool)}}


def rayjob(cfg: "ProgramConfig") -> dict:
    """The Miles run as a RayJob on the long-lived RayCluster (same argv as the TorchX component)."""
    run = cfg.workloads.run
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": meta(cfg, run.name, "miles-run"),
        "spec": {
            "clusterSelector": {"ray.io/cluster": L.RAY_CLUSTER},
            "entrypoint": shlex.join(miles_argv(cfg)),
            "entrypointResources": json.dumps(entrypoint_resources()),
            "runtimeEnvYAML": yaml.safe_dump({"env_vars": runtime_env(cfg.pool(Role.TRAIN))}, sort_keys=True),
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": False,
            "backoffLimit": 0,
            "submitterPodTemplate": submitter_template(cfg),
        },
    }


# --- storage ---------------------------------------------------------------------------------

def fsx_pv(cfg: "ProgramConfig", file_system_id: Any, dns_name: Any, mount_name: Any) -> dict:
    """Static PV of the FSx for Lustre file system (the CSI driver only mounts it)."""
    gib = cfg.workloads.storage.capacity_gib
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{cfg.checkpoints.namespace}-fsx", "labels": labels("fsx")},
        "spec": {
            "capacity": {"storage": f"{gib}Gi"}, "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "", "mountOptions": ["flock"],
            "claimRef": {"namespace": cfg.checkpoints.namespace, "name": FSX_CLAIM},
            "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": file_system_id,
                    "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name}},
        },
    }


def fsx_pvc(cfg: "ProgramConfig") -> dict:
    gib = cfg.workloads.storage.capacity_gib
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(cfg, FSX_CLAIM),
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "volumeName": f"{cfg.checkpoints.namespace}-fsx",
                     "resources": {"requests": {"storage": f"{gib}Gi"}}}}


# --- namespace, identity, scripts ------------------------------------------------------------

def namespace(cfg: "ProgramConfig") -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": cfg.checkpoints.namespace, "labels": labels("rl")}}


def service_account(cfg: "ProgramConfig") -> dict:
    """The service account the bucket's Pod Identity role is bound to (Ray pods and the Job)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(cfg, cfg.checkpoints.service_account)}


def scripts_configmap(cfg: "ProgramConfig") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(cfg, SCRIPTS),
            "data": {"reward-server.py": (HERE / "reward_server.py").read_text(),
                     "stage.py": (HERE / "stage.py").read_text()}}


def scripts_volume() -> dict:
    return {"name": "scripts", "configMap": {"name": SCRIPTS}}


# --- reward service --------------------------------------------------------------------------

def reward_template(cfg: "ProgramConfig") -> dict:
    g = L.reward_group(cfg)
    s = cfg.workloads.reward
    command = s.command or ["python3", "/opt/scripts/reward-server.py"]
    probe = {"httpGet": {"path": "/health", "port": "http"}}
    c = {
        "name": "reward", "image": cfg.versions.software.reward_image or cfg.versions.software.image,
        "command": command,
        "env": env_list({"RM_TYPE": cfg.workloads.run.rm_type, "PORT": str(s.port)}),
        "ports": [{"name": "http", "containerPort": s.port}],
        "resources": container_resources(g),
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 20, "failureThreshold": 3},
        "startupProbe": {**probe, "periodSeconds": 10, "failureThreshold": 60},
        "volumeMounts": [{"name": "scripts", "mountPath": "/opt/scripts", "readOnly": True}],
    }
    spec = {
        "containers": [c], "volumes": [scripts_volume()], "automountServiceAccountToken": False,
        # A Spot notice gives two minutes; the service drains in well under that.
        "terminationGracePeriodSeconds": 30,
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": labels(REWARD_SERVICE)}}],
        **placement(g.pool),
    }
    return {"metadata": {"labels": labels(REWARD_SERVICE)}, "spec": spec}


def reward_deployment(cfg: "ProgramConfig") -> dict:
    g = L.reward_group(cfg)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(cfg, REWARD_SERVICE),
            "spec": {"replicas": g.replicas, "selector": {"matchLabels": labels(REWARD_SERVICE)},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                     "template": reward_template(cfg)}}


def reward_service(cfg: "ProgramConfig") -> dict:
    port = cfg.workloads.reward.port
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(cfg, REWARD_SERVICE),
            "spec": {"selector": labels(REWARD_SERVICE),
                     "ports": [{"name": "http", "port": port, "targetPort": "http"}]}}


def reward_pdb(cfg: "ProgramConfig") -> dict:
    """Voluntary disruptions (drains before a Spot replacement, upgrades) take one replica at a time."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(cfg, REWARD_SERVICE),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels(REWARD_SERVICE)}}}


# --- preprocessing Job -----------------------------------------------------------------------

def stage_template(cfg: "ProgramConfig") -> dict:
    g, p, run = L.preprocess_job(cfg), L.paths(cfg), cfg.workloads.run
    data_dir = p.data.rsplit("/", 1)[0]
    env = env_list({"MODEL": run.model, "MODEL_DIR": p.model, "DATASET": run.dataset, "DATA_DIR": data_dir,
                    "PROMPT_FILE": run.prompt_file, "HF_HOME": f"{p.mount}/hf-cache"})
    env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token",
                                                                   "optional": True}}})
    c = {"name": "stage", "image": cfg.versions.software.image,
         "command": ["python3", "/opt/scripts/stage.py"], "env": env,
         "resources": container_resources(g),
         "volumeMounts": [{"name": FSX_VOLUME, "mountPath": p.mount},
                          {"name": "scripts", "mountPath": "/opt/scripts", "readOnly": True}]}
    spec = {"restartPolicy": "OnFailure", "serviceAccountName": cfg.checkpoints.service_account,
            "containers": [c], "volumes": [fsx_volume(), scripts_volume()], **placement(g.pool)}
    return {"metadata": {"labels": labels("stage")}, "spec": spec}


def preprocess_job(cfg: "ProgramConfig") -> dict:
    m = meta(cfg, f"stage-{cfg.workloads.run.name}", "stage")
    # Downloading a large model takes longer than `pulumi up` should wait.
    m["annotations"] = {"pulumi.com/skipAwait": "true"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": m,
            "spec": {"backoffLimit": 4, "template": stage_template(cfg)}}


# --- operators -------------------------------------------------------------------------------

def system_placement(cfg: "ProgramConfig") -> dict:
    return placement(cfg.pool(Role.SYSTEM))


def kuberay_values(cfg: "ProgramConfig") -> dict:
    p = system_placement(cfg)
    return {"nodeSelector": p["nodeSelector"], "tolerations": p.get("tolerations", [])}


def volcano_values(cfg: "ProgramConfig") -> dict:
    p = system_placement(cfg)
    custom: dict[str, Any] = {"default_ns": p["nodeSelector"]}
    if p.get("tolerations"):
        custom["default_tolerations"] = p["tolerations"]
    return {"custom": custom}


def fsx_csi_values() -> dict:
    """Node plugin only: static provisioning needs no controller (and so no AWS credentials); the
    node DaemonSet tolerates every taint (chart default), so GPU and Spot nodes mount the volume."""
    return {"nodeComponentOnly": True, "node": {"tolerateAllTaints": True}}


def volcano_queue(cfg: "ProgramConfig") -> dict:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": VOLCANO_QUEUE, "labels": labels("volcano-queue")},
            "spec": {"weight": 1, "reclaimable": False}}


# --- everything ------------------------------------------------------------------------------

def pod_templates(cfg: "ProgramConfig") -> list[tuple[str, Pool, dict, int]]:
    """(name, pool, pod template, replicas) of every pod the workloads create."""
    out = [("ray-head", L.head_pool(cfg), ray_pod_template(cfg, L.ray_head(cfg), head=True), 1)]
    for g in L.ray_workers(cfg):
        out.append((f"ray-{g.name}", g.pool, ray_pod_template(cfg, g), g.replicas))
    if cfg.workloads.run.ray_job:
        out.append(("ray-job-submitter", L.head_pool(cfg), submitter_template(cfg), 1))
    if L.reward_group(cfg):
        out.append(("reward", L.reward_group(cfg).pool, reward_template(cfg), L.reward_group(cfg).replicas))
    if L.preprocess_job(cfg):
        out.append(("stage", L.preprocess_job(cfg).pool, stage_template(cfg), 1))
    return out


def k8s_objects(cfg: "ProgramConfig", fs: tuple[Any, Any, Any] = ("fs-0", "fs-0.fsx", "mount")) -> list[dict]:
    """Every core Kubernetes object, in creation order (CRs and Helm values apart)."""
    objs = [namespace(cfg), service_account(cfg), scripts_configmap(cfg), fsx_pv(cfg, *fs), fsx_pvc(cfg)]
    if L.reward_group(cfg):
        objs += [reward_deployment(cfg), reward_service(cfg), reward_pdb(cfg)]
    if L.preprocess_job(cfg):
        objs.append(preprocess_job(cfg))
    return objs


def custom_resources(cfg: "ProgramConfig") -> list[dict]:
    crs = [raycluster(cfg), volcano_queue(cfg)]
    if cfg.workloads.run.ray_job:
        crs.append(rayjob(cfg))
    return crs

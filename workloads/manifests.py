"""Every Kubernetes object of the workloads, rendered as plain dicts by pure functions.

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

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from stackconfig.stack import POOL_LABEL, Pool, Role

from . import layout as L
from .argv import REWARD_SERVICE, miles_argv
from .env import gpu_env, runtime_env
from .resources import EFA, GPU, GI, HUGEPAGES
from .settings import CAPACITY_BLOCK_DRAIN_MINUTES

if TYPE_CHECKING:  # pragma: no cover
    from .stack import ProgramConfig

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
HERE = Path(__file__).resolve().parent
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
    # Runs as the image's user (root): see the Ray entries of policy/checkov-justifications.yaml.
    c["securityContext"] = security_context(g)
    spec = {"serviceAccountName": cfg.checkpoints.service_account, "securityContext": pod_security_context(),
            "containers": [c], "volumes": [shm_volume(g), fsx_volume()], **placement(g.pool)}
    return {"metadata": {"labels": ray_labels("ray-head" if head else f"ray-{g.name}")}, "spec": spec}


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


SUBMITTER = "ray-job-submitter"


def submitter_template(cfg: "ProgramConfig") -> dict:
    """KubeRay fills in the command (``ray job submit`` to the head's dashboard port); it needs no
    Kubernetes API access and writes only under /tmp."""
    pool = L.head_pool(cfg)
    c = {"name": SUBMITTER, "image": cfg.versions.software.image, "imagePullPolicy": "IfNotPresent",
         "env": env_list(TMP_HOME_ENV),
         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
         "securityContext": security_context(read_only=True), "volumeMounts": [TMP_MOUNT]}
    return {"metadata": {"labels": labels(SUBMITTER)},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": pod_security_context(), "containers": [c], "volumes": [tmp_volume()],
                     **placement(pool)}}


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
        "imagePullPolicy": "IfNotPresent", "command": command,
        "env": env_list({"RM_TYPE": cfg.workloads.run.rm_type, "PORT": str(s.port), **TMP_HOME_ENV}),
        "ports": [{"name": "http", "containerPort": s.port}],
        "resources": container_resources(g),
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 20, "failureThreshold": 3},
        "startupProbe": {**probe, "periodSeconds": 10, "failureThreshold": 60},
        # Root in the Miles image (it imports miles from /root/miles), with no capability at all.
        "securityContext": security_context(g, read_only=True),
        "volumeMounts": [{"name": "scripts", "mountPath": "/opt/scripts", "readOnly": True}, TMP_MOUNT],
    }
    spec = {
        "securityContext": pod_security_context(),
        "containers": [c], "volumes": [scripts_volume(), tmp_volume()], "automountServiceAccountToken": False,
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
    # The Hugging Face token (gated models) is read from a file of the optional Secret hf-token,
    # not from an environment variable.
    env = env_list({"MODEL": run.model, "MODEL_DIR": p.model, "DATASET": run.dataset, "DATA_DIR": data_dir,
                    "PROMPT_FILE": run.prompt_file, "HF_HOME": f"{p.mount}/hf-cache",
                    "HF_TOKEN_FILE": f"{HF_TOKEN_DIR}/token", **TMP_HOME_ENV})
    c = {"name": "stage", "image": cfg.versions.software.image, "imagePullPolicy": "IfNotPresent",
         "command": ["python3", "/opt/scripts/stage.py"], "env": env,
         "resources": container_resources(g),
         # Root (the FSx root directory is root-owned; see CKV_K8S_23), with no capability at all.
         "securityContext": security_context(read_only=True),
         "volumeMounts": [{"name": FSX_VOLUME, "mountPath": p.mount},
                          {"name": "scripts", "mountPath": "/opt/scripts", "readOnly": True},
                          {"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True}, TMP_MOUNT]}
    token = {"name": "hf-token", "secret": {"secretName": "hf-token", "optional": True,
                                            "items": [{"key": "token", "path": "token"}]}}
    spec = {"restartPolicy": "OnFailure", "serviceAccountName": cfg.checkpoints.service_account,
            "securityContext": pod_security_context(), "containers": [c],
            "volumes": [fsx_volume(), scripts_volume(), token, tmp_volume("4Gi")], **placement(g.pool)}
    return {"metadata": {"labels": labels("stage")}, "spec": spec}


def preprocess_job(cfg: "ProgramConfig") -> dict:
    m = meta(cfg, f"stage-{cfg.workloads.run.name}", "stage")
    # Downloading a large model takes longer than `pulumi up` should wait.
    m["annotations"] = {"pulumi.com/skipAwait": "true"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": m,
            "spec": {"backoffLimit": 4, "template": stage_template(cfg)}}


# --- disruption budgets of the run ----------------------------------------------------------

def ray_pod_labels(cfg: "ProgramConfig", group: str) -> dict[str, str]:
    """The labels KubeRay puts on a pod of ``group`` ("head" or a worker groupName): the template's
    plus its own three (labelPod in ray-operator/controllers/ray/common/pod.go, v1.7.0)."""
    head = group == "head"
    template = ray_pod_template(cfg, L.ray_head(cfg) if head else L.worker(cfg, group), head=head)
    return {**template["metadata"]["labels"], RAY_CLUSTER_LABEL: L.RAY_CLUSTER,
            RAY_NODE_TYPE_LABEL: "head" if head else "worker", RAY_GROUP_LABEL: RAY_HEAD_GROUP if head else group}


def protected_ray_groups(cfg: "ProgramConfig") -> list[str]:
    """Ray groups whose pods a voluntary eviction must never take: the head (the driver and every
    actor die with it), the trainers (one lost rank stops the NCCL world), and the rollout engines
    unless the rollout pool is Spot (there Miles' --use-fault-tolerance restarts a lost engine, and
    a budget would only hold up the rebalance drain of a node that is going away anyway)."""
    groups = ["head", "trainer"]
    if not L.is_spot(cfg.pool(Role.ROLLOUT)):
        groups.append("rollout")
    return groups


def ray_pdb(cfg: "ProgramConfig", group: str) -> dict:
    """maxUnavailable 0: a node group update, an EKS/Karpenter consolidation or ``kubectl drain``
    waits instead of evicting the pod. Deleting the pod (KubeRay, an operator) is not an eviction."""
    head = group == "head"
    selector = {RAY_CLUSTER_LABEL: L.RAY_CLUSTER, RAY_NODE_TYPE_LABEL: "head" if head else "worker"}
    if not head:
        selector[RAY_GROUP_LABEL] = group
    name = f"ray-{group}"
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(cfg, name, "ray"),
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": selector}}}


def ray_pdbs(cfg: "ProgramConfig") -> list[dict]:
    return [ray_pdb(cfg, g) for g in protected_ray_groups(cfg)]


# --- network policies --------------------------------------------------------------------------

def _kube_dns() -> dict:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}


POD_IDENTITY_AGENT = "169.254.170.23/32"
"""EKS Pod Identity agent (hostNetwork DaemonSet, link-local address, port 80)."""
ANYWHERE = "0.0.0.0/0"


def _all_tcp() -> list[dict]:
    return [{"protocol": "TCP"}]  # a port entry without a port: every TCP port


def _tcp(port: int) -> list[dict]:
    return [{"protocol": "TCP", "port": port}]


def _pods(selector: dict[str, str]) -> dict:
    return {"podSelector": {"matchLabels": dict(selector)}}


def network_policy(cfg: "ProgramConfig", name: str, selector: dict[str, str] | None, why: str,
                   ingress: list[dict] | None = None, egress: list[dict] | None = None) -> dict:
    """One policy for the pods ``selector`` picks (None: every pod of the namespace). It isolates
    both directions, so what it does not allow (and no other policy allows) is denied."""
    m = meta(cfg, name, "network-policy")
    m["annotations"] = {"rl.platform/allows": why}
    spec: dict[str, Any] = {"podSelector": {"matchLabels": dict(selector)} if selector else {},
                            "policyTypes": ["Ingress", "Egress"]}
    if ingress:
        spec["ingress"] = ingress
    if egress:
        spec["egress"] = egress
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": m, "spec": spec}


def network_policies(cfg: "ProgramConfig") -> list[dict]:
    """Default deny for the namespace, then per workload exactly what the run needs.

    Not subject to these policies, by construction: EFA/RDMA traffic (SRD on the EFA devices, not
    through the pod's IP stack), the FSx for Lustre mount (the node's kernel client mounts it for the
    CSI driver), and the kubelet's probes (the VPC CNI's policy agent always admits the node's own IP).
    They take effect once the VPC CNI enforces NetworkPolicies (``enableNetworkPolicy``).
    """
    head = labels("ray-head")
    out = [
        network_policy(cfg, "default-deny", None, "nothing: every pod of the namespace starts isolated"),
        network_policy(cfg, "allow-dns", None, "every pod -> CoreDNS (kube-system k8s-app=kube-dns), 53/UDP+TCP",
                       egress=[{"to": [_kube_dns()], "ports": [{"protocol": "UDP", "port": 53},
                                                            {"protocol": "TCP", "port": 53}]}]),
    ]
    ray_egress = [{"to": [_pods(RAY_PODS)], "ports": _all_tcp()},
                  {"to": [{"ipBlock": {"cidr": ANYWHERE}}], "ports": _tcp(443)},
                  {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(80)}]
    reward = L.reward_group(cfg)
    if reward is not None:
        ray_egress.insert(1, {"to": [_pods(labels(REWARD_SERVICE))], "ports": _tcp(cfg.workloads.reward.port)})
    out.append(network_policy(
        cfg, "ray", RAY_PODS,
        "Ray pods <-> Ray pods on every TCP port: GCS 6379, raylet, object manager, worker ports, dashboard "
        "agent, NCCL/Gloo bootstrap and socket traffic, torch TCPStore, SGLang engine and router HTTP ports "
        "(all but GCS and dashboard chosen at run time); Ray pods -> reward service; Ray pods -> HTTPS 443 "
        "(S3 through the gateway endpoint, Hugging Face) and the Pod Identity agent 169.254.170.23:80",
        ingress=[{"from": [_pods(RAY_PODS)], "ports": _all_tcp()}], egress=ray_egress))
    out.append(network_policy(
        cfg, "ray-head", head,
        f"Ray head dashboard/job API {DASHBOARD_PORT}/TCP <- the RayJob submitter and the KubeRay operator "
        f"(namespace {KUBERAY_NAMESPACE}, polls RayJob status); nothing else outside the Ray pods",
        ingress=[{"from": [_pods(labels(SUBMITTER)),
                           {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": KUBERAY_NAMESPACE}}}],
                  "ports": _tcp(DASHBOARD_PORT)}]))
    if cfg.workloads.run.ray_job:
        out.append(network_policy(cfg, SUBMITTER, labels(SUBMITTER),
                                  f"RayJob submitter -> Ray head {DASHBOARD_PORT}/TCP (ray job submit/logs)",
                                  egress=[{"to": [_pods(head)], "ports": _tcp(DASHBOARD_PORT)}]))
    if reward is not None:
        out.append(network_policy(cfg, REWARD_SERVICE, labels(REWARD_SERVICE),
                                  f"reward service {cfg.workloads.reward.port}/TCP <- Ray pods (Miles' --rm-url); "
                                  f"no egress",
                                  ingress=[{"from": [_pods(RAY_PODS)], "ports": _tcp(cfg.workloads.reward.port)}]))
    if L.preprocess_job(cfg) is not None:
        out.append(network_policy(cfg, "stage", labels("stage"),
                                  "staging Job -> HTTPS 443 (Hugging Face, S3) and the Pod Identity agent; "
                                  "no ingress",
                                  egress=[{"to": [{"ipBlock": {"cidr": ANYWHERE}}], "ports": _tcp(443)},
                                          {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(80)}]))
    if L.capacity_block_end(cfg) is not None:
        out.append(network_policy(cfg, CHECKPOINT_TRIGGER, labels(CHECKPOINT_TRIGGER),
                                  "nothing: the trigger only writes a file on the FSx volume"))
    return out


# --- Capacity Block end --------------------------------------------------------------------------

CHECKPOINT_TRIGGER = "checkpoint-before-block-end"
TRIGGER_EARLY_SECONDS = 300
"""The guard accepts a start up to five minutes before the scheduled minute (clock skew)."""


def _utc(t) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def trigger_script(cfg: "ProgramConfig") -> str:
    """Create the sentinel once: only between the scheduled time and the start of the drain. A cron
    schedule names no year, so the same minute comes back every year; the guard makes it a no-op."""
    end, p = L.capacity_block_end(cfg), L.paths(cfg)
    start = int(end.trigger.timestamp()) - TRIGGER_EARLY_SECONDS
    stop = int(end.drain.timestamp())
    return "\n".join([
        "set -eu",
        'now="$(date -u +%s)"',
        f'if [ "$now" -lt {start} ] || [ "$now" -ge {stop} ]; then',
        f'  echo "not between {_utc(end.trigger)} and the drain at {_utc(end.drain)} (Capacity Block of '
        f'{", ".join(end.pools)} ends {_utc(end.end)}): nothing to do"',
        "  exit 0",
        "fi",
        f"mkdir -p {shlex.quote(p.checkpoints)}",
        f"touch {shlex.quote(p.save_trigger)}",
        f'echo "created {p.save_trigger}: Miles saves a checkpoint after its current step"',
    ])


def trigger_template(cfg: "ProgramConfig") -> dict:
    p = L.paths(cfg)
    c = {"name": "trigger", "image": cfg.workloads.images.checkpoint_trigger, "imagePullPolicy": "IfNotPresent",
         "command": ["/bin/sh", "-c", trigger_script(cfg)],
         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
         # Root: the checkpoint directory belongs to root (Miles runs as root); no capability at all.
         "securityContext": security_context(read_only=True),
         "volumeMounts": [{"name": FSX_VOLUME, "mountPath": p.mount}]}
    spec = {"restartPolicy": "OnFailure", "automountServiceAccountToken": False,
            "securityContext": pod_security_context(), "containers": [c], "volumes": [fsx_volume()],
            **placement(L.utility_pool(cfg))}
    return {"metadata": {"labels": labels(CHECKPOINT_TRIGGER)}, "spec": spec}


def checkpoint_trigger_cronjob(cfg: "ProgramConfig") -> dict:
    """Ask Miles for a checkpoint ``leadMinutes`` before the earliest Capacity Block end of the GPU
    pools: a CronJob (cpu pool) on that UTC minute, day and month that creates the sentinel file."""
    end = L.capacity_block_end(cfg)
    t = end.trigger
    lead = cfg.workloads.capacity_block_end.lead_minutes
    m = meta(cfg, CHECKPOINT_TRIGGER)
    m["annotations"] = {"rl.platform/capacity-block-end": _utc(end.end),
                        "rl.platform/capacity-block-pools": ",".join(end.pools)}
    return {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": m,
        "spec": {
            "schedule": f"{t.minute} {t.hour} {t.day} {t.month} *",
            "timeZone": "Etc/UTC",
            # Never start once the drain has begun: the nodes are going.
            "startingDeadlineSeconds": (lead - CAPACITY_BLOCK_DRAIN_MINUTES) * 60,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"metadata": {"labels": labels(CHECKPOINT_TRIGGER)},
                            "spec": {"backoffLimit": 3, "activeDeadlineSeconds": 600,
                                     "template": trigger_template(cfg)}},
        },
    }


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
    if L.capacity_block_end(cfg):
        out.append((CHECKPOINT_TRIGGER, L.utility_pool(cfg), trigger_template(cfg), 1))
    return out


def k8s_objects(cfg: "ProgramConfig", fs: tuple[Any, Any, Any] = ("fs-0", "fs-0.fsx", "mount")) -> list[dict]:
    """Every core Kubernetes object, in creation order (CRs and Helm values apart)."""
    objs = [namespace(cfg), *network_policies(cfg), service_account(cfg), scripts_configmap(cfg),
            fsx_pv(cfg, *fs), fsx_pvc(cfg), *ray_pdbs(cfg)]
    if L.reward_group(cfg):
        objs += [reward_deployment(cfg), reward_service(cfg), reward_pdb(cfg)]
    if L.preprocess_job(cfg):
        objs.append(preprocess_job(cfg))
    if L.capacity_block_end(cfg):
        objs.append(checkpoint_trigger_cronjob(cfg))
    return objs


def custom_resources(cfg: "ProgramConfig") -> list[dict]:
    crs = [raycluster(cfg), volcano_queue(cfg)]
    if cfg.workloads.run.ray_job:
        crs.append(rayjob(cfg))
    return crs

"""The Ray side: the RayCluster (head and worker groups), the opt-in RayJob on it (submitted by the
KubeRay operator, no submitter pod), and the PodDisruptionBudgets that keep voluntary evictions off
the head, the trainers and reserved rollout pods."""

from __future__ import annotations

import json
from typing import Any

import yaml

from workloads.derive import layout as L
from workloads.derive.argv import SCRIPTS_DIR, driver, entry_and_flags
from workloads.derive.model import WorkloadModel
from workloads.pod.preflight import PASSED_UPTIME_SECONDS, sglang_flags
from workloads.render.common import (
    FSX_VOLUME,
    HEAD_PORTS,
    RAY_CLUSTER_LABEL,
    RAY_GROUP_LABEL,
    RAY_HEAD_GROUP,
    RAY_NODE_TYPE_LABEL,
    SHM_VOLUME,
    container_resources,
    env_list,
    scripts_volume,
    fsx_volume,
    meta,
    placement,
    pod_security_context,
    ray_labels,
    security_context,
    shm_volume,
)

SCRIPTS_MOUNT = {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True}
BOOT_VOLUME = {"name": "preflight-boot", "emptyDir": {}}
BOOT_MOUNT = {"name": "preflight-boot", "mountPath": "/var/run/rl-preflight"}
"""The pod's own disk volume where its preflight keeps the boot it first passed on (``preflight.check_boot``)."""
NODE_DOWN_SECONDS = 1800
"""How long a GPU pod stays bound to a node that is not ready or unreachable before it is evicted (the API
server's default, which a pod's own toleration replaces, is 300 s: kubernetes v1.35.3
plugin/pkg/admission/defaulttolerationseconds/admission.go:44-45,141-162). Long enough for a reboot (EKS
node auto-repair's, a GPU reset) to keep the pod, and with it the boot record that refuses the node until
it is re-tested; a pod made again finds no record and is refused by the node's uptime instead
(``preflight.PASSED_UPTIME_SECONDS``). The price: a node that is gone for good holds its pods this long
before KubeRay makes them again elsewhere. An allowance, not a measurement."""
NODE_DOWN_TOLERATIONS = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": NODE_DOWN_SECONDS}
                         for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]


def gpu_placement(m: WorkloadModel, g: L.Group) -> dict:
    """Where a GPU pod of ``g`` goes (``placement``), tolerating its node down for ``NODE_DOWN_SECONDS``."""
    spec = placement(g.pool, m.capabilities(g.pool))
    return {**spec, "tolerations": [*spec.get("tolerations", []), *NODE_DOWN_TOLERATIONS]}

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


def preflight_args(m: WorkloadModel, g: L.Group) -> list[str]:
    """What this group's pods assume of their node, for ``workloads/pod/preflight.py``."""
    args = ["--gpus", str(g.gpus), "--efa", str(g.efa), "--nccl", m.profile.nccl,
            "--shm-gib", str(g.shm_bytes // (1024 ** 3)), "--hugepages-mi", str(g.hugepages_mi)]
    if g.efa and g.env.get("NCCL_NET") == "Socket":
        args += ["--fabric", "sockets"]
    # DeepEP V2 over GIN: gdrdrv, and for type 5 the GDA path; not where DeepEP runs with GIN off (direct mode).
    if g.efa and "NCCL_GIN_TYPE" in g.env and g.env.get("EP_DISABLE_GIN") != "1":
        args += ["--gin", "gpu" if g.env["NCCL_GIN_TYPE"] == "5" else "proxy"]
    return args


def sglang_engine_args(m: WorkloadModel, g: L.Group) -> list[str]:
    """The rollout pods' preflight also has the image's SGLang resolve the engine Miles will start (not the
    burn-in, which checks nodes, not engines)."""
    if g.name != "rollout" or m.argv is None:
        return []
    _, flags = entry_and_flags(m.argv)
    engine = {"argv": sglang_flags(flags), "model_path": m.paths.model,
              "gpus_per_engine": int(flags[flags.index("--rollout-num-gpus-per-engine") + 1]),
              "gpus_per_node": int(flags[flags.index("--num-gpus-per-node") + 1])}
    return ["--sglang-engine", json.dumps(engine, separators=(",", ":"))]


def preflight_container(m: WorkloadModel, g: L.Group, main: dict) -> dict:
    """Init container with the main container's image, resources, env and mounts (the kubelet hands
    the init container's devices on to the main container): the pod starts Ray only on a node whose
    GPUs, EFA devices, NCCL plugin, GDRCopy, memlock, huge pages and /dev/shm match the group. Its last
    log line (the finding) stays in its status as the termination message (``FallbackToLogsOnError``),
    where the burn-in's watcher reads whether the node is at fault (``nodes.watch.NODE_FAULTS``)."""
    return {"name": "preflight", "image": main["image"], "imagePullPolicy": "IfNotPresent",
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "command": ["python3", f"{SCRIPTS_DIR}/preflight.py", *preflight_args(m, g), *sglang_engine_args(m, g),
                        "--boot-record", f"{BOOT_MOUNT['mountPath']}/boot",
                        *(["--min-uptime", str(PASSED_UPTIME_SECONDS)] if m.burn_in else [])],
            "env": [*main.get("env", []), {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "resources": main["resources"], "securityContext": main["securityContext"],
            "volumeMounts": [*(v for v in main["volumeMounts"] if v != SCRIPTS_MOUNT), SCRIPTS_MOUNT, BOOT_MOUNT]}


def ray_pod_template(m: WorkloadModel, g: L.Group, head: bool = False) -> dict:
    c: dict[str, Any] = {
        "name": "ray-head" if head else "ray-worker",
        "image": m.image,
        "imagePullPolicy": "IfNotPresent",
        "resources": container_resources(g),
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"},
                         {"name": FSX_VOLUME, "mountPath": m.paths.mount}],
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }
    if g.gpus:  # the Miles driver runs on a training pod (entrypoint resources): its launcher is here
        c["volumeMounts"].append(SCRIPTS_MOUNT)
    env = g.env
    if env:
        c["env"] = env_list(env)
    if head:
        c["ports"] = [{"name": n, "containerPort": p} for n, p in HEAD_PORTS.items()]
    # Runs as the image's user (root): see the Ray entries of policy/checkov-justifications.yaml.
    c["securityContext"] = security_context(g)
    spec = {"serviceAccountName": m.service_account, "securityContext": pod_security_context(),
            "containers": [c], "volumes": [shm_volume(g), fsx_volume()],
            **(gpu_placement(m, g) if g.gpus else placement(g.pool))}
    if g.gpus:
        spec["initContainers"] = [preflight_container(m, g, c)]
        spec["volumes"] += [scripts_volume(), BOOT_VOLUME]
    return {"metadata": {"labels": ray_labels("ray-head" if head else f"ray-{g.name}")}, "spec": spec}


TOKEN_AUTH = {"mode": "token"}
"""Ray token authentication (Ray >= 2.52; KubeRay v1.7.0 refuses older ``rayVersion``, utils/validation.go:284-298).
KubeRay creates a Secret with a random token per cluster (raycluster_controller.go:423-470) and sets
``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` from it in the Ray container of every pod
(common/pod.go:345-425); Ray then refuses dashboard, Jobs API and GCS requests without that token
(ray-2.53.0 src/ray/rpc/authentication/authentication_token_loader.cc: the token from RAY_AUTH_TOKEN
first). The operator's dashboard client reads the Secret and sends the token (utils/util.go:1056-1080)."""


def cluster_spec(m: WorkloadModel, workers: tuple[L.Group, ...]) -> dict:
    """A RayCluster spec: the head, and one fixed-size group per worker group (no autoscaling)."""
    head = m.head
    groups = [{"groupName": g.name, "replicas": g.replicas, "minReplicas": g.replicas, "maxReplicas": g.replicas,
               "rayStartParams": ray_start_params(g), "template": ray_pod_template(m, g)} for g in workers]
    return {"rayVersion": m.profile.ray, "enableInTreeAutoscaling": False, "authOptions": TOKEN_AUTH,
            "headGroupSpec": {"serviceType": "ClusterIP", "rayStartParams": ray_start_params(head, head=True),
                              "template": ray_pod_template(m, head, head=True)},
            "workerGroupSpecs": groups}


def raycluster(m: WorkloadModel) -> dict:
    """``workloads.run.suspend``: ``spec.suspend``, on which KubeRay v1.7.0 deletes every pod of the
    cluster (raycluster_controller.go:943-955), so no disruption budget holds a node's drain."""
    spec = cluster_spec(m, m.workers)
    if m.settings.run.suspend:
        spec["suspend"] = True
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta(m, L.RAY_CLUSTER, "ray"), "spec": spec}


def runtime_env_yaml(env_vars: dict[str, str]) -> str:
    """A RayJob's ``runtimeEnvYAML``: one line per variable, however long (the argv is kilobytes)."""
    return yaml.safe_dump({"env_vars": env_vars}, sort_keys=True, width=float("inf"))


def entrypoint_resources() -> dict[str, float]:
    """Miles' driver needs libcuda: a sliver of the training nodes' custom resource."""
    return {L.GPU_NODE_RESOURCE: 0.001}


SUBMISSION_MODE = "HTTPMode"
"""How every RayJob the platform renders is submitted: the KubeRay operator posts the job to the head's
Jobs API and polls it (rayjob_controller.go:225-236 and 296-330, v1.7.0). No submitter Job, whose
failures or early exit would end a healthy run (K8sJobMode, ray-project/kuberay#4921).
``render.admission`` holds team RayJobs to it."""


def rayjob(m: WorkloadModel) -> dict:
    """The Miles run as a RayJob on the long-lived RayCluster (same argv as the TorchX component).

    KubeRay v1.7.0 with ``clusterSelector`` and ``HTTPMode``: the operator takes the named RayCluster
    instead of creating one (rayjob_controller.go:946-961), reads the URL of its head Service's
    ``dashboard`` port once the cluster is Ready (rayjob_controller.go:206-222, utils/util.go:1022-1054),
    and builds its dashboard client from that RayCluster, so it sends the token from the cluster's own
    Secret (utils/util.go:1056-1080; rayjob_controller.go:296). A job id unknown to the head is
    submitted there (rayjob_controller.go:296-311 and 1305-1321; the 404 is a BadRequest,
    utils/dashboardclient/dashboard_httpclient.go:168-170). Validation allows it: clusterSelector
    refuses only SidecarMode and ``backoffLimit`` > 0 (utils/validation.go:567-578).

    No ``ray.io/disable-provisioned-head-restart``: KubeRay reads it on a RayCluster
    (raycluster_controller.go:1025-1043 and 1458-1460) and copies it from a RayJob only onto a cluster
    it creates for that job (rayjob_controller.go:997-1007), never onto a selected one. The stack's
    head is recreated if lost; the new head knows no job, so the operator resubmits the run under the
    same id (rayjob_controller.go:1305-1321), which resumes from its checkpoint (``--load``), if the
    head answers within the status-check timeout (300 s, utils/constant.go:286-290); otherwise the
    RayJob is Failed. The RayCluster stays when the job ends (rayjob_controller.go:427-431)."""
    run = m.settings.run
    entrypoint, env = driver(m.run_argv(), dict(m.runtime_env))
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": meta(m, f"{run.name}-{run.attempt}", "miles-run"),
        "spec": {
            "clusterSelector": {"ray.io/cluster": L.RAY_CLUSTER},
            "entrypoint": entrypoint,
            "entrypointResources": json.dumps(entrypoint_resources()),
            "runtimeEnvYAML": runtime_env_yaml(env),
            "submissionMode": SUBMISSION_MODE,
            "shutdownAfterJobFinishes": False,
            "backoffLimit": 0,
        },
    }


# --- disruption budgets of the run ----------------------------------------------------------

def ray_pod_labels(m: WorkloadModel, group: str) -> dict[str, str]:
    """The labels KubeRay puts on a pod of ``group`` ("head" or a worker groupName): the template's
    plus its own three (labelPod in ray-operator/controllers/ray/common/pod.go, v1.7.0)."""
    head = group == "head"
    template = ray_pod_template(m, m.head if head else m.worker(group), head=head)
    return {**template["metadata"]["labels"], RAY_CLUSTER_LABEL: L.RAY_CLUSTER,
            RAY_NODE_TYPE_LABEL: "head" if head else "worker", RAY_GROUP_LABEL: RAY_HEAD_GROUP if head else group}


def protected_ray_groups(m: WorkloadModel) -> list[str]:
    """Ray groups whose pods a voluntary eviction must never take: the head (the driver and every
    actor die with it), the trainers (one lost rank stops the NCCL world), and the rollout engines
    unless the rollout pool is Spot (there Miles' --use-fault-tolerance restarts a lost engine, and
    a budget would only hold up the rebalance drain of a node that is going away anyway)."""
    groups = ["head", "trainer"]
    if not m.rollout_spot:
        groups.append("rollout")
    return groups


def ray_pdb(m: WorkloadModel, group: str) -> dict:
    """maxUnavailable 0: a node group update, an EKS/Karpenter consolidation or ``kubectl drain``
    waits instead of evicting the pod. Deleting the pod (KubeRay, an operator) is not an eviction.
    A worker's budget has ``unhealthyPodEvictionPolicy: AlwaysAllow``: a worker that is not Ready (its
    preflight refuses the node, e.g. after a reboot) is evicted whatever the budget (kubernetes v1.35.3
    pkg/registry/core/pod/storage/eviction.go:238-245), so the burn-in can free its node (``nodes.retest``);
    a drain may then take a worker whose readiness probe fails for a while under load too. The head's keeps
    ``IfHealthyBudget``: its probe also asks the GCS (KubeRay v1.6.2 ray-operator/controllers/ray/common/pod.go:
    515-516), it carries no boot check, and evicting it ends the run; a head not Ready is evicted only while the
    budget is healthy (eviction.go:246-251), which with one head and no disruption allowed it never is."""
    head = group == "head"
    selector = {RAY_CLUSTER_LABEL: L.RAY_CLUSTER, RAY_NODE_TYPE_LABEL: "head" if head else "worker"}
    if not head:
        selector[RAY_GROUP_LABEL] = group
    name = f"ray-{group}"
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(m, name, "ray"),
            "spec": {"maxUnavailable": 0, "unhealthyPodEvictionPolicy": "IfHealthyBudget" if head else "AlwaysAllow",
                     "selector": {"matchLabels": selector}}}


def ray_pdbs(m: WorkloadModel) -> list[dict]:
    return [ray_pdb(m, g) for g in protected_ray_groups(m)]

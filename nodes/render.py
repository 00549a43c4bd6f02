"""The burn-in's Kubernetes objects: namespace, service account, RBAC, scripts, one DaemonSet per GPU
pool, and the admission policies.

Guarantees:
- a pool's DaemonSet places its pod only on that pool's nodes whose result label is neither
  ``passed`` nor ``failed`` (a new node, or one asked to ``retest``); once the agent writes the
  result the node no longer matches and the DaemonSet controller deletes the pod, which frees the
  node's GPUs and EFA devices (kubernetes/kubernetes pkg/controller/daemon/daemon_controller.go,
  ``NodeShouldRunDaemonPod``: a node that fails the pod's node affinity should not keep running it);
- it tolerates exactly the pool's own taints and the burn-in taint, nothing else;
- the pod is the pool's Ray worker pod as the run would have it (image, env, resources, /dev/shm,
  IPC_LOCK), with the DCGM container first (it records the start, so the budget counts from it);
- the agent's liveness probe stops a container still undecided past the budget (plus a minute), so a
  hang becomes a failure with that reason (``nodes.agent.decide``);
- the watcher (``nodes.watch``) runs on every GPU node that passed, with no GPU, and re-tests it
  when a run's preflight fails there;
- RBAC: read and patch nodes, create Events in its namespace (the watcher also lists pods); the
  admission policies (``nodes.policy``) narrow both to the pod's own node and the burn-in keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from stackconfig.stack import POOL_LABEL
from stackconfig.versions import dcgm_image
from workloads.model import WorkloadModel
from workloads.render.network_policies import ANYWHERE, POD_IDENTITY_AGENT, _tcp, baseline, policy
from workloads.render.common import (container_resources, env_list, labels, pod_security_context, security_context,
                                     shm_volume, tolerations, SHM_VOLUME)

from .burn_in import PoolBurnIn
from .marks import DONE, PASSED, RESULT_LABEL
from .policy import burn_in_policies

NAMESPACE = "rl-burn-in"
SERVICE_ACCOUNT = "burn-in"
WATCH_ACCOUNT = "burn-in-watch"
WATCH = "burn-in-watch"
SCRIPTS = "burn-in-scripts"
SCRIPTS_DIR = "/opt/burn-in"
RESULTS_DIR = "/results"
PROBE_GRACE_SECONDS = 60
HERE = Path(__file__).resolve().parent
SCRIPT_FILES = {"agent.py": HERE / "agent.py", "marks.py": HERE / "marks.py", "incluster.py": HERE / "incluster.py",
                "replace.py": HERE / "replace.py", "watch.py": HERE / "watch.py", "preflight.py": HERE.parent / "workloads" / "preflight.py",
                "fabric_bench.py": HERE.parent / "workloads" / "fabric_bench.py"}
"""What the agent imports, flat in one folder: the preflight and the bench are the workloads' own files."""


def _meta(name: str, namespace: str | None = NAMESPACE) -> dict:
    md = {"name": name, "labels": labels(name)}
    if namespace:
        md["namespace"] = namespace
    return md


def _binding(kind: str, name: str, accounts: list[str], namespace: str | None) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{kind}Binding", "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": a, "namespace": NAMESPACE} for a in accounts]}


def base_objects() -> list[dict]:
    """Namespace, service accounts, RBAC and scripts, shared by every pool's DaemonSet and the watcher."""
    rbac = "rbac.authorization.k8s.io/v1"
    node_rule = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(NAMESPACE, None)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(SERVICE_ACCOUNT)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(WATCH_ACCOUNT)},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": _meta(NAMESPACE, None), "rules": [node_rule]},
        _binding("ClusterRole", NAMESPACE, [SERVICE_ACCOUNT], None),
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": _meta(f"{NAMESPACE}-watch", None),
         "rules": [node_rule, {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
        _binding("ClusterRole", f"{NAMESPACE}-watch", [WATCH_ACCOUNT], None),
        {"apiVersion": rbac, "kind": "Role", "metadata": _meta("burn-in-events"),
         "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]},
        _binding("Role", "burn-in-events", [SERVICE_ACCOUNT, WATCH_ACCOUNT], NAMESPACE),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(SCRIPTS),
         "data": {key: path.read_text() for key, path in SCRIPT_FILES.items()}},
        *network_policies(),
    ]


def network_policies() -> list[dict]:
    """Default deny and DNS (strict mode isolates a pod no policy selects), then what the agent and
    the watcher reach: the API server and, for replacement, the Auto Scaling API on 443, and the Pod
    Identity agent for the replacement role's credentials. Nothing reaches them."""
    return [*baseline(_meta), policy(
        _meta("allow-api"), None, "burn-in pods -> API server and AWS APIs 443/TCP, Pod Identity agent 80/TCP",
        egress=[{"to": [{"ipBlock": {"cidr": ANYWHERE}}], "ports": _tcp(443)},
                {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(80)}])]


def dcgm_script(b: PoolBurnIn) -> str:
    """Record the start once per pod, start the DCGM host engine (it daemonizes), run the diagnostic
    within its allowance, keep its JSON and exit code for the agent; never fail the container (the
    agent judges, so a failed diagnostic is reported rather than restarted)."""
    r = RESULTS_DIR
    return "\n".join([
        f"[ -s {r}/started ] || date +%s > {r}/started",
        f"if ! nv-hostengine > {r}/dcgm.err 2>&1; then echo 127 > {r}/dcgm.rc; exit 0; fi",
        f"timeout {b.steps['dcgm']} dcgmi diag -r {b.dcgm_level} -j > {r}/dcgm.json 2>> {r}/dcgm.err",
        f"echo $? > {r}/dcgm.rc",
        "nv-hostengine --term > /dev/null 2>&1 || true",
        "exit 0"])


def liveness_command(b: PoolBurnIn) -> list[str]:
    r = RESULTS_DIR
    limit = b.budget_seconds + PROBE_GRACE_SECONDS
    return ["sh", "-c", f"test -e {r}/written || test ! -s {r}/started || "
                        f"test $(( $(date +%s) - $(cat {r}/started) )) -lt {limit}"]


def daemonset(m: WorkloadModel, b: PoolBurnIn) -> dict:
    g = b.group
    results = {"name": "results", "mountPath": RESULTS_DIR}
    gpus = {"nvidia.com/gpu": str(g.gpus), "cpu": "1", "memory": "2Gi"}
    dcgm = {"name": "dcgm", "image": dcgm_image(m.software), "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", dcgm_script(b)],
            "resources": {"requests": gpus, "limits": gpus},
            "securityContext": security_context(),
            "volumeMounts": [results]}
    env = {**g.env, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    agent = {"name": "agent", "image": m.image, "imagePullPolicy": "IfNotPresent",
             "command": ["python3", f"{SCRIPTS_DIR}/agent.py", "--plan", json.dumps(b.agent_plan, sort_keys=True),
                         "--results", RESULTS_DIR],
             "env": [*env_list(env),
                     {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                     {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
             "resources": container_resources(g), "securityContext": security_context(g),
             "livenessProbe": {"exec": {"command": liveness_command(b)}, "periodSeconds": 60, "failureThreshold": 1,
                               "timeoutSeconds": 10},
             "volumeMounts": [results, {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
                              *([{"name": SHM_VOLUME, "mountPath": "/dev/shm"}] if g.shm_bytes else [])]}
    volumes = [{"name": "results", "emptyDir": {}}, {"name": "scripts", "configMap": {"name": SCRIPTS}},
               *([shm_volume(g)] if g.shm_bytes else [])]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [b.pool.name]},
                              {"key": RESULT_LABEL, "operator": "NotIn", "values": list(DONE)}]}]}}}
    taint = b.agent_plan["taint"]
    pod_labels = labels(b.name)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(b.name),
            "spec": {"selector": {"matchLabels": pod_labels},
                     "template": {"metadata": {"labels": pod_labels},
                                  "spec": {"serviceAccountName": SERVICE_ACCOUNT,
                                           "securityContext": pod_security_context(),
                                           "affinity": affinity,
                                           "tolerations": [*tolerations(b.pool),
                                                           {"key": taint["key"], "operator": "Equal",
                                                            "value": taint["value"], "effect": taint["effect"]}],
                                           "initContainers": [dcgm], "containers": [agent], "volumes": volumes}}}}


def watch_daemonset(m: WorkloadModel, plans: list[PoolBurnIn]) -> dict:
    """``nodes.watch`` on every GPU node that passed: no GPU, a little CPU and memory, read-only root."""
    taint = plans[0].agent_plan["taint"]
    tolerated = {json.dumps(t, sort_keys=True): t for b in plans for t in tolerations(b.pool)}
    tolerated[json.dumps(taint)] = {"key": taint["key"], "operator": "Equal", "value": taint["value"],
                                    "effect": taint["effect"]}
    small = {"cpu": "50m", "memory": "128Mi"}
    c = {"name": "watch", "image": m.image, "imagePullPolicy": "IfNotPresent",
         "command": ["python3", f"{SCRIPTS_DIR}/watch.py", "--taint", json.dumps(taint, sort_keys=True)],
         "env": [*env_list({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}),
                 {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                 {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
         "resources": {"requests": small, "limits": small}, "securityContext": security_context(read_only=True),
         "volumeMounts": [{"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [b.pool.name for b in plans]},
                              {"key": RESULT_LABEL, "operator": "In", "values": [PASSED]}]}]}}}
    pod_labels = labels(WATCH)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(WATCH),
            "spec": {"selector": {"matchLabels": pod_labels},
                     "template": {"metadata": {"labels": pod_labels},
                                  "spec": {"serviceAccountName": WATCH_ACCOUNT, "securityContext": pod_security_context(),
                                           "affinity": affinity, "tolerations": list(tolerated.values()),
                                           "containers": [c],
                                           "volumes": [{"name": "scripts", "configMap": {"name": SCRIPTS}}]}}}}


def burn_in_objects(m: WorkloadModel, plans: list[PoolBurnIn]) -> list[dict]:
    """Everything the burn-in registers; nothing when no pool has a plan (burn-in off)."""
    if not plans:
        return []
    taint_key = plans[0].agent_plan["taint"]["key"]
    return [*base_objects(), *(daemonset(m, b) for b in plans), watch_daemonset(m, plans),
            *burn_in_policies(NAMESPACE, SERVICE_ACCOUNT, WATCH_ACCOUNT, taint_key)]

"""The burn-in's Kubernetes objects: namespace, service accounts, RBAC, scripts, one DaemonSet per GPU
pool, the watcher, the controller (re-tests; replacement with ``burnIn.replaceFailed``) and the admission
policies.

Guarantees:
- a pool's DaemonSet places its pod only on that pool's nodes whose result label is neither
  ``passed`` nor ``failed`` (a new node, or one asked to ``retest``); once the agent writes the
  result the node no longer matches and the DaemonSet controller deletes the pod, which frees the
  node's GPUs and EFA devices (kubernetes/kubernetes pkg/controller/daemon/daemon_controller.go,
  ``NodeShouldRunDaemonPod``: a node that fails the pod's node affinity should not keep running it);
- it tolerates exactly the pool's own taints, the burn-in taint and the quarantine taint (a re-test
  of a failed node), nothing else;
- the pod is the pool's Ray worker pod as the run would have it (image, env, resources, /dev/shm,
  IPC_LOCK), with the DCGM container first, less the pool's own GPU resource (``agent_resources``); the
  agent's budget counts from the agent's own start;
- ``pulumi up`` does not wait for the DaemonSets or the controller: they carry
  ``pulumi.com/skipAwait`` (pulumi-kubernetes provider/pkg/await/daemonset.go awaits a DaemonSet's
  rollout, ``_defaultDaemonSetTimeout`` 10 minutes, and deployment.go a Deployment's, unless
  ``metadata.SkipAwaitLogic``, await.go), since a burn-in pod is never Ready before its images are
  pulled and its checks are done, and on a first deploy the images are pushed after ``pulumi up``;
- the agent's liveness probe stops a container still undecided past the budget (plus a minute), so a
  hang becomes a failure with that reason (``nodes.agent.decide``);
- the watcher (``nodes.watch``) runs on every GPU node that passed, with no GPU, and re-tests it
  when a run's preflight fails there;
- the controller (``nodes.controller``) runs on the system pool: it evicts what holds a node asked to
  re-test (``nodes.retest``) and, with ``burnIn.replaceFailed``, is the only pod with the Pod Identity
  role that may call ``autoscaling:SetInstanceHealth`` and the only one that reaches the Pod Identity agent;
- RBAC: read and patch nodes, create Events in its namespace (the watcher also lists pods; the
  controller lists nodes and pods, creates pod evictions and keeps its ConfigMap: exactly the calls of
  ``nodes.controller``, held so by ``tests/test_nodes_controller.py``); the admission policies
  (``nodes.policy``) narrow them to the pod's own node and the burn-in keys (the controller: its
  annotations on nodes);
- the controller may evict only in the namespaces runs live in (``eviction_namespaces``: the
  platform's Ray namespace and each team's), by a Role in each, never cluster-wide: a run's head, trainers
  and rollout pods there are under a budget of ``maxUnavailable: 0`` that lets go only a worker that is not
  Ready (``unhealthyPodEvictionPolicy: AlwaysAllow``); a Spot rollout pool's workers
  (``workloads.render.ray.protected_ray_groups``) and any other pod there are under none, so the controller
  can evict those at will, as a drain could.
  Not narrowed by node with an admission policy: the API server admits an eviction on the ``Eviction``
  object alone (kubernetes v1.35.3 pkg/registry/core/pod/storage/eviction.go:150-154, ``createValidation``
  of the eviction), which names the pod but not its node, and a ValidatingAdmissionPolicy's CEL reads
  no other object.
"""

from __future__ import annotations

import json
from pathlib import Path

from stackconfig.labels import pool_gpu_resource
from stackconfig.stack import POOL_LABEL
from stackconfig.versions import dcgm_image
from workloads.derive.model import WorkloadModel
from workloads.render.teams import namespace_of
from workloads.render.network_policies import ANYWHERE, POD_IDENTITY_AGENT, _all_tcp, _tcp, baseline, policy
from workloads.render.common import (container_resources, env_list, labels, pod_security_context, security_context,
                                     shm_volume, tolerations, SHM_VOLUME)

from .burn_in import QUARANTINE_TAINT, PoolBurnIn
from .breaker import BREAKER
from .marks import DONE, NODE_EVENTS_NAMESPACE, PASSED, RESULT_LABEL
from .pairs import HOST_LABEL, host_image_env
from .policy import HOST_IMAGES_PARAM, burn_in_policies

NAMESPACE = "rl-burn-in"
SERVICE_ACCOUNT = "burn-in"
WATCH_ACCOUNT = "burn-in-watch"
WATCH = "burn-in-watch"
REPLACE_ACCOUNT = "burn-in-replace"
REPLACE = "burn-in-replace"
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
AGENT_LABEL = {"app.kubernetes.io/component": "burn-in-agent"}
"""On every pool's burn-in pod: the pods that check each other in pairs (``nodes.pairs``)."""
SCRIPTS = "burn-in-scripts"
SCRIPTS_DIR = "/opt/burn-in"
RESULTS_DIR = "/results"
PROBE_GRACE_SECONDS = 60
HERE = Path(__file__).resolve().parent
SCRIPT_FILES = {**{f"{name}.py": HERE / f"{name}.py" for name in
                   ("agent", "collectives", "dcgm", "efa", "pairs", "marks", "incluster", "replace", "watch",
                    "controller", "breaker", "retest")},
                "preflight.py": HERE.parent / "workloads" / "pod" / "preflight.py",
                "fabric_bench.py": HERE.parent / "workloads" / "pod" / "fabric_bench.py"}
"""What the agent imports, flat in one folder: the preflight and the bench are the workloads' own files."""


NODE_EVENTS = "rl-burn-in-node-events"
"""The Role that lets the burn-in's accounts write Events about nodes (``marks.NODE_EVENTS_NAMESPACE``)."""


def _meta(name: str, namespace: str | None = NAMESPACE, skip_await: bool = False) -> dict:
    md = {"name": name, "labels": labels(name)}
    if namespace:
        md["namespace"] = namespace
    if skip_await:
        md["annotations"] = dict(SKIP_AWAIT)
    return md


def _binding(kind: str, name: str, accounts: list[str], namespace: str | None) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{kind}Binding", "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": a, "namespace": NAMESPACE} for a in accounts]}


def base_objects() -> list[dict]:
    """Namespace, service accounts, RBAC and scripts, shared by every pool's DaemonSet, the watcher and
    the controller."""
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
        _binding("Role", "burn-in-events", [SERVICE_ACCOUNT, WATCH_ACCOUNT, REPLACE_ACCOUNT], NAMESPACE),
        {"apiVersion": rbac, "kind": "Role", "metadata": _meta(NODE_EVENTS, NODE_EVENTS_NAMESPACE),
         "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]},
        _binding("Role", NODE_EVENTS, [SERVICE_ACCOUNT, WATCH_ACCOUNT, REPLACE_ACCOUNT], NODE_EVENTS_NAMESPACE),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(REPLACE_ACCOUNT)},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": _meta(f"{NAMESPACE}-replace", None),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
        _binding("ClusterRole", f"{NAMESPACE}-replace", [REPLACE_ACCOUNT], None),
        {"apiVersion": rbac, "kind": "Role", "metadata": _meta(BREAKER),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
                   {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [BREAKER],
                    "verbs": ["get", "update"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "delete"]}]},
        _binding("Role", BREAKER, [REPLACE_ACCOUNT], NAMESPACE),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(SCRIPTS),
         "data": {key: path.read_text() for key, path in SCRIPT_FILES.items()}},
        *network_policies(),
    ]


EVICT = "rl-burn-in-evict"
"""The Role, in each namespace runs live in, that lets the controller evict pods there (``nodes.retest``)."""


def eviction_namespaces(m: WorkloadModel) -> list[str]:
    """Where run pods live: the platform's Ray namespace and every team's."""
    return sorted({m.namespace, *(namespace_of(t.name) for t in m.settings.teams)})


def eviction_roles(namespaces: list[str]) -> list[dict]:
    """``pods/eviction`` create for the controller's account, one Role and binding per namespace."""
    role = {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}
    return [o for ns in namespaces for o in (
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(EVICT, ns), "rules": [role]},
        _binding("Role", EVICT, [REPLACE_ACCOUNT], ns))]


def network_policies() -> list[dict]:
    """Default deny and DNS (strict mode isolates a pod no policy selects), then what the pods reach:
    the API server on 443 (all), the Auto Scaling API on 443 and the Pod Identity agent for the
    replacement role's credentials (the controller only), and the burn-in pods of two nodes checked as
    a pair each other over TCP (the torch rendezvous, NCCL's bootstrap sockets, fi_pingpong's control
    connection; the EFA traffic itself does not go through the pod's IP stack). Nothing else reaches them."""
    peers = [{"podSelector": {"matchLabels": dict(AGENT_LABEL)}}]
    return [*baseline(_meta), policy(
        _meta("allow-api"), None, "burn-in pods -> API server 443/TCP",
        egress=[{"to": [{"ipBlock": {"cidr": ANYWHERE}}], "ports": _tcp(443)}]), policy(
        _meta("allow-pairs"), AGENT_LABEL, "burn-in pods <-> burn-in pods, all TCP (the check with a neighbour)",
        ingress=[{"from": peers, "ports": _all_tcp()}], egress=[{"to": peers, "ports": _all_tcp()}]), policy(
        _meta("allow-pod-identity"), labels(REPLACE),
        "replacement controller -> Pod Identity agent 80/TCP",
        egress=[{"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(80)}])]


DCGM_USER = 1000
"""The DCGM container's user, never root, held by the kubelet (``runAsNonRoot``). As root, NVVS adds the EUD
tests to level 3 and above (DCGM v4.5.2 nvvs/src/NvidiaValidationSuite.cpp:1151-1157, ``IsRunningAsRoot``:
common/DcgmUtilities.cpp:1083-1086, ``geteuid() == 0``); the EUD plugin, closed source, would run with every
capability dropped and fail, a software failure on every node of every pool. As any other user the suite
leaves them out, and the host engine runs "as non-root. Some functionality will be limited" (v4.5.2
hostengine/src/main.cpp:445). The id is arbitrary: the image needs no account for it."""
DCGM_HOST_ENGINE = ["nv-hostengine", "--pid", f"{RESULTS_DIR}/nvhostengine.pid",
                    "--log-filename", f"{RESULTS_DIR}/nv-hostengine.log", "--home-dir", RESULTS_DIR]
"""Every file the host engine and its diagnostic write goes to the pod's results volume, an emptyDir the
kubelet creates with mode 0777 (kubernetes v1.35.3 pkg/volume/emptydir/empty_dir.go, ``perm``), which
``DCGM_USER`` can write: its defaults are root's (v4.5.2 hostengine/src/HostEngineCommandLine.cpp:422-427,
``/var/run/nvhostengine.pid``, which the daemon exits on when it cannot write it, main.cpp:204-219;
``/var/log/nv-hostengine.log``, common/DcgmLogging.h:55; the diagnostic's logs in ``--home-dir``, else
``/var/log/nvidia-dcgm``, common/DcgmUtilities.cpp:1139-1146)."""


def dcgm_script(b: PoolBurnIn) -> str:
    """Start the DCGM host engine (it daemonizes, nv-hostengine(8)), run the diagnostic within its own
    allowance, keep its JSON and exit code for the agent; never fail the container (the agent judges,
    so a failed diagnostic is reported rather than restarted)."""
    r, engine = RESULTS_DIR, " ".join(DCGM_HOST_ENGINE)
    return "\n".join([
        f"if ! {engine} > {r}/dcgm.err 2>&1; then echo 127 > {r}/dcgm.rc; exit 0; fi",
        f"timeout {b.steps['dcgm']} dcgmi diag -r {b.dcgm_level} -j > {r}/dcgm.json 2>> {r}/dcgm.err",
        f"echo $? > {r}/dcgm.rc",
        f"{' '.join(DCGM_HOST_ENGINE[:3])} --term > /dev/null 2>&1 || true",
        "exit 0"])


def liveness_command(b: PoolBurnIn) -> list[str]:
    """Alive while the result is written, the clock has not started, the node rebooted since it did (the
    agent starts over: ``nodes.agent.BOOT_ID``), or the budget (plus a grace) has not run out."""
    r = RESULTS_DIR
    limit = b.budget_seconds + PROBE_GRACE_SECONDS
    return ["sh", "-c", f"test -e {r}/written || test ! -s {r}/started || "
                        f"test \"$(cat {r}/boot 2>/dev/null)\" != \"$(cat /proc/sys/kernel/random/boot_id)\" || "
                        f"test $(( $(date +%s) - $(cat {r}/started) )) -lt {limit}"]


def dcgm_resources(b: PoolBurnIn) -> dict:
    """The node's GPUs and the agent's CPU and memory (the Ray pod's): an init container's request
    adds nothing to the pod's, whose effective request is the larger of its largest init container's
    and the sum of its app containers' (Kubernetes docs, Init Containers, "Resource sharing within
    containers"), so the diagnostic gets room for its stress tests at no cost.

    Privilege: none (the platform's pod rules allow IPC_LOCK only). NVIDIA's DCGM docs (nv-hostengine)
    say the host engine runs without root "but prints a warning and cannot provide features for which
    the host-engine user lacks device or operating-system permissions. Configuration management and
    portions of diagnostics can require root"; the NVSwitch module needs root. A test that cannot run
    for that reason reports Fail with a software category (DCGM docs, Diagnostic Plugins, Interpreting
    results), which fails the node without a replacement (``nodes.agent.HARDWARE_CATEGORIES``).

    Profiling: the CloudWatch agent's dcgm-exporter on the node starts its own embedded host engine
    (dcgm-exporter docs: without ``--remote-hostengine-info``) and watches profiling metrics;
    ``dcgmi profile --pause`` acts on the host engine dcgmi connects to (dcgmi profile docs), here the
    burn-in's own, so it cannot pause the exporter's. The conflict is stated, not solved: a level 2/3
    test that needs the profiling counters the exporter holds fails as software, never replaced."""
    r = container_resources(b.group)["limits"]
    res = {"nvidia.com/gpu": str(b.group.gpus), "cpu": r["cpu"], "memory": r["memory"]}
    return {"requests": dict(res), "limits": dict(res)}


def agent_resources(b: PoolBurnIn) -> dict:
    """The run's pod's requests and limits (``container_resources``) less the pool's own GPU resource
    (``stackconfig.labels.pool_gpu_resource``): the advertiser sets it to 0 on a node under the burn-in or
    quarantine taint (``nodes.advertise``), the nodes this pod runs on, and it counts only in the team Queues and
    quotas, which do not hold this namespace."""
    key = pool_gpu_resource(b.pool.name)
    return {part: {k: v for k, v in r.items() if k != key} for part, r in container_resources(b.group).items()}


def daemonset(m: WorkloadModel, b: PoolBurnIn) -> dict:
    g = b.group
    results = {"name": "results", "mountPath": RESULTS_DIR}
    dcgm = {"name": "dcgm", "image": dcgm_image(m.software), "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", dcgm_script(b)],
            "resources": dcgm_resources(b),
            "securityContext": {**security_context(), "runAsNonRoot": True, "runAsUser": DCGM_USER},
            "volumeMounts": [results]}
    env = {**g.env, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    agent = {"name": "agent", "image": m.image, "imagePullPolicy": "IfNotPresent",
             "command": ["python3", f"{SCRIPTS_DIR}/agent.py", "--plan", json.dumps(b.agent_plan, sort_keys=True),
                         "--results", RESULTS_DIR],
             "env": [*env_list(env),
                     {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                     {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                     {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
             "resources": agent_resources(b), "securityContext": security_context(g),
             "livenessProbe": {"exec": {"command": liveness_command(b)}, "periodSeconds": 60, "failureThreshold": 1,
                               "timeoutSeconds": 10},
             "volumeMounts": [results, {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
                              *([{"name": SHM_VOLUME, "mountPath": "/dev/shm"}] if g.shm_bytes else [])]}
    volumes = [{"name": "results", "emptyDir": {}}, {"name": "scripts", "configMap": {"name": SCRIPTS}},
               *([shm_volume(g)] if g.shm_bytes else [])]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [b.pool.name]},
                              {"key": RESULT_LABEL, "operator": "NotIn", "values": list(DONE)}]}]}}}
    pod_labels = labels(b.name)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(b.name, skip_await=True),
            "spec": {"selector": {"matchLabels": pod_labels},
                     "template": {"metadata": {"labels": {**pod_labels, **AGENT_LABEL}},
                                  "spec": {"serviceAccountName": SERVICE_ACCOUNT,
                                           "securityContext": pod_security_context(),
                                           "affinity": affinity,
                                           "tolerations": [*tolerations(b.pool),
                                                           *(_toleration(b.agent_plan[k]) for k in ("taint", "quarantine"))],
                                           "initContainers": [dcgm], "containers": [agent], "volumes": volumes}}}}


def _toleration(taint: dict) -> dict:
    return {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": taint["effect"]}


def watch_daemonset(m: WorkloadModel, plans: list[PoolBurnIn]) -> dict:
    """``nodes.watch`` on every GPU node that passed: no GPU, a little CPU and memory, read-only root."""
    taint = plans[0].agent_plan["taint"]
    tolerated = {json.dumps(t, sort_keys=True): t for b in plans for t in tolerations(b.pool)}
    tolerated[json.dumps(taint)] = _toleration(taint)
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
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(WATCH, skip_await=True),
            "spec": {"selector": {"matchLabels": pod_labels},
                     "template": {"metadata": {"labels": pod_labels},
                                  "spec": {"serviceAccountName": WATCH_ACCOUNT, "securityContext": pod_security_context(),
                                           "affinity": affinity, "tolerations": list(tolerated.values()),
                                           "containers": [c],
                                           "volumes": [{"name": "scripts", "configMap": {"name": SCRIPTS}}]}}}}


HOST = "burn-in-host"


def host_pod_spec(m: WorkloadModel, b: PoolBurnIn) -> dict:
    """The pod that checks a lone new node from a proven node of the pool (``nodes.pairs.host_pod`` names the
    nodes): the pool's burn-in agent container running ``pairs.py`` (rank 0), no DCGM, no probe, no token,
    not the DaemonSet's labels (its controller would adopt it), the pair policy's label."""
    pod = daemonset(m, b)["spec"]["template"]["spec"]
    agent = {k: v for k, v in pod["containers"][0].items() if k != "livenessProbe"}
    agent = {**agent, "name": "host", "command": ["python3", f"{SCRIPTS_DIR}/pairs.py", "--plan",
                                                  json.dumps(b.agent_plan, sort_keys=True), "--results", RESULTS_DIR]}
    spec = {k: v for k, v in pod.items() if k not in ("initContainers", "affinity", "containers")}
    return {"metadata": {"labels": {**labels(HOST), **AGENT_LABEL}},
            "spec": {**spec, "containers": [agent], "restartPolicy": "Never", "automountServiceAccountToken": False}}


def controller_plan(m: WorkloadModel, plans: list[PoolBurnIn]) -> dict:
    """What the controller is told: the burn-in's pools, whether it replaces in each, their breakers, and the
    host pod of each pool whose new nodes are checked with a neighbour."""
    return {"namespace": NAMESPACE, "poolLabel": POOL_LABEL, "quarantine": plans[0].agent_plan["quarantine"],
            "taint": plans[0].agent_plan["taint"],
            "pools": {b.pool.name: {"replace": b.replace, **b.breaker.model_dump(by_alias=True)} for b in plans},
            "hosts": {b.pool.name: host_pod_spec(m, b) for b in plans if b.steps.get("neighbours")}}


def host_images(m: WorkloadModel, plans: list[PoolBurnIn]) -> dict[str, str]:
    """Each host pool's image under its variable (``nodes.pairs.host_image_env``): an environment value the
    deploy fills with the stack registry's URL, which the plan's JSON string never gets."""
    return {host_image_env(pool): spec["spec"]["containers"][0]["image"]
            for pool, spec in controller_plan(m, plans)["hosts"].items()}


def host_images_param(m: WorkloadModel, plans: list[PoolBurnIn]) -> dict:
    """The ConfigMap the host-pod policy admits images from: the controller's own ``host_images``, which the
    deploy fills alike (``nodes.policy.HOST_IMAGES_PARAM``)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(HOST_IMAGES_PARAM), "data": host_images(m, plans)}


def host_capabilities(m: WorkloadModel, plans: list[PoolBurnIn]) -> list[str]:
    """The capabilities a host container adds (its pool's agent's)."""
    return sorted({a for spec in controller_plan(m, plans)["hosts"].values() for c in spec["spec"]["containers"]
                   for a in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add", [])})


def controller(m: WorkloadModel, plans: list[PoolBurnIn]) -> dict:
    """``nodes.controller`` on the system pool: one replica, never two at once (``Recreate``)."""
    small = {"cpu": "100m", "memory": "128Mi"}
    c = {"name": "controller", "image": m.image, "imagePullPolicy": "IfNotPresent",
         "command": ["python3", f"{SCRIPTS_DIR}/controller.py", "--plan", json.dumps(controller_plan(m, plans), sort_keys=True)],
         "env": env_list({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", **host_images(m, plans)}),
         "resources": {"requests": small, "limits": small}, "securityContext": security_context(read_only=True),
         "volumeMounts": [{"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True}]}
    pod_labels = labels(REPLACE)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(REPLACE, skip_await=True),
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": pod_labels},
                     "template": {"metadata": {"labels": pod_labels},
                                  "spec": {"serviceAccountName": REPLACE_ACCOUNT,
                                           "securityContext": pod_security_context(),
                                           "nodeSelector": {POOL_LABEL: m.system_pool.name},
                                           "tolerations": tolerations(m.system_pool), "containers": [c],
                                           "volumes": [{"name": "scripts", "configMap": {"name": SCRIPTS}}]}}}}


def burn_in_objects(m: WorkloadModel, plans: list[PoolBurnIn]) -> list[dict]:
    """Everything the burn-in registers; nothing when no pool has a plan (burn-in off)."""
    if not plans:
        return []
    caps = tuple(sorted({k for b in plans for k in b.capabilities}))
    return [*base_objects(), *eviction_roles(eviction_namespaces(m)), *(daemonset(m, b) for b in plans),
            watch_daemonset(m, plans), controller(m, plans), host_images_param(m, plans),
            *burn_in_policies(NAMESPACE, SERVICE_ACCOUNT, WATCH_ACCOUNT, REPLACE_ACCOUNT, plans[0].agent_plan["taint"]["key"],
                              QUARANTINE_TAINT.key, caps,
                              (HOST_LABEL, f"{SCRIPTS_DIR}/pairs.py", host_capabilities(m, plans)), BREAKER)]

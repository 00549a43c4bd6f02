"""The GPU resource advertiser's Kubernetes objects: every GPU node advertises its pool's own resource
(``stackconfig.labels.pool_gpu_resource``) as many as its GPUs, which the team Queues and ResourceQuotas count
per pool and every team GPU pod requests (docs/design/scheduling.md, "Per-pool guarantees"); every head-pool
node advertises ``stackconfig.labels.HEAD_SLOT_RESOURCE`` as many as the run heads it holds
(``workloads.derive.layout.heads_per_node``), which every run head requests one of and the team
ResourceQuotas bound at ``maxRuns`` (docs/design/tenancy.md, "Head pool").

Guarantees:
- one DaemonSet (``nodes.advertise``) on every GPU pool's and the head pool's nodes, whether or not the
  stack's burn-in is on, tolerating exactly the taints the device plugins tolerate
  (``components.device_plugins.gpu_taints``: the pools', the burn-in's and the quarantine taint) and the head
  pool's, so a node's resource is there before the burn-in lifts its taint; no GPU, a little CPU and memory, a read-only root, the workload image (every GPU node pulls it);
- RBAC: get nodes and patch the nodes' status, nothing else; the admission policy ``rl-gpu-resource-own-node``
  (matched to its account only, ``failurePolicy: Fail``) narrows that to the node its pod runs on (the
  service-account token's node name, as ``nodes.policy``), to one key of ``status.capacity``: on a GPU node its
  pool resource, equal to 0 or its allocatable ``nvidia.com/gpu`` (its healthy GPUs) and never removed (the
  advertiser writes 0 while no run pod may land there: under the burn-in or quarantine taint, cordoned, or
  fewer healthy GPUs than a run pod takes, ``whole_node_gpus``; ``nodes.advertise``), on a head-pool node its
  head slots, equal to the heads a node holds; every other part of the status, the labels, annotations,
  finalizers and owner references as they were;
- default-deny NetworkPolicies: the pods reach the API server (443) and DNS only;
- ``pulumi up`` does not wait for the DaemonSet (``pulumi.com/skipAwait``): GPU nodes join over many minutes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from components.device_plugins import gpu_taints, tolerations
from components.gpu_node_setup import BURN_IN_TAINT, QUARANTINE_TAINT
from stackconfig.labels import HEAD_SLOT_RESOURCE, pool_gpu_resource
from stackconfig.stack import POOL_LABEL
from workloads.derive.layout import heads_on
from workloads.derive.model import WorkloadModel
from workloads.render.cel import cel_list
from workloads.render.common import env_list, labels, pod_security_context, security_context
from workloads.render.network_policies import api_server_egress, baseline, policy

from .advertise import GPU
from .policy import PART_OF, _NODE

NAMESPACE = "rl-gpu-resources"
ACCOUNT = "gpu-resource-advertiser"
NAME = "gpu-resource-advertiser"
POLICY = "rl-gpu-resource-own-node"
SCRIPTS_DIR = "/opt/gpu-resource"
HERE = Path(__file__).resolve().parent
SCRIPT_FILES = {"advertise.py": HERE / "advertise.py", "incluster.py": HERE / "incluster.py"}
OTHER_STATUS = ("allocatable", "phase", "conditions", "addresses", "daemonEndpoints", "nodeInfo", "images",
                "volumesInUse", "volumesAttached", "config", "runtimeHandlers", "features", "declaredFeatures")
"""Every NodeStatus field but ``capacity`` (Kubernetes v1.35 core/v1 NodeStatus)."""
UNCHANGED_METADATA = (("labels", "{}"), ("annotations", "{}"), ("finalizers", "[]"), ("ownerReferences", "[]"))
"""Metadata a status write keeps as it was (field, CEL of its absent value). The node status strategy resets only
``spec`` (kubernetes pkg/registry/core/node/strategy.go ``nodeStatusStrategy.PrepareForUpdate``): a finalizer would
keep a removed instance's Node (and its resources, counted by Volcano), an owner reference would let the garbage
collector delete the Node (review35 C1)."""
RUN_BLOCKING_TAINTS = (BURN_IN_TAINT.key, QUARANTINE_TAINT.key)
"""The taints (keys) under which a GPU node advertises 0 of its pool resource: no run pod tolerates them."""


def resources(m: WorkloadModel) -> dict[str, str]:
    """GPU pool -> its own resource."""
    return {p.name: pool_gpu_resource(p.name) for p in m.pools if p.instance.is_gpu}


def whole_node_gpus(m: WorkloadModel) -> dict[str, int]:
    """GPU pool -> the GPUs a run's pod there takes, all of a node's (the instance catalog's count, as
    ``workloads.derive.layout`` sizes the pod): a node with fewer allocatable advertises 0."""
    return {p.name: p.instance.gpus for p in m.pools if p.instance.is_gpu}


def head_slots(m: WorkloadModel) -> int:
    """What a head-pool node advertises of ``HEAD_SLOT_RESOURCE``: the run heads it holds."""
    return heads_on(m.head, m.settings.efa_devices)


def _tolerated(m: WorkloadModel) -> list[dict]:
    """The GPU pools' taints (``gpu_taints``), then the head pool's that are not among them."""
    gpu = gpu_taints(m.pools)
    return tolerations([*gpu, *(t for t in m.head_pool.taints if t not in gpu)])


def _meta(name: str, namespace: str | None = NAMESPACE) -> dict:
    md = {"name": name, "labels": labels(name)}
    if namespace:
        md["namespace"] = namespace
    return md


def _policy_meta(name: str) -> dict:
    """A NetworkPolicy's metadata, named apart from the burn-in's (the two register in one component)."""
    return _meta(f"{NAME}-{name}")


def daemonset(m: WorkloadModel) -> dict:
    small = {"cpu": "20m", "memory": "64Mi"}
    c = {"name": "advertise", "image": m.image, "imagePullPolicy": "IfNotPresent",
         "command": ["python3", f"{SCRIPTS_DIR}/advertise.py", "--resources", json.dumps(resources(m), sort_keys=True),
                     "--pool-label", POOL_LABEL,
                     "--head-pool", m.head_pool.name, "--head-slots", str(head_slots(m)),
                     "--whole-node", json.dumps(whole_node_gpus(m), sort_keys=True),
                     "--taints", json.dumps(list(RUN_BLOCKING_TAINTS))],
         "env": [*env_list({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}),
                 {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
         "resources": {"requests": small, "limits": small}, "securityContext": security_context(read_only=True),
         "volumeMounts": [{"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": sorted({*resources(m), m.head_pool.name})}]}]}}}
    pod_labels = labels(NAME)
    md = _meta(NAME)
    md["annotations"] = {"pulumi.com/skipAwait": "true"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": md,
            "spec": {"selector": {"matchLabels": pod_labels},
                     "template": {"metadata": {"labels": pod_labels},
                                  "spec": {"serviceAccountName": ACCOUNT, "securityContext": pod_security_context(),
                                           "affinity": affinity, "tolerations": _tolerated(m),
                                           "containers": [c],
                                           "volumes": [{"name": "scripts", "configMap": {"name": NAME}}]}}}}


def _same(field: str) -> str:
    """``status.<field>`` as it was. ``dyn``: the API server's type check has no type for a resource list (its
    quantities are int-or-string), as in ``workloads.render.pod_limits.request``."""
    new, old = f"dyn(object.status).{field}", f"dyn(oldObject.status).{field}"
    return f"has({new}) == has({old}) && (!has({new}) || {new} == {old})"


def policy_rules() -> list[tuple[str, str]]:
    """(CEL, message) of ``POLICY``: what a status write of the advertiser's account may change."""
    meta = " && ".join(f"(has(object.metadata.{f}) ? object.metadata.{f} : {empty}) == "
                       f"(has(oldObject.metadata.{f}) ? oldObject.metadata.{f} : {empty})" for f, empty in UNCHANGED_METADATA)
    new, old = "variables.capacity", "variables.oldCapacity"
    alloc = "variables.allocatable"  # the rule above keeps it as it was: the kubelet's, not this write's
    return [
        ("variables.nodeName != '' && object.metadata.name == variables.nodeName",
         "the GPU resource advertiser may write only the node its own pod runs on (service-account token node-name)"),
        (meta + " && " + " && ".join(_same(f) for f in OTHER_STATUS),
         "the GPU resource advertiser may change only status.capacity (labels, annotations, finalizers and "
         "ownerReferences as they were)"),
        (f"{new}.all(k, k == variables.key || (k in {old} && {old}[k] == {new}[k]))"
         f" && {old}.all(k, k == variables.key || k in {new})",
         "the GPU resource advertiser may set only its node's pool resource (variables.resources), or on the "
         f"head pool its {HEAD_SLOT_RESOURCE}"),
        (f"variables.key in ['', '{HEAD_SLOT_RESOURCE}'] || (variables.key in {new}"
         f" ? string({new}[variables.key]) == '0' || (variables.usable"
         f" && string({new}[variables.key]) == string({alloc}['{GPU}']))"
         f" : !(variables.key in {old}))",
         f"the GPU resource advertiser sets its node's pool resource to 0, or to the node's allocatable {GPU} "
         "while a run's pod may use the node (not cordoned, none of the run-blocking taints, a whole node's GPUs "
         "allocatable), and does not remove it"),
        (f"variables.key != '{HEAD_SLOT_RESOURCE}' || !(variables.key in {new})"
         f" || string({new}[variables.key]) == variables.headSlots",
         f"the GPU resource advertiser sets a head-pool node's {HEAD_SLOT_RESOURCE} to the heads a node holds "
         "(variables.headSlots)"),
    ]


def advertiser_policy(pool_resources: dict[str, str], head_pool: str, slots: int, whole_node: dict[str, int],
                      taints: Sequence[str]) -> list[dict]:
    """``POLICY`` and its binding, for the advertiser's account; ``pool_resources``: GPU pool -> its resource;
    ``head_pool``'s nodes advertise ``slots`` head slots; a node's GPUs only while it is ``usable`` as
    ``nodes.advertise.takes_a_run`` judges (``whole_node``: GPU pool -> a run pod's GPUs; ``taints``: the keys
    no run pod tolerates), so not even a compromised advertiser counts a node no run may use in Volcano's total."""
    capacity = "has({0}.status) && has(dyn({0}.status).capacity) ? dyn({0}.status).capacity : {{}}"
    allocatable = "has(object.status) && has(dyn(object.status).allocatable) ? dyn(object.status).allocatable : {}"
    variables = [("nodeName", _NODE),
                 ("resources", "{" + ", ".join(f"'{p}': '{r}'" for p, r in sorted(pool_resources.items())) + "}"),
                 ("pool", f"has(object.metadata.labels) && '{POOL_LABEL}' in object.metadata.labels"
                          f" ? object.metadata.labels['{POOL_LABEL}'] : ''"),
                 ("headPool", f"'{head_pool}'"), ("headSlots", f"'{slots}'"),
                 ("key", "variables.pool in variables.resources ? variables.resources[variables.pool]"
                         f" : (variables.pool == variables.headPool ? '{HEAD_SLOT_RESOURCE}' : '')"),
                 ("capacity", capacity.format("object")), ("oldCapacity", capacity.format("oldObject")),
                 ("allocatable", allocatable),
                 ("wholeNode", "{" + ", ".join(f"'{p}': {n}" for p, n in sorted(whole_node.items())) + "}"),
                 ("usable", "!(has(object.spec.unschedulable) && object.spec.unschedulable)"
                            " && !(has(object.spec.taints) && object.spec.taints.exists(t, t.key in "
                            f"{cel_list(sorted(taints))})) && variables.pool in variables.wholeNode"
                            f" && '{GPU}' in variables.allocatable"
                            f" && int(string(variables.allocatable['{GPU}'])) >= variables.wholeNode[variables.pool]")]
    user = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
    md = {"name": POLICY, "labels": dict(PART_OF)}
    return [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": md,
             "spec": {"failurePolicy": "Fail",
                      "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                              "operations": ["UPDATE"], "resources": ["nodes/status"]}]},
                      "matchConditions": [{"name": "advertiser-service-account",
                                           "expression": f"request.userInfo.username == {json.dumps(user)}"}],
                      "variables": [{"name": n, "expression": e} for n, e in variables],
                      "validations": [{"expression": e, "message": msg} for e, msg in policy_rules()]}},
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": dict(md), "spec": {"policyName": POLICY, "validationActions": ["Deny"]}}]


def advertiser_objects(m: WorkloadModel) -> list[dict]:
    """Namespace, account, RBAC, scripts, NetworkPolicies, the admission policy, then the DaemonSet; nothing
    when the stack has no GPU pool."""
    if not resources(m):
        return []
    rbac = "rbac.authorization.k8s.io/v1"
    role = _meta(NAME, None)
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(NAMESPACE, None)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(ACCOUNT)},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": role,
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                   {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": role,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(NAME),
         "data": {key: path.read_text() for key, path in SCRIPT_FILES.items()}},
        *baseline(_policy_meta), policy(_policy_meta("allow-api"), None,
                                        f"GPU resource advertiser -> API server 443/TCP ({', '.join(m.api_server)})",
                                        egress=[api_server_egress(m.api_server)]),
        *advertiser_policy(resources(m), m.head_pool.name, head_slots(m), whole_node_gpus(m), RUN_BLOCKING_TAINTS),
        daemonset(m),
    ]

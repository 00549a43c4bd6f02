"""The admission policy that holds the burn-in's writes to its own node and its own keys.

RBAC cannot name "the node this pod runs on": the burn-in's ClusterRole may patch any node. These
ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30), matched to
the burn-in's service account only, deny (``failurePolicy: Fail``, binding ``Deny``):
- a node write by that account unless the node is the one named by the request's
  ``authentication.kubernetes.io/node-name`` user extra, or that changes anything but the burn-in
  labels and annotations (``nodes.marks``), the pool's capability labels it refreshes, and the
  burn-in and quarantine taints;
- an Event it creates unless it is about that same node.
The watcher's account (``nodes.watch``) gets the same pair, narrowed further: on its own node it may
only set the result label to ``retest``, with the burn-in taint in place. The replacement
controller's account (``nodes.controller``, on the system pool, so no own node) may change only the
replacement and neighbour annotations of a node (``nodes.pairs``), create only host pods
(``nodes.pairs.host_pod``: the host label, one container running the pair script from a pool's deployed host
image, no service-account token, no volume but a ConfigMap or an emptyDir, nothing of the host's), and
create no ConfigMap but its breaker's; where it may evict is RBAC's
(``nodes.render.eviction_roles``: an admission policy cannot see which node an eviction's pod is on).

The node name reaches the request from the pod's bound service-account token: the API server puts
the pod's node in the token and the authenticator copies it into the user's extra
(``NodeNameKey`` of k8s.io/apiserver/pkg/authentication/serviceaccount; feature
``ServiceAccountTokenPodNodeInfo``: beta and on by default in Kubernetes 1.30, GA and locked on in
1.32, kubernetes/kubernetes pkg/features/kube_features.go). The stacks pin Kubernetes 1.35
(``stackconfig/versions.py``), so EKS clusters of this platform carry it. A request without it (a
token that is not a pod's) matches no node and is denied.
"""

from __future__ import annotations

import json

from .marks import ANNOTATIONS, LABELS, PEER_ANNOTATION, REPLACEMENT_ANNOTATION, RESULT_LABEL, RETEST

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
BURN_IN_PREFIX = "rl-burn-in"
WATCH_PREFIX = "rl-burn-in-watch"
REPLACE_PREFIX = "rl-burn-in-replace"
PART_OF = {"app.kubernetes.io/part-of": "moe-rl-platform"}

_NODE = (f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
         f"size(request.userInfo.extra['{NODE_NAME_EXTRA}']) > 0 ? request.userInfo.extra['{NODE_NAME_EXTRA}'][0] : ''")


def _kept(new: str, old: str, own: str) -> str:
    """Every key of ``new``/``old`` that is not in ``own`` is in both, with the same value."""
    return (f"{new}.all(k, k in {own} || (k in {old} && {old}[k] == {new}[k])) && "
            f"{old}.all(k, k in {own} || k in {new})")


def _map(side: str, field: str) -> str:
    return f"has({side}.metadata.{field}) ? {side}.metadata.{field} : {{}}"


OWN_NODE = ("variables.nodeName != '' && object.metadata.name == variables.nodeName",
            "the burn-in may write only the node its own pod runs on (service-account token node-name)")


def node_rules(taint_keys: tuple[str, ...], labels: tuple[str, ...], annotations: tuple[str, ...]) -> list[tuple[str, str]]:
    """What a write may change, whatever node it is on."""
    return [
        (_kept("variables.newLabels", "variables.oldLabels", json.dumps(list(labels))),
         f"the burn-in may change only the labels {', '.join(labels)}"),
        (_kept("variables.newAnnotations", "variables.oldAnnotations", json.dumps(list(annotations))),
         f"the burn-in may change only the annotations {', '.join(annotations) or '(none)'}"),
        ("variables.newTaints == variables.oldTaints",
         f"the burn-in may add or remove only the {' and '.join(taint_keys) or '(no)'} taint"),
        ("(has(object.spec.unschedulable) && object.spec.unschedulable) == "
         "(has(oldObject.spec.unschedulable) && oldObject.spec.unschedulable)",
         "the burn-in may not cordon or uncordon a node"),
    ]


def retest_rules(taint_key: str) -> list[tuple[str, str]]:
    """What the watcher may write beyond ``node_rules``: the ``retest`` label, with the taint in place."""
    return [(f"{json.dumps(RESULT_LABEL)} in variables.newLabels && variables.newLabels[{json.dumps(RESULT_LABEL)}] == "
             f"{json.dumps(RETEST)} && has(object.spec.taints) && object.spec.taints.exists(t, t.key == "
             f"{json.dumps(taint_key)})",
             f"the watcher may only ask for a re-test ({RESULT_LABEL}={RETEST}, with the {taint_key} taint)")]


HOST_IMAGES_PARAM = "burn-in-host-images"
"""The ConfigMap (in the burn-in's namespace) the host-pod policy reads its images from (``paramKind``): each
pool's host image, the same values as the controller's environment (``nodes.pairs.host_image_env``), so the
deploy fills the stack registry's URL into both; a rule's own text never gets it (``stackconfig.images.fill``
fills only strings that start with the registry token). Missing, every host pod is denied
(``parameterNotFoundAction: Deny``); the controller may not create it (``configmap_rules``) nor, by RBAC,
change it."""


def host_pod_rules(host_label: str, script: str, adds: list[str] = ()) -> list[tuple[str, str]]:
    """What a pod the controller creates must be: a host pod of the check with a neighbour, and no more: one
    container running ``python3 <script> --plan <json> --results <dir>`` from one of the pools' deployed host
    images (``HOST_IMAGES_PARAM``) and nothing else (no args, no environment from Secrets or ConfigMaps), not
    privileged, no privilege escalation, every capability dropped but ``adds`` (the agent's)."""
    sc = "c.securityContext"
    return [
        ("has(params.data) && object.spec.containers.all(c, has(c.image) && "
         "params.data.exists(k, params.data[k] == c.image))",
         f"a host pod runs a pool's deployed host image only (ConfigMap {HOST_IMAGES_PARAM})"),
        (f"has(object.metadata.labels) && {json.dumps(host_label)} in object.metadata.labels",
         "the burn-in controller creates only host pods"),
        ("has(object.spec.automountServiceAccountToken) && object.spec.automountServiceAccountToken == false",
         "a host pod holds no service-account token"),
        (f"!has(object.spec.initContainers) && object.spec.containers.all(c, has(c.command) && "
         f"c.command.size() > 1 && c.command[1] == {json.dumps(script)})",
         f"a host pod runs {script} only"),
        ("object.spec.containers.size() == 1 && object.spec.containers.all(c, c.command.size() == 6 && "
         "c.command[0] == 'python3' && c.command[2] == '--plan' && c.command[4] == '--results' && !has(c.args) && "
         "!has(c.envFrom) && (!has(c.env) || c.env.all(e, !has(e.valueFrom) || has(e.valueFrom.fieldRef))))",
         f"a host pod is one container running python3 {script} --plan <plan> --results <dir>, no args, no "
         "environment from Secrets or ConfigMaps"),
        (f"object.spec.containers.all(c, has({sc}) && !(has({sc}.privileged) && {sc}.privileged) && "
         f"has({sc}.allowPrivilegeEscalation) && !{sc}.allowPrivilegeEscalation && has({sc}.capabilities) && "
         f"has({sc}.capabilities.drop) && 'ALL' in {sc}.capabilities.drop && (!has({sc}.capabilities.add) || "
         f"{sc}.capabilities.add.all(a, a in {json.dumps(sorted(adds))})))",
         f"a host pod is not privileged, escalates nothing and adds no capability but {', '.join(adds) or 'none'}"),
        ("!has(object.spec.volumes) || object.spec.volumes.all(v, has(v.configMap) || has(v.emptyDir))",
         "a host pod mounts only ConfigMaps and emptyDirs"),
        ("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && "
         "object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)",
         "a host pod shares nothing of its node's"),
    ]


def configmap_rules(breaker: str) -> list[tuple[str, str]]:
    """The controller creates no ConfigMap but its breaker's (RBAC cannot name what is created): not the host
    images it is held to."""
    return [(f"object.metadata.name == {json.dumps(breaker)}", f"the burn-in controller creates only ConfigMap {breaker}")]


EVENT_RULES = [("dyn(object).involvedObject.kind == 'Node' && dyn(object).involvedObject.name == variables.nodeName",
                "the burn-in may report only on the node its own pod runs on")]
"""``dyn``: the policy matches events.k8s.io/v1 Events too (matchPolicy Equivalent), converted to core/v1 before
they are judged (apiserver v0.35.3 pkg/admission/plugin/policy/validating/dispatcher.go:127-170), but the API
server's type check reads ``object`` as each matched kind and finds no ``involvedObject`` in events.k8s.io's."""


def _policy(name: str, username: str, operations: list[str], resource: str, variables: list[tuple[str, str]],
            rules: list[tuple[str, str]], param: tuple[str, str] | None = None) -> list[dict]:
    """The policy and its binding; ``param``: (namespace, name) of the ConfigMap its rules read as ``params``."""
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name, "labels": dict(PART_OF)},
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": operations, "resources": [resource]}]},
                       "matchConditions": [{"name": "burn-in-service-account",
                                            "expression": f"request.userInfo.username == {json.dumps(username)}"}],
                       "variables": [{"name": n, "expression": e} for n, e in variables],
                       "validations": [{"expression": e, "message": m} for e, m in rules]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name, "labels": dict(PART_OF)},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    if param:
        policy["spec"]["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
        binding["spec"]["paramRef"] = {"namespace": param[0], "name": param[1], "parameterNotFoundAction": "Deny"}
    return [policy, binding]


def _node_vars(taint_keys: tuple[str, ...]) -> list[tuple[str, str]]:
    keep = " && ".join(f"t.key != {json.dumps(k)}" for k in taint_keys) or "true"
    taints = "has({0}.spec.taints) ? {0}.spec.taints.filter(t, {1}) : []"
    return [("nodeName", _NODE),
            ("newLabels", _map("object", "labels")), ("oldLabels", _map("oldObject", "labels")),
            ("newAnnotations", _map("object", "annotations")),
            ("oldAnnotations", _map("oldObject", "annotations")),
            ("newTaints", taints.format("object", keep)), ("oldTaints", taints.format("oldObject", keep))]


def own_node_policies(prefix: str, user: str, taint_keys: tuple[str, ...], labels: tuple[str, ...],
                      annotations: tuple[str, ...], extra: list[tuple[str, str]] = ()) -> list[dict]:
    """``<prefix>-own-node`` and ``<prefix>-own-events`` with their bindings, for the account ``user``."""
    rules = [OWN_NODE, *node_rules(taint_keys, labels, annotations), *extra]
    return [*_policy(f"{prefix}-own-node", user, ["UPDATE"], "nodes", _node_vars(taint_keys), rules),
            *_policy(f"{prefix}-own-events", user, ["CREATE", "UPDATE"], "events", [("nodeName", _NODE)], EVENT_RULES)]


def burn_in_policies(namespace: str, service_account: str, watch_account: str, replace_account: str,
                     burn_in_key: str, quarantine_key: str, capability_labels: tuple[str, ...] = (),
                     host_pods: tuple[str, str, list[str]] = ("", "", []), breaker: str = "") -> list[dict]:
    """The burn-in's (its result and capability labels, on its node), the watcher's (a re-test of its
    node) and the replacement controller's (its annotations, on any node; ``host_pods``: the host label and
    script its pods carry, their images from ``HOST_IMAGES_PARAM``; ``breaker``: the one ConfigMap it creates),
    with bindings."""
    account = "system:serviceaccount:{}:{}".format
    return [*own_node_policies(BURN_IN_PREFIX, account(namespace, service_account), (burn_in_key, quarantine_key),
                               (*LABELS, *capability_labels), ANNOTATIONS),
            *own_node_policies(WATCH_PREFIX, account(namespace, watch_account), (burn_in_key,), (RESULT_LABEL,), (),
                               retest_rules(burn_in_key)),
            *_policy(f"{REPLACE_PREFIX}-nodes", account(namespace, replace_account), ["UPDATE"], "nodes",
                     _node_vars(()), node_rules((), (), (REPLACEMENT_ANNOTATION, PEER_ANNOTATION))),
            *_policy(f"{REPLACE_PREFIX}-pods", account(namespace, replace_account), ["CREATE"], "pods", [],
                     host_pod_rules(*host_pods), (namespace, HOST_IMAGES_PARAM)),
            *_policy(f"{REPLACE_PREFIX}-configmaps", account(namespace, replace_account), ["CREATE"], "configmaps", [],
                     configmap_rules(breaker))]

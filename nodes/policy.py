"""The admission policy that holds the burn-in's writes to its own node and its own keys.

RBAC cannot name "the node this pod runs on": the burn-in's ClusterRole may patch any node. These
ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30), matched to
the burn-in's service account only, deny (``failurePolicy: Fail``, binding ``Deny``):
- a node write by that account unless the node is the one named by the request's
  ``authentication.kubernetes.io/node-name`` user extra, or that changes anything but the burn-in
  labels and annotations (``nodes.marks``) and the burn-in taint;
- an Event it creates unless it is about that same node.

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

from .marks import ANNOTATIONS, LABELS

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
NODE_POLICY = "rl-burn-in-own-node"
EVENT_POLICY = "rl-burn-in-own-events"
PART_OF = {"app.kubernetes.io/part-of": "moe-rl-platform"}

_NODE = (f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
         f"size(request.userInfo.extra['{NODE_NAME_EXTRA}']) > 0 ? request.userInfo.extra['{NODE_NAME_EXTRA}'][0] : ''")


def _kept(new: str, old: str, own: str) -> str:
    """Every key of ``new``/``old`` that is not in ``own`` is in both, with the same value."""
    return (f"{new}.all(k, k in {own} || (k in {old} && {old}[k] == {new}[k])) && "
            f"{old}.all(k, k in {own} || k in {new})")


def _map(side: str, field: str) -> str:
    return f"has({side}.metadata.{field}) ? {side}.metadata.{field} : {{}}"


def node_rules(taint_key: str) -> list[tuple[str, str]]:
    return [
        ("variables.nodeName != '' && object.metadata.name == variables.nodeName",
         "the burn-in may write only the node its own pod runs on (service-account token node-name)"),
        (_kept("variables.newLabels", "variables.oldLabels", json.dumps(list(LABELS))),
         f"the burn-in may change only the labels {', '.join(LABELS)}"),
        (_kept("variables.newAnnotations", "variables.oldAnnotations", json.dumps(list(ANNOTATIONS))),
         f"the burn-in may change only the annotations {', '.join(ANNOTATIONS)}"),
        ("variables.newTaints == variables.oldTaints", f"the burn-in may add or remove only the {taint_key} taint"),
        ("(has(object.spec.unschedulable) && object.spec.unschedulable) == "
         "(has(oldObject.spec.unschedulable) && oldObject.spec.unschedulable)",
         "the burn-in may not cordon or uncordon a node"),
    ]


EVENT_RULES = [("object.involvedObject.kind == 'Node' && object.involvedObject.name == variables.nodeName",
                "the burn-in may report only on the node its own pod runs on")]


def _policy(name: str, username: str, operations: list[str], resource: str, variables: list[tuple[str, str]],
            rules: list[tuple[str, str]]) -> list[dict]:
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
    return [policy, binding]


def burn_in_policies(namespace: str, service_account: str, taint_key: str) -> list[dict]:
    """Both policies and their bindings, for the burn-in's service account."""
    user = f"system:serviceaccount:{namespace}:{service_account}"
    taints = "has({0}.spec.taints) ? {0}.spec.taints.filter(t, t.key != {1}) : []"
    node_vars = [("nodeName", _NODE),
                 ("newLabels", _map("object", "labels")), ("oldLabels", _map("oldObject", "labels")),
                 ("newAnnotations", _map("object", "annotations")),
                 ("oldAnnotations", _map("oldObject", "annotations")),
                 ("newTaints", taints.format("object", json.dumps(taint_key))),
                 ("oldTaints", taints.format("oldObject", json.dumps(taint_key)))]
    return [*_policy(NODE_POLICY, user, ["UPDATE"], "nodes", node_vars, node_rules(taint_key)),
            *_policy(EVENT_POLICY, user, ["CREATE", "UPDATE"], "events", [("nodeName", _NODE)], EVENT_RULES)]

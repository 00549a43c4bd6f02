"""Guardrail checks of team isolation in the recorded graph: every team namespace (label
``rl.platform/team``) is covered by each admission policy the platform renders
(``workloads.render.admission``), unweakened, through a Deny binding that selects it, and holds a
default-deny NetworkPolicy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

from stackconfig.stack import GPU_ROLES, POOL_LABEL, ROLE_LABEL, Role
from workloads.render.admission import admission_policies
from workloads.render.runs import PRIORITY_CLASS_PREFIX
from workloads.schema.teams import TEAM_LABEL

from .view import (NAMESPACE, NETWORK_POLICY, NODE_GROUP, PRIORITY_CLASS, UNKNOWN, VAP, VAP_BINDING, Resource, Stack,
                   as_list, dig)


def _name(res: Resource) -> Any:
    return dig(res.props, "metadata", "name")


def _selects(selector: Any, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects an object with ``labels``."""
    if not isinstance(selector, Mapping):
        return selector is None  # no selector: every namespace
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in as_list(selector.get("matchExpressions")):
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if not {"In": key in labels and labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}.get(op, False):
            return False
    return True


def team_pools(stack: Stack) -> tuple[list[str], str]:
    """(GPU pools, head pool) team pods may run on, from the node groups' labels: the train and rollout
    pools, and the cpu pool for a run's head (the system pool where there is none, as
    ``workloads.derive.layout.head_pool`` places it by default)."""
    roles: dict[str, list[str]] = {}
    for ng in stack.of_type(NODE_GROUP):
        pool, role = dig(ng.props, "labels", POOL_LABEL), dig(ng.props, "labels", ROLE_LABEL)
        if isinstance(pool, str) and isinstance(role, str):
            roles.setdefault(role, []).append(pool)
    gpu = sorted(p for r in GPU_ROLES for p in roles.get(r.value, []))
    head = (roles.get(Role.CPU.value) or roles.get(Role.SYSTEM.value) or [""])[0]
    return gpu, head


def _rules(spec: Mapping) -> set[tuple[str, str, str, str]]:
    """(group, version, resource, operation) a policy's matchConstraints cover."""
    return {(g, v, r, o) for rule in as_list(dig(spec, "matchConstraints", "resourceRules"))
            for g in rule.get("apiGroups", []) for v in rule.get("apiVersions", [])
            for r in rule.get("resources", []) for o in rule.get("operations", [])}


def policy_weakened(expected: Mapping, actual: Mapping) -> list[str]:
    """What ``actual`` (a ValidatingAdmissionPolicy's spec) lost of ``expected``."""
    problems = []
    if actual.get("failurePolicy", "Fail") != "Fail":
        problems.append(f"failurePolicy {actual.get('failurePolicy')} (must be Fail)")
    if actual.get("matchConstraints", {}).get("matchPolicy", "Equivalent") != "Equivalent" or \
            actual.get("matchConstraints", {}).get("excludeResourceRules") or \
            (actual.get("matchConditions") or []) != (expected.get("matchConditions") or []):
        problems.append("narrowed by matchPolicy, excludeResourceRules or matchConditions")
    if missing := _rules(expected) - _rules(actual):
        problems.append(f"no longer matches {', '.join(sorted('/'.join(filter(None, m)) for m in missing))}")
    have = {v.get("expression") for v in as_list(actual.get("validations"))}
    if lost := [v["message"] for v in expected["validations"] if v["expression"] not in have]:
        problems.append(f"lost the check(s): {'; '.join(lost)}")
    variables = {v.get("name"): v.get("expression") for v in as_list(actual.get("variables"))}
    if any(variables.get(v["name"]) != v["expression"] for v in expected.get("variables", [])):
        problems.append("a variable its checks read was changed")
    return problems


def binding_problems(policy: str, binding: Mapping | None, namespace: str, labels: Mapping[str, str]) -> list[str]:
    """Why ``binding`` (a ValidatingAdmissionPolicyBinding's spec) does not deny in ``namespace``."""
    if binding is None:
        return [f"no binding of {policy}"]
    problems = []
    if "Deny" not in as_list(binding.get("validationActions")):
        problems.append(f"the binding of {policy} does not Deny")
    match = binding.get("matchResources") or {}
    if not _selects(match.get("namespaceSelector"), labels):
        problems.append(f"the binding of {policy} does not select namespace {namespace}")
    if match.get("objectSelector") or match.get("excludeResourceRules") or binding.get("paramRef"):
        problems.append(f"the binding of {policy} is narrowed (objectSelector, excludeResourceRules or paramRef)")
    return problems


def default_deny(policy: Mapping) -> bool:
    spec = policy.get("spec") or {}
    return (spec.get("podSelector") == {} and set(spec.get("policyTypes") or []) >= {"Ingress", "Egress"}
            and not spec.get("ingress") and not spec.get("egress"))


def check_team_isolation(stack: Stack) -> Iterator[tuple[str, str]]:
    """Every team namespace: each of the platform's admission policies present, unweakened, and bound
    with Deny to it; a default-deny NetworkPolicy in it."""
    teams = [(ns, labels) for ns in stack.of_type(NAMESPACE)
             if isinstance(labels := dig(ns.props, "metadata", "labels"), Mapping) and TEAM_LABEL in labels]
    if not teams:
        return
    classes = [n for pc in stack.of_type(PRIORITY_CLASS)
               if isinstance(n := _name(pc), str) and n.startswith(PRIORITY_CLASS_PREFIX)]
    gpu_pools, head_pool = team_pools(stack)
    expected = [o for o in admission_policies(classes, gpu_pools, head_pool) if o["kind"] == "ValidatingAdmissionPolicy"]
    policies = {_name(r): r for r in stack.of_type(VAP)}
    bindings: dict[Any, list[Mapping]] = {}
    for r in stack.of_type(VAP_BINDING):
        bindings.setdefault(dig(r.props, "spec", "policyName"), []).append(r.props.get("spec") or {})
    deny = {dig(r.props, "metadata", "namespace") for r in stack.of_type(NETWORK_POLICY) if default_deny(r.props)}
    for want in expected:
        got = policies.get(want["metadata"]["name"])
        if got is not None and (spec := got.props.get("spec")) is not UNKNOWN:
            for p in policy_weakened(want["spec"], spec or {}):
                yield got.urn, f"{got.label}: {p}"
    for ns, labels in teams:
        name = _name(ns)
        for want in expected:
            policy = want["metadata"]["name"]
            if policy not in policies:
                yield ns.urn, f"{ns.label}: no ValidatingAdmissionPolicy {policy} covers team namespace {name}"
                continue
            found = [binding_problems(policy, b, name, labels) for b in bindings.get(policy, [])] or \
                [binding_problems(policy, None, name, labels)]
            if all(found):
                yield ns.urn, f"{ns.label}: {found[0][0]}"
        if name not in deny:
            yield ns.urn, (f"{ns.label}: no default-deny NetworkPolicy in {name} (podSelector {{}}, Ingress and "
                           f"Egress, no rules)")

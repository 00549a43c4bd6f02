"""Does the RBAC a stack renders allow a request? Kubernetes' RBAC rules, evaluated on the requests the
burn-in's programs make against the tests' fake API servers (kubernetes/kubernetes
plugin/pkg/auth/authorizer/rbac/rbac.go ``RuleAllows``: verb, API group, resource or
``resource/subresource``, resource name; a Role's rules hold in its RoleBinding's namespace, a
ClusterRole's through a ClusterRoleBinding everywhere). Request attributes as the API server derives
them (k8s.io/apiserver pkg/endpoints/request/requestinfo.go ``NewRequestInfo``): a GET of a collection is
``list``, of an object ``get``; POST ``create``; PUT ``update``; PATCH ``patch``; DELETE ``delete``."""

from __future__ import annotations

from dataclasses import dataclass

from fake_kube import split

VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None


def attributes(method: str, path: str) -> Request:
    """The RBAC attributes of one request (path without its query)."""
    collection, name, sub = split(path)
    parts = collection.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts[:-1] else None
    resource = parts[-1] + (f"/{sub}" if sub else "")
    verb = VERBS.get(method) or ("get" if name else "list")
    return Request(verb, group, resource, namespace, name)


def rules_of(objects: list[dict], account: str, namespace: str) -> list[tuple[dict, str | None]]:
    """(rule, the namespace it holds in or None for every namespace) of the service account."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    out = []
    for b in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == account and s.get("namespace") == namespace
                   for s in b.get("subjects") or []):
            continue
        ref, scope = b["roleRef"], b["metadata"].get("namespace")
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        out += [(rule, scope) for rule in role.get("rules") or []]
    return out


def _matches(values: list[str], value: str) -> bool:
    return "*" in values or value in values


def allows(rules: list[tuple[dict, str | None]], request: Request) -> bool:
    return any(
        (scope is None or scope == request.namespace) and _matches(rule.get("verbs", []), request.verb)
        and _matches(rule.get("apiGroups", []), request.group) and _matches(rule.get("resources", []), request.resource)
        and (not rule.get("resourceNames") or request.name in rule["resourceNames"])
        for rule, scope in rules)

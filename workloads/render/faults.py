"""The Kubernetes side of the bench's fault engine (``components.faults``), per team namespace: the
service account FIS runs its pod-delete pod with, and what the FIS role (Kubernetes group
``FIS_GROUP``, its EKS access entry) may do there. Nothing outside the team's namespace.

Rules as the FIS User Guide's "Use the AWS FIS aws:eks:pod actions" describes for ``aws:eks:pod-delete``
(the FIS role creates and watches its own pod in the target namespace; that pod, running as
``FIS_SERVICE_ACCOUNT``, lists and deletes the target pod). Only rendered with ``faultInjection``.
"""

from __future__ import annotations

from components.faults import FIS_GROUP, FIS_SERVICE_ACCOUNT

from workloads.schema.teams import TeamSettings
from workloads.render.teams import namespace_of, team_labels

RBAC = "rbac.authorization.k8s.io"
INJECTOR_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]}]
"""The FIS pod's own rights: find the pods its template selects and delete one."""
ENGINE_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]}]
"""The FIS role's rights: start, watch and remove its pod with the team's injector account."""


def fault_rbac(team: TeamSettings) -> list[dict]:
    ns = namespace_of(team.name)

    def md(name: str) -> dict:
        return {"name": name, "namespace": ns, "labels": team_labels(team, "fault-injection")}
    engine = f"{FIS_SERVICE_ACCOUNT}-engine"
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": md(FIS_SERVICE_ACCOUNT)},
            {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": md(FIS_SERVICE_ACCOUNT), "rules": INJECTOR_RULES},
            {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": md(FIS_SERVICE_ACCOUNT),
             "subjects": [{"kind": "ServiceAccount", "name": FIS_SERVICE_ACCOUNT, "namespace": ns}],
             "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": FIS_SERVICE_ACCOUNT}},
            {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": md(engine), "rules": ENGINE_RULES},
            {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": md(engine),
             "subjects": [{"kind": "Group", "apiGroup": RBAC, "name": FIS_GROUP}],
             "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": engine}}]

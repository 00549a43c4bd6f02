"""The Kubernetes side of the bench's fault engine (``components.faults``), per team namespace: the
service account FIS runs its pod-delete pod with, what the FIS role (Kubernetes group
``FIS_GROUP``, its EKS access entry) may do there, and what the team's members need to aim a pod fault
(``member_rules``, and the Leases they take, ``fault_leases``). Nothing outside the team's namespace.

Rules as the FIS User Guide's "Use the AWS FIS aws:eks:pod actions" describes for ``aws:eks:pod-delete``
(the FIS role creates and watches its own pod in the target namespace; that pod, running as
``FIS_SERVICE_ACCOUNT``, lists and deletes the target pod). Only rendered with ``faultInjection``.
"""

from __future__ import annotations

from components.faults import FAULT_LEASE_SECONDS, FIS_GROUP, FIS_SERVICE_ACCOUNT, team_fault_leases

from workloads.schema.teams import TeamSettings, team_group
from workloads.render.common import RAY_NODE_TYPE_LABEL
from workloads.render.network_policies import ANYWHERE, _tcp, policy
from workloads.render.teams import namespace_of, team_labels

RBAC = "rbac.authorization.k8s.io"
INJECTOR_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]}]
"""The FIS pod's own rights: find the pods its template selects and delete one."""
ENGINE_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]}]
"""The FIS role's rights: start, watch and remove its pod with the team's injector account."""
MEMBER_ROLE = "bench-fault-target"


def member_rules() -> list[dict]:
    """A member's rights to aim a pod fault (``bench.faults``, ``bench.lease``): read and update only the
    pod-fault groups' Leases (``components.faults.fault_lease``), which the stack renders (``fault_leases``),
    and patch pods, which the team pod policy narrows to adding or removing ``FAULT_TARGET_LABEL`` = the
    pod's own group (``render.pod_rules.member_pod_update``). No create: RBAC cannot name the object of a
    create (Kubernetes RBAC docs, "Referring to resources"), so a member allowed to create Leases could use up
    the team's Lease quota with others' names first. No delete: a Lease is freed by an update without a holder."""
    return [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
             "resourceNames": team_fault_leases()},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]


def fault_leases(team: TeamSettings) -> list[dict]:
    """The team's pod-fault Leases (``components.faults.team_fault_leases``), free (no ``holderIdentity``), for
    ``bench.lease`` to take by update; exactly as many as the team quota's ``count/leases.coordination.k8s.io``
    (``render.teams.team_resource_quota``), so the quota admits them and no other Lease. ``leaseDurationSeconds``
    is the bench's own (``FAULT_LEASE_SECONDS``) and no holder field is rendered, so re-applying the object
    changes no value a holder wrote (``bench.lease`` keeps these labels on every update)."""
    return [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": _metadata(team, name),
             "spec": {"leaseDurationSeconds": FAULT_LEASE_SECONDS}} for name in team_fault_leases()]


def _metadata(team: TeamSettings, name: str) -> dict:
    """The metadata of every fault-injection object of ``team``."""
    return {"name": name, "namespace": namespace_of(team.name), "labels": team_labels(team, "fault-injection")}


def fault_rbac(team: TeamSettings) -> list[dict]:
    """The FIS pod's and role's rights, the member's Role, and the team's pod-fault Leases (``fault_leases``)."""
    ns = namespace_of(team.name)

    def md(name: str) -> dict:
        return _metadata(team, name)
    engine = f"{FIS_SERVICE_ACCOUNT}-engine"
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": md(FIS_SERVICE_ACCOUNT)},
            {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": md(FIS_SERVICE_ACCOUNT), "rules": INJECTOR_RULES},
            {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": md(FIS_SERVICE_ACCOUNT),
             "subjects": [{"kind": "ServiceAccount", "name": FIS_SERVICE_ACCOUNT, "namespace": ns}],
             "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": FIS_SERVICE_ACCOUNT}},
            {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": md(engine), "rules": ENGINE_RULES},
            {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": md(engine),
             "subjects": [{"kind": "Group", "apiGroup": RBAC, "name": FIS_GROUP}],
             "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": engine}},
            {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": md(MEMBER_ROLE), "rules": member_rules()},
            {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": md(MEMBER_ROLE),
             "subjects": [{"kind": "Group", "apiGroup": RBAC, "name": team_group(team.name)}],
             "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": MEMBER_ROLE}},
            *fault_leases(team)]


FIS_POD = {"matchExpressions": [{"key": RAY_NODE_TYPE_LABEL, "operator": "DoesNotExist"}]}
"""The FIS pod among the team's pods: the one KubeRay did not create. KubeRay labels every pod it makes
with ``ray.io/node-type`` and lets no template override it (kuberay v1.6.2
ray-operator/controllers/ray/common/pod.go:776-800); a member creates no pod itself (``SUBMITTER_RULES``), so
in a team namespace the only other pod is the one FIS creates there (FIS User Guide, "Use the AWS FIS
aws:eks:pod actions": FIS creates its pod in the target namespace), whose labels the guide does not give."""


def fault_injector_policy(team: TeamSettings) -> dict:
    """The FIS pod's way out of the team's default deny: the API server (HTTPS 443), where it lists and
    deletes the target pod and FIS watches it. Anywhere on 443 (not narrowed to ``api_server_egress`` as the
    KubeRay operator's is). No ingress; CoreDNS comes
    from the namespace's ``allow-dns``. What it adds to a Ray pod's rights: nothing (``ray-external``
    already reaches 443)."""
    md = {"name": "fis-pod-api-server", "namespace": namespace_of(team.name),
          "labels": team_labels(team, "fault-injection")}
    out = policy(md, None, "the FIS pod (the team's pods KubeRay did not create) -> API server HTTPS 443; no ingress",
                 egress=[{"to": [{"ipBlock": {"cidr": ANYWHERE}}], "ports": _tcp(443)}])
    out["spec"]["podSelector"] = dict(FIS_POD)
    return out

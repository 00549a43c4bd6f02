"""What a stack's recorded graph gives the control plane: its identities, its Kubernetes objects in the
order the program registers them, and its Helm releases' values.

Identities follow EKS access entries (EKS user guide, "Grant IAM users access to Kubernetes with EKS access
entries"): an IAM role's sessions are the user ``arn:aws:sts::<account>:assumed-role/<role>/<session>``
with the entry's ``kubernetesGroups``; ``AmazonEKSClusterAdminPolicy`` at cluster scope grants what
``cluster-admin`` grants.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analysis.mocks import Graph
from components.cluster import ADMIN_POLICY

from controlplane.cluster import User

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
SESSION = "controlplane-test"
CONTROL_PLANE_USERS = {"system:kube-controller-manager": User("system:kube-controller-manager"),
                       "system:kube-scheduler": User("system:kube-scheduler"), "kwok": User("kwok-controller")}
"""The components' own identities: kube-controller-manager and kube-scheduler as their bootstrap RBAC
names them; kwok bound to the ClusterRole of its own kustomize/rbac."""


def session_user(principal_arn: str) -> str:
    """The Kubernetes user of an IAM role's session (access entries' default username)."""
    m = re.fullmatch(r"arn:(aws[\w-]*):iam::(\d{12}):role/(?:.*/)?([\w+=,.@-]+)", principal_arn)
    if not m:
        return principal_arn
    partition, account, role = m.groups()
    return f"arn:{partition}:sts::{account}:assumed-role/{role}/{SESSION}"


@dataclass(frozen=True)
class Principal:
    arn: str
    user: User
    admin: bool


def principals(graph: Graph) -> list[Principal]:
    """Every IAM principal with an access entry: its identity and whether it is a cluster admin."""
    admins = {r.inputs["principalArn"] for r in graph.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
              if r.inputs["policyArn"] == ADMIN_POLICY and r.inputs["accessScope"]["type"] == "cluster"}
    return [Principal(arn, User(session_user(arn), tuple(r.inputs.get("kubernetesGroups") or ())), arn in admins)
            for r in graph.of_type("aws:eks/accessEntry:AccessEntry") for arn in [r.inputs["principalArn"]]]


def users(graph: Graph) -> dict[str, User]:
    """Token users of the API server: ``admin`` (the first cluster admin: the deploying identity), each
    principal by its ARN, and the control plane's own components."""
    found = principals(graph)
    admin = next(p for p in found if p.admin)
    return {"admin": admin.user, **{p.arn: p.user for p in found}, **CONTROL_PLANE_USERS}


def admin_bindings(graph: Graph) -> list[dict]:
    """What EKS's authorizer grants the cluster admins: a ClusterRoleBinding to ``cluster-admin`` each."""
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": f"eks-access-admin-{i}"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": p.user.name}]}
            for i, p in enumerate(p for p in principals(graph) if p.admin)]


def objects(graph: Graph) -> list[dict]:
    """The graph's Kubernetes objects (not Helm releases), in registration order, as the provider sends them."""
    return [dict(r.inputs) for r in graph.resources
            if r.type.startswith("kubernetes:") and r.type != HELM_RELEASE and "kind" in r.inputs]


def csi_drivers(graph: Graph) -> list[str]:
    """The CSI drivers of the graph's PersistentVolumes (the FSx CSI driver's node plugin runs on every node:
    ``workloads.render.operators.fsx_csi_values``)."""
    return sorted({o["spec"]["csi"]["driver"] for o in objects(graph) if o["kind"] == "PersistentVolume"
                   and "csi" in o["spec"]})


def release(graph: Graph, chart: str) -> dict:
    """The inputs of the Helm release of ``chart`` (values, namespace, version)."""
    found = [r.inputs for r in graph.of_type(HELM_RELEASE) if r.inputs["chart"] == chart]
    if len(found) != 1:
        raise LookupError(f"{len(found)} Helm releases of chart {chart!r} in the graph")
    return dict(found[0])

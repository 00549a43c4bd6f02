"""A stack deployed onto the test control plane: its nodes, its operators, its objects, its identities.

``deploy`` does what ``pulumi up`` does to the cluster, in its order: the operators' Helm releases (Volcano,
KubeRay), then every Kubernetes object of the recorded graph, applied as the deploying identity (the stack's
first cluster admin). Every refusal is collected and raised together, naming the object and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client

from analysis.mocks import Graph
from workloads.derive.model import WorkloadModel, derive

from controlplane import stack
from controlplane.cluster import ControlPlane, module_dir
from controlplane.kube import Kube, eventually
from controlplane.nodes import stack_nodes
from controlplane.operators import Volcano, install_kuberay, load_all


@dataclass
class Platform:
    cp: ControlPlane
    cfg: object
    graph: Graph
    model: WorkloadModel
    volcano: Volcano

    @property
    def admin(self) -> Kube:
        return Kube(self.cp.client("admin"))

    def member(self, principal_arn: str) -> Kube:
        """A client acting as the IAM principal's session (its access entry's groups)."""
        return Kube(self.cp.client(principal_arn))

    def stop(self) -> None:
        self.cp.stop()


def kwok_rbac() -> list[dict]:
    """kwok's ClusterRole (its module's kustomize/rbac/role.yaml), bound to the kwok controller's user."""
    roles = load_all((module_dir("sigs.k8s.io/kwok") / "kustomize/rbac/role.yaml").read_text())
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "kwok-controller"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kwok-controller"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": stack.CONTROL_PLANE_USERS["kwok"].name}]}
    return [*roles, binding]


def apply_graph(kube: Kube, objs: list[dict]) -> None:
    refused = []
    for obj in objs:
        try:
            kube.apply(obj)
        except client.ApiException as e:
            md = obj["metadata"]
            refused.append(f"{obj['kind']} {md.get('namespace', '')}/{md['name']}: {e.status} {e.body}")
    if refused:
        raise AssertionError("the API server refused objects of the graph:\n" + "\n".join(refused))


def quota_counted(quota) -> bool:
    """The quota controller has counted every resource the quota limits. Until it has, the API server refuses
    every create the quota covers ("status unknown for quota"): a quota created before the controller's
    discovery found its CRD (up to 30 s after the CRD appears) lacks that count until the next full resync
    (``controlplane.cluster.QUOTA_SYNC``)."""
    return set(quota.spec.hard or {}) <= set((quota.status and quota.status.used) or {})


def deploy(cfg, graph: Graph, proven: bool = True, counts: dict[str, int] | None = None) -> Platform:
    """The stack on a new control plane, its nodes Ready (``proven``: the burn-in taint already lifted)."""
    cp = ControlPlane(stack.users(graph), cfg.network.service_ipv4_cidr).start(
        [*stack.admin_bindings(graph), *kwok_rbac()])
    try:
        model = derive(cfg)
        admin = Kube(cp.client("admin"))
        objs = stack_nodes(cfg, model, counts, proven, stack.csi_drivers(graph))
        admin.apply_all(objs)
        nodes = [o for o in objs if o["kind"] == "Node"]
        core = client.CoreV1Api(cp.client())
        eventually("every node Ready", lambda: sum(
            any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
            for n in core.list_node().items) == len(nodes), 60)
        volcano = Volcano(cp, stack.release(graph, "volcano"))
        volcano.install(admin)
        install_kuberay(cp, admin, stack.release(graph, "kuberay-operator"))
        apply_graph(admin, stack.objects(graph))
        eventually("every ResourceQuota counted", lambda: all(quota_counted(q) for q in core.list_resource_quota_for_all_namespaces().items), 90)
        return Platform(cp, cfg, graph, model, volcano)
    except BaseException:
        cp.stop()
        raise

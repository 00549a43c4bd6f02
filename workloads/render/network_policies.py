"""The namespace's NetworkPolicies: default deny, then per workload exactly what the run needs."""

from __future__ import annotations

from typing import Any, Callable

from workloads.derive.argv import REWARD_SERVICE
from workloads.derive.model import WorkloadModel
from workloads.schema.teams import TEAM_LABEL
from workloads.render.block_end import CHECKPOINT_TRIGGER
from workloads.render.common import DASHBOARD_PORT, KUBERAY_NAMESPACE, RAY_NODE_TYPE_LABEL, RAY_PODS, labels, meta

# --- network policies --------------------------------------------------------------------------

def _kube_dns() -> dict:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}


POD_IDENTITY_AGENT = "169.254.170.23/32"
"""EKS Pod Identity agent (hostNetwork DaemonSet, link-local address, port 80)."""
ANYWHERE = "0.0.0.0/0"


def _all_tcp() -> list[dict]:
    return [{"protocol": "TCP"}]  # a port entry without a port: every TCP port


def _tcp(port: int) -> list[dict]:
    return [{"protocol": "TCP", "port": port}]


def _pods(selector: dict[str, str]) -> dict:
    return {"podSelector": {"matchLabels": dict(selector)}}


def _namespace(name: str) -> dict:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


TEAM_RAY_PODS = {"namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]},
                 "podSelector": {"matchLabels": dict(RAY_PODS)}}
"""The Ray pods of every team namespace (runs)."""


def policy(md: dict, selector: dict[str, str] | None, why: str, ingress: list[dict] | None = None,
           egress: list[dict] | None = None) -> dict:
    """One policy (metadata ``md``) for the pods ``selector`` picks (None: every pod of the namespace).
    It isolates both directions, so what it does not allow (and no other policy allows) is denied."""
    md = {**md, "annotations": {"rl.platform/allows": why}}
    spec: dict[str, Any] = {"podSelector": {"matchLabels": dict(selector)} if selector else {},
                            "policyTypes": ["Ingress", "Egress"]}
    if ingress:
        spec["ingress"] = ingress
    if egress:
        spec["egress"] = egress
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": md, "spec": spec}


def network_policy(m: WorkloadModel, name: str, selector: dict[str, str] | None, why: str,
                   ingress: list[dict] | None = None, egress: list[dict] | None = None) -> dict:
    """``policy`` in the workloads' namespace."""
    return policy(meta(m, name, "network-policy"), selector, why, ingress, egress)


def api_server_egress(cidrs: tuple[str, ...]) -> dict:
    """HTTPS 443 to the API server alone: ``cidrs`` are ``WorkloadModel.api_server`` (the ``kubernetes``
    Service's ClusterIP /32 and the cluster's subnets, ``components.network.api_server_cidrs``)."""
    return {"to": [{"ipBlock": {"cidr": c}} for c in cidrs], "ports": _tcp(443)}


def _dns_egress() -> dict:
    return {"to": [_kube_dns()], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def baseline(md: Callable[[str], dict]) -> list[dict]:
    """Default deny and DNS for every pod of a namespace; ``md(name)`` gives each policy's metadata."""
    return [
        policy(md("default-deny"), None, "nothing: every pod of the namespace starts isolated"),
        policy(md("allow-dns"), None, "every pod -> CoreDNS (kube-system k8s-app=kube-dns), 53/UDP+TCP",
               egress=[_dns_egress()]),
    ]


def kuberay_operator_policy(workloads_namespace: str, api_server: tuple[str, ...]) -> dict:
    """Every pod of the KubeRay operator's namespace (instead of the platform namespaces' allow-all,
    ``components.cluster.platform_pods_policy``): HTTPS 443 to the API server alone (``api_server_egress``),
    CoreDNS, and the dashboard port of the Ray heads of the workloads' namespace
    and of every team namespace, where the operator submits a RayJob and polls it in HTTPMode with the
    cluster's Ray token (rayjob_controller.go:225-236, 296-330; utils/util.go:1061-1080, v1.7.0). No
    ingress: the chart runs no webhook (values.yaml 1.7.0), and the kubelet's probes are always admitted."""
    heads = {RAY_NODE_TYPE_LABEL: "head"}
    md = {"name": "kuberay-operator", "namespace": KUBERAY_NAMESPACE, "labels": labels("network-policy")}
    return policy(md, None,
                  f"KubeRay operator -> API server HTTPS 443 ({', '.join(api_server)}: the kubernetes Service and "
                  f"the cluster's subnets), CoreDNS, Ray heads' {DASHBOARD_PORT}/TCP in namespace "
                  f"{workloads_namespace} and the team namespaces; no ingress",
                  egress=[_dns_egress(), api_server_egress(api_server),
                          {"to": [{**_namespace(workloads_namespace), **_pods(heads)},
                                  {**TEAM_RAY_PODS, "podSelector": {"matchLabels": {**RAY_PODS, **heads}}}],
                           "ports": _tcp(DASHBOARD_PORT)}])


def network_policies(m: WorkloadModel) -> list[dict]:
    """Default deny for the namespace, then per workload exactly what the run needs.

    Not subject to these policies, by construction: EFA/RDMA traffic (SRD on the EFA devices, not
    through the pod's IP stack), the FSx for Lustre mount (the node's kernel client mounts it for the
    CSI driver), and the kubelet's probes (the VPC CNI's policy agent always admits the node's own IP).
    They take effect once the VPC CNI enforces NetworkPolicies (``enableNetworkPolicy``).
    """
    head = labels("ray-head")
    out = baseline(lambda name: meta(m, name, "network-policy"))
    ray_egress = [{"to": [_pods(RAY_PODS)], "ports": _all_tcp()},
                  {"to": [{"ipBlock": {"cidr": ANYWHERE}}], "ports": _tcp(443)},
                  {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(80)}]
    reward = m.reward
    if reward is not None:
        ray_egress.insert(1, {"to": [_pods(labels(REWARD_SERVICE))], "ports": _tcp(m.settings.reward.port)})
    out.append(network_policy(
        m, "ray", RAY_PODS,
        "Ray pods <-> Ray pods on every TCP port: GCS 6379, raylet, object manager, worker ports, dashboard "
        "agent, NCCL/Gloo bootstrap and socket traffic, torch TCPStore, SGLang engine and router HTTP ports "
        "(all but GCS and dashboard chosen at run time); Ray pods -> reward service; Ray pods -> HTTPS 443 "
        "(S3 through the gateway endpoint, Hugging Face) and the Pod Identity agent 169.254.170.23:80",
        ingress=[{"from": [_pods(RAY_PODS)], "ports": _all_tcp()}], egress=ray_egress))
    out.append(network_policy(
        m, "ray-head", head,
        f"Ray head dashboard/job API {DASHBOARD_PORT}/TCP <- the KubeRay operator (namespace {KUBERAY_NAMESPACE}: "
        f"submits the RayJob and polls its status, HTTPMode); nothing else outside the Ray pods",
        ingress=[{"from": [_namespace(KUBERAY_NAMESPACE)], "ports": _tcp(DASHBOARD_PORT)}]))
    if reward is not None:
        port = m.settings.reward.port
        teams = m.settings.reward.team_ports([t.name for t in m.settings.teams])
        out.append(network_policy(
            m, REWARD_SERVICE, labels(REWARD_SERVICE),
            f"reward service {port}/TCP <- Ray pods of this namespace; each team's Ray pods to its own port only "
            f"({', '.join(f'{t} {p}' for t, p in teams.items()) or 'no teams'}), which is how the service tells "
            f"teams apart (Miles' --rm-url); no egress",
            ingress=[{"from": [_pods(RAY_PODS)], "ports": _tcp(port)},
                     *({"from": [{"namespaceSelector": {"matchLabels": {TEAM_LABEL: t}},
                                  "podSelector": {"matchLabels": dict(RAY_PODS)}}], "ports": _tcp(p)}
                       for t, p in teams.items())]))
    if m.stage is not None:
        out.append(network_policy(m, "stage", labels("stage"),
                                  "staging Job -> HTTPS 443 (Hugging Face, S3) and the Pod Identity agent; "
                                  "no ingress",
                                  egress=[{"to": [{"ipBlock": {"cidr": ANYWHERE}}], "ports": _tcp(443)},
                                          {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(80)}]))
    if m.block_end is not None:
        out.append(network_policy(m, CHECKPOINT_TRIGGER, labels(CHECKPOINT_TRIGGER),
                                  "nothing: the trigger only writes a file on the FSx volume"))
    return out

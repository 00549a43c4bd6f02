"""The API-server NetworkPolicies allow the address the real API server gives the ``kubernetes`` Service (issue
35 item 8): kube-apiserver, started with the stack's Service range as EKS is given it, puts the Service at the
first address of that range, the /32 the KubeRay operator's and the GPU resource advertiser's policies allow
HTTPS to (``components.network.api_server_cidrs``)."""

from __future__ import annotations

import pytest
from kubernetes import client

from conftest import recorded
from nodes.pool_resources import NAMESPACE as ADVERTISER_NAMESPACE
from workloads.render import KUBERAY_NAMESPACE

from controlplane import stack
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane


def test_the_kubernetes_service_is_at_the_address_the_api_server_policies_allow():
    platform = platform_of("p5en-shared", recorded)
    service = client.CoreV1Api(platform.cp.client()).read_namespaced_service("kubernetes", "default")
    assert service.spec.cluster_ip == platform.cfg.network.kubernetes_service_ip
    allowed = {}
    for obj in stack.objects(platform.graph):
        ns = obj["metadata"].get("namespace")
        if obj["kind"] == "NetworkPolicy" and ns in (KUBERAY_NAMESPACE, ADVERTISER_NAMESPACE):
            allowed.setdefault(ns, set()).update(
                peer["ipBlock"]["cidr"] for rule in obj["spec"].get("egress", [])
                if any(p.get("port") == 443 for p in rule.get("ports", [])) for peer in rule["to"] if "ipBlock" in peer)
    assert set(allowed) == {KUBERAY_NAMESPACE, ADVERTISER_NAMESPACE}
    for ns, cidrs in allowed.items():
        host = [c for c in cidrs if c.endswith("/32")]
        assert host == [f"{service.spec.cluster_ip}/32"], (ns, sorted(cidrs))
        assert cidrs == set(platform.model.api_server), ns

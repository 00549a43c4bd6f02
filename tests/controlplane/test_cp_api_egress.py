"""The API-server NetworkPolicies allow the address the real API server gives the ``kubernetes`` Service (issue
35 item 8): kube-apiserver, started with the stack's Service range as EKS is given it, puts the Service at the
first address of that range, the /32 the KubeRay operator's and the GPU resource advertiser's policies allow
HTTPS to (``components.network.api_server_cidrs``)."""

from __future__ import annotations

import pytest
from kubernetes import client

from conftest import recorded
from netpol import https_blocks
from nodes.pool_resources import NAMESPACE as ADVERTISER_NAMESPACE
from workloads.render import KUBERAY_NAMESPACE

from controlplane import stack
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane


def test_the_kubernetes_service_is_at_the_address_the_api_server_policies_allow():
    platform = platform_of("p5en-shared", recorded)
    service = client.CoreV1Api(platform.cp.client()).read_namespaced_service("kubernetes", "default")
    assert service.spec.cluster_ip == platform.cfg.network.kubernetes_service_ip
    policies = [o for o in stack.objects(platform.graph) if o["kind"] == "NetworkPolicy"]
    allowed = {ns: https_blocks([p for p in policies if p["metadata"].get("namespace") == ns])
               for ns in (KUBERAY_NAMESPACE, ADVERTISER_NAMESPACE)}
    assert all(allowed.values()), allowed
    for ns, cidrs in allowed.items():
        host = [c for c in cidrs if c.endswith("/32")]
        assert host == [f"{service.spec.cluster_ip}/32"], (ns, sorted(cidrs))
        assert cidrs == set(platform.model.api_server), ns

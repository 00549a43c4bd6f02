"""The KubeRay operator's namespace reaches what the operator needs and nothing else (issue 26 item 7):
the API server (HTTPS), CoreDNS and the Ray heads' dashboard port, where it posts and polls jobs with the
cluster's Ray token; no Ray GCS, no other port of a team's pods, no IMDS, no ingress. HTTPS for it and for
the GPU resource advertiser goes to the API server alone (issue 35 item 8): the ``kubernetes`` Service's
ClusterIP and the subnets the EKS cluster is given, as the graph itself says them."""

from __future__ import annotations

import ipaddress

import pytest
from netpol import https_blocks
from conftest import graph_of
from test_workloads import variant
from test_workloads_security import IMDS, S3, Pod, allowed

from components.network import plan_subnets
from nodes.pool_resources import NAME as ADVERTISER
from nodes.pool_resources import NAMESPACE as ADVERTISER_NAMESPACE
from stackconfig.network import NetworkSettings, kubernetes_service_ip
from workloads.derive.model import derive
from workloads.render import KUBERAY_NAMESPACE

NP = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def test_the_operator_namespace_reaches_only_the_api_dns_and_the_ray_heads_dashboard():
    graph = graph_of("p5en-shared")
    policies = [dict(r.inputs) for r in graph.of_type(NP)]
    policies = [{**p, "metadata": dict(p["metadata"])} for p in policies]
    ours = [p for p in policies if p["metadata"]["namespace"] == KUBERAY_NAMESPACE]
    assert ours, "no policy in the operator's namespace"
    operator = Pod("kuberay-operator", KUBERAY_NAMESPACE, {"app.kubernetes.io/name": "kuberay-operator"})
    head = Pod("r-1-head", "team-alpha", {"app.kubernetes.io/part-of": "moe-rl-platform",
                                          "app.kubernetes.io/component": "ray", "ray.io/node-type": "head"})
    worker = Pod("r-1-train", "team-alpha", {**head.labels, "ray.io/node-type": "worker"})
    dns = Pod("coredns", "kube-system", {"k8s-app": "kube-dns"})
    api = graph.of_type("aws:eks/cluster:Cluster")[0].inputs["kubernetesNetworkConfig"]["serviceIpv4Cidr"]
    needed = [(head, 8265), (dns, 53), (str(next(ipaddress.IPv4Network(api).hosts())), 443)]
    for dst, port in needed:
        assert allowed(ours, operator, dst, port), (dst, port)
    for dst, port in [(head, 6379), (worker, 8265), (worker, 29500), (IMDS, 80), (dns, 8080), ("10.0.0.9", 6443),
                      (S3, 443)]:
        assert not allowed(ours, operator, dst, port), (dst, port)
    assert not allowed(ours, head, operator, 8080)  # nothing reaches the operator's pods


def _api_server_of(graph) -> tuple[str, set[str]]:
    """What the graph gives EKS: the ``kubernetes`` Service's address (the first of the cluster's Service range,
    kubernetes v1.35.3 pkg/controlplane/apiserver/options/options.go:379) and the CIDRs of the subnets the
    cluster is given (where EKS puts the control plane's interfaces)."""
    (cluster,) = graph.of_type("aws:eks/cluster:Cluster")
    inputs = dict(cluster.inputs)
    service = ipaddress.IPv4Network(inputs["kubernetesNetworkConfig"]["serviceIpv4Cidr"])
    subnets = {dict(s.outputs)["id"]: dict(s.inputs)["cidrBlock"] for s in graph.of_type("aws:ec2/subnet:Subnet")}
    assert inputs["vpcConfig"]["endpointPrivateAccess"] is True  # in-VPC requests stay on the interfaces
    return str(next(service.hosts())), {subnets[i] for i in inputs["vpcConfig"]["subnetIds"]}


@pytest.mark.parametrize("stack", ["p5en-shared", "p5en-prod"])
def test_the_operator_and_the_advertiser_reach_https_only_at_the_api_server(stack):
    graph = graph_of(stack)
    service_ip, cluster_subnets = _api_server_of(graph)
    policies = [{**dict(r.inputs), "metadata": dict(dict(r.inputs)["metadata"])} for r in graph.of_type(NP)]
    pods = {KUBERAY_NAMESPACE: Pod("kuberay-operator", KUBERAY_NAMESPACE, {"app.kubernetes.io/name": "kuberay-operator"}),
            ADVERTISER_NAMESPACE: Pod("advertiser", ADVERTISER_NAMESPACE, {"app.kubernetes.io/name": ADVERTISER})}
    for namespace, pod in pods.items():
        ours = [p for p in policies if p["metadata"]["namespace"] == namespace]
        assert ours, f"no policy in {namespace}"
        assert https_blocks(ours) == {f"{service_ip}/32", *cluster_subnets}, namespace
        inside = [str(next(ipaddress.IPv4Network(c).hosts())) for c in cluster_subnets]
        for address in [service_ip, *inside]:
            assert allowed(ours, pod, address, 443), (namespace, address)
        node_subnet = next(dict(s.inputs)["cidrBlock"] for s in graph.of_type("aws:ec2/subnet:Subnet")
                           if s.name.endswith("-nodes"))
        elsewhere = [S3, "8.8.8.8", str(next(ipaddress.IPv4Network(node_subnet).hosts())), IMDS]
        for address in elsewhere:
            assert not allowed(ours, pod, address, 443), (namespace, address)
        assert not allowed(ours, pod, service_ip, 80) and not allowed(ours, pod, inside[0], 6443)


@pytest.mark.parametrize("cidr, address", [("172.20.0.0/16", "172.20.0.1"), ("10.100.0.0/16", "10.100.0.1"),
                                           ("192.168.4.0/24", "192.168.4.1"), ("172.16.0.0/12", "172.16.0.1")])
def test_the_kubernetes_service_address_is_the_first_of_the_service_range(cidr, address):
    assert kubernetes_service_ip(cidr) == address
    assert NetworkSettings(service_ipv4_cidr=cidr, vpc_cidr="10.0.0.0/16" if cidr[:3] != "10." else "10.0.0.0/24"
                           ).kubernetes_service_ip == address


def test_the_model_derives_the_api_server_from_the_stack_subnets_and_service_range():
    cfg = variant("p5en-shared", {"network": {"vpcCidr": "10.8.0.0/16", "serviceIpv4Cidr": "192.168.0.0/20"}})
    plan = {s.name: s.cidr for s in plan_subnets(cfg)}
    assert derive(cfg).api_server == ("192.168.0.1/32", plan["private-a"], plan["private-b"])
    assert all(c.startswith("10.8.") for c in derive(cfg).api_server[1:])

"""The KubeRay operator's namespace reaches what the operator needs and nothing else (issue 26 item 7):
the API server (HTTPS), CoreDNS and the Ray heads' dashboard port, where it posts and polls jobs with the
cluster's Ray token; no Ray GCS, no other port of a team's pods, no IMDS, no ingress."""

from __future__ import annotations

from conftest import graph_of
from test_workloads_security import IMDS, S3, Pod, allowed

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
    needed = [(head, 8265), (dns, 53), (S3, 443)]  # S3 here stands for the API server's addresses
    for dst, port in needed:
        assert allowed(ours, operator, dst, port), (dst, port)
    for dst, port in [(head, 6379), (worker, 8265), (worker, 29500), (IMDS, 80), (dns, 8080), ("10.0.0.9", 6443)]:
        assert not allowed(ours, operator, dst, port), (dst, port)
    assert not allowed(ours, head, operator, 8080)  # nothing reaches the operator's pods

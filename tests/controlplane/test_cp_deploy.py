"""Both reference stacks deploy onto the real control plane: every object of the graph admitted by the API
server (its schemas, the admission plugins EKS enables, the ValidatingAdmissionPolicies the stack itself
installs, Volcano's webhooks) as the deploying identity, and what the controllers make of them runs."""

from __future__ import annotations

import pytest
from kubernetes import client

from conftest import recorded

from controlplane import stack
from controlplane.kube import eventually
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane
STACKS = ["p5en-prod", "p5en-shared"]


def _platform(stack: str):
    return platform_of(stack, recorded)


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_of_the_graph_is_admitted_and_every_daemonset_is_ready(stack):
    platform = _platform(stack)  # deploy raises, naming each refused object
    apps = client.AppsV1Api(platform.cp.client())
    rendered = _named(platform, "DaemonSet")
    assert rendered, "the graph renders the burn-in DaemonSets"

    def placed():
        sets = [apps.read_namespaced_daemon_set(name, ns) for ns, name in rendered]
        ready = all(s.status.observed_generation and s.status.number_ready == s.status.desired_number_scheduled
                    for s in sets)
        return ready and sum(s.status.number_ready for s in sets)
    # the watcher runs on every proven GPU node; the pools' burn-in DaemonSets on none of them (all passed)
    gpu_nodes = sum(p.nodes.desired for p in platform.cfg.pools if p.instance.is_gpu)
    assert eventually("each DaemonSet ready on the nodes it selects", placed, 120) >= gpu_nodes


def _named(platform, kind: str) -> list[tuple[str, str]]:
    """(namespace, name) of each object of ``kind`` the graph registers."""
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in stack.objects(platform.graph) if o["kind"] == kind]


@pytest.mark.parametrize("stack", STACKS)
def test_the_platforms_deployments_and_jobs_run(stack):
    platform = _platform(stack)
    apps, batch = client.AppsV1Api(platform.cp.client()), client.BatchV1Api(platform.cp.client())
    deployments = [apps.read_namespaced_deployment(name, ns) for ns, name in _named(platform, "Deployment")]
    assert any(d.spec.replicas for d in deployments), "the graph renders the reward service"
    for d in deployments:
        eventually(f"Deployment {d.metadata.namespace}/{d.metadata.name}: {d.spec.replicas} available", lambda d=d: (
            apps.read_namespaced_deployment(d.metadata.name, d.metadata.namespace).status.available_replicas or 0)
            == d.spec.replicas, 120)
    for ns, name in _named(platform, "Job"):
        eventually(f"Job {ns}/{name} complete", lambda ns=ns, name=name: (
            batch.read_namespaced_job(name, ns).status.succeeded or 0) >= 1, 120)

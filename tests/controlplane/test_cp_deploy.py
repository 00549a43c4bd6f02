"""Both reference stacks deploy onto the real control plane: every object of the graph admitted by the API
server (its schemas, the admission plugins EKS enables, the ValidatingAdmissionPolicies the stack itself
installs, Volcano's webhooks) as the deploying identity, and what the controllers make of them runs."""

from __future__ import annotations

import pytest
from kubernetes import client

from conftest import recorded

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
    daemonsets = [d for d in apps.list_daemon_set_for_all_namespaces().items
                  if d.metadata.namespace not in ("kube-system",)]
    assert daemonsets, "the graph renders the burn-in DaemonSets"

    def placed() -> bool:
        sets = [apps.read_namespaced_daemon_set(d.metadata.name, d.metadata.namespace) for d in daemonsets]
        return all(s.status.observed_generation and s.status.number_ready == s.status.desired_number_scheduled
                   for s in sets)
    eventually("each DaemonSet ready on the nodes it selects", placed, 120)


@pytest.mark.parametrize("stack", STACKS)
def test_the_platforms_deployments_and_jobs_run(stack):
    platform = _platform(stack)
    apps, batch = client.AppsV1Api(platform.cp.client()), client.BatchV1Api(platform.cp.client())
    for d in apps.list_deployment_for_all_namespaces().items:
        if d.metadata.namespace == "kube-system":
            continue
        eventually(f"Deployment {d.metadata.namespace}/{d.metadata.name} available", lambda d=d: (
            apps.read_namespaced_deployment(d.metadata.name, d.metadata.namespace).status.available_replicas
            == d.spec.replicas) or d.spec.replicas == 0, 120)
    for j in batch.list_job_for_all_namespaces().items:
        eventually(f"Job {j.metadata.namespace}/{j.metadata.name} complete", lambda j=j: (
            batch.read_namespaced_job(j.metadata.name, j.metadata.namespace).status.succeeded or 0) >= 1, 120)

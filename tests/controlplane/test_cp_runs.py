"""Runs reach all-pods-Running, gang-bound, on the pools the plan says, through the real submission path;
KubeRay's pods carry what our admission policies expect; deleting a run leaves nothing that holds a node."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import ROOT, recorded

from workloads.checks.runs import load_run
from workloads.render.teams import namespace_of

from controlplane import runs, stack
from controlplane.kube import eventually
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane


def _shared():
    return platform_of("p5en-shared", recorded)


def test_the_reference_raycluster_of_p5en_prod_runs_on_its_pools():
    platform = platform_of("p5en-prod", recorded)
    rendered = [o for o in stack.objects(platform.graph) if o["kind"] == "RayCluster"]
    assert len(rendered) == 1, "p5en-prod renders one reference RayCluster"
    ns, name = rendered[0]["metadata"]["namespace"], rendered[0]["metadata"]["name"]
    cluster = platform.admin.get("ray.io/v1", "RayCluster", name, ns)
    expected = 1 + sum(g["replicas"] for g in cluster["spec"]["workerGroupSpecs"])
    pods = runs.cluster_running(platform, ns, name, expected, 180)
    for pod in pods:
        wanted = pod.spec.node_selector["rl.platform/pool"]
        assert runs.node_pool(platform, pod.spec.node_name) == wanted, pod.metadata.name
    per_node = Counter(p.spec.node_name for p in pods if p.metadata.labels["ray.io/node-type"] == "worker")
    assert max(per_node.values()) == 1, "each GPU worker has a node of its own"


def test_a_team_run_submitted_by_its_member_is_gang_bound_on_its_pools_and_leaves_nothing_when_deleted():
    platform = _shared()
    run_file = ROOT / "runs" / "grpo-qwen3-30b.yaml"
    run = load_run(run_file)
    member = runs.member_of(platform, run.team)
    runs.submit(platform, run_file, member)
    job = next(j for j in runs.rayjobs(platform.admin, run.team) if j["metadata"]["labels"]["rl.platform/run"] == run.name)
    name, ns = job["metadata"]["name"], namespace_of(run.team)
    try:
        expected = 1 + sum(run.nodes.values())
        pods = runs.all_running(platform, run.team, name, expected, 180)
        pools = Counter(runs.node_pool(platform, p.spec.node_name) for p in pods
                        if p.metadata.labels["ray.io/node-type"] == "worker")
        assert dict(pools) == dict(run.nodes)
        for pod in pods:
            assert pod.spec.scheduler_name == "volcano"
            assert pod.metadata.annotations.get("scheduling.k8s.io/group-name"), pod.metadata.name
            assert pod.spec.priority_class_name and pod.spec.priority_class_name.startswith("rl-"), pod.metadata.name
        groups = platform.admin.list(*runs.PODGROUP, namespace=ns)
        assert len(groups) == 1
        group = groups[0]
        assert group["status"]["phase"] == "Running"
        assert group["spec"]["minMember"] == expected
        assert group["spec"]["queue"] == namespace_of(run.team)
    finally:
        runs.delete_run(platform, run.team, name)
    eventually("no PodGroup left", lambda: not platform.admin.list(*runs.PODGROUP, namespace=ns), 60)
    eventually("no RayCluster left", lambda: not platform.admin.list("ray.io/v1", "RayCluster", namespace=ns), 60)

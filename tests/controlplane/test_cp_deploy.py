"""Both reference stacks deploy onto the real control plane: every object of the graph admitted by the API
server (its schemas, the admission plugins EKS enables, the ValidatingAdmissionPolicies the stack itself
installs, Volcano's webhooks) as the deploying identity, and what the controllers make of them runs where
it should: each DaemonSet on exactly the nodes meant for it (the watcher on every passed GPU node, a pool's
burn-in on each of its nodes not yet passed, the GPU resource advertiser on every GPU and head-pool node), each Deployment's rendered replicas available, each Job done."""

from __future__ import annotations

import pytest
from kubernetes import client

from conftest import recorded
from nodes.marks import PASSED, RESULT_LABEL
from nodes.pool_resources import NAME as ADVERTISER

from controlplane import stack
from controlplane.kube import eventually
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane
STACKS = ["p5en-prod", "p5en-shared"]
WATCHER = "burn-in-watch"


def _platform(stack: str):
    return platform_of(stack, recorded)


def _named(platform, kind: str) -> list[dict]:
    """The graph's objects of ``kind``, as rendered."""
    return [o for o in stack.objects(platform.graph) if o["kind"] == kind]


def _daemon_sets_on(platform, expected: dict[str, tuple[int, int | None]]) -> None:
    """Each DaemonSet wants exactly ``expected[name][0]`` pods and has ``expected[name][1]`` of them ready
    (None: not checked, for a pod that may not fit beside a run's)."""
    apps = client.AppsV1Api(platform.cp.client())
    sets = {o["metadata"]["name"]: o["metadata"]["namespace"] for o in _named(platform, "DaemonSet")}
    assert set(sets) == set(expected), f"the graph's DaemonSets {sorted(sets)}"
    seen = {}

    def placed():
        for name, ns in sets.items():
            status = apps.read_namespaced_daemon_set(name, ns).status
            if status.observed_generation:
                seen[name] = (status.desired_number_scheduled, status.number_ready)
        return all(name in seen and seen[name][0] == d and r in (None, seen[name][1])
                   for name, (d, r) in expected.items())
    try:
        eventually(f"DaemonSets (desired, ready) {expected}", placed, 120)
    except AssertionError as e:
        raise AssertionError(f"{e}; found {seen}") from None


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_of_the_graph_is_admitted_and_every_daemonset_is_on_its_nodes(stack):
    platform = _platform(stack)  # deploy raises, naming each refused object
    gpu = [p for p in platform.cfg.pools if p.instance.is_gpu]
    nodes = sum(p.nodes.desired for p in gpu)
    advertised = nodes + platform.model.head_pool.nodes.desired  # GPU nodes and the head pool's (head slots)
    burn_in = {f"burn-in-{p.name}": (0, 0) for p in gpu}  # every node of a proven platform has passed
    _daemon_sets_on(platform, {WATCHER: (nodes, nodes), ADVERTISER: (advertised, advertised), **burn_in})
    # an idle node of each GPU pool back to untested: its pool's burn-in goes there, the watcher leaves it. Only
    # idle nodes: a burn-in pod takes the node's GPUs (p5en-prod's reference RayCluster and the reward replicas
    # hold every node of their pools; there this step is skipped).
    core = client.CoreV1Api(platform.cp.client())
    busy = {p.spec.node_name for p in core.list_pod_for_all_namespaces().items
            if p.spec.node_name and not any(o.kind == "DaemonSet" for o in p.metadata.owner_references or [])}
    idle = {p.name: [n.metadata.name for n in core.list_node(label_selector=f"rl.platform/pool={p.name}").items
                     if n.metadata.name not in busy] for p in gpu}
    untested = {pool: names[0] for pool, names in idle.items() if names}
    assert stack == "p5en-prod" or len(untested) >= 2, f"idle GPU nodes per pool: {idle}"
    try:
        for name in untested.values():
            core.patch_node(name, {"metadata": {"labels": {RESULT_LABEL: None}}})
        _daemon_sets_on(platform, {WATCHER: (nodes - len(untested), nodes - len(untested)),
                                   ADVERTISER: (advertised, advertised), **burn_in,
                                   **{f"burn-in-{pool}": (1, 1) for pool in untested}})
    finally:
        for name in untested.values():
            core.patch_node(name, {"metadata": {"labels": {RESULT_LABEL: PASSED}}})
    _daemon_sets_on(platform, {WATCHER: (nodes, nodes), ADVERTISER: (advertised, advertised), **burn_in})


@pytest.mark.parametrize("stack", STACKS)
def test_the_platforms_deployments_and_jobs_run(stack):
    platform = _platform(stack)
    apps, batch = client.AppsV1Api(platform.cp.client()), client.BatchV1Api(platform.cp.client())
    core = client.CoreV1Api(platform.cp.client())
    deployments = _named(platform, "Deployment")
    assert {d["metadata"]["name"] for d in deployments} >= {"reward", "burn-in-replace"}, deployments
    for d in deployments:
        ns, name, want = d["metadata"]["namespace"], d["metadata"]["name"], d["spec"]["replicas"]
        assert want >= 1, f"Deployment {ns}/{name} renders {want} replicas"
        eventually(f"Deployment {ns}/{name}: {want} available", lambda ns=ns, name=name, want=want: (
            apps.read_namespaced_deployment(name, ns).status.available_replicas or 0) == want, 120)
        pool = d["spec"]["template"]["spec"]["nodeSelector"]["rl.platform/pool"]
        selector = ",".join(f"{k}={v}" for k, v in d["spec"]["selector"]["matchLabels"].items())
        for pod in core.list_namespaced_pod(ns, label_selector=selector).items:
            node = core.read_node(pod.spec.node_name)
            assert node.metadata.labels["rl.platform/pool"] == pool, f"{pod.metadata.name} on {node.metadata.name}"
    for o in _named(platform, "Job"):
        ns, name = o["metadata"]["namespace"], o["metadata"]["name"]
        eventually(f"Job {ns}/{name} complete", lambda ns=ns, name=name: (
            batch.read_namespaced_job(name, ns).status.succeeded or 0) >= 1, 120)

"""The GPU resource advertiser (``nodes.advertise``, ``nodes.pool_resources``): every GPU node advertises its pool's
own resource as many as its GPUs while a run's pod may land there, 0 otherwise, and its account may write nothing
else (docs/design/scheduling.md, "Per-pool guarantees")."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import STACKS, graph_of
from test_nodes import evaluate, request_from
from test_workloads import variant
from test_workloads_security import pod_specs, registered_objects

from components.device_plugins import gpu_taints, tolerations
from components.gpu_node_setup import BURN_IN_TAINT, QUARANTINE_TAINT
from nodes import advertise
from nodes.pool_resources import ACCOUNT, NAMESPACE, POLICY, RUN_BLOCKING_TAINTS, advertiser_objects
from stackconfig.labels import POOL_LABEL, pool_gpu_resource
from workloads.derive.model import derive
from workloads.render.pod_limits import pod_limits

USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
RESOURCES = {"train": "rl.platform/gpu-train", "rollout": "rl.platform/gpu-rollout"}
RULES = {"whole_node": {"train": 8, "rollout": 8}, "taints": RUN_BLOCKING_TAINTS}
"""``wanted``'s and ``step``'s keyword arguments as the DaemonSet gives them on p5en pools."""


def _node(name: str = "train-000", pool: str = "train", capacity: dict | None = None,
          allocatable: dict | None = None) -> dict:
    """A node as the kubelet reports it; ``allocatable`` what differs from ``capacity`` (a device plugin's
    unhealthy devices are in its resource's capacity, not its allocatable: devicemanager ``GetCapacity``)."""
    capacity = {"cpu": "192", "nvidia.com/gpu": "8"} if capacity is None else capacity
    return {"metadata": {"name": name, "labels": {POOL_LABEL: pool}, "resourceVersion": "1"},
            "spec": {"taints": []}, "status": {"capacity": dict(capacity),
                                               "allocatable": {**capacity, **(allocatable or {})},
                                               "conditions": [{"type": "Ready", "status": "True"}]}}


class FakeApi:
    def __init__(self, node: dict):
        self.nodes, self.patches = {node["metadata"]["name"]: node}, []

    def node(self, name: str) -> dict:
        return self.nodes[name]

    def patch_node_status(self, name: str, patch: dict) -> dict:
        self.patches.append((name, patch))
        self.nodes[name]["status"]["capacity"].update(patch["status"]["capacity"])
        return self.nodes[name]


def test_the_advertiser_sets_its_pools_resource_to_the_nodes_gpus_once_they_are_advertised():
    api = FakeApi(_node(capacity={"cpu": "192"}))  # the device plugin has not registered yet
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) is None and api.patches == []
    api.nodes["train-000"]["status"]["capacity"]["nvidia.com/gpu"] = "8"
    api.nodes["train-000"]["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) == {"status": {"capacity": {
        "rl.platform/gpu-train": "8"}}}
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) is None  # already so: nothing written
    api.nodes["train-000"]["status"]["capacity"]["rl.platform/gpu-train"] = "0"  # zeroed at a re-registration
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) is not None and len(api.patches) == 2
    assert advertise.wanted(_node(pool="system"), RESOURCES, POOL_LABEL, **RULES) is None


def test_the_daemonset_runs_on_every_gpu_pool_and_the_head_pool_through_the_burn_in_and_registers_its_policy():
    m = derive(variant("p5en-shared", {}))
    objects = advertiser_objects(m)
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    gpu = sorted(p.name for p in m.pools if p.instance.is_gpu)
    assert term["matchExpressions"] == [{"key": POOL_LABEL, "operator": "In", "values": sorted([*gpu, m.head_pool.name])}]
    assert m.head_pool.taints == () and m.head_pool.name not in gpu  # so the GPU pools' tolerations are all it needs
    assert pod["tolerations"] == tolerations(gpu_taints(m.pools))  # the burn-in and quarantine taints included
    (c,) = pod["containers"]
    assert json.loads(c["command"][c["command"].index("--resources") + 1]) == {p: pool_gpu_resource(p) for p in gpu}
    assert "nvidia.com/gpu" not in c["resources"]["requests"] and pod["serviceAccountName"] == ACCOUNT
    roles = [o for o in objects if o["kind"] == "ClusterRole"]
    assert [r["rules"] for r in roles] == [[{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                                            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]]
    assert [o["metadata"]["name"] for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")] == [POLICY] * 2
    assert advertiser_objects(derive(variant("p5en-shared", {}))) == objects


@pytest.fixture(scope="module")
def policy():
    return next(o for o in advertiser_objects(derive(variant("p5en-shared", {})))
                if o["kind"] == "ValidatingAdmissionPolicy")


def _written(node: dict, edit) -> dict:
    new = copy.deepcopy(node)
    edit(new)
    return new


def test_the_advertiser_may_set_only_its_pools_resource_of_its_own_node_to_its_gpus(policy):
    old = _node()
    own = _written(old, lambda n: n["status"]["capacity"].update({"rl.platform/gpu-train": "8"}))
    assert evaluate(policy, request_from("train-000", USER), own, old) == []
    assert evaluate(policy, request_from("train-000", "system:node:train-000"), own, old) is None  # the kubelet
    refusals = {
        "another node": (request_from("train-001", USER), own),
        "a token without a node": (request_from(None, USER), own),
        "another pool's resource": (request_from("train-000", USER), _written(
            old, lambda n: n["status"]["capacity"].update({"rl.platform/gpu-rollout": "8"}))),
        "more than its GPUs": (request_from("train-000", USER), _written(
            old, lambda n: n["status"]["capacity"].update({"rl.platform/gpu-train": "16"}))),
        "more GPUs": (request_from("train-000", USER), _written(
            old, lambda n: n["status"]["capacity"].update({"nvidia.com/gpu": "16"}))),
        "allocatable": (request_from("train-000", USER), _written(
            old, lambda n: n["status"]["allocatable"].update({"rl.platform/gpu-train": "8"}))),
        "a condition": (request_from("train-000", USER), _written(
            old, lambda n: n["status"]["conditions"][0].update({"status": "False"}))),
        "a label": (request_from("train-000", USER), _written(
            old, lambda n: n["metadata"]["labels"].update({POOL_LABEL: "rollout"}))),
    }
    admitted = [what for what, (request, new) in refusals.items() if not evaluate(policy, request, new, old)]
    assert admitted == []


def test_the_advertiser_writes_zero_while_fewer_gpus_than_a_run_pod_takes_are_healthy():
    """The kubelet counts a device plugin's unhealthy GPUs in ``nvidia.com/gpu``'s capacity only and copies the pool
    resource's capacity to its allocatable (kubernetes v1.35 devicemanager ``GetCapacity``, nodestatus ``MachineInfo``).
    A team pod on a GPU pool takes a whole node, all 8 GPUs: with 7 healthy none fits, so the pool resource, which
    Volcano sums into every queue's ``realCapability``, is 0 (it was 7 before), and 0 when none is healthy or the
    device plugin is gone."""
    api = FakeApi(_node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "8"},
                        allocatable={"nvidia.com/gpu": "7"}))  # one GPU unhealthy
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) == {"status": {"capacity": {
        "rl.platform/gpu-train": "0"}}}
    api.nodes["train-000"]["status"]["allocatable"]["nvidia.com/gpu"] = "0"  # every GPU unhealthy
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) is None  # 0 already
    api.nodes["train-000"]["status"]["allocatable"]["nvidia.com/gpu"] = "8"  # healthy again
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) == {"status": {"capacity": {
        "rl.platform/gpu-train": "8"}}}


def _tainted(node: dict, *taints) -> dict:
    node["spec"]["taints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]
    return node


@pytest.mark.parametrize("taint", [BURN_IN_TAINT, QUARANTINE_TAINT], ids=["burn-in", "quarantine"])
def test_the_advertiser_writes_zero_under_the_burn_in_or_quarantine_taint_and_the_gpus_once_it_is_gone(taint):
    """Volcano v1.15.1 sums every node's allocatable into the total behind each queue's ``realCapability``, taints
    notwithstanding (framework/session.go:273-275): a node no run pod tolerates must count 0 there. Matched by key
    (a re-test puts the burn-in taint back; any value keeps run pods off)."""
    api = FakeApi(_tainted(_node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "8"}), taint))
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) == {"status": {"capacity": {
        "rl.platform/gpu-train": "0"}}}
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) is None
    api.nodes["train-000"]["spec"]["taints"] = [{"key": taint.key, "value": "other", "effect": "NoExecute"}]
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) is None  # still 0
    api.nodes["train-000"]["spec"]["taints"] = [{"key": "example.com/pool-own", "value": "x", "effect": "NoSchedule"}]
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL, **RULES) == {"status": {"capacity": {
        "rl.platform/gpu-train": "8"}}}  # burn-in passed: back on the next pass
    fresh = _tainted(_node(), taint)  # a new node: nothing advertised yet, 0 written
    assert advertise.wanted(fresh, RESOURCES, POOL_LABEL, **RULES) == {"status": {"capacity": {
        "rl.platform/gpu-train": "0"}}}


def test_the_advertiser_writes_zero_on_a_cordoned_node():
    node = _node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "8"})
    node["spec"]["unschedulable"] = True
    assert advertise.wanted(node, RESOURCES, POOL_LABEL, **RULES) == {"status": {"capacity": {
        "rl.platform/gpu-train": "0"}}}
    node["spec"]["unschedulable"] = False
    assert advertise.wanted(node, RESOURCES, POOL_LABEL, **RULES) is None


@pytest.mark.parametrize("stack", ["p5en-shared", "p5en-prod"])
def test_the_daemonset_gives_the_catalogs_whole_node_gpus_and_the_taints_no_run_pod_tolerates(stack):
    """The whole-node count is the instance catalog's, as the run's pod of each GPU pool requests it (the pod shape
    admission holds team pods to, ``render.pod_limits``); the taints are the burn-in's and the quarantine's, which
    the DaemonSet itself tolerates and no run pod does."""
    m = derive(variant(stack, {}))
    ds = next(o for o in advertiser_objects(m) if o["kind"] == "DaemonSet")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    whole = json.loads(c["command"][c["command"].index("--whole-node") + 1])
    assert whole == {p.name: p.instance.gpus for p in m.pools if p.instance.is_gpu}
    shapes = pod_limits(m).gpu_shapes
    assert shapes and all(int(shapes[pool]["nvidia.com/gpu"]) == whole[pool] for pool in shapes)
    taints = json.loads(c["command"][c["command"].index("--taints") + 1])
    assert taints == [BURN_IN_TAINT.key, QUARANTINE_TAINT.key]
    assert set(taints) <= {t["key"] for t in ds["spec"]["template"]["spec"]["tolerations"]}


@pytest.mark.parametrize("stack", STACKS)
def test_no_pod_that_runs_under_the_burn_in_or_quarantine_taint_requests_a_pool_resource(stack):
    """The advertiser writes 0 of the pool resource under those taints: a pod that tolerates them (the burn-in's,
    a re-test's) and requested it would never be placed there, nor admitted by the kubelet (fits against 0)."""
    found = []
    for where, pod in (x for o in registered_objects(graph_of(stack)) for x in pod_specs(o)):
        if not set(RUN_BLOCKING_TAINTS) & {t.get("key") for t in pod.get("tolerations") or []}:
            continue
        for c in [*(pod.get("initContainers") or []), *pod["containers"]]:
            asked = {k for part in (c.get("resources") or {}).values() for k in part if k.startswith("rl.platform/gpu-")}
            found += [f"{where}/{c['name']}: {k}" for k in sorted(asked)]
    assert found == []


def test_the_policy_holds_the_pool_resource_to_zero_or_the_allocatable_gpus(policy):
    request = request_from("train-000", USER)
    healthy = _node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "8"})
    one_down = _node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "8"},
                     allocatable={"nvidia.com/gpu": "7"})

    def to(old: dict, n: str) -> dict:
        return _written(old, lambda node: node["status"]["capacity"].update({"rl.platform/gpu-train": n}))
    assert evaluate(policy, request, to(healthy, "0"), healthy) == []  # tainted or cordoned
    assert evaluate(policy, request, to(one_down, "0"), one_down) == []  # fewer GPUs than a run pod takes
    assert evaluate(policy, request, to(to(healthy, "0"), "8"), to(healthy, "0")) == []  # back
    assert evaluate(policy, request, to(_node(), "0"), _node()) == []  # a new node's first write
    message = ("the GPU resource advertiser sets its node's pool resource to 0, or to the node's allocatable "
               "nvidia.com/gpu while a run's pod may use the node (not cordoned, none of the run-blocking taints, a "
               "whole node's GPUs allocatable), and does not remove it")
    removed = _written(healthy, lambda n: n["status"]["capacity"].pop("rl.platform/gpu-train"))
    seven = _node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "0"},
                  allocatable={"nvidia.com/gpu": "7"})
    cordoned = _written(to(healthy, "0"), lambda n: n["spec"].update({"unschedulable": True}))
    tainted = {key: _written(to(healthy, "0"), lambda n, k=key: n["spec"]["taints"].append(
        {"key": k, "effect": "NoSchedule"})) for key in RUN_BLOCKING_TAINTS}
    # a compromised advertiser counting a node no run may use (review35b F1): Volcano's total would leave
    # another team's guarantee short by it
    refusals = {"8 of 7 healthy": (to(one_down, "8"), one_down), "3": (to(healthy, "3"), healthy),
                "1": (to(healthy, "1"), healthy), "removed": (removed, healthy),
                "7 of 7 healthy": (to(seven, "7"), seven), "8 on a cordoned node": (to(cordoned, "8"), cordoned),
                **{f"8 under {k}": (to(node, "8"), node) for k, node in tainted.items()}}
    assert {what: evaluate(policy, request, new, old) for what, (new, old) in refusals.items()} == {
        what: [message] for what in refusals}


def test_the_advertiser_may_not_add_a_finalizer_or_owner_to_its_own_node(policy):
    """review35 C1: the node status strategy resets only ``spec`` (kubernetes pkg/registry/core/node/strategy.go
    ``nodeStatusStrategy.PrepareForUpdate``), so a status write could otherwise keep a removed instance's Node
    (finalizer) or have the garbage collector delete it (owner reference)."""
    old = _node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "8"})
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "0b5e6f1c-0000-4000-8000-000000000000"}
    edits = {"a finalizer": lambda n: n["metadata"].update(finalizers=["example.com/keep"]),
             "an owner reference": lambda n: n["metadata"].update(ownerReferences=[owner])}
    admitted = [what for what, edit in edits.items()
                if not evaluate(policy, request_from("train-000", USER), _written(old, edit), old)]
    assert admitted == []
    kept = _written(old, lambda n: n["metadata"].update(finalizers=["example.com/keep"]))
    assert evaluate(policy, request_from("train-000", USER), kept, kept) == []  # one already there stays allowed

"""The GPU resource advertiser (``nodes.advertise``, ``nodes.pool_resources``): every GPU node advertises its pool's
own resource as many as its GPUs, and its account may write nothing else (docs/design/scheduling.md, "Per-pool
guarantees")."""

from __future__ import annotations

import copy
import json

import pytest
from test_nodes import evaluate, request_from
from test_workloads import variant

from components.device_plugins import gpu_taints, tolerations
from nodes import advertise
from nodes.pool_resources import ACCOUNT, NAMESPACE, POLICY, advertiser_objects
from stackconfig.labels import POOL_LABEL, pool_gpu_resource
from workloads.derive.model import derive

USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
RESOURCES = {"train": "rl.platform/gpu-train", "rollout": "rl.platform/gpu-rollout"}


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
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL) is None and api.patches == []
    api.nodes["train-000"]["status"]["capacity"]["nvidia.com/gpu"] = "8"
    api.nodes["train-000"]["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL) == {"status": {"capacity": {
        "rl.platform/gpu-train": "8"}}}
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL) is None  # already so: nothing written
    api.nodes["train-000"]["status"]["capacity"]["rl.platform/gpu-train"] = "0"  # zeroed at a re-registration
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL) is not None and len(api.patches) == 2
    assert advertise.wanted(_node(pool="system"), RESOURCES, POOL_LABEL) is None


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


def test_the_advertiser_follows_the_allocatable_gpus_down_to_zero():
    """The kubelet counts a device plugin's unhealthy GPUs in ``nvidia.com/gpu``'s capacity only and copies the pool
    resource's capacity to its allocatable (kubernetes v1.35 devicemanager ``GetCapacity``, nodestatus ``MachineInfo``):
    the pool resource, which Volcano sums into every queue's ``realCapability``, must follow the allocatable GPUs,
    to 0 when none is healthy or the device plugin is gone."""
    api = FakeApi(_node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "8"},
                        allocatable={"nvidia.com/gpu": "7"}))  # one GPU unhealthy
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL) == {"status": {"capacity": {
        "rl.platform/gpu-train": "7"}}}
    api.nodes["train-000"]["status"]["allocatable"]["nvidia.com/gpu"] = "0"  # every GPU unhealthy
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL) == {"status": {"capacity": {
        "rl.platform/gpu-train": "0"}}}
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL) is None
    api.nodes["train-000"]["status"]["allocatable"]["nvidia.com/gpu"] = "8"  # healthy again
    assert advertise.step(api, "train-000", RESOURCES, POOL_LABEL) == {"status": {"capacity": {
        "rl.platform/gpu-train": "8"}}}


def test_the_policy_holds_the_pool_resource_to_the_allocatable_gpus(policy):
    old = _node(allocatable={"nvidia.com/gpu": "7"})  # capacity 8, one GPU unhealthy
    to = {n: _written(old, lambda node, n=n: node["status"]["capacity"].update({"rl.platform/gpu-train": n}))
          for n in ("7", "8")}
    assert evaluate(policy, request_from("train-000", USER), to["7"], old) == []
    assert evaluate(policy, request_from("train-000", USER), to["8"], old) == [
        "the GPU resource advertiser sets its node's pool resource to the node's allocatable nvidia.com/gpu"]
    none = _node(capacity={"cpu": "192", "nvidia.com/gpu": "8", "rl.platform/gpu-train": "8"},
                 allocatable={"nvidia.com/gpu": "0"})
    zero = _written(none, lambda n: n["status"]["capacity"].update({"rl.platform/gpu-train": "0"}))
    assert evaluate(policy, request_from("train-000", USER), zero, none) == []


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

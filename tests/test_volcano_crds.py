"""The vendored Volcano PodGroup and HyperNode schemas (volcano-sh/volcano v1.15.1) validate offline."""

from __future__ import annotations

import copy

from workloads.checks.crds import crd_document, crd_schema, validate

PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")
HYPERNODE = ("topology.volcano.sh/v1alpha1", "HyperNode")

POD_GROUP = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "train", "namespace": "default"},
    "spec": {
        "minMember": 4,
        "queue": "default",
        "minResources": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 8},
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
    },
}

HYPER_NODE = {
    "apiVersion": "topology.volcano.sh/v1alpha1",
    "kind": "HyperNode",
    "metadata": {"name": "s0"},
    "spec": {
        "tier": 1,
        "members": [
            {"type": "Node", "selector": {"exactMatch": {"name": "node-0"}}},
            {"type": "Node", "selector": {"regexMatch": {"pattern": "^node-[1-3]$"}}},
            {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"volcano.sh/tor": "tor-0"}}}},
        ],
    },
}


def test_origin_is_the_pinned_release():
    for key in (PODGROUP, HYPERNODE):
        origin = crd_document(*key)["origin"]
        assert (origin["repository"], origin["tag"]) == ("volcano-sh/volcano", "v1.15.1")
        assert origin["commit"] == "0a56ed331897f5455916a44d3075671376d731d6"
    assert crd_document(*HYPERNODE)["scope"] == "Cluster"


def test_minimal_pod_group_is_valid():
    assert validate(POD_GROUP, crd_schema(*PODGROUP)) == []


def test_minimal_hyper_node_is_valid():
    assert validate(HYPER_NODE, crd_schema(*HYPERNODE)) == []


def test_hyper_node_of_hyper_nodes_is_valid():
    obj = copy.deepcopy(HYPER_NODE)
    obj["spec"] = {"tier": 2, "members": [{"type": "HyperNode", "selector": {"exactMatch": {"name": "s0"}}}]}
    assert validate(obj, crd_schema(*HYPERNODE)) == []


def test_misspelt_pod_group_field_is_reported():
    obj = copy.deepcopy(POD_GROUP)
    obj["spec"]["minMembers"] = obj["spec"].pop("minMember")
    assert validate(obj, crd_schema(*PODGROUP)) == [".spec.minMembers: unknown field"]


def test_misspelt_hyper_node_selector_is_reported():
    obj = copy.deepcopy(HYPER_NODE)
    obj["spec"]["members"][1]["selector"] = {"regexMatches": {"pattern": "^node-.*$"}}
    assert validate(obj, crd_schema(*HYPERNODE)) == [".spec.members[1].selector.regexMatches: unknown field"]


def test_schema_errors_are_reported():
    pg = copy.deepcopy(POD_GROUP)
    pg["spec"]["networkTopology"]["mode"] = "strict"
    assert any("'strict' is not one of ['hard', 'soft']" in e for e in validate(pg, crd_schema(*PODGROUP)))
    hn = copy.deepcopy(HYPER_NODE)
    del hn["spec"]["tier"]
    hn["spec"]["members"][0]["type"] = "Rack"
    errors = validate(hn, crd_schema(*HYPERNODE))
    assert any("'tier' is a required property" in e for e in errors)
    assert any("'Rack' is not one of ['Node', 'HyperNode']" in e for e in errors)


def test_volcano_discovers_hypernodes_from_the_eks_network_labels():
    """The stack's Volcano release carries label-based HyperNode discovery over EKS's
    topology.k8s.aws/network-node-layer-{1,2,3} labels, hostname last (so layer 3 becomes tier 1)."""
    from conftest import graph_of
    (volcano,) = [r.inputs for r in graph_of("p5en-prod").resources
                  if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs["chart"] == "volcano"]
    (entry,) = volcano["values"]["custom"]["controller_config_override"]["networkTopologyDiscovery"]
    assert entry["source"] == "label" and entry["enabled"] is True
    (labels,) = entry["config"]["networkTopologyTypes"].values()
    assert [x["nodeLabel"] for x in labels] == [
        "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
        "topology.k8s.aws/network-node-layer-3", "kubernetes.io/hostname"]
    assert len(next(iter(entry["config"]["networkTopologyTypes"]))) <= 20  # Volcano's limit on the type name

"""Interop: examples/pulumi_eks attaches our EFA pools and checkpoint store to a pulumi-eks cluster.

``eks.Cluster`` is a remote component: under mocks nothing inside it is created, and the mock
engine answers its outputs (``analysis.mocks.REMOTE_CHILDREN``): ``eksCluster`` is a reference to
the aws.eks.Cluster it would create, so the example reads ``eks_cluster.name`` and
``eks_cluster.vpc_config.cluster_security_group_id`` exactly as under ``pulumi up``.
"""

import runpy

import pulumi
import pulumi_eks  # noqa: F401  (in requirements.txt: the example must run, not be skipped)
import pytest
from conftest import ROOT

from analysis import mocks
from components.multilang import PACKAGE
from stackconfig.versions import Versions

REGION = "us-east-1"
EXAMPLE = ROOT / "examples" / "pulumi_eks" / "__main__.py"


@pytest.fixture(scope="module")
def graph() -> mocks.Graph:
    return mocks.run(lambda: runpy.run_path(str(EXAMPLE)) and None,
                     region=REGION, stack="dev", project="eks-with-efa-pools")


@pytest.fixture(scope="module")
def cluster(graph):
    return graph.named("eks:index:Cluster", "rl")


@pytest.fixture(scope="module")
def eks_cluster(cluster) -> dict:
    """State of the aws.eks.Cluster inside the pulumi-eks component, as the mocks answered it."""
    urn = cluster.outputs["eksCluster"]["urn"]
    assert urn.endswith("eks:index:Cluster$aws:eks/cluster:Cluster::rl-eksCluster")
    return mocks.computed_outputs("eks:index:Cluster", "rl", cluster.inputs, REGION)["eksCluster"]


def _resources_in(value) -> list:
    if isinstance(value, pulumi.Resource):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [r for v in items for r in _resources_in(v)]


def test_pulumi_eks_cluster_uses_api_auth_without_default_node_group(graph, cluster):
    role = graph.named("aws:iam/role:Role", "gpu-nodes")
    assert cluster.inputs["authenticationMode"] == "API"
    assert cluster.inputs["skipDefaultNodeGroup"] is True
    assert cluster.inputs["skipDefaultSecurityGroups"] is True
    assert "nodeGroupOptions" not in cluster.inputs and "instanceRoles" not in cluster.inputs
    assert cluster.inputs["accessEntries"] == {
        "gpu-nodes": {"principalArn": role.outputs["arn"], "type": "EC2_LINUX"}}
    assert cluster.inputs["vpcCniOptions"]["addonVersion"] == Versions().addons.vpc_cni  # >= 1.18.5
    assert len(cluster.inputs["privateSubnetIds"]) == 2
    assert _resources_in(cluster.inputs) == [], "pass plain outputs, not Resource objects, to a remote component"


def test_train_pool_has_the_p5en_efa_layout_with_the_eks_cluster_group(graph, eks_cluster):
    pool = graph.named(f"{PACKAGE}:index:GpuNodePool", "rl-train")
    lt = graph.children(pool, "aws:ec2/launchTemplate:LaunchTemplate")[0]
    interfaces = lt.inputs["networkInterfaces"]
    layout = [(i["networkCardIndex"], i["deviceIndex"], i["interfaceType"]) for i in interfaces]
    assert layout == [(0, 0, "interface"), (0, 1, "efa-only")] + [(c, 0, "efa-only") for c in range(1, 16)]
    efa_sg = graph.named("aws:ec2/securityGroup:SecurityGroup", "rl-efa").outputs["id"]
    cluster_sg = eks_cluster["vpcConfig"]["clusterSecurityGroupId"]
    assert all(i["securityGroups"] == [cluster_sg, efa_sg] for i in interfaces)
    assert "vpcSecurityGroupIds" not in lt.inputs and "securityGroupNames" not in lt.inputs
    target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0123456789abcdef0"}
    assert lt.inputs["instanceMarketOptions"]["marketType"] == "capacity-block"
    assert graph.children(pool, "aws:ec2/placementGroup:PlacementGroup") == []


def test_node_groups_join_the_eks_cluster_after_role_and_egress(graph, cluster, eks_cluster):
    role_arn = graph.named("aws:iam/role:Role", "gpu-nodes").outputs["arn"]
    subnet = {n: graph.named("aws:ec2/subnet:Subnet", n).outputs["id"]
              for n in ("efa", "spread-a", "spread-b")}
    must_exist = {r.urn for r in graph.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                  if r.name.startswith("gpu-nodes-")}
    must_exist |= {graph.named("aws:ec2/routeTableAssociation:RouteTableAssociation", n).urn for n in subnet}
    assert len(must_exist) == 6
    for name, subnets, capacity in (("rl-train", [subnet["efa"]], "CAPACITY_BLOCK"),
                                    ("rl-system", [subnet["spread-a"], subnet["spread-b"]], "ON_DEMAND")):
        pool = graph.named(f"{PACKAGE}:index:GpuNodePool", name)
        assert must_exist <= set(pool.dependencies)
        ng = graph.children(pool, "aws:eks/nodeGroup:NodeGroup")[0]
        assert ng.inputs["clusterName"] == eks_cluster["name"] and cluster.urn in ng.dependencies
        assert (ng.inputs["nodeRoleArn"], ng.inputs["subnetIds"], ng.inputs["capacityType"]) == (
            role_arn, subnets, capacity)


def test_checkpoint_store_pod_identity_targets_the_eks_cluster(graph, cluster, eks_cluster):
    store = graph.named(f"{PACKAGE}:index:CheckpointStore", "rl-checkpoints")
    assoc = graph.children(store, "aws:eks/podIdentityAssociation:PodIdentityAssociation")[0]
    assert assoc.inputs["clusterName"] == eks_cluster["name"] and cluster.urn in assoc.dependencies
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == ("rl", "checkpoint-writer")
    agent = graph.named("aws:eks/addon:Addon", "pod-identity-agent")
    assert (agent.inputs["addonName"], agent.inputs["clusterName"]) == (
        "eks-pod-identity-agent", eks_cluster["name"])


def test_mocks_answer_pulumi_eks_own_group_unless_default_groups_are_skipped():
    """Why the example reads eks_cluster.vpc_config: pulumi-eks's clusterSecurityGroupId is its
    own group (not the one EKS attaches to nodes) unless skipDefaultSecurityGroups is set."""
    out = mocks.computed_outputs("eks:index:Cluster", "c", {}, REGION)
    assert out["clusterSecurityGroupId"] != out["eksCluster"]["vpcConfig"]["clusterSecurityGroupId"]
    out = mocks.computed_outputs("eks:index:Cluster", "c", {"skipDefaultSecurityGroups": True}, REGION)
    assert out["clusterSecurityGroupId"] == out["eksCluster"]["vpcConfig"]["clusterSecurityGroupId"]


def test_device_plugins_go_to_the_eks_cluster_and_tolerate_the_gpu_taint(graph):
    plugins = graph.named(f"{PACKAGE}:index:GpuDevicePlugins", "rl-device-plugins")
    (provider,) = graph.children(plugins, "pulumi:providers:kubernetes")
    releases = {r.inputs["chart"]: r for r in graph.resources if r.type == "kubernetes:helm.sh/v3:Release"}
    assert set(releases) == {"nvidia-device-plugin", "aws-efa-k8s-device-plugin"}
    charts = Versions().charts
    for release in releases.values():
        assert release.provider.startswith(provider.urn)
        assert release.inputs["values"]["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
        assert release.inputs["version"] in (charts.nvidia_device_plugin.version, charts.efa_device_plugin.version)
    assert "p5en.48xlarge" in releases["aws-efa-k8s-device-plugin"].inputs["values"]["supportedInstanceLabels"]["values"]

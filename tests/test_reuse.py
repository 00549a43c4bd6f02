"""Reuse: another Pulumi program composes our components; other languages get a typed schema."""

import json
import runpy
import subprocess
import sys

import pytest
from conftest import ROOT
from pulumi.provider.experimental.component import ComponentProvider

from analysis import mocks
from components.multilang import COMPONENTS, PACKAGE, GpuNodePool


def test_consumer_program_composes_components():
    graph = mocks.run(lambda: runpy.run_path(str(ROOT / "tests/consumer/__main__.py")) and None,
                      region="us-west-2", stack="consumer", project="consumer")
    pool = graph.named(f"{PACKAGE}:index:GpuNodePool", "team-rollout")
    lt = graph.children(pool, "aws:ec2/launchTemplate:LaunchTemplate")[0]
    cards = [(i["networkCardIndex"], i["deviceIndex"], i["interfaceType"]) for i in lt.inputs["networkInterfaces"]]
    assert cards == [(0, 0, "interface")] + [(c, 0, "efa-only") for c in range(1, 17)]
    assert graph.children(pool, "aws:ec2/placementGroup:PlacementGroup") == []
    sg = graph.named("aws:ec2/securityGroup:SecurityGroup", "team-efa")
    assert all(i["securityGroups"] == ["sg-cluster", sg.outputs["id"]] for i in lt.inputs["networkInterfaces"])
    ng = graph.children(pool, "aws:eks/nodeGroup:NodeGroup")[0]
    assert ng.inputs["capacityType"] == "CAPACITY_BLOCK" and ng.inputs["subnetIds"] == ["subnet-efa"]
    store = graph.named(f"{PACKAGE}:index:CheckpointStore", "team-checkpoints")
    assoc = graph.children(store, "aws:eks/podIdentityAssociation:PodIdentityAssociation")[0]
    assert assoc.inputs["namespace"] == "team-rl"


def test_component_rejects_invalid_pool_like_a_stack_file():
    def program():
        GpuNodePool("bad", {"pool_name": "train", "role": "train", "instance_type": "p5en.48xlarge",
                            "min_nodes": 1, "desired_nodes": 1, "max_nodes": 1, "capacity_type": "SPOT",
                            "cluster_name": "c", "node_role_arn": "r", "node_subnet_id": "s",
                            "spread_subnet_ids": ["a"], "cluster_security_group_id": "sg",
                            "efa_security_group_id": "sg2"})
    with pytest.raises(Exception, match="SPOT is not allowed for the training pool"):
        mocks.run(program, region="us-east-1", stack="bad")


def test_plugin_schema_exposes_typed_components():
    schema = json.loads(ComponentProvider(COMPONENTS, PACKAGE, PACKAGE, "0.1.0").schema)
    resources = schema["resources"]
    assert set(resources) == {f"{PACKAGE}:index:{c.__name__}" for c in COMPONENTS}
    pool = resources[f"{PACKAGE}:index:GpuNodePool"]
    assert pool["isComponent"] is True
    assert pool["inputProperties"]["instanceType"] == {
        "description": "A type of the instance catalog, e.g. p5en.48xlarge.", "type": "string", "plain": True}
    assert pool["inputProperties"]["minNodes"]["type"] == "integer"
    assert {"capacityType", "reservationId"}.isdisjoint(pool["requiredInputs"])
    assert set(pool["properties"]) == {"nodeGroupName", "launchTemplateId", "efaDevicesPerNode", "gpusPerNode"}
    store = resources[f"{PACKAGE}:index:CheckpointStore"]
    assert store["requiredInputs"] == ["clusterName"]
    assert store["inputProperties"]["retainOnDestroy"]["type"] == "boolean"
    assert set(store["properties"]) == {"bucketName", "bucketArn", "writerRoleArn"}
    assert resources[f"{PACKAGE}:index:EfaPeerSecurityGroup"]["requiredInputs"] == ["vpcId"]


def test_plugin_process_serves_the_schema_over_grpc():
    """Start the plugin as the Pulumi engine would and ask it for its schema (loopback only)."""
    import grpc
    from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

    proc = subprocess.Popen([sys.executable, str(ROOT / "provider" / "__main__.py"), "127.0.0.1:1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        port = int(proc.stdout.readline().decode().strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            reply = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=30)
        served = json.loads(reply.schema)
    finally:
        proc.kill()
        proc.wait()
    expected = json.loads(ComponentProvider(COMPONENTS, PACKAGE, PACKAGE, "0.1.0").schema)
    assert served["name"] == PACKAGE and served["resources"] == expected["resources"]

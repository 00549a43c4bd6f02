"""The EFA device plugin's image comes from the EKS add-on registry of the stack's own region, and a
Capacity Block pool written as ``nodes: N`` may scale to 0 (EKS's scale-down before the block
ends; EKS User Guide, capacity-blocks-mng: "When upgrading managed node groups with Capacity
Blocks, make sure that the desired size of the node group is set to 0")."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, STACKS, graph_of, load
from test_workloads import variant

from components.device_plugins import eks_addon_registry
from stackconfig.stack import CapacityType, Pool

REGISTRIES = json.loads((ROOT / "catalog" / "data" / "eks-addon-registries.json").read_text())


def efa_release(graph) -> dict:
    return next(r for r in graph.of_type("kubernetes:helm.sh/v3:Release")
                if r.inputs["name"] == "aws-efa-k8s-device-plugin").inputs


@pytest.mark.parametrize("stack", STACKS)
def test_the_efa_plugin_image_comes_from_the_stacks_own_region(stack):
    cfg = load(stack)
    repository = efa_release(graph_of(stack))["values"]["image"]["repository"]
    host, _, path = repository.partition("/")
    assert path == "eks/aws-efa-k8s-device-plugin"  # the chart's default path, another region's host
    assert host == f"{REGISTRIES['accounts'][cfg.region]}.dkr.ecr.{cfg.region}.amazonaws.com"


def test_another_region_gets_its_own_registry_and_account():
    """ap-southeast-7's registry is in another account than us-east-1's (the table, not one account)."""
    assert eks_addon_registry("ap-southeast-7").startswith(REGISTRIES["accounts"]["ap-southeast-7"] + ".")
    assert REGISTRIES["accounts"]["ap-southeast-7"] != REGISTRIES["accounts"]["us-east-1"]
    assert ".ap-southeast-7." in eks_addon_registry("ap-southeast-7")


@pytest.mark.parametrize("stack", STACKS)
def test_capacity_block_pools_can_scale_to_zero(stack):
    for pool in load(stack).pools:
        if pool.capacity.type is CapacityType.CAPACITY_BLOCK:
            assert pool.nodes.min == 0 and pool.nodes.desired == pool.nodes.max >= 1, (stack, pool.name)


def test_nodes_n_means_min_0_only_for_capacity_blocks():
    pool = {"name": "rollout", "role": "rollout", "instanceType": "p5.48xlarge", "nodes": 4}
    block = {"type": "CAPACITY_BLOCK", "reservationId": "cr-0123456789abcdef0"}
    counts = lambda **kw: tuple(Pool.model_validate({**pool, **kw}).nodes.model_dump().values())  # noqa: E731
    assert counts(capacity=block) == (0, 4, 4)
    assert counts() == counts(capacity={"type": "ODCR", "reservationId": "cr-0123456789abcdef0"}) == (4, 4, 4)
    assert counts(capacity=block, nodes={"min": 2, "desired": 4, "max": 4}) == (2, 4, 4)  # as written

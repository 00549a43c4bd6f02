"""Every stack file validates and the whole program builds under mocks for every stack."""

from pathlib import Path

import pytest
from conftest import STACKS, graph_of, load

from stackconfig.stack import Role

FAMILIES = {"p4d", "p4de", "p5", "p5e", "p5en-prod", "p6-b200", "p6-b300", "dev"}


def test_every_family_has_a_stack():
    assert FAMILIES <= set(STACKS)


def test_stack_builds_under_mocks(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    node_groups = graph.of_type("aws:eks/nodeGroup:NodeGroup")
    assert sorted(ng.inputs["nodeGroupName"] for ng in node_groups) == sorted(
        f"{cfg.cluster_name}-{p.name}" for p in cfg.pools)
    assert len(graph.of_type("aws:eks/cluster:Cluster")) == 1
    assert len(graph.of_type("aws:s3/bucket:Bucket")) == 1


def test_reference_shape():
    cfg = load("p5en-prod")
    train, rollout = cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT)
    assert (train.instance_type, train.nodes.desired) == ("p5en.48xlarge", 16)
    assert (rollout.instance_type, rollout.nodes.desired) == ("p5en.48xlarge", 32)
    roles = {p.role for p in cfg.pools}
    assert {Role.REWARD, Role.CPU, Role.MEMORY, Role.SYSTEM} <= roles


SEED_FAMILIES = ("p5", "p5e", "p5en-prod", "p6-b200", "p6-b300")


@pytest.mark.parametrize("stack", SEED_FAMILIES)
def test_every_p5_p6_family_stack_runs_the_seeds_configuration(stack):
    """DeepEP V2 over EFA on profile miles-deepep-v2, its rollout engines across nodes, its image by digest."""
    from workloads.derive.model import derive
    from workloads.schema.run import DeepEPVersion
    cfg = load(stack)
    m = derive(cfg)
    assert cfg.workloads.run.software == "miles-deepep-v2" and m.deepep.version is DeepEPVersion.V2
    assert m.argv[m.argv.index("--sglang-moe-a2a-backend") + 1] == "deepep_v2"
    assert cfg.workloads.run.rollout.nodes_per_engine > 1
    assert "@sha256:" in cfg.versions.software.images["miles-deepep-v2"]


@pytest.mark.parametrize("stack", ["p4d", "p4de"])
def test_the_a100_stacks_say_why_they_do_not(stack):
    text = (Path("stacks") / f"Pulumi.{stack}.yaml").read_text()
    assert "DeepEP V2" in text and "SM90" in text

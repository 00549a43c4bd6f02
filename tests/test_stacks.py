"""Every stack file validates and the whole program builds under mocks for every stack."""

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

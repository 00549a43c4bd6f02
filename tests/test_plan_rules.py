"""The plan's rules judge the RECORDED graph: each rule fires on a graph that breaks it, naming
the pool or subnet, and stays silent on the graph the program really registers."""

import copy

import pytest
from conftest import graph_copy, load

from analysis.rules import plan as rules
from catalog import CATALOG
from analysis.recorded import (EGRESS_RULE, LAUNCH_TEMPLATE, PLACEMENT_GROUP, SUBNET, pool_resources,
                                 subnet_budgets)
from analysis.mocks import Registered

STACK = "p5en-prod"


@pytest.fixture
def recorded():
    """A private copy of p5en-prod's recorded graph, free to break."""
    return load(STACK), graph_copy(STACK)


def _pool(cfg, graph, name):
    return next(r for r in pool_resources(cfg, graph) if r.pool.name == name)


def _subnet(cfg, graph, name):
    return graph.named(SUBNET, f"{cfg.cluster_name}-{name}")


def _fired(cfg, graph):
    return [(v.rule, v.subject, v.message) for v in rules.check_recorded_graph(cfg, graph)]


def test_real_graph_passes(recorded):
    assert _fired(*recorded) == []


def test_missing_efa_interface(recorded):
    cfg, graph = recorded
    _pool(cfg, graph, "rollout").launch_template.inputs["networkInterfaces"].pop()
    fired = _fired(cfg, graph)
    assert fired and all(rule == rules.EFA_LAYOUT and "rollout" in subject for rule, subject, _ in fired)
    assert any("15 of 16 EFA devices attached" in m for *_, m in fired)


def test_old_efa_layout_named(recorded):
    """The eksctl/terraform layout (``efa`` as primary) is not the current AWS layout."""
    cfg, graph = recorded
    ifaces = _pool(cfg, graph, "train").launch_template.inputs["networkInterfaces"]
    ifaces[0]["interfaceType"] = "efa"
    fired = _fired(cfg, graph)
    assert any(rule == rules.EFA_LAYOUT and "card 0/device 0: efa (want interface)" in m for rule, _, m in fired)


def test_public_ip_on_efa_interface(recorded):
    cfg, graph = recorded
    _pool(cfg, graph, "train").launch_template.inputs["networkInterfaces"][3]["associatePublicIpAddress"] = "true"
    assert any("interface 3 sets associatePublicIpAddress" in m for *_, m in _fired(cfg, graph))


def test_node_group_outside_the_zone(recorded):
    cfg, graph = recorded
    _subnet(cfg, graph, "nodes").inputs["availabilityZone"] = cfg.secondary_availability_zone
    fired = _fired(cfg, graph)
    assert {(rule, subject) for rule, subject, _ in fired} == {
        (rules.SINGLE_AZ, f"pool {p.name} (node group {cfg.cluster_name}-{p.name})")
        for p in cfg.pools if p.single_az}


def test_efa_pools_in_different_subnets(recorded):
    cfg, graph = recorded
    other = _subnet(cfg, graph, "private-a").outputs["id"]
    _pool(cfg, graph, "rollout").node_group.inputs["subnetIds"] = [other]
    fired = _fired(cfg, graph)
    assert any(rule == rules.SINGLE_AZ and subject == "single-AZ pools" for rule, subject, _ in fired)


def test_placement_group_on_a_reservation(recorded):
    cfg, graph = recorded
    train = _pool(cfg, graph, "train")
    graph.resources.append(Registered(
        type=PLACEMENT_GROUP, name="pg", urn="urn:pg", inputs={"strategy": "cluster"},
        outputs={"name": "pg", "id": "pg-id"}, custom=True, parent="", dependencies=[],
        retain_on_delete=False, protect=False))
    train.launch_template.inputs["placement"] = {"groupName": "pg"}
    fired = _fired(cfg, graph)
    assert [(rule, subject) for rule, subject, _ in fired] == [(rules.PLACEMENT, "pool train")]
    assert "blocks or shrinks launches" in fired[0][2]


def test_placement_group_missing_without_reservation():
    # The p5 stack has an on-demand EFA pool: it needs a cluster placement group.
    cfg, graph = load("p5"), graph_copy("p5")
    rollout = _pool(cfg, graph, "rollout")
    assert rollout.placement_group is not None
    del rollout.launch_template.inputs["placement"]
    assert any(rule == rules.PLACEMENT and "no cluster placement group" in m for rule, _, m in _fired(cfg, graph))


def test_reservation_target_differs(recorded):
    cfg, graph = recorded
    target = _pool(cfg, graph, "rollout").launch_template.inputs["capacityReservationSpecification"]
    target["capacityReservationTarget"]["capacityReservationId"] = "cr-0000000000000000f"
    assert any(rule == rules.PLACEMENT and "cr-0000000000000000f" in m for rule, _, m in _fired(cfg, graph))


def test_efa_group_without_egress_to_itself(recorded):
    cfg, graph = recorded
    graph.resources = [r for r in graph.resources if r.type != EGRESS_RULE]
    fired = _fired(cfg, graph)
    assert {(rule, subject) for rule, subject, _ in fired} == {
        (rules.EFA_PEERS, f"pool {p.name}") for p in cfg.pools if p.efa_enabled}


def test_subnet_too_small_for_its_pools(recorded):
    cfg, graph = recorded
    _subnet(cfg, graph, "nodes").inputs["cidrBlock"] = "10.0.0.0/20"
    fired = _fired(cfg, graph)
    demand = next(b.demand for b in subnet_budgets(cfg, graph) if b.name == "nodes")
    assert [(rule, m) for rule, _, m in fired] == [
        (rules.IP_BUDGET, f"pools train, rollout need {demand:,} node and pod IPs at max size; "
                          f"the subnet holds {4096 - 5:,}")]


def test_subnet_outside_the_vpc(recorded):
    cfg, graph = recorded
    _subnet(cfg, graph, "public-b").inputs["cidrBlock"] = "10.9.0.0/26"
    assert any(rule == rules.IP_BUDGET and "outside the VPC" in m for rule, _, m in _fired(cfg, graph))


def test_interface_rule_on_plain_inputs():
    """The per-resource rule takes the inputs a resource policy receives."""
    p6 = CATALOG["p6-b300.48xlarge"]
    good = {"networkInterfaces": [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface",
                                   "securityGroups": ["sg-a"]}]
            + [{"networkCardIndex": c, "deviceIndex": 0, "interfaceType": "efa-only", "securityGroups": ["sg-a"]}
               for c in range(1, 17)]}
    assert rules.efa_interface_problems(good, p6, ["sg-a"]) == []
    shifted = copy.deepcopy(good)
    shifted["networkInterfaces"].insert(1, {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only",
                                            "securityGroups": ["sg-a"]})
    assert any("17 of 16" in p for p in rules.efa_interface_problems(shifted, p6, ["sg-a"]))
    assert any("lacks security group" in p for p in rules.efa_interface_problems(good, p6, ["sg-b"]))


def test_launch_templates_are_what_the_rules_read(recorded):
    """Guard: the rules look at the registered launch templates, not at the config."""
    cfg, graph = recorded
    assert {r.launch_template.urn for r in pool_resources(cfg, graph)} == {
        lt.urn for lt in graph.of_type(LAUNCH_TEMPLATE)}

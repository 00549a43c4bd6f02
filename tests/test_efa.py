"""EFA on every GPU pool, checked on the launch templates the program actually registered."""

import pytest
from conftest import graph_of, load

from catalog import CATALOG
from stackconfig.stack import Role

# EFA interface counts per family as AWS publishes them (EfaInfo.MaximumEfaInterfaces),
# stated independently of the catalog so a catalog error fails here.
EFA_COUNT = {"p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32, "p5e.48xlarge": 32,
             "p5en.48xlarge": 16, "p6-b200.48xlarge": 8, "p6-b300.48xlarge": 16}
FAMILY_STACK = {"p4d.24xlarge": "p4d", "p4de.24xlarge": "p4de", "p5.48xlarge": "p5",
                "p5e.48xlarge": "p5e", "p5en.48xlarge": "p5en-prod",
                "p6-b200.48xlarge": "p6-b200", "p6-b300.48xlarge": "p6-b300"}


def _efa_pools(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    for pool in cfg.pools:
        if pool.efa_enabled:
            lt = graph.named("aws:ec2/launchTemplate:LaunchTemplate", f"{cfg.cluster_name}-{pool.name}")
            ng = graph.named("aws:eks/nodeGroup:NodeGroup", f"{cfg.cluster_name}-{pool.name}")
            yield cfg, pool, lt, ng


def _efa_sg_id(stack):
    cfg = load(stack)
    return graph_of(stack).named("aws:ec2/securityGroup:SecurityGroup", f"{cfg.cluster_name}-efa").outputs["id"]


@pytest.mark.parametrize("instance_type", sorted(EFA_COUNT))
def test_launch_template_layout(instance_type):
    stack = FAMILY_STACK[instance_type]
    checked = 0
    for cfg, pool, lt, _ in _efa_pools(stack):
        if pool.instance_type != instance_type:
            continue
        ifaces = lt.inputs["networkInterfaces"]
        layout = [(i["networkCardIndex"], i["deviceIndex"], i["interfaceType"]) for i in ifaces]
        assert layout[0] == (0, 0, "interface"), "primary must be ENA at card 0 / device 0"
        efa = layout[1:]
        assert len(efa) == EFA_COUNT[instance_type]
        assert all(kind == "efa-only" for _, _, kind in efa)
        if instance_type == "p6-b300.48xlarge":
            # Card 0 is ENA-only on p6-b300: EFA starts at card 1, up to card 16 of 17.
            assert [(c, d) for c, d, _ in efa] == [(c, 0) for c in range(1, 17)]
        else:
            assert efa[0][:2] == (0, 1)
            assert [(c, d) for c, d, _ in efa[1:]] == [(c, 0) for c in range(1, EFA_COUNT[instance_type])]
        assert len({c for c, _, _ in efa}) == len(efa), "one EFA per network card"
        for iface in ifaces:
            for forbidden in ("subnetId", "associatePublicIpAddress", "ipv4Addresses", "ipv4AddressCount",
                              "ipv4Prefixes", "ipv4PrefixCount", "privateIpAddress"):
                assert forbidden not in iface, (pool.name, forbidden)
            assert iface["securityGroups"] == [f"sg-{cfg.cluster_name}-cluster", _efa_sg_id(stack)]
        for forbidden in ("vpcSecurityGroupIds", "securityGroupNames", "iamInstanceProfile",
                          "hibernationOptions"):
            assert forbidden not in lt.inputs
        # A Spot pool with several types names them on the node group instead (test_run_fixes).
        assert lt.inputs.get("instanceType") == (None if pool.spot_alternatives else instance_type)
        checked += 1
    assert checked >= 2, "train and rollout pools of this family must carry EFA"


def test_catalog_efa_counts_match_aws():
    assert {n: CATALOG[n].efa_max for n in EFA_COUNT} == EFA_COUNT
    assert CATALOG["p6-b300.48xlarge"].network_cards == 17


def test_placement_group_iff_not_reserved(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    groups = {g.name for g in graph.of_type("aws:ec2/placementGroup:PlacementGroup")}
    for c, pool, lt, _ in _efa_pools(stack):
        name = f"{cfg.cluster_name}-{pool.name}"
        if pool.capacity.type in ("CAPACITY_BLOCK", "ODCR"):
            assert name not in groups and "placement" not in lt.inputs
            target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
            assert target["capacityReservationId"] == pool.capacity.reservation_id
        else:
            assert name in groups
            pg = graph.named("aws:ec2/placementGroup:PlacementGroup", name)
            assert pg.inputs["strategy"] == "cluster"
            assert lt.inputs["placement"]["groupName"] == pg.outputs["name"]


def test_capacity_block_template(stack):
    for cfg, pool, lt, ng in _efa_pools(stack):
        if pool.capacity.type == "CAPACITY_BLOCK":
            assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
            assert ng.inputs["capacityType"] == "CAPACITY_BLOCK"
            assert "instanceTypes" not in ng.inputs
        elif pool.capacity.type == "ODCR":
            assert ng.inputs["capacityType"] == "ON_DEMAND"
            assert "instanceMarketOptions" not in lt.inputs


def test_single_zone_for_every_efa_pool(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    node_subnet = graph.named("aws:ec2/subnet:Subnet", f"{cfg.cluster_name}-nodes")
    assert node_subnet.inputs["availabilityZone"] == cfg.availability_zone
    zones = set()
    for _, pool, _, ng in _efa_pools(stack):
        assert ng.inputs["subnetIds"] == [node_subnet.outputs["id"]]
        zones.add(node_subnet.inputs["availabilityZone"])
    assert zones == {cfg.availability_zone}
    gpu_pools = [p for p in cfg.pools if p.role in (Role.TRAIN, Role.ROLLOUT)]
    assert all(p.single_az for p in gpu_pools)


def test_efa_security_group_self_rules(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    sg_id = _efa_sg_id(stack)
    sg = graph.named("aws:ec2/securityGroup:SecurityGroup", f"{cfg.cluster_name}-efa")
    for direction in ("Ingress", "Egress"):
        rules = [r for r in graph.of_type(f"aws:vpc/securityGroup{direction}Rule:SecurityGroup{direction}Rule")
                 if r.inputs["securityGroupId"] == sg_id]
        assert [(r.inputs["ipProtocol"], r.inputs["referencedSecurityGroupId"]) for r in rules] == [("-1", sg_id)]
    assert not any(k.startswith("kubernetes.io/cluster/") for k in sg.inputs.get("tags", {}))


def test_gpu_pools_tainted_and_labelled(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    for pool in cfg.pools:
        ng = graph.named("aws:eks/nodeGroup:NodeGroup", f"{cfg.cluster_name}-{pool.name}")
        assert ng.inputs["labels"]["rl.platform/role"] == pool.role.value
        taints = {(t["key"], t["effect"]) for t in ng.inputs.get("taints", [])}
        assert (("nvidia.com/gpu", "NO_SCHEDULE") in taints) == pool.instance.is_gpu
        assert ng.inputs["amiType"] == ("AL2023_x86_64_NVIDIA" if pool.instance.is_gpu else "AL2023_x86_64_STANDARD")
        lt = graph.named("aws:ec2/launchTemplate:LaunchTemplate", f"{cfg.cluster_name}-{pool.name}")
        assert lt.inputs["metadataOptions"]["httpTokens"] == "required"

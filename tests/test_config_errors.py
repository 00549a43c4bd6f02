"""Bad stack files fail with one clear message naming stack, field and what is allowed,
and register nothing."""

import copy

import pytest
import yaml
from conftest import ROOT

import program
from analysis import mocks
from stackconfig.stack import StackConfigError, load_stack


def _raw():
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.p5en-prod.yaml").read_text())
    return copy.deepcopy(doc["config"]["moe-rl-platform:platform"])


def _pool(raw, name):
    return next(p for p in raw["pools"] if p["name"] == name)


def _unknown_key(raw):
    raw["pools"][1]["efaa"] = True


def _impossible_counts(raw):
    _pool(raw, "cpu")["nodes"] = {"min": 4, "desired": 2, "max": 8}


def _not_in_catalog(raw):
    _pool(raw, "rollout")["instanceType"] = "p5x.48xlarge"


def _efa_without_efa(raw):
    _pool(raw, "cpu")["efa"] = True


def _spot_training(raw):
    _pool(raw, "train")["capacity"] = {"type": "SPOT"}


def _reservation_without_reserved_type(raw):
    _pool(raw, "cpu")["capacity"] = {"type": "ON_DEMAND", "reservationId": "cr-0123456789abcdef0"}


def _reserved_without_id(raw):
    _pool(raw, "train")["capacity"] = {"type": "CAPACITY_BLOCK"}


def _bad_capacity_type(raw):
    _pool(raw, "train")["capacity"] = {"type": "RESERVED"}


def _zone_outside_region(raw):
    raw["availabilityZone"] = "us-west-2a"


def _vpc_too_small(raw):
    raw["network"] = {"vpcCidr": "10.0.0.0/20"}


def _public_service_range(raw):
    raw["network"] = {"serviceIpv4Cidr": "8.8.0.0/16"}


def _service_range_in_the_vpc(raw):
    raw["network"] = {"vpcCidr": "10.0.0.0/16", "serviceIpv4Cidr": "10.0.0.0/12"}


CASES = [
    (_unknown_key, "pools[train].efaa", "unknown key"),
    (_impossible_counts, "pools[cpu].nodes", "min <= desired <= max"),
    (_not_in_catalog, "pools[rollout].instanceType", "did you mean p5.48xlarge"),
    (_efa_without_efa, "pools[cpu].efa", "p5en.48xlarge, p6-b200.48xlarge"),
    (_spot_training, "pools[train].capacity.type", "allowed: ON_DEMAND, CAPACITY_BLOCK, ODCR"),
    (_reservation_without_reserved_type, "pools[cpu].capacity.reservationId",
     "only allowed with type CAPACITY_BLOCK or ODCR"),
    (_reserved_without_id, "pools[train].capacity.reservationId", "required when type is CAPACITY_BLOCK"),
    (_bad_capacity_type, "pools[train].capacity.type", "allowed: 'ON_DEMAND', 'SPOT', 'CAPACITY_BLOCK' or 'ODCR'"),
    (_zone_outside_region, "availabilityZone", "is not a zone of us-east-1"),
    (_vpc_too_small, "network.vpcCidr", "allowed: a larger CIDR"),
    (_public_service_range, "network.serviceIpv4Cidr: 8.8.0.0/16",
     "allowed: /12 to /24 within 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16"),
    (_service_range_in_the_vpc, "network.serviceIpv4Cidr: 10.0.0.0/12 overlaps vpcCidr 10.0.0.0/16",
     "allowed: a private /12 to /24 apart from the VPC's blocks, e.g. 172.20.0.0/16"),
]


@pytest.mark.parametrize("mutate, field, allowed", CASES, ids=[c[0].__name__ for c in CASES])
def test_bad_stack_fails_clearly_and_registers_nothing(mutate, field, allowed):
    raw = _raw()
    mutate(raw)
    model = getattr(program, "ProgramConfig", None)
    graph = mocks.Graph()

    def build():
        cfg = load_stack("p5en-prod", raw, model) if model else load_stack("p5en-prod", raw)
        program.build(cfg)

    with pytest.raises(StackConfigError) as err:
        mocks.run(build, region="us-east-1", stack="p5en-prod", graph=graph)
    message = str(err.value)
    assert message.startswith("stack 'p5en-prod': ")
    assert field in message and allowed in message, message
    assert graph.resources == []


def test_valid_reference_stack_registers_resources():
    graph = mocks.Graph()
    model = getattr(program, "ProgramConfig", None)
    raw = _raw()
    cfg = load_stack("p5en-prod", raw, model) if model else load_stack("p5en-prod", raw)
    mocks.run(lambda: program.build(cfg), region="us-east-1", stack="p5en-prod", graph=graph)
    assert len(graph.resources) > 50


def test_missing_config_key():
    with pytest.raises(StackConfigError, match="config.moe-rl-platform:platform: missing; allowed: a mapping"):
        load_stack("empty", None)

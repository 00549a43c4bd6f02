"""Hostile and broken stack configs: thousands of random, adversarial and valid-looking but
inconsistent documents thrown at ``load_stack`` and, when they validate, at the program under
mocks. Each must either build a valid graph or raise ``StackConfigError`` whose message starts
with ``stack '<name>': `` and leave nothing registered; never another exception.

A built graph is valid when every pool has its node group and launch template labelled with its
role and name, the subnets are disjoint and inside the VPC's blocks, and the plan's graph rules
and every guardrail policy pass.
"""

from __future__ import annotations

import copy
import ipaddress
import math
import os
from collections import Counter
from typing import Any

import pytest
from conftest import STACKS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import program
from analysis import mocks
from catalog import CATALOG
from stackconfig.stack import POOL_LABEL, ROLE_LABEL, StackConfigError
from analysis.rules.plan import check_recorded_graph
from stackconfig.files import raw_stack
from policy.adapter import evaluate
from analysis.rules.view import LAUNCH_TEMPLATE, NODE_GROUP, SUBNET
from policy.rules import MANDATORY

SCALE = float(os.environ.get("HOSTILE_SCALE", "1"))
"""Multiplies every example count; CI runs 1, a deeper local run e.g. HOSTILE_SCALE=8."""
HOSTILE = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                   suppress_health_check=list(HealthCheck))
COUNTS: Counter = Counter()
"""The cases of the property running now (``counted``)."""
BASES = {s: raw_stack(s) for s in STACKS}


# --- what every case must satisfy --------------------------------------------------------------

def _load(stack: str, raw: Any):
    from workloads.checks import gate
    return gate.load(stack, raw)


def _assert_clean_error(stack: str, err: BaseException) -> None:
    assert type(err) is StackConfigError, f"{type(err).__name__}: {err}"
    message = str(err)
    assert message.startswith(f"stack '{stack}': "), message
    assert "Traceback" not in message and len(message.splitlines()[0]) > len(f"stack '{stack}': ")


def validate_or_fail(stack: str, raw: Any):
    """The config, or None after checking the error is a clean StackConfigError."""
    COUNTS["load_stack"] += 1
    try:
        cfg = _load(stack, raw)
    except Exception as err:  # noqa: BLE001 - the type is the assertion
        _assert_clean_error(stack, err)
        COUNTS["rejected"] += 1
        return None
    COUNTS["validated"] += 1
    return cfg


def _subnets_sound(graph: mocks.Graph) -> None:
    blocks = [ipaddress.ip_network(r.inputs["cidrBlock"]) for r in graph.resources
              if r.type in ("aws:ec2/vpc:Vpc", "aws:ec2/vpcIpv4CidrBlockAssociation:VpcIpv4CidrBlockAssociation")]
    for i, a in enumerate(blocks):
        assert not any(a.overlaps(b) for b in blocks[i + 1:]), f"VPC blocks overlap: {blocks}"
    subnets = [(s.name, ipaddress.ip_network(s.inputs["cidrBlock"])) for s in graph.of_type(SUBNET)]
    for i, (name, net) in enumerate(subnets):
        assert any(net.subnet_of(b) for b in blocks), f"subnet {name} {net} outside the VPC blocks {blocks}"
        clash = [n for n, other in subnets[i + 1:] if net.overlaps(other)]
        assert not clash, f"subnet {name} {net} overlaps {clash}"


def build_or_fail(stack: str, raw: Any, cfg) -> None:
    """Run the program; a valid graph or a clean error with nothing registered."""
    graph = mocks.Graph()
    COUNTS["program"] += 1
    try:
        mocks.run(lambda: program.build(cfg), region=cfg.region, stack=stack, graph=graph)
    except Exception as err:  # noqa: BLE001
        _assert_clean_error(stack, err)
        assert graph.resources == [], f"{len(graph.resources)} resources registered before: {err}"
        COUNTS["program_rejected"] += 1
        return
    COUNTS["built"] += 1
    for pool in cfg.pools:
        name = f"{cfg.cluster_name}-{pool.name}"
        ng = graph.named(NODE_GROUP, name)
        graph.named(LAUNCH_TEMPLATE, name)
        assert ng.inputs["labels"][ROLE_LABEL] == pool.role.value, ng.inputs["labels"]
        assert ng.inputs["labels"][POOL_LABEL] == pool.name, ng.inputs["labels"]
    _subnets_sound(graph)
    assert [str(v) for v in check_recorded_graph(cfg, graph)] == []
    assert evaluate(graph, MANDATORY, platform_config=raw, region=cfg.region) == []


# --- strategies ----------------------------------------------------------------------------------

STACK_NAMES = st.one_of(st.sampled_from(STACKS), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", fullmatch=True))

ADVERSARIAL = st.sampled_from([
    None, True, False, 0, -1, 1, 7, 8, 16, 23, 24, 25, 250, 251, 999, 1000, 1001, 2**31, 2**63, 10**30, -10**30,
    0.5, 16.0, -0.0, 1e308, math.inf, -math.inf, math.nan, "", " ", "0", "16", "１６", "٣", "\x00", "\u202e",
    "🙂" * 3, "a" * 5000, "9" * 5000, "null", "true", "None", "{}", "[]",
    "10.0.0.0/16", "10.0.0.0/15", "10.0.0.0/24", "10.0.0.0/25", "10.0.0.1/16", "0.0.0.0/0", "::/0", "fd00::/8",
    "256.0.0.0/16", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0", "us-east-1", "us-east-1a", "us-west-2b",
    "p5en.48xlarge", "P5EN.48XLARGE", "p5x.48xlarge", "m7i.xlarge", "SPOT", "spot", "CAPACITY_BLOCK", "ODCR",
    "ON_DEMAND", "cr-0123456789abcdef0", "cr-XYZ", "arn:aws:resource-groups:us-east-1:123456789012:group/g",
    "train", "rollout", "system", "TRAIN", {}, [], [[]], [{}], {"min": 0}, {"min": 1, "desired": 0, "max": 2},
    {"type": "SPOT"}, {"": None}, {"0": 0}, {1: 1},
])

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=30), ADVERSARIAL)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=12), st.integers(), st.sampled_from(
        ["region", "pools", "nodes", "capacity", "network", "cluster", "name", "role", "instanceType"])),
        inner, max_size=5)), max_leaves=15)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


def _set(doc: dict, path: tuple, value: Any) -> None:
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _delete(doc: dict, path: tuple) -> None:
    node = doc
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]


def _mutate_anywhere(data, doc: dict) -> None:
    """Replace, delete or add at a random place of the document, with random or adversarial values."""
    paths = [p for p in _paths(doc) if p]
    op = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if op == "replace":
        _set(doc, data.draw(st.sampled_from(paths)), data.draw(JSON))
    elif op == "delete":
        _delete(doc, data.draw(st.sampled_from(paths)))
    else:
        holders = [p for p in [()] + paths if isinstance(_get(doc, p), dict)]
        _set(doc, data.draw(st.sampled_from(holders)) + (data.draw(st.text(min_size=1, max_size=12)),),
             data.draw(JSON))


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


REGIONS = ["us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-southeast-2", "us-gov-west-1"]
BOUNDARY_NODES = [0, 1, 2, 3, 8, 16, 32, 64, 128, 500, 999, 1000, 1001]
CIDRS = ["10.0.0.0/16", "10.0.0.0/17", "10.0.0.0/18", "10.0.0.0/20", "10.0.0.0/22", "10.0.0.0/23",
         "10.0.0.0/24", "10.0.0.0/15", "10.0.0.0/25", "172.16.0.0/16", "192.168.0.0/24", "100.64.0.0/16",
         "10.1.0.0/16", "10.0.128.0/17", "10.0.0.0/8"]
NAMES = st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,23}", fullmatch=True), st.text(max_size=30), ADVERSARIAL)


def _pool(data, doc: dict) -> dict | None:
    pools = doc.get("pools")
    if isinstance(pools, list) and pools and all(isinstance(p, dict) for p in pools):
        return data.draw(st.sampled_from(pools))
    return None


def _nodes(data, doc):
    if (p := _pool(data, doc)) is not None:
        if data.draw(st.booleans()):
            p["nodes"] = data.draw(st.sampled_from(BOUNDARY_NODES))
        else:
            lo, mid, hi = sorted(data.draw(st.lists(st.sampled_from(BOUNDARY_NODES), min_size=3, max_size=3)))
            p["nodes"] = {"min": lo, "desired": mid, "max": hi} if data.draw(st.booleans()) else {
                "min": hi, "desired": mid, "max": lo}


def _network(data, doc):
    net = doc.setdefault("network", {})
    if isinstance(net, dict):
        net["vpcCidr"] = data.draw(st.sampled_from(CIDRS))
        if data.draw(st.booleans()):
            net["efaCidr"] = data.draw(st.sampled_from(CIDRS + [None]))


def _capacity(data, doc):
    if (p := _pool(data, doc)) is not None:
        cap = {"type": data.draw(st.sampled_from(["ON_DEMAND", "SPOT", "CAPACITY_BLOCK", "ODCR", "RESERVED"]))}
        rid = data.draw(st.sampled_from([None, "cr-0123456789abcdef0", "cr-0a1b2c3d",
                                         "arn:aws:resource-groups:us-east-1:123456789012:group/odcr", "cr-"]))
        if rid is not None:
            cap["reservationId"] = rid
        price = data.draw(st.sampled_from([None, 0, 0.01, 55.04, 1e9, -1]))
        if price is not None:
            cap["hourlyPrice"] = price
        p["capacity"] = cap


def _pool_shape(data, doc):
    if (p := _pool(data, doc)) is not None:
        field = data.draw(st.sampled_from(["instanceType", "role", "efa", "maxPods", "rootVolumeGib", "labels", "name"]))
        p[field] = data.draw({
            "instanceType": st.sampled_from(list(CATALOG) + ["p5x.48xlarge"]),
            "role": st.sampled_from(["train", "rollout", "reward", "cpu", "memory", "system", "critic"]),
            "efa": st.sampled_from([None, True, False, "yes"]),
            "maxPods": st.sampled_from([None, 7, 8, 110, 198, 250, 251, 737]),
            "rootVolumeGib": st.sampled_from([19, 20, 200, 16384, 16385]),
            "labels": st.dictionaries(st.sampled_from([ROLE_LABEL, POOL_LABEL, "team", "nvidia.com/gpu.present", "a b"]),
                                      st.sampled_from(["train", "x", "", "true"]), max_size=2),
            "name": NAMES,
        }[field])


def _pools_list(data, doc):
    pools = doc.get("pools")
    if isinstance(pools, list) and pools:
        op = data.draw(st.sampled_from(["drop", "duplicate", "rename-dup", "shuffle"]))
        i = data.draw(st.integers(0, len(pools) - 1))
        if op == "drop":
            pools.pop(i)
        elif op == "duplicate":
            pools.append(copy.deepcopy(pools[i]))
        elif op == "rename-dup" and isinstance(pools[i], dict):
            extra = copy.deepcopy(pools[i])
            extra["name"] = f"extra{i}"
            pools.append(extra)
        else:
            pools.reverse()


def _zones(data, doc):
    region = data.draw(st.sampled_from(REGIONS + [doc.get("region")]))
    doc["region"] = region
    zone = st.sampled_from([f"{region}a", f"{region}b", f"{region}c", "us-west-2a", f"{region}", f"{region}aa"])
    doc["availabilityZone"] = data.draw(zone)
    doc["secondaryAvailabilityZone"] = data.draw(zone)


def _cluster(data, doc):
    doc["cluster"] = {
        "endpointPublicAccess": data.draw(st.sampled_from([True, False, "false"])),
        "publicAccessCidrs": data.draw(st.lists(st.sampled_from(
            ["0.0.0.0/0", "203.0.113.0/24", "10.0.0.1/32", "::/0", "300.0.0.0/8", ""]), max_size=3)),
        "adminRoleArns": data.draw(st.lists(st.sampled_from(
            ["arn:aws:iam::123456789012:role/admin", "", "not-an-arn"]), max_size=2)),
    }


def _checkpoints(data, doc):
    doc["checkpoints"] = {
        "retainOnDestroy": data.draw(st.sampled_from([True, False, "no", None])),
        "noncurrentVersionDays": data.draw(st.sampled_from([0, 1, 30, 3650, 3651])),
        "namespace": data.draw(NAMES),
        "serviceAccount": data.draw(NAMES),
    }


WORKLOAD_FIELDS = {
    ("run", "parallel", "tensor"): [1, 2, 4, 8, 16, 0],
    ("run", "parallel", "expert"): [1, 8, 16, 64, 128, 7],
    ("run", "parallel", "pipeline"): [1, 2, 4, 3],
    ("run", "rollout", "nodesPerEngine"): [1, 2, 4, 32, 33],
    ("run", "grpo", "rolloutBatchSize"): [1, 32, 1000, 0],
    ("run", "grpo", "globalBatchSize"): [1, 7, 256, 4096],
    ("run", "deepep", "version"): [None, "v1", "v2", "v3"],
    ("run", "name"): ["grpo", "GRPO", "a" * 64, ""],
    ("run", "model"): ["Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3", "no-slash", "a/b/c"],
    ("run", "rayJob"): [True, False],
    ("run", "extraArgs"): [[], ["--foo"], ["--foo", "x" * 300]],
    ("ray", "headPool"): [None, "cpu", "system", "train", "nope"],
    ("ray", "gpuShmGib"): [1, 256, 4096],
    ("reward", "enabled"): [None, True, False],
    ("reward", "pool"): [None, "reward", "cpu", "train", "nope"],
    ("reward", "gpus"): [0, 1, 4, 8],
    ("reward", "replicas"): [1, 2, 1000],
    ("reward", "port"): [1023, 1024, 8000, 65535, 65536],
    ("storage", "capacityGib"): [1199, 1200, 2400, 3600, 4800, 10**9],
    ("storage", "throughputPerTib"): [125, 250, 300, 1000],
    ("efaDevices",): [{}, {"train": 15}, {"rollout": 0}, {"cpu": 1}, {"train": 99}],
}


def _workloads(data, doc):
    """Valid-looking values for the program's ``workloads:`` section (ProgramConfig)."""
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(sorted(WORKLOAD_FIELDS)))
        node = doc.setdefault("workloads", {})
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[path[-1]] = data.draw(st.one_of(st.sampled_from(WORKLOAD_FIELDS[path]), ADVERSARIAL))


VALID_LOOKING = [_nodes, _network, _capacity, _pool_shape, _pools_list, _zones, _cluster, _checkpoints, _workloads]


def _document(data, *, hostile: bool) -> tuple[str, Any]:
    stack = data.draw(STACK_NAMES)
    doc = copy.deepcopy(BASES[data.draw(st.sampled_from(STACKS))])
    for _ in range(data.draw(st.integers(1, 3))):
        mutations = VALID_LOOKING + ([_mutate_anywhere] * 3 if hostile else [])
        data.draw(st.sampled_from(mutations))(data, doc)
    return stack, doc


# --- the properties --------------------------------------------------------------------------

@settings(HOSTILE, max_examples=int(400 * SCALE))
@given(stack=STACK_NAMES, raw=st.one_of(JSON, st.dictionaries(st.text(max_size=20), JSON, max_size=8)))
def _random_documents(stack, raw):
    validate_or_fail(stack, raw)


@settings(HOSTILE, max_examples=int(400 * SCALE))
@given(data=st.data())
def _mutated_stack_files(data):
    validate_or_fail(*_document(data, hostile=True))


@settings(HOSTILE, max_examples=int(80 * SCALE))
@given(data=st.data())
def _valid_looking_configs(data):
    stack, raw = _document(data, hostile=False)
    cfg = validate_or_fail(stack, raw)
    if cfg is not None and COUNTS["program"] < PROGRAM_RUNS:
        build_or_fail(stack, raw, cfg)


PROGRAM_RUNS = int(24 * SCALE)
"""A mocked program run costs about 0.5 s (about 180 resources): the first this many validated
configs are built, the rest are only validated."""


def counted(prop) -> Counter:
    """Run a property's examples; the cases it counted (printed, shown with ``-s`` or on failure)."""
    COUNTS.clear()
    prop()
    print(f"{prop.__name__}: {COUNTS['load_stack']} load_stack cases ({COUNTS['validated']} validated, "
          f"{COUNTS['rejected']} rejected cleanly); {COUNTS['program']} program runs ({COUNTS['built']} valid "
          f"graphs, {COUNTS['program_rejected']} rejected before registering)")
    return Counter(COUNTS)


def test_random_documents_validate_or_fail_cleanly():
    found = counted(_random_documents)
    assert found["rejected"]  # random documents are (nearly) never stacks: refused, each cleanly


def test_mutated_stack_files_validate_or_fail_cleanly():
    found = counted(_mutated_stack_files)
    assert found["rejected"] and found["validated"]


def test_valid_looking_configs_build_a_valid_graph_or_fail_before_registering():
    found = counted(_valid_looking_configs)
    assert found["rejected"] and found["built"]


# --- failures the properties found, kept as explicit regressions ------------------------------------

def _p5en() -> dict:
    return copy.deepcopy(BASES["p5en-prod"])


def _with(path: tuple, value: Any) -> dict:
    doc = _p5en()
    _set(doc, path, value)
    return doc


REGRESSIONS = [
    # _where() took an integer mapping key for a list index: IndexError instead of a message.
    ("int-key-at-root", {0: None}, "0: Keys should be strings"),
    ("int-key-in-pool", _with(("pools", 1, 7), "x"), "pools[train].7: Keys should be strings"),
    # Pool labels overrode the role/pool labels the platform sets, or were not Kubernetes labels.
    ("label-overrides-pool", _with(("pools", 1, "labels"), {"rl.platform/pool": "x"}),
     "pools[train].labels: 'rl.platform/pool': rl.platform/ labels are set from the pool's role and name"),
    ("label-not-kubernetes", _with(("pools", 0, "labels"), {"a b": ""}), "pools[system].labels: 'a b': '' is not a valid"),
    ("label-value-newline", _with(("pools", 0, "labels"), {"team": "ml\n"}), "is not a valid Kubernetes label"),
    # Any string was accepted as the writer's namespace/service account (an association EKS refuses).
    ("empty-namespace", _with(("checkpoints",), {"namespace": ""}),
     "checkpoints.namespace: '' is not allowed; allowed: a string matching"),
    ("wildcard-service-account", _with(("checkpoints",), {"serviceAccount": "*"}),
     "checkpoints.serviceAccount: '*' is not allowed; allowed: a string matching"),
    # A secondary EFA block equal to (or inside) the VPC block: overlapping subnets AWS refuses.
    ("efa-cidr-overlaps-vpc", _with(("network",), {"vpcCidr": "10.0.0.0/16", "efaCidr": "10.0.0.0/16"}),
     "network.efaCidr: 10.0.0.0/16 overlaps vpcCidr 10.0.0.0/16"),
]


@pytest.mark.parametrize("name, raw, message", REGRESSIONS, ids=[r[0] for r in REGRESSIONS])
def test_regression_fails_cleanly_before_registering(name, raw, message):
    graph = mocks.Graph()

    def build():
        program.build(_load("p5en-prod", raw))

    with pytest.raises(StackConfigError) as err:
        mocks.run(build, region="us-east-1", stack="p5en-prod", graph=graph)
    _assert_clean_error("p5en-prod", err.value)
    assert message in str(err.value)
    assert graph.resources == []


def test_regression_dev_style_opt_out_spelled_as_yaml_no():
    """``retainOnDestroy: no`` is false to the schema, so the bucket policy must read it the same way."""
    raw = _with(("checkpoints",), {"retainOnDestroy": "no"})
    cfg = validate_or_fail("p5en-prod", raw)
    assert cfg is not None and cfg.checkpoints.retain_on_destroy is False
    build_or_fail("p5en-prod", raw, cfg)

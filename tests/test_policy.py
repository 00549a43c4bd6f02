"""The policy pack on every stack's recorded graph (all pass) and on deliberately broken copies
(each policy names the resource it catches), with values known (`pulumi up`) and unknown
(first `pulumi preview`), through the policies directly and (marked ``contract``: upstream's code,
about 1 s a graph, run by the contract stage) through pulumi_policy's own analyzer servicer."""

from __future__ import annotations

import ast
import copy
import datetime
import json
import re
import runpy
from dataclasses import dataclass
from typing import Callable

import pulumi_policy
import pytest
import yaml
from pulumi_policy.proxy import UnknownValueError
from conftest import ROOT, graph_copy, graph_of, load, raw_config
from test_tenancy import BROKEN as TEAM_BREAKS

from analysis import mocks
from components.efa import efa_layout
from catalog import CATALOG
from analysis.rules import fabric, view
from policy import rules as pack
from policy.adapter import Wire, analyze, evaluate, resource_args, stack_args
from policy.rules import ALL, MANDATORY, POLICIES

LT = view.LAUNCH_TEMPLATE
NG = view.NODE_GROUP


def _run(stack: str, graph: mocks.Graph | None = None, *, policies=MANDATORY, preview=False, raw=None,
         servicer=False):
    cfg = load(stack)
    platform = raw_config(stack) if raw is None else raw
    run = analyze if servicer else evaluate
    return run(graph or graph_of(stack), policies, preview=preview, platform_config=platform, region=cfg.region)


# --- the real stacks pass ----------------------------------------------------------------------

@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
def test_every_stack_passes_every_policy(stack, preview):
    assert _run(stack, preview=preview) == []


@pytest.mark.contract
def test_every_stack_passes_through_the_servicer(stack):
    assert _run(stack, servicer=True) == []


@pytest.mark.contract
def test_reference_stack_passes_a_first_preview_through_the_servicer():
    """No policy is skipped as "can't run during preview" on a stack that does not exist yet."""
    assert _run("p5en-prod", servicer=True, preview=True) == []


# --- the pack itself ---------------------------------------------------------------------------

def test_pack_entry_point_builds_the_pack_from_all_policies(monkeypatch):
    built = []
    monkeypatch.setattr(pulumi_policy, "PolicyPack", lambda **kw: built.append(kw))
    runpy.run_path(str(ROOT / "policy" / "__main__.py"), run_name="__main__")
    assert len(built) == 1
    assert built[0]["policies"] is ALL and built[0]["name"] == pack.PACK_NAME
    assert built[0]["enforcement_level"] is pulumi_policy.EnforcementLevel.MANDATORY


def test_entry_point_does_nothing_but_build_the_pack():
    tree = ast.parse((ROOT / "policy" / "__main__.py").read_text())
    calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    assert [c.value.func.id for c in calls if isinstance(c.value.func, ast.Name)] == ["PolicyPack"]


def test_policies_are_unique_mandatory_and_described():
    assert len(POLICIES) == len(ALL)
    assert MANDATORY == ALL
    for policy in ALL:
        assert policy.description.endswith(".")


def test_pack_metadata():
    text = (ROOT / "policy" / "PulumiPolicy.yaml").read_text()
    assert "name: python" in text and "version:" in text
    assert "pulumi-policy==1.21.0" in (ROOT / "policy" / "requirements.txt").read_text()


def test_adapter_builds_what_the_servicer_builds():
    """Resource args carry inputs behind pulumi_policy's unknown-checking proxy, numbers as the
    protocol sends them (floats), options with protect and parent; stack args link parents,
    dependencies and property dependencies to resource objects."""
    graph = graph_of("p5en-prod")
    wire = Wire(graph, preview=True)
    lt = graph.named(LT, "rl-p5en-prod-train")
    args = resource_args(wire, lt)
    assert isinstance(args, pulumi_policy.ResourceValidationArgs)
    assert args.props["networkInterfaces"][1]["deviceIndex"] == 1.0
    with pytest.raises(UnknownValueError):
        args.props["networkInterfaces"][0]["securityGroups"][1]
    assert args.opts.parent == lt.parent and args.opts.protect is False
    stack = stack_args(wire)
    by_name = {(r.resource_type, r.name): r for r in stack.resources}
    ng = by_name[(NG, "rl-p5en-prod-train")]
    assert {d.name for d in ng.property_dependencies["subnetIds"]} == {"rl-p5en-prod-nodes"}
    assert by_name[(LT, "rl-p5en-prod-train")] in ng.property_dependencies["launchTemplate"]
    assert ng.parent is by_name[("rlplatform:nodes:NodePool", "rl-p5en-prod-train")]


def test_retain_on_delete_is_not_visible_to_policies():
    """The analyzer protocol carries protect but no retainOnDelete: the bucket rule judges
    forceDestroy instead."""
    from pulumi.runtime.proto import analyzer_pb2
    fields = {f.name for f in analyzer_pb2.AnalyzerResourceOptions.DESCRIPTOR.fields}
    assert "protect" in fields and not any("retain" in f.lower() for f in fields)
    assert graph_of("p5en-prod").named(view.BUCKET, "rl-p5en-prod-checkpoints").retain_on_delete


# --- broken graphs -------------------------------------------------------------------------------

def _copy(stack: str) -> mocks.Graph:
    return graph_copy(stack)


def _set(r: mocks.Registered, key: str, value, *targets: mocks.Registered) -> None:
    """Set an input (and the output that mirrors it); new references become dependencies."""
    r.inputs[key] = value
    r.outputs[key] = copy.deepcopy(value)
    r.dependencies += [t.urn for t in targets if t.urn not in r.dependencies]


def _add(graph: mocks.Graph, type_: str, name: str, inputs: dict, *deps: mocks.Registered,
         parent: str = "") -> mocks.Registered:
    stack = graph.resources[0].urn.split("::")[0].removeprefix("urn:pulumi:")
    urn = f"urn:pulumi:{stack}::moe-rl-platform::{type_}::{name}"
    outputs = {**inputs, **mocks.computed_outputs(type_, name, inputs, "us-east-1")}
    r = mocks.Registered(type=type_, name=name, urn=urn, inputs=inputs, outputs=outputs, custom=True,
                         parent=parent, dependencies=[d.urn for d in deps], retain_on_delete=False, protect=False)
    graph.resources.append(r)
    return r


def _drop(graph: mocks.Graph, type_: str, name: str) -> None:
    graph.resources.remove(graph.named(type_, name))


def _id(r: mocks.Registered) -> str:
    return r.outputs["id"]


@dataclass(frozen=True)
class Break:
    id: str
    stack: str
    policy: str
    mutate: Callable[[mocks.Graph], tuple[str, str]]
    """Breaks the graph; returns (type, name) of the resource the policy must name."""
    expect: str
    raw: dict | None = None
    known_only: bool = False
    """The broken value is computed from another resource's id/ARN: unknown in a first preview, so
    the check runs when `pulumi up` registers the resource with known inputs, before creating it."""


def _drop_last_efa(g):
    lt = g.named(LT, "rl-p5en-prod-train")
    _set(lt, "networkInterfaces", lt.inputs["networkInterfaces"][:-1])
    return LT, lt.name


def _legacy_layout(g):
    """The layout eksctl/Karpenter emit (EFA at 0/0, device 1 elsewhere) on p6-b300."""
    lt = g.named(LT, "rl-p6-b300-train")
    ifaces = copy.deepcopy(lt.inputs["networkInterfaces"])
    ifaces[0]["interfaceType"] = "efa"
    _set(lt, "networkInterfaces", ifaces)
    return LT, lt.name


def _card_zero_efa_on_b300(g):
    lt = g.named(LT, "rl-p6-b300-rollout")
    ifaces = copy.deepcopy(lt.inputs["networkInterfaces"])
    ifaces.insert(1, {**ifaces[1], "networkCardIndex": 0.0, "deviceIndex": 1.0})
    _set(lt, "networkInterfaces", ifaces[:-1])
    return LT, lt.name


def _efa_on_wrong_type(g):
    lt = g.named(LT, "rl-p5-rollout")
    _set(lt, "instanceType", "p5en.48xlarge")
    return LT, lt.name


def _subnet_on_efa_interface(g):
    lt = g.named(LT, "rl-p4d-train")
    ifaces = copy.deepcopy(lt.inputs["networkInterfaces"])
    node_subnet = g.named(view.SUBNET, "rl-p4d-nodes")
    ifaces[2]["subnetId"] = _id(node_subnet)
    _set(lt, "networkInterfaces", ifaces, node_subnet)
    return LT, lt.name


def _rollout_in_second_zone(g):
    ng = g.named(NG, "rl-p5en-prod-rollout")
    other = g.named(view.SUBNET, "rl-p5en-prod-private-b")
    ng.dependencies.remove(g.named(view.SUBNET, "rl-p5en-prod-nodes").urn)
    _set(ng, "subnetIds", [_id(other)], other)
    return NG, ng.name


def _train_spans_zones(g):
    ng = g.named(NG, "rl-p5-train")
    other = g.named(view.SUBNET, "rl-p5-private-b")
    _set(ng, "subnetIds", ng.inputs["subnetIds"] + [_id(other)], other)
    return NG, ng.name


def _efa_pool_on_foreign_subnet(g):
    ng = g.named(NG, "rl-dev-train")
    _set(ng, "subnetIds", ["subnet-0123456789abcdef0"])
    return NG, ng.name


def _drop_efa_egress(g):
    _drop(g, view.EGRESS_RULE, "rl-p5en-prod-efa-self-out")
    return LT, "rl-p5en-prod-train"


def _drop_efa_ingress(g):
    _drop(g, view.INGRESS_RULE, "rl-p6-b200-efa-self-in")
    return LT, "rl-p6-b200-rollout"


def _egress_to_world_not_self(g):
    rule = g.named(view.EGRESS_RULE, "rl-p4de-efa-self-out")
    del rule.inputs["referencedSecurityGroupId"], rule.outputs["referencedSecurityGroupId"]
    _set(rule, "cidrIpv4", "0.0.0.0/0")
    return LT, "rl-p4de-train"


def _efa_group_off_interfaces(g):
    lt = g.named(LT, "rl-p5e-train")
    ifaces = copy.deepcopy(lt.inputs["networkInterfaces"])
    for i in ifaces:
        i["securityGroups"] = i["securityGroups"][:1]
    _set(lt, "networkInterfaces", ifaces)
    lt.dependencies.remove(g.named(view.SECURITY_GROUP, "rl-p5e-efa").urn)
    return LT, lt.name


def _placement_on_capacity_block(g):
    lt = g.named(LT, "rl-p5en-prod-train")
    pg = _add(g, "aws:ec2/placementGroup:PlacementGroup", "rl-p5en-prod-train-pg", {"strategy": "cluster"})
    _set(lt, "placement", {"groupName": pg.outputs["name"]}, pg)
    return LT, lt.name


def _placement_on_odcr(g):
    lt = g.named(LT, "rl-p6-b200-rollout")
    _set(lt, "placement", {"groupName": "rollout-cluster"})
    return LT, lt.name


def _spot_training(g):
    ng = g.named(NG, "rl-p5en-prod-train")
    _set(ng, "capacityType", "SPOT")
    return NG, ng.name


def _spot_market_training(g):
    lt = g.named(LT, "rl-dev-train")
    _set(lt, "instanceMarketOptions", {"marketType": "spot"})
    return NG, "rl-dev-train"


def _imdsv1(g):
    lt = g.named(LT, "rl-p5en-prod-system")
    _set(lt, "metadataOptions", {**lt.inputs["metadataOptions"], "httpTokens": "optional"})
    return LT, lt.name


def _no_metadata_options(g):
    lt = g.named(LT, "rl-p4d-cpu")
    del lt.inputs["metadataOptions"], lt.outputs["metadataOptions"]
    return LT, lt.name


def _world_ingress_rule(g):
    sg = g.named(view.SECURITY_GROUP, "rl-p5en-prod-efa")
    _add(g, view.INGRESS_RULE, "ssh-from-anywhere", {"securityGroupId": _id(sg), "ipProtocol": "tcp",
                                                      "fromPort": 22, "toPort": 22, "cidrIpv4": "0.0.0.0/0"}, sg)
    return view.INGRESS_RULE, "ssh-from-anywhere"


def _world_inline_ipv6(g):
    sg = g.named(view.SECURITY_GROUP, "rl-p5-efa")
    _set(sg, "ingress", [{"protocol": "tcp", "fromPort": 443, "toPort": 443, "ipv6CidrBlocks": ["::/0"]}])
    return view.SECURITY_GROUP, sg.name


def _world_legacy_rule(g):
    sg = g.named(view.SECURITY_GROUP, "rl-dev-efa")
    _add(g, view.LEGACY_RULE, "legacy-open", {"type": "ingress", "securityGroupId": _id(sg), "protocol": "-1",
                                               "fromPort": 0, "toPort": 0, "cidrBlocks": ["10.0.0.0/8", "0.0.0.0/0"]}, sg)
    return view.LEGACY_RULE, "legacy-open"


def _drop_versioning(g):
    _drop(g, view.BUCKET_VERSIONING, "rl-p5en-prod-checkpoints")
    return view.BUCKET, "rl-p5en-prod-checkpoints"


def _suspend_versioning(g):
    v = g.named(view.BUCKET_VERSIONING, "rl-p4d-checkpoints")
    _set(v, "versioningConfiguration", {"status": "Suspended"})
    return view.BUCKET, "rl-p4d-checkpoints"


def _sse_s3_only(g):
    enc = g.named(view.BUCKET_ENCRYPTION, "rl-p5-checkpoints")
    _set(enc, "rules", [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}])
    return view.BUCKET, "rl-p5-checkpoints"


def _public_policy_allowed(g):
    pab = g.named(view.BUCKET_PUBLIC_ACCESS, "rl-p6-b300-checkpoints")
    _set(pab, "blockPublicPolicy", False)
    return view.BUCKET, "rl-p6-b300-checkpoints"


def _drop_tls_policy(g):
    _drop(g, view.BUCKET_POLICY, "rl-p5e-checkpoints")
    return view.BUCKET, "rl-p5e-checkpoints"


def _tls_policy_on_objects_only(g):
    pol = g.named(view.BUCKET_POLICY, "rl-p4de-checkpoints")
    _set(pol, "policy", pol.inputs["policy"].replace('"arn:aws:s3:::rl-p4de-checkpoints", ', ""))
    return view.BUCKET, "rl-p4de-checkpoints"


def _acls_enabled(g):
    own = g.named(view.BUCKET_OWNERSHIP, "rl-dev-checkpoints")
    _set(own, "rule", {"objectOwnership": "ObjectWriter"})
    return view.BUCKET, "rl-dev-checkpoints"


def _force_destroy(g):
    b = g.named(view.BUCKET, "rl-p5en-prod-checkpoints")
    _set(b, "forceDestroy", True)
    return view.BUCKET, b.name


def _dev_without_opt_out(g):
    return view.BUCKET, "rl-dev-checkpoints"


def _drop_writer_association(g):
    _drop(g, view.POD_IDENTITY, "rl-p5en-prod-checkpoints-writer")
    return view.ROLE, "rl-p5en-prod-checkpoints-writer"


def _wildcard_service_account(g):
    a = g.named(view.POD_IDENTITY, "rl-p5-checkpoints-writer")
    _set(a, "serviceAccount", "*")
    return view.POD_IDENTITY, a.name


def _irsa_without_sub(g):
    _add(g, view.ROLE, "irsa-any-pod", {"assumeRolePolicy": (
        '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRoleWithWebIdentity", '
        '"Principal": {"Federated": "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/X"}, '
        '"Condition": {"StringLike": {"oidc.eks.us-east-1.amazonaws.com/id/X:sub": "system:serviceaccount:*"}}}]}')})
    return view.ROLE, "irsa-any-pod"


def _writer_associated_twice(g):
    first = g.named(view.POD_IDENTITY, "rl-p5-checkpoints-writer")
    _add(g, view.POD_IDENTITY, "writer-again", copy.deepcopy(first.inputs),
         *[g.by_urn()[u] for u in first.dependencies])
    return view.POD_IDENTITY, "writer-again"


def _writer_on_every_bucket(g):
    pol = g.named(view.ROLE_POLICY, "rl-p5en-prod-checkpoints-writer")
    _set(pol, "policy", pol.inputs["policy"].replace('"arn:aws:s3:::rl-p5en-prod-checkpoints/*"', '"*"'))
    return view.ROLE_POLICY, pol.name


def _writer_on_wildcard_bucket(g):
    pol = g.named(view.ROLE_POLICY, "rl-p6-b200-checkpoints-writer")
    _set(pol, "policy", pol.inputs["policy"].replace('"arn:aws:s3:::rl-p6-b200-checkpoints"', '"arn:aws:s3:::rl-*"'))
    return view.ROLE_POLICY, pol.name


def _s3_full_access(g):
    role = g.named(view.ROLE, "rl-p5en-prod-node")
    _add(g, view.ROLE_POLICY_ATTACHMENT, "node-s3", {"role": role.outputs["name"],
                                                      "policyArn": "arn:aws:iam::aws:policy/AmazonS3FullAccess"}, role)
    return view.ROLE_POLICY_ATTACHMENT, "node-s3"


BREAKS = [
    Break("efa-count", "p5en-prod", "efa-interface-layout", _drop_last_efa, "15 of 16 EFA devices"),
    Break("efa-legacy-layout", "p6-b300", "efa-interface-layout", _legacy_layout, "card 0/device 0: efa"),
    Break("efa-card0-on-b300", "p6-b300", "efa-interface-layout", _card_zero_efa_on_b300, "p6-b300.48xlarge EFA layout"),
    Break("efa-type-mismatch", "p5", "efa-interface-layout", _efa_on_wrong_type, "32 of 16 EFA devices"),
    Break("efa-subnet-on-interface", "p4d", "efa-interface-layout", _subnet_on_efa_interface, "interface 2 sets subnetId"),
    Break("efa-second-zone", "p5en-prod", "efa-single-az", _rollout_in_second_zone, "us-east-1b"),
    Break("efa-two-zones", "p5", "efa-single-az", _train_spans_zones, "spans zones"),
    Break("efa-foreign-subnet", "dev", "efa-single-az", _efa_pool_on_foreign_subnet, "not defined in this stack"),
    Break("efa-no-egress", "p5en-prod", "efa-security-group-self-rules", _drop_efa_egress, "lacks self egress"),
    Break("efa-no-ingress", "p6-b200", "efa-security-group-self-rules", _drop_efa_ingress, "lacks self ingress"),
    Break("efa-egress-not-self", "p4de", "efa-security-group-self-rules", _egress_to_world_not_self, "lacks self egress"),
    Break("efa-group-missing", "p5e", "efa-security-group-self-rules", _efa_group_off_interfaces,
          "no security group of this stack"),
    Break("placement-capacity-block", "p5en-prod", "no-placement-group-with-reservation",
          _placement_on_capacity_block, "targets a capacity reservation"),
    Break("placement-odcr", "p6-b200", "no-placement-group-with-reservation", _placement_on_odcr, "rollout-cluster"),
    Break("spot-train", "p5en-prod", "training-never-spot", _spot_training, "capacityType SPOT"),
    Break("spot-market-train", "dev", "training-never-spot", _spot_market_training, "spot market"),
    Break("imdsv1", "p5en-prod", "imdsv2-required", _imdsv1, "'optional'"),
    Break("imds-default", "p4d", "imdsv2-required", _no_metadata_options, "None"),
    Break("world-ingress-rule", "p5en-prod", "no-world-open-ingress", _world_ingress_rule, "0.0.0.0/0"),
    Break("world-inline-ipv6", "p5", "no-world-open-ingress", _world_inline_ipv6, "::/0"),
    Break("world-legacy-rule", "dev", "no-world-open-ingress", _world_legacy_rule, "0.0.0.0/0"),
    Break("bucket-no-versioning", "p5en-prod", "checkpoint-bucket-secure", _drop_versioning, "versioning"),
    Break("bucket-suspended", "p4d", "checkpoint-bucket-secure", _suspend_versioning, "Suspended"),
    Break("bucket-sse-s3", "p5", "checkpoint-bucket-secure", _sse_s3_only, "AES256"),
    Break("bucket-public-policy", "p6-b300", "checkpoint-bucket-secure", _public_policy_allowed, "blockPublicPolicy"),
    Break("bucket-no-tls-policy", "p5e", "checkpoint-bucket-secure", _drop_tls_policy, "TLS"),
    Break("bucket-tls-objects-only", "p4de", "checkpoint-bucket-secure", _tls_policy_on_objects_only, "TLS",
          known_only=True),
    Break("bucket-acls", "dev", "checkpoint-bucket-secure", _acls_enabled, "ObjectWriter"),
    Break("bucket-force-destroy", "p5en-prod", "checkpoint-bucket-kept", _force_destroy, "forceDestroy"),
    Break("bucket-dev-without-opt-out", "dev", "checkpoint-bucket-kept", _dev_without_opt_out, "retainOnDestroy",
          raw={"checkpoints": {"retainOnDestroy": True}}),
    Break("pod-role-unbound", "p5en-prod", "pod-roles-scoped", _drop_writer_association, "no PodIdentityAssociation"),
    Break("pod-role-wildcard-sa", "p5", "pod-roles-scoped", _wildcard_service_account, "serviceAccount='*'"),
    Break("irsa-any-service-account", "p4d", "pod-roles-scoped", _irsa_without_sub, "system:serviceaccount"),
    Break("pod-identity-twice", "p5", "pod-identity-unique", _writer_associated_twice, "already associated"),
    Break("s3-star", "p5en-prod", "s3-access-scoped-to-bucket", _writer_on_every_bucket, "on *", known_only=True),
    Break("s3-wildcard-bucket", "p6-b200", "s3-access-scoped-to-bucket", _writer_on_wildcard_bucket, "rl-*",
          known_only=True),
    Break("s3-managed-full-access", "p5en-prod", "s3-access-scoped-to-bucket", _s3_full_access, "AmazonS3FullAccess"),
    *(Break(f"team-{n}", "p5en-shared", "team-isolation", mutate, expect) for n, (mutate, expect) in TEAM_BREAKS.items()),
]


def test_every_policy_is_broken_at_least_once():
    """The AWS isolation policies are broken in tests/test_policy_security.py."""
    from analysis.rules.security import SECURITY_POLICIES
    from test_cluster_security import BREAKS as CLUSTER_BREAKS
    assert {b.policy for b in BREAKS + CLUSTER_BREAKS} == set(POLICIES) - {name for name, _, _ in SECURITY_POLICIES}


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
@pytest.mark.parametrize("case", BREAKS, ids=[b.id for b in BREAKS])
def test_policy_names_the_broken_resource(case, preview):
    assert_break_caught(case, preview)


def assert_break_caught(case: Break, preview: bool) -> None:
    """Mutate a copy of the stack's graph; the case's policy alone names the broken resource (or,
    for a value only known at `pulumi up`, stays silent in a preview)."""
    graph = _copy(case.stack)
    type_, name = case.mutate(graph)
    target = graph.named(type_, name)
    found = _run(case.stack, graph, policies=[POLICIES[case.policy]], preview=preview, raw=case.raw)
    if preview and case.known_only:
        assert found == []  # cannot be judged yet; no false alarm either
        return
    mine = [v for v in found if v.urn == target.urn]
    assert mine, f"{case.policy} reported nothing on {name}: {found}"
    assert any(name in v.message and case.expect in v.message for v in mine), mine


@pytest.mark.parametrize("servicer", [False, pytest.param(True, marks=pytest.mark.contract)],
                         ids=["direct", "servicer"])
@pytest.mark.parametrize("case", [b for b in BREAKS if b.id in (
    "efa-count", "efa-second-zone", "efa-no-egress", "spot-train", "bucket-no-versioning", "pod-role-unbound")],
    ids=lambda b: b.id)
def test_the_broken_policy_alone_fires_among_all_policies(case, servicer):
    """With every policy of the pack (directly, and through pulumi_policy's Analyze/AnalyzeStack):
    the broken policy fires, mandatory, on the resource; no other policy does. Directly, with every
    mapping's keys in reverse order too: what a policy finds does not hang on the order keys arrive in
    (the servicer hands them in upb's order, the direct path in the program's)."""
    graph = _copy(case.stack)
    type_, name = case.mutate(graph)
    found = [v for v in _run(case.stack, graph, servicer=servicer, raw=case.raw, policies=ALL)
             if POLICIES[v.policy] in MANDATORY]
    assert {v.policy for v in found} == {case.policy}
    assert graph.named(type_, name).urn in {v.urn for v in found}
    if not servicer:
        for r in graph.resources:
            r.inputs, r.outputs = _keys_reversed(r.inputs), _keys_reversed(r.outputs)
        reordered = [v for v in _run(case.stack, graph, raw=case.raw, policies=ALL) if POLICIES[v.policy] in MANDATORY]
        assert sorted(map(repr, reordered)) == sorted(map(repr, found))


def _keys_reversed(value):
    if isinstance(value, dict):
        return {k: _keys_reversed(value[k]) for k in reversed(value)}
    if isinstance(value, list):
        return [_keys_reversed(v) for v in value]
    return value


def test_efa_layout_rule_agrees_with_the_component_for_every_efa_type():
    """The rule accepts exactly ``efa_layout(CATALOG[type])`` for every EFA type of the catalog."""
    for it in (t for t in CATALOG.values() if t.has_efa):
        interfaces = [{"networkCardIndex": float(i.card), "deviceIndex": float(i.device), "interfaceType": i.kind,
                       "securityGroups": ["sg-a"]} for i in efa_layout(it)]
        res = view.Resource(LT, "lt", "urn:lt", {"instanceType": it.name, "networkInterfaces": interfaces})
        assert fabric.check_efa_layout(res) == [], it.name
        legacy = [{**interfaces[0], "interfaceType": "efa"}] + interfaces[1:]
        extra = interfaces + [{**interfaces[-1], "networkCardIndex": interfaces[-1]["networkCardIndex"] + 1}]
        for wrong in (legacy, extra, [interfaces[0]] + interfaces[2:]):
            res.props["networkInterfaces"] = wrong
            assert fabric.check_efa_layout(res) or len(interfaces) == 2 and wrong == [interfaces[0]], it.name


# --- the checks never crash on what CrossGuard may hand them -----------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=150,
                suppress_health_check=list(HealthCheck))
KEYS = st.sampled_from(["networkInterfaces", "instanceType", "metadataOptions", "placement", "labels",
                        "capacityType", "launchTemplate", "subnetIds", "availabilityZone", "ingress", "egress",
                        "cidrIpv4", "cidrBlocks", "type", "protocol", "self", "policy", "assumeRolePolicy",
                        "inlinePolicies", "policyArn", "namespace", "serviceAccount", "roleArn", "bucket",
                        "versioningConfiguration", "rules", "forceDestroy", "podIdentityAssociations",
                        "capacityReservationSpecification", "instanceMarketOptions", "securityGroupId",
                        "referencedSecurityGroupId", "ipProtocol", "clusterName", "addonName", "id", "arn", "name"])
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 40), st.floats(allow_nan=False), st.text(max_size=12),
              st.just(view.UNKNOWN), st.sampled_from(["0.0.0.0/0", "::/0", "efa-only", "efa", "required", "train",
                                                       "p5en.48xlarge", "SPOT", "spot", "-1", "ingress", "Enabled",
                                                       '{"Statement": [{"Effect": "Allow", "Action": "s3:*", '
                                                       '"Resource": "*"}]}', "rl.platform/role"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.one_of(KEYS, st.text(max_size=6)),
                                                                         inner, max_size=4)),
    max_leaves=12)
TYPES = [LT, NG, view.SUBNET, view.SECURITY_GROUP, view.INGRESS_RULE, view.EGRESS_RULE, view.LEGACY_RULE,
         view.BUCKET, view.BUCKET_VERSIONING, view.BUCKET_POLICY, view.BUCKET_PUBLIC_ACCESS, view.ROLE,
         view.ROLE_POLICY, view.ROLE_POLICY_ATTACHMENT, view.POD_IDENTITY, view.ADDON]
RESOURCES = st.lists(st.builds(lambda t, n, props: view.Resource(t, f"r{n}", f"urn:{t}::r{n}", props),
                               st.sampled_from(TYPES), st.integers(0, 5), st.dictionaries(KEYS, VALUES, max_size=6)),
                     max_size=8)


@FUZZ
@given(RESOURCES)
def test_checks_never_raise_on_odd_properties(resources):
    stack = view.Stack(resources)
    for policy in ALL:
        if isinstance(policy, pulumi_policy.StackValidationPolicy):
            list(policy.check(stack))
        else:
            for res in resources:
                if res.type in policy.resource_types:
                    assert all(isinstance(m, str) for m in policy.check(res))


def test_efa_layout_of_a_spot_template_is_checked_against_its_node_groups_types():
    """p4d's Spot rollout template names no type (the node group lists p4d/p4de); the policy checks
    the layout against each listed type and fires when one has another layout."""
    graph = _copy("p4d")
    raw = yaml.safe_load((ROOT / "stacks" / "Pulumi.p4d.yaml").read_text())["config"]["moe-rl-platform:platform"]
    assert [v for v in evaluate(graph, MANDATORY, platform_config=raw) if v.policy == "efa-interface-layout"] == []
    (ng,) = [n for n in graph.of_type(view.NODE_GROUP) if n.inputs["labels"]["rl.platform/pool"] == "rollout"]
    _set(ng, "instanceTypes", ["p4d.24xlarge", "p5.48xlarge"])
    fired = [v for v in evaluate(graph, MANDATORY, platform_config=raw) if v.policy == "efa-interface-layout"]
    assert fired and all("p5.48xlarge" in v.message for v in fired)


def test_pack_runs_in_the_projects_virtualenv():
    """``virtualenv`` of a policy pack is relative to the pack's folder, the project's to its root
    (Pulumi docs, "Pulumi.yaml project file" runtime.options.virtualenv; PulumiPolicy.yaml takes the
    same runtime options): both must name one folder, or ``pulumi preview --policy-pack policy``
    builds a second environment (or fails on a missing one)."""
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["runtime"]["options"]["virtualenv"]
    pack = yaml.safe_load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())["runtime"]["options"]["virtualenv"]
    assert (ROOT / "policy" / pack).resolve() == (ROOT / project).resolve()


_REFERENCE_ALPHABET = "ab.-:/ _"
"""Name and other characters: enough to put a reference next to, or apart from, a longer name."""


@FUZZ
@given(strings=st.sets(st.text(alphabet=_REFERENCE_ALPHABET, min_size=1, max_size=4), min_size=1, max_size=8),
       text=st.text(alphabet=_REFERENCE_ALPHABET, max_size=20))
def test_a_reference_is_found_exactly_where_it_stands_as_a_whole_token(strings, text):
    """The indexed search agrees with the whole-token pattern: no name character on either side."""
    from policy.adapter import _References
    alternatives = "|".join(map(re.escape, sorted(strings, key=len, reverse=True)))
    whole_token = re.compile(rf"(?<![A-Za-z0-9_.-])(?:{alternatives})(?![A-Za-z0-9_.-])")
    assert _References(strings).find(text) == bool(whole_token.search(text))


def test_properties_reach_the_policies_as_the_protobuf_round_trip_sends_them(stack):
    """``as_sent`` (the direct path) equals json, Struct and MessageToDict on every resource's inputs
    and outputs, known and unknown (the servicer's own path is the contract stage's)."""
    from google.protobuf import json_format
    from policy.adapter import as_sent, to_struct
    graph = graph_of(stack)
    for preview in (False, True):
        wire = Wire(graph, preview=preview)
        for r in graph.resources:
            for props in (wire.inputs(r), wire.outputs(r)):
                assert _typed(as_sent(props)) == _typed(json_format.MessageToDict(to_struct(props))), r.urn


_ODD = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=5),
              st.sampled_from([pulumi_policy.EnforcementLevel.MANDATORY, b"x", ("a", 1), object,
                                               datetime.date(2026, 12, 2)])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.one_of(st.text(max_size=3), st.integers(-3, 3), st.booleans(), st.none(), st.floats(-1, 1)), inner,
        max_size=3)), max_leaves=8)


@FUZZ
@given(value=_ODD)
def test_odd_values_reach_the_policies_as_the_protobuf_round_trip_sends_them_or_fail_alike(value):
    from google.protobuf import json_format
    from policy.adapter import as_sent, to_struct
    try:
        expected = json_format.MessageToDict(to_struct({"v": value}))
    except ValueError:
        with pytest.raises(ValueError):
            as_sent({"v": value})
        return
    assert _typed(as_sent({"v": value})) == _typed(expected)


def _typed(value) -> str:
    """A value's JSON with sorted keys: 1 and 1.0 differ (``==`` does not tell them apart)."""
    return json.dumps(value, sort_keys=True)

"""The guardrail policies `pulumi preview --policy-pack policy` enforces on every stack.

Importable without starting anything: ``ALL`` is the list of policies, ``policy/__main__.py``
only wraps it in a ``PolicyPack``. Each check is a plain function of a resource (or of the whole
stack) as CrossGuard hands it over, so tests call the same functions with args built from a
recorded graph (``policy/adapter.py``).

What CrossGuard sees, and how the checks cope with it:
- A resource policy gets the resource's inputs; a stack policy gets every resource's outputs,
  parent, dependencies and property dependencies (which input came from which resource).
- During a preview of resources that do not exist yet, computed values (ids, ARNs, bucket names,
  JSON built from them) are unknown. Properties are read through ``plain``, which turns them into
  ``UNKNOWN`` instead of letting the proxy raise; references between resources are followed
  through property dependencies when the value itself is unknown (``Stack.refs``). A check whose
  input is unknown is skipped for that resource; ``pulumi up`` runs it again with known values.
- Resource options carry ``protect`` but not ``retainOnDelete`` (the analyzer protocol has no
  such field), so the checkpoint bucket's protection is judged by ``forceDestroy``.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import pulumi
from pulumi_policy import (EnforcementLevel, ReportViolation, ResourceValidationArgs,
                           ResourceValidationPolicy, StackValidationArgs, StackValidationPolicy)
from pulumi_policy.proxy import UnknownValueError

from components.catalog import CATALOG
from components.config import CONFIG_KEY, ROLE_LABEL, CheckpointSettings, Role
from components.iam import POD_IDENTITY_PRINCIPAL
from components.rules import efa_interface_problems
from components.stackfile import PROJECT

PACK_NAME = "moe-rl-platform-guardrails"

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
SUBNET = "aws:ec2/subnet:Subnet"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS_RULE = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
LEGACY_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
BUCKET = "aws:s3/bucket:Bucket"
BUCKET_VERSIONING = "aws:s3/bucketVersioning:BucketVersioning"
BUCKET_ENCRYPTION = ("aws:s3/bucketServerSideEncryptionConfiguration:"
                     "BucketServerSideEncryptionConfiguration")
BUCKET_PUBLIC_ACCESS = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
BUCKET_OWNERSHIP = "aws:s3/bucketOwnershipControls:BucketOwnershipControls"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
IAM_POLICY = "aws:iam/policy:Policy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POD_IDENTITY = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ADDON = "aws:eks/addon:Addon"

EFA_KINDS = ("efa", "efa-only")
ALL_PROTOCOLS = ("-1", "all")
KMS_ALGORITHMS = ("aws:kms", "aws:kms:dsse")
PUBLIC_ACCESS_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
BROAD_S3_MANAGED_POLICIES = frozenset({
    "AdministratorAccess", "PowerUserAccess", "ReadOnlyAccess", "AmazonS3FullAccess",
    "AmazonS3ReadOnlyAccess", "AmazonS3OutpostsFullAccess", "AmazonS3OutpostsReadOnlyAccess",
})
"""AWS managed policies that grant S3 actions on every bucket (``Resource: "*"``)."""


# --- values as CrossGuard hands them over ----------------------------------------------------

class _Unknown:
    """A value the engine does not know yet (preview of a resource that does not exist)."""

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN = _Unknown()


def plain(value: Any) -> Any:
    """Deep copy of CrossGuard properties as dicts/lists: unknowns become ``UNKNOWN`` instead of
    raising on access, integral numbers (the protocol sends every number as a float) become ints."""
    if isinstance(value, Mapping):
        out = {}
        for key in value:
            try:
                out[key] = plain(value[key])
            except UnknownValueError:
                out[key] = UNKNOWN
        return out
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = []
        for i in range(len(value)):
            try:
                items.append(plain(value[i]))
            except UnknownValueError:
                items.append(UNKNOWN)
        return items
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def leaves(value: Any) -> Iterator[Any]:
    """Every scalar in a nested value (UNKNOWN included)."""
    if isinstance(value, Mapping):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def has_unknown(value: Any) -> bool:
    return any(v is UNKNOWN for v in leaves(value))


def dig(value: Any, *path: str | int, default: Any = None) -> Any:
    """``value[path[0]][path[1]]...`` or ``default`` when a step is missing or of the wrong kind."""
    for step in path:
        if isinstance(step, int) and isinstance(value, list) and -len(value) <= step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, Mapping) and step in value:
            value = value[step]
        else:
            return default
    return value


def as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def parse_json(value: Any) -> Any:
    """A JSON document given as a string (IAM/bucket policies) or already as a mapping."""
    if value is UNKNOWN or value is None:
        return value
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


@dataclass
class Resource:
    """One resource as a policy sees it: plain properties plus its links to other resources."""

    type: str
    name: str
    urn: str
    props: dict
    parent: str | None = None
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    protect: bool = False

    @property
    def label(self) -> str:
        kind = self.type.rsplit(":", 1)[-1]
        return f"{kind} {self.name}"

    def identities(self) -> set[str]:
        """Values by which other resources refer to this one (ids, ARNs, names)."""
        return {v for k in ("id", "arn", "name", "bucket") if isinstance(v := self.props.get(k), str) and v}


class Stack:
    """Every resource of a stack, with reference resolution that also works during preview."""

    def __init__(self, resources: Iterable[Resource]):
        self.resources = list(resources)
        self.by_urn = {r.urn: r for r in self.resources}

    @classmethod
    def from_args(cls, args: StackValidationArgs) -> "Stack":
        return cls(Resource(
            type=r.resource_type, name=r.name, urn=r.urn, props=plain(r.props),
            parent=r.parent.urn if r.parent is not None else None,
            dependencies=[d.urn for d in r.dependencies],
            property_dependencies={k: [d.urn for d in v] for k, v in r.property_dependencies.items()},
            protect=bool(r.opts.protect)) for r in args.resources)

    def of_type(self, *types: str) -> list[Resource]:
        return [r for r in self.resources if r.type in types]

    def refs(self, res: Resource, key: str, *types: str) -> tuple[list[Resource], list[str]]:
        """The resources of ``types`` that ``res.props[key]`` refers to, and the known values in it
        that name no such resource of this stack.

        Known values are matched against the targets' ids/ARNs/names. Unknown values (preview) are
        resolved through the property dependencies of ``key``, or, where the engine sent none,
        through the resource's dependencies.
        """
        value = res.props.get(key)
        targets = self.of_type(*types)
        found: list[Resource] = []
        unresolved: list[str] = []
        for leaf in leaves(value):
            if isinstance(leaf, str):
                hits = [t for t in targets if leaf in t.identities()]
                found += [t for t in hits if t not in found]
                if not hits:
                    unresolved.append(leaf)
        if has_unknown(value):
            urns = res.property_dependencies.get(key)
            if urns is None:
                urns = res.dependencies
            found += [self.by_urn[u] for u in urns
                      if u in self.by_urn and self.by_urn[u].type in types and self.by_urn[u] not in found]
        return found, unresolved


# --- EFA launch templates and node groups ------------------------------------------------------

def efa_interfaces(template: Mapping) -> list[dict]:
    return [i for i in as_list(template.get("networkInterfaces")) if isinstance(i, Mapping)
            and i.get("interfaceType") in EFA_KINDS]


def is_efa_template(template: Mapping) -> bool:
    return bool(efa_interfaces(template))


def is_reserved_template(template: Mapping) -> bool:
    spec = template.get("capacityReservationSpecification")
    if not isinstance(spec, Mapping):
        return spec is UNKNOWN
    return bool(spec.get("capacityReservationTarget")) or spec.get("capacityReservationPreference") not in (
        None, "open", "none")


def check_efa_layout(res: Resource) -> list[str]:
    """An EFA launch template carries exactly the interfaces ``components.efa.efa_layout`` gives its
    instance type: ENA primary at card 0/device 0, one EFA-only per EFA card, as many as the type's
    EFA maximum; no subnet or addresses on the interfaces; groups only on the interfaces."""
    props = res.props
    if not is_efa_template(props):
        return []
    instance_type = props.get("instanceType")
    if instance_type is UNKNOWN:
        return []
    instance = CATALOG.get(instance_type) if isinstance(instance_type, str) else None
    if instance is None:
        return [f"{res.label}: has EFA interfaces but instanceType {instance_type!r} is not in the instance "
                f"catalog, so its EFA layout cannot be checked; EFA types: "
                f"{', '.join(n for n, t in CATALOG.items() if t.has_efa)}"]
    if not instance.has_efa:
        return [f"{res.label}: has EFA interfaces but {instance.name} has no EFA"]
    return [f"{res.label} ({instance.name}): {p}" for p in efa_interface_problems(props, instance)]


def check_imdsv2(res: Resource) -> list[str]:
    """Every launch template requires IMDSv2 session tokens."""
    tokens = dig(res.props, "metadataOptions", "httpTokens")
    if tokens is UNKNOWN or tokens == "required":
        return []
    return [f"{res.label}: metadataOptions.httpTokens is {tokens!r}; IMDSv2 needs 'required'"]


def check_no_placement_with_reservation(res: Resource) -> list[str]:
    """A template that launches into a Capacity Block or ODCR sets no placement group: a forced
    placement group blocks or shrinks launches into the reservation."""
    if not is_reserved_template(res.props):
        return []
    placement = res.props.get("placement")
    if not isinstance(placement, Mapping):
        return []
    groups = {k: placement[k] for k in ("groupName", "groupId") if placement.get(k) not in (None, "")}
    if not groups:
        return []
    shown = ", ".join(f"{k}={'<unknown>' if v is UNKNOWN else v!r}" for k, v in groups.items())
    return [f"{res.label}: targets a capacity reservation and sets placement {shown}; the reservation "
            f"already fixes placement"]


def _node_group_templates(stack: Stack, ng: Resource) -> list[Resource]:
    templates, _ = stack.refs(ng, "launchTemplate", LAUNCH_TEMPLATE)
    return templates


def check_efa_single_az(stack: Stack) -> Iterator[tuple[str, str]]:
    """Every node group whose launch template has EFA interfaces (or targets a reservation) uses
    subnets of one zone, and all EFA node groups share that zone: EFA traffic cannot cross zones."""
    efa_zones: dict[str, Resource] = {}
    for ng in stack.of_type(NODE_GROUP):
        templates = _node_group_templates(stack, ng)
        efa = any(is_efa_template(t.props) for t in templates)
        reserved = any(is_reserved_template(t.props) for t in templates)
        if not (efa or reserved):
            continue
        why = "EFA" if efa else "capacity-reservation"
        subnets, unresolved = stack.refs(ng, "subnetIds", SUBNET)
        if unresolved:
            yield ng.urn, (f"{ng.label}: {why} node group uses subnet(s) {', '.join(unresolved)} not defined in "
                           f"this stack; their zone cannot be verified")
        zones = {dig(s.props, "availabilityZone") or dig(s.props, "availabilityZoneId") for s in subnets}
        if UNKNOWN in zones:
            continue
        unplaced = [s.name for s in subnets if not isinstance(dig(s.props, "availabilityZone")
                                                              or dig(s.props, "availabilityZoneId"), str)]
        if unplaced:
            yield ng.urn, (f"{ng.label}: {why} node group uses subnet(s) {', '.join(unplaced)} without an "
                           f"availabilityZone (AWS would pick one); pin the zone")
            continue
        if len(zones) > 1:
            yield ng.urn, (f"{ng.label}: {why} node group spans zones {', '.join(sorted(map(str, zones)))} "
                           f"(subnets {', '.join(s.name for s in subnets)}); it must use one zone")
        elif efa and zones:
            efa_zones.setdefault(next(iter(zones)), ng)
    if len(efa_zones) > 1:
        for zone, ng in sorted(efa_zones.items()):
            yield ng.urn, (f"{ng.label}: EFA node groups are spread over zones {', '.join(sorted(efa_zones))}; "
                           f"this one is in {zone}; all EFA peers must share one zone")


def _rule_targets(stack: Stack, rule: Resource, group: Resource, key: str) -> bool:
    found, _ = stack.refs(rule, key, SECURITY_GROUP)
    return group in found


def _self_rule(stack: Stack, group: Resource, direction: str) -> bool:
    """``group`` admits all protocols from itself (ingress) or to itself (egress)."""
    rule_type = INGRESS_RULE if direction == "ingress" else EGRESS_RULE
    for rule in stack.of_type(rule_type):
        if (rule.props.get("ipProtocol") in ALL_PROTOCOLS
                and _rule_targets(stack, rule, group, "securityGroupId")
                and _rule_targets(stack, rule, group, "referencedSecurityGroupId")):
            return True
    for rule in stack.of_type(LEGACY_RULE):
        if (rule.props.get("type") == direction and rule.props.get("protocol") in ALL_PROTOCOLS
                and _rule_targets(stack, rule, group, "securityGroupId")
                and (rule.props.get("self") is True
                     or _rule_targets(stack, rule, group, "sourceSecurityGroupId"))):
            return True
    for inline in as_list(group.props.get(direction)):
        if isinstance(inline, Mapping) and inline.get("self") is True and inline.get("protocol") in ALL_PROTOCOLS:
            return True
    return False


def check_efa_security_group(stack: Stack) -> Iterator[tuple[str, str]]:
    """The EFA interfaces of every EFA launch template carry a security group of this stack that
    allows all protocols in from itself AND out to itself (without the egress rule NCCL fails with
    "Unreachable remote")."""
    for lt in stack.of_type(LAUNCH_TEMPLATE):
        interfaces = efa_interfaces(lt.props)
        if not interfaces:
            continue
        probe = Resource(lt.type, lt.name, lt.urn, {"networkInterfaces": interfaces}, lt.parent,
                         lt.dependencies, lt.property_dependencies)
        groups, _ = stack.refs(probe, "networkInterfaces", SECURITY_GROUP)
        missing = {g.name: [d for d in ("ingress", "egress") if not _self_rule(stack, g, d)] for g in groups}
        if not any(not dirs for dirs in missing.values()):
            detail = "; ".join(f"{name} lacks self {' and '.join(dirs)}" for name, dirs in sorted(missing.items()))
            yield lt.urn, (f"{lt.label}: no security group on its EFA interfaces allows all protocols both in "
                           f"from and out to itself ({detail or 'no security group of this stack on them'})")


def check_training_not_spot(stack: Stack) -> Iterator[tuple[str, str]]:
    """Node groups labelled ``rl.platform/role=train`` never run on Spot: not by capacity type and
    not by a launch template that asks for the spot market."""
    for ng in stack.of_type(NODE_GROUP):
        if dig(ng.props, "labels", ROLE_LABEL) != Role.TRAIN.value:
            continue
        if ng.props.get("capacityType") == "SPOT":
            yield ng.urn, f"{ng.label}: training node group has capacityType SPOT; training never runs on Spot"
        for lt in _node_group_templates(stack, ng):
            if dig(lt.props, "instanceMarketOptions", "marketType") == "spot":
                yield ng.urn, (f"{ng.label}: training node group's {lt.label} asks for the spot market; "
                               f"training never runs on Spot")


# --- security groups -----------------------------------------------------------------------

def _world(cidr: Any) -> bool:
    if not isinstance(cidr, str):
        return False
    try:
        return ipaddress.ip_network(cidr.strip(), strict=False).prefixlen == 0
    except ValueError:
        return False


def check_no_world_ingress(res: Resource) -> list[str]:
    """No security group admits traffic from 0.0.0.0/0 or ::/0 (inline ingress, ingress rules)."""
    props, open_to = res.props, []
    if res.type == SECURITY_GROUP:
        for rule in as_list(props.get("ingress")):
            if isinstance(rule, Mapping):
                open_to += [c for key in ("cidrBlocks", "ipv6CidrBlocks") for c in as_list(rule.get(key)) if _world(c)]
    elif res.type == INGRESS_RULE:
        open_to += [props[k] for k in ("cidrIpv4", "cidrIpv6") if _world(props.get(k))]
    elif res.type == LEGACY_RULE and props.get("type") == "ingress":
        open_to += [c for key in ("cidrBlocks", "ipv6CidrBlocks") for c in as_list(props.get(key)) if _world(c)]
    return [f"{res.label}: allows inbound traffic from {c}" for c in dict.fromkeys(open_to)]


# --- IAM ---------------------------------------------------------------------------------------

def _statements(document: Any) -> list[Mapping]:
    return [s for s in as_list(dig(document, "Statement")) if isinstance(s, Mapping)]


def _s3_actions(statement: Mapping) -> list[str]:
    actions = [a for a in as_list(statement.get("Action")) if isinstance(a, str)]
    return [a for a in actions if a == "*" or a.lower().startswith("s3:") or a.lower().startswith("s3*")]


def _bucket_scoped(arn: Any) -> bool:
    """``arn:aws:s3:::<bucket>`` or ``arn:aws:s3:::<bucket>/<key pattern>`` with a literal bucket name."""
    if arn is UNKNOWN:
        return True
    if not isinstance(arn, str):
        return False
    partition, sep, rest = arn.partition(":s3:::")
    if not (sep and partition.startswith("arn:aws")):
        return False
    bucket = rest.split("/", 1)[0]
    return bool(bucket) and not any(c in bucket for c in "*?$")


def policy_document_problems(label: str, document: Any) -> list[str]:
    """Allow statements with S3 actions name bucket ARNs, never ``*`` or a wildcard bucket."""
    if document is UNKNOWN or document is None:
        return []
    problems = []
    for n, st in enumerate(_statements(document)):
        if st.get("Effect") != "Allow":
            continue
        actions = _s3_actions(st)
        if not actions:
            continue
        sid = f"statement {st.get('Sid') or n}"
        if "NotResource" in st:
            problems.append(f"{label}: {sid} grants {', '.join(actions)} with NotResource; name the bucket")
        wide = [r for r in as_list(st.get("Resource")) if not _bucket_scoped(r)]
        if wide:
            problems.append(f"{label}: {sid} grants {', '.join(actions)} on {', '.join(map(str, wide))}; "
                            f"S3 permissions must name the bucket (arn:aws:s3:::<bucket>[/...])")
    return problems


def check_s3_scoped(res: Resource) -> list[str]:
    """S3 permissions name the bucket: no S3 action on ``Resource: "*"`` or a wildcard bucket in
    role policies, customer-managed policies and inline role policies; no AWS managed policy that
    grants S3 on every bucket."""
    props = res.props
    if res.type in (ROLE_POLICY, IAM_POLICY):
        return policy_document_problems(res.label, parse_json(props.get("policy")))
    if res.type == ROLE:
        return [p for inline in as_list(props.get("inlinePolicies")) if isinstance(inline, Mapping)
                for p in policy_document_problems(f"{res.label} inline policy {inline.get('name', '')}".rstrip(),
                                                  parse_json(inline.get("policy")))]
    if res.type == ROLE_POLICY_ATTACHMENT:
        arn = props.get("policyArn")
        if isinstance(arn, str) and arn.startswith("arn:aws") and ":iam::aws:policy/" in arn:
            name = arn.rsplit("/", 1)[-1]
            if name in BROAD_S3_MANAGED_POLICIES:
                return [f"{res.label}: attaches {name}, which grants S3 actions on every bucket"]
    return []


def _trusts_pods(document: Any) -> bool:
    for st in _statements(document):
        if st.get("Effect") == "Allow":
            services = as_list(dig(st, "Principal", "Service"))
            if POD_IDENTITY_PRINCIPAL in services:
                return True
    return False


def _irsa_problems(label: str, document: Any) -> list[str]:
    """A role trusting an EKS OIDC provider pins ``:sub`` to one literal service account."""
    problems = []
    for st in _statements(document):
        federated = [f for f in as_list(dig(st, "Principal", "Federated")) if isinstance(f, str)]
        if st.get("Effect") != "Allow" or not any("oidc-provider/" in f for f in federated):
            continue
        equals = dig(st, "Condition", "StringEquals", default={})
        subs = [v for k, vals in (equals.items() if isinstance(equals, Mapping) else [])
                if isinstance(k, str) and k.endswith(":sub") for v in as_list(vals)]
        named = [s for s in subs if isinstance(s, str) and s.startswith("system:serviceaccount:")
                 and len(s.split(":")) == 4 and all(s.split(":")[2:]) and not any(c in s for c in "*?")]
        if not subs or len(named) != len(subs):
            problems.append(f"{label}: trusts an EKS OIDC provider without a StringEquals condition naming "
                            f"system:serviceaccount:<namespace>:<name>")
    return problems


def _literal(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and not any(c in value for c in "*?")


def check_pod_roles_scoped(stack: Stack) -> Iterator[tuple[str, str]]:
    """Every role that pods can assume is bound to named service accounts: a role trusting
    ``pods.eks.amazonaws.com`` has a PodIdentityAssociation naming a namespace and a service
    account (or an EKS add-on's association naming its service account), and every association
    names both literally; a role trusting an EKS OIDC provider pins ``:sub``."""
    bound: dict[str, list[str]] = {}
    for assoc in stack.of_type(POD_IDENTITY):
        ns, sa = assoc.props.get("namespace"), assoc.props.get("serviceAccount")
        roles, _ = stack.refs(assoc, "roleArn", ROLE)
        if ns is UNKNOWN or sa is UNKNOWN:
            continue
        if not (_literal(ns) and _literal(sa)):
            yield assoc.urn, (f"{assoc.label}: must name one namespace and one service account, got "
                              f"namespace={ns!r} serviceAccount={sa!r}")
            continue
        for role in roles:
            bound.setdefault(role.urn, []).append(f"{ns}/{sa}")
    for addon in stack.of_type(ADDON):
        for n, assoc in enumerate(as_list(addon.props.get("podIdentityAssociations"))):
            if not isinstance(assoc, Mapping):
                continue
            sa = assoc.get("serviceAccount")
            probe = Resource(addon.type, addon.name, addon.urn, {"roleArn": assoc.get("roleArn")}, addon.parent,
                             addon.dependencies, {"roleArn": addon.property_dependencies.get(
                                 "podIdentityAssociations", addon.dependencies)})
            roles, _ = stack.refs(probe, "roleArn", ROLE)
            if sa is UNKNOWN:
                continue
            if not _literal(sa):
                yield addon.urn, f"{addon.label}: pod identity association {n} names service account {sa!r}"
                continue
            for role in roles:
                bound.setdefault(role.urn, []).append(f"add-on {addon.props.get('addonName', addon.name)}/{sa}")
    for role in stack.of_type(ROLE):
        document = parse_json(role.props.get("assumeRolePolicy"))
        if document is UNKNOWN or document is None:
            continue
        for problem in _irsa_problems(role.label, document):
            yield role.urn, problem
        if _trusts_pods(document) and role.urn not in bound:
            yield role.urn, (f"{role.label}: trusts {POD_IDENTITY_PRINCIPAL} but no PodIdentityAssociation binds "
                             f"it to a namespace and service account")


ADDON_NAMESPACES = {
    "vpc-cni": "kube-system", "aws-ebs-csi-driver": "kube-system", "aws-efs-csi-driver": "kube-system",
    "aws-mountpoint-s3-csi-driver": "kube-system", "aws-fsx-csi-driver": "kube-system",
    "amazon-cloudwatch-observability": "amazon-cloudwatch", "adot": "opentelemetry-operator-system",
}
"""Where the EKS add-ons that take pod identity associations run their service accounts."""


def _cluster_key(stack: Stack, res: Resource) -> str:
    value = res.props.get("clusterName")
    if isinstance(value, str):
        return value
    clusters, _ = stack.refs(res, "clusterName", "aws:eks/cluster:Cluster")
    return clusters[0].props.get("name", clusters[0].urn) if clusters else "?"


def check_pod_identity_unique(stack: Stack) -> Iterator[tuple[str, str]]:
    """One Pod Identity association per service account: EKS refuses a second one for the same
    cluster, namespace and service account (ResourceInUseException "Association already exists"),
    including one an EKS add-on creates from its ``podIdentityAssociations``."""
    seen: dict[tuple, str] = {}
    for addon in stack.of_type(ADDON):
        name = addon.props.get("addonName")
        for assoc in as_list(addon.props.get("podIdentityAssociations")):
            sa = assoc.get("serviceAccount") if isinstance(assoc, Mapping) else None
            if isinstance(sa, str) and isinstance(name, str):
                seen[(_cluster_key(stack, addon), ADDON_NAMESPACES.get(name, "*"), sa)] = f"add-on {name}"
    for assoc in stack.of_type(POD_IDENTITY):
        ns, sa = assoc.props.get("namespace"), assoc.props.get("serviceAccount")
        if not (isinstance(ns, str) and isinstance(sa, str)):
            continue
        cluster = _cluster_key(stack, assoc)
        other = seen.get((cluster, ns, sa)) or seen.get((cluster, "*", sa))
        if other:
            yield assoc.urn, (f"{assoc.label}: {ns}/{sa} is already associated by {other}; EKS refuses a second "
                              f"Pod Identity association for one service account")
        else:
            seen[(cluster, ns, sa)] = assoc.label


# --- checkpoint bucket ---------------------------------------------------------------------------

def stack_platform_config() -> Mapping | None:
    """The stack's ``moe-rl-platform:platform`` config, which the CLI hands to policy packs in
    PULUMI_CONFIG (None when absent)."""
    raw = pulumi.runtime.get_config(f"{PROJECT}:{CONFIG_KEY}")
    value = parse_json(raw) if raw is not None else None
    return value if isinstance(value, Mapping) else None


def stack_opts_out_of_retention() -> bool:
    """True only when the stack file's ``checkpoints`` say ``retainOnDestroy: false`` (e.g. dev), read
    with the platform's own schema; anything unreadable keeps the bucket."""
    checkpoints = dig(stack_platform_config(), "checkpoints")
    if not isinstance(checkpoints, Mapping):
        return False
    try:
        return CheckpointSettings.model_validate(checkpoints).retain_on_destroy is False
    except ValueError:
        return False


def check_bucket_kept(res: Resource) -> list[str]:
    """``pulumi destroy`` cannot empty the bucket: forceDestroy stays false (or the bucket is
    protected), unless the stack file opts out with ``checkpoints.retainOnDestroy: false``."""
    force = res.props.get("forceDestroy")
    if force is not True or res.protect or stack_opts_out_of_retention():
        return []
    return [f"{res.label}: forceDestroy is true, so `pulumi destroy` deletes every checkpoint; only a stack "
            f"whose config sets checkpoints.retainOnDestroy: false may do that"]


def _bucket_parts(stack: Stack, bucket: Resource, type_: str) -> list[Resource]:
    return [r for r in stack.of_type(type_) if bucket in stack.refs(r, "bucket", BUCKET)[0]]


def _tls_only(document: Any) -> bool | None:
    """Whether a bucket policy denies every request not made over TLS (None: unknown yet)."""
    if document is UNKNOWN:
        return None
    for st in _statements(document):
        actions = as_list(st.get("Action"))
        insecure = dig(st, "Condition", "Bool", "aws:SecureTransport")
        if (st.get("Effect") == "Deny" and ("s3:*" in actions or "*" in actions)
                and str(insecure).lower() == "false" and st.get("Principal") in ("*", {"AWS": "*"})):
            resources = [r for r in as_list(st.get("Resource")) if isinstance(r, str)]
            if any(r.endswith("/*") for r in resources) and any("/" not in r.split(":::", 1)[-1] for r in resources):
                return True
    return False


def check_buckets_secure(stack: Stack) -> Iterator[tuple[str, str]]:
    """Every bucket is versioned, KMS-encrypted, private (all four public access blocks, ACLs
    disabled) and TLS-only (a bucket policy denying aws:SecureTransport=false)."""
    for bucket in stack.of_type(BUCKET):
        label = bucket.label
        status = [dig(v.props, "versioningConfiguration", "status") for v in _bucket_parts(stack, bucket, BUCKET_VERSIONING)]
        if dig(bucket.props, "versioning", "enabled") is True:
            status.append("Enabled")
        if "Enabled" not in status and UNKNOWN not in status:
            yield bucket.urn, f"{label}: versioning is not enabled (found {status or 'no BucketVersioning'})"
        algorithms = [dig(rule, "applyServerSideEncryptionByDefault", "sseAlgorithm")
                      for enc in _bucket_parts(stack, bucket, BUCKET_ENCRYPTION)
                      for rule in as_list(enc.props.get("rules"))]
        algorithms += [dig(rule, "applyServerSideEncryptionByDefault", "sseAlgorithm")
                       for rule in as_list(dig(bucket.props, "serverSideEncryptionConfiguration", "rules"))]
        if not any(a in KMS_ALGORITHMS for a in algorithms) and UNKNOWN not in algorithms:
            yield bucket.urn, (f"{label}: no KMS default encryption (found {algorithms or 'no encryption configuration'}); "
                               f"allowed: {', '.join(KMS_ALGORITHMS)}")
        blocks = _bucket_parts(stack, bucket, BUCKET_PUBLIC_ACCESS)
        if not any(all(b.props.get(f) in (True, UNKNOWN) for f in PUBLIC_ACCESS_FLAGS) for b in blocks):
            off = sorted({f for b in blocks for f in PUBLIC_ACCESS_FLAGS if b.props.get(f) is not True})
            yield bucket.urn, (f"{label}: public access is not fully blocked "
                               f"({'not true: ' + ', '.join(off) if blocks else 'no BucketPublicAccessBlock'})")
        acl = bucket.props.get("acl")
        if isinstance(acl, str) and acl not in ("private", ""):
            yield bucket.urn, f"{label}: canned ACL {acl!r}; the bucket must be private"
        ownership = [dig(o.props, "rule", "objectOwnership") for o in _bucket_parts(stack, bucket, BUCKET_OWNERSHIP)]
        if "BucketOwnerEnforced" not in ownership and UNKNOWN not in ownership:
            yield bucket.urn, f"{label}: ACLs are not disabled (objectOwnership {ownership or 'not set'}, want BucketOwnerEnforced)"
        verdicts = [_tls_only(parse_json(p.props.get("policy"))) for p in _bucket_parts(stack, bucket, BUCKET_POLICY)]
        if not any(v is not False for v in verdicts):
            yield bucket.urn, (f"{label}: no bucket policy denies requests without TLS (Deny s3:* on the bucket and "
                               f"its objects when aws:SecureTransport is false)")


# --- the policies ------------------------------------------------------------------------------

ResourceCheck = Callable[[Resource], list[str]]
StackCheck = Callable[[Stack], Iterable[tuple[str, str]]]


def resource_from_args(args: ResourceValidationArgs) -> Resource:
    opts = args.opts
    return Resource(type=args.resource_type, name=args.name, urn=args.urn, props=plain(args.props),
                    parent=getattr(opts, "parent", None), protect=bool(getattr(opts, "protect", False)))


def resource_policy(name: str, description: str, types: Sequence[str], check: ResourceCheck
                    ) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.resource_type in types:
            for message in check(resource_from_args(args)):
                report_violation(message, None)

    policy = ResourceValidationPolicy(name=name, description=description, validate=validate,
                                      enforcement_level=EnforcementLevel.MANDATORY)
    policy.check = check  # type: ignore[attr-defined]
    policy.resource_types = tuple(types)  # type: ignore[attr-defined]
    return policy


def stack_policy(name: str, description: str, check: StackCheck,
                 enforcement: EnforcementLevel = EnforcementLevel.MANDATORY) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        for urn, message in check(Stack.from_args(args)):
            report_violation(message, urn)

    policy = StackValidationPolicy(name=name, description=description, validate=validate,
                                   enforcement_level=enforcement)
    policy.check = check  # type: ignore[attr-defined]
    return policy


ALL: list = [
    resource_policy("efa-interface-layout",
                    "EFA launch templates carry the instance type's full EFA layout (ENA primary, one "
                    "EFA-only interface per EFA card, as many as the type's EFA maximum).",
                    [LAUNCH_TEMPLATE], check_efa_layout),
    stack_policy("efa-single-az",
                 "Node groups with EFA interfaces (or a capacity reservation) use subnets of one "
                 "Availability Zone, and all EFA node groups share it.",
                 check_efa_single_az),
    stack_policy("efa-security-group-self-rules",
                 "EFA interfaces carry a security group that allows all traffic in from and out to itself.",
                 check_efa_security_group),
    resource_policy("no-placement-group-with-reservation",
                    "Launch templates that target a Capacity Block or ODCR set no placement group.",
                    [LAUNCH_TEMPLATE], check_no_placement_with_reservation),
    stack_policy("training-never-spot",
                 "Node groups labelled rl.platform/role=train never run on Spot.",
                 check_training_not_spot),
    resource_policy("imdsv2-required",
                    "Every launch template requires IMDSv2 (metadataOptions.httpTokens = required).",
                    [LAUNCH_TEMPLATE], check_imdsv2),
    resource_policy("no-world-open-ingress",
                    "No security group allows inbound traffic from 0.0.0.0/0 or ::/0.",
                    [SECURITY_GROUP, INGRESS_RULE, LEGACY_RULE], check_no_world_ingress),
    stack_policy("checkpoint-bucket-secure",
                 "S3 buckets are versioned, KMS-encrypted, private and TLS-only.",
                 check_buckets_secure),
    resource_policy("checkpoint-bucket-kept",
                    "S3 buckets survive `pulumi destroy` (forceDestroy false) unless the stack opts out "
                    "with checkpoints.retainOnDestroy: false.",
                    [BUCKET], check_bucket_kept),
    stack_policy("pod-roles-scoped",
                 "IAM roles for pods are bound to named namespaces and service accounts.",
                 check_pod_roles_scoped),
    stack_policy("pod-identity-unique",
                 "One EKS Pod Identity association per service account (add-on associations included).",
                 check_pod_identity_unique),
    resource_policy("s3-access-scoped-to-bucket",
                    "IAM permissions for S3 name the bucket, never Resource \"*\".",
                    [ROLE_POLICY, IAM_POLICY, ROLE, ROLE_POLICY_ATTACHMENT], check_s3_scoped),
]
"""Every policy of the pack; all mandatory."""
MANDATORY = [p for p in ALL if p.enforcement_level is EnforcementLevel.MANDATORY]

POLICIES = {p.name: p for p in ALL}

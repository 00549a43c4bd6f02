"""Resources as the guardrail checks see them: plain properties plus links to other resources.

The same view serves CrossGuard (``Stack.from_args`` on what the engine hands over, unknown values
included during a preview) and the offline tests (built from a graph recorded under mocks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from pulumi_policy import StackValidationArgs
from pulumi_policy.proxy import UnknownValueError


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
KMS_KEY = "aws:kms/key:Key"
KEY_POLICY = "aws:kms/keyPolicy:KeyPolicy"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
ENDPOINT_POLICY = "aws:ec2/vpcEndpointPolicy:VpcEndpointPolicy"
ADDON = "aws:eks/addon:Addon"
NAMESPACE, NETWORK_POLICY = "kubernetes:core/v1:Namespace", "kubernetes:networking.k8s.io/v1:NetworkPolicy"
PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAP_BINDING = VAP + "Binding"

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



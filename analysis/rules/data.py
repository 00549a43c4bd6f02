"""Guardrail checks of identity and data: pod roles scoped to service accounts, one Pod Identity
association each, S3 access scoped to buckets, a checkpoint bucket that is versioned, encrypted,
private, TLS-only and kept on destroy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import pulumi

from components.iam import POD_IDENTITY_PRINCIPAL
from stackconfig.files import PROJECT
from stackconfig.stack import CONFIG_KEY, CheckpointSettings

from .iam_eval import DENY, decide
from .view import (ADDON, BROAD_S3_MANAGED_POLICIES, BUCKET, BUCKET_ENCRYPTION, BUCKET_OWNERSHIP, BUCKET_POLICY, BUCKET_PUBLIC_ACCESS, BUCKET_VERSIONING, IAM_POLICY, KMS_ALGORITHMS, POD_IDENTITY, PUBLIC_ACCESS_FLAGS, ROLE, ROLE_POLICY, ROLE_POLICY_ATTACHMENT, Resource, Stack, UNKNOWN, as_list, dig, parse_json)


FOREIGN = "not-this-platform"
"""A name no resource of a stack has: the probes' other bucket, namespace, repository."""


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


def tls_deny_covers(document: Any, bucket_arn: str) -> bool | None:
    """Whether ``document`` denies, to anyone, every request to ``bucket_arn`` and its objects made
    without TLS (None: unknown yet)."""
    if document is UNKNOWN:
        return None
    insecure = {"aws:SecureTransport": "false"}
    probes = [("s3:GetObject", f"{bucket_arn}/{FOREIGN}/deep/key"), ("s3:PutObject", f"{bucket_arn}/k"),
              ("s3:ListBucket", bucket_arn), ("s3:GetBucketPolicy", bucket_arn)]
    return all(decide([document], a, r, insecure, {"AWS": f"arn:aws:iam::000000000000:role/{FOREIGN}"}) == DENY
               for a, r in probes)


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
        arn = bucket.props.get("arn")
        verdicts = [tls_deny_covers(parse_json(p.props.get("policy")), arn) if isinstance(arn, str) else None
                    for p in _bucket_parts(stack, bucket, BUCKET_POLICY)]
        if not any(v is not False for v in verdicts):
            yield bucket.urn, (f"{label}: no bucket policy denies requests without TLS (Deny s3:* on the bucket and "
                               f"its objects when aws:SecureTransport is false)")



"""Guardrail checks of isolation on the AWS side: what a team member could reach if a change
loosened an IAM document, a bucket, a key, an endpoint or a launch template.

Each check plays requests against the documents the stack renders (``iam_eval``), statement by
statement, rather than matching their shape: a narrowed Deny, an Allow with ``NotAction``, a
prefix widened to the bucket or a trust policy with one more principal changes the answer.
Values unknown during a first preview skip the check for that resource (``pulumi up`` runs it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

from components.checkpoints import PREFIX_TAG
from components.iam import NAMESPACE_TAG, POD_IDENTITY_PRINCIPAL, SERVICE_ACCOUNT_TAG

from .data import ADDON_NAMESPACES, FOREIGN
from .iam_eval import ALLOW, DENY, decide, statements
from .iam_lint import DOCUMENTS, POLICY_NAME as IAM_LINT, check_iam_valid
from .view import (ADDON, BUCKET, ENDPOINT_POLICY, IAM_POLICY, KEY_POLICY, KMS_KEY, LAUNCH_TEMPLATE, POD_IDENTITY,
                   ROLE, ROLE_POLICY, ROLE_POLICY_ATTACHMENT, VPC_ENDPOINT, Resource, Stack, UNKNOWN, as_list, dig,
                   has_unknown, parse_json)

BACKUP_VAULT = "aws:backup/vault:Vault"
VAULT_LOCK = "aws:backup/vaultLockConfiguration:VaultLockConfiguration"
BACKUP_PLAN = "aws:backup/plan:Plan"
BACKUP_SELECTION = "aws:backup/selection:Selection"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
DATA_REPOSITORY = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
BUCKET_NOTIFICATION = "aws:s3/bucketNotification:BucketNotification"
BROAD_MANAGED = {"AdministratorAccess", "PowerUserAccess", "IAMFullAccess", "AmazonEC2ContainerRegistryReadOnly",
                 "AmazonEC2ContainerRegistryPullOnly", "AmazonEC2ContainerRegistryPowerUser",
                 "AmazonEC2ContainerRegistryFullAccess"}
"""Managed policies that reach every resource of a service: admin, or every ECR repository."""
NODE_REQUIRED_MANAGED = {"AmazonEC2ContainerRegistryReadOnly"}
"""Broad, but EKS requires it on a node role (CreateNodegroup refuses a node role without it,
aws/containers-roadmap#1610): allowed on a role trusted by EC2 only, and only where that role's own
documents deny pulls outside the stack's repositories (``check_node_pulls_scoped`` proves it)."""
MANAGED_DOCUMENTS = {
    "AmazonEC2ContainerRegistryReadOnly": {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Resource": "*", "Action": [
            "ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer",
            "ecr:GetRepositoryPolicy", "ecr:DescribeRepositories", "ecr:ListImages", "ecr:DescribeImages",
            "ecr:BatchGetImage", "ecr:GetLifecyclePolicy", "ecr:GetLifecyclePolicyPreview",
            "ecr:ListTagsForResource", "ecr:DescribeImageScanFindings"]}]},
}
"""The documents of the managed policies the evaluator plays requests against: AWS Managed Policy
Reference, AmazonEC2ContainerRegistryReadOnly, policy version v3 (default; edited 2019-12-10)."""
DESTRUCTIVE = ["s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectRetention", "s3:BypassGovernanceRetention",
               "s3:PutBucketObjectLockConfiguration", "s3:PutLifecycleConfiguration", "s3:PutBucketVersioning",
               "s3:DeleteBucketPolicy", "s3:PutBucketPolicy"]
"""Actions by which a pod could destroy checkpoints or shorten their retention."""
BACKUP_DESTRUCTIVE = ["backup:DeleteRecoveryPoint", "backup:UpdateRecoveryPointLifecycle", "backup:DeleteBackupVault",
                      "backup:DeleteBackupVaultLockConfiguration", "backup:PutBackupVaultLockConfiguration",
                      "backup:PutBackupVaultAccessPolicy", "backup:DeleteBackupVaultAccessPolicy",
                      "backup:DeleteBackupPlan", "backup:UpdateBackupPlan", "backup:DeleteBackupSelection"]
"""Actions by which a pod could delete recovery points, unlock their vault or stop the backups."""


def _documents(stack: Stack, role: Resource) -> list[Any] | None:
    """Every policy document of ``role`` (inline policies and RolePolicy resources); None if unknown."""
    docs = [parse_json(p.get("policy")) for p in as_list(role.props.get("inlinePolicies")) if isinstance(p, Mapping)]
    docs += [parse_json(p.props.get("policy")) for p in stack.of_type(ROLE_POLICY)
             if role in stack.refs(p, "role", ROLE)[0]]
    return None if any(d is UNKNOWN for d in docs) else [d for d in docs if d is not None]


def _arn_parts(arn: Any) -> list[str] | None:
    return arn.split(":", 5) if isinstance(arn, str) and arn.count(":") >= 5 else None


# --- launch templates and IAM documents --------------------------------------------------------

def check_imds_one_hop(res: Resource) -> list[str]:
    """IMDS answers one hop only: a container behind the node's network namespace cannot read the
    node role's credentials (EC2 user guide, "Configure the instance metadata options": hop limit)."""
    hops = dig(res.props, "metadataOptions", "httpPutResponseHopLimit")
    if hops is UNKNOWN or hops in (1, 1.0):
        return []
    return [f"{res.label}: metadataOptions.httpPutResponseHopLimit is {hops!r}; want 1, so pods cannot reach "
            f"the node role through IMDS"]


def broad_statements(label: str, document: Any) -> list[str]:
    problems = []
    for n, st in enumerate(statements(document)):
        if st.get("Effect") != ALLOW:
            continue
        sid = f"statement {st.get('Sid') or n}"
        if "NotAction" in st or "NotResource" in st:
            problems.append(f"{label}: {sid} allows with {'NotAction' if 'NotAction' in st else 'NotResource'}; "
                            f"name the actions and resources")
        wild = [a for a in as_list(st.get("Action")) if isinstance(a, str) and a.split(":")[-1] == "*"]
        if wild:
            problems.append(f"{label}: {sid} allows {', '.join(wild)}; name the actions")
    return problems


def check_no_broad_allow(res: Resource) -> list[str]:
    """No Allow with NotAction/NotResource or a service-wide action, no admin or every-repository
    managed policy."""
    if res.type in (ROLE_POLICY, IAM_POLICY):
        document = parse_json(res.props.get("policy"))
        return [] if document in (UNKNOWN, None) else broad_statements(res.label, document)
    if res.type == ROLE:
        return [p for inline in as_list(res.props.get("inlinePolicies")) if isinstance(inline, Mapping)
                for p in broad_statements(f"{res.label} inline policy", parse_json(inline.get("policy")))]
    arn = res.props.get("policyArn")
    name = arn.rsplit("/", 1)[-1] if isinstance(arn, str) else None
    broad = BROAD_MANAGED - NODE_REQUIRED_MANAGED  # judged with the role's documents: node-pulls-scoped
    return [f"{res.label}: attaches {name}, which reaches every resource of its service"] if name in broad else []


# --- pod roles ---------------------------------------------------------------------------------

def _bindings(stack: Stack) -> Iterator[tuple[Resource, Resource, str, str]]:
    """(binding resource, role, namespace, service account) of every Pod Identity association."""
    for assoc in stack.of_type(POD_IDENTITY):
        for role in stack.refs(assoc, "roleArn", ROLE)[0]:
            yield assoc, role, assoc.props.get("namespace"), assoc.props.get("serviceAccount")
    for addon in stack.of_type(ADDON):
        name = addon.props.get("addonName")
        namespace = ADDON_NAMESPACES.get(name, UNKNOWN) if isinstance(name, str) else UNKNOWN
        for assoc in as_list(addon.props.get("podIdentityAssociations")):
            if not isinstance(assoc, Mapping):
                continue
            arn = assoc.get("roleArn")
            for role in stack.of_type(ROLE):
                if isinstance(arn, str) and arn in role.identities():
                    yield addon, role, namespace, assoc.get("serviceAccount")


def check_pod_roles_bound(stack: Stack) -> Iterator[tuple[str, str]]:
    """A pod role trusts only ``pods.eks.amazonaws.com``, only for the session tags of the namespace
    and service account its association names, and every permission it has holds only for that
    namespace and service account (``aws:PrincipalTag``): no extra principal, no second namespace."""
    for binding, role, namespace, account in _bindings(stack):
        trust = parse_json(role.props.get("assumeRolePolicy"))
        if trust is UNKNOWN or UNKNOWN in (namespace, account):
            continue
        pod = {"Service": POD_IDENTITY_PRINCIPAL}
        for st in statements(trust):
            if st.get("Effect") == ALLOW and st.get("Principal") != pod:
                yield role.urn, f"{role.label}: a pod role trusts {st.get('Principal')!r} as well; only {pod}"
        # A session of the same cluster that differs from the bound one in namespace or service account.
        cluster = {f"aws:RequestTag/{k}": v for k, v in _cluster_tags(trust).items()}
        for other_namespace, other_account in ((FOREIGN, account), (namespace, FOREIGN)):
            probe = {**cluster, f"aws:RequestTag/{NAMESPACE_TAG}": other_namespace,
                     f"aws:RequestTag/{SERVICE_ACCOUNT_TAG}": other_account}
            if decide([trust], "sts:AssumeRole", role.props.get("arn") or "*", probe, pod) == ALLOW:
                yield role.urn, (f"{role.label}: its trust policy admits a Pod Identity session of another "
                                 f"namespace or service account than {namespace}/{account} ({binding.label})")
                break
        documents = _documents(stack, role)
        for document in documents or []:
            for n, st in enumerate(statements(document)):
                if st.get("Effect") != ALLOW:
                    continue
                tags = {k.split("/", 1)[1]: v for k, v in dig(st, "Condition", "StringEquals", default={}).items()
                        if isinstance(k, str) and k.startswith("aws:PrincipalTag/")}
                if tags.get(NAMESPACE_TAG) != namespace or tags.get(SERVICE_ACCOUNT_TAG) != account:
                    yield role.urn, (f"{role.label}: permission statement {st.get('Sid') or n} is not held to the "
                                     f"session tags of {namespace}/{account} ({binding.label}); it names "
                                     f"{tags.get(NAMESPACE_TAG)!r}/{tags.get(SERVICE_ACCOUNT_TAG)!r}")


def _cluster_tags(trust: Any) -> dict[str, str]:
    """The cluster tag values the trust policy asks for (so a probe differs in one tag only)."""
    found = {}
    for st in statements(trust):
        for key, value in dig(st, "Condition", "StringEquals", default={}).items():
            if isinstance(key, str) and key.startswith("aws:RequestTag/eks-cluster") and isinstance(value, str):
                found[key.split("/", 1)[1]] = value
    return found


def check_team_writers_scoped(stack: Stack) -> Iterator[tuple[str, str]]:
    """A role tagged ``checkpoint-prefix`` (a team's writer) reaches no object, listing or key use
    outside that prefix of any bucket its documents name (no multipart-upload listing, which no
    condition key holds to a prefix), and has no managed policy."""
    for role in stack.of_type(ROLE):
        prefix = dig(role.props, "tags", PREFIX_TAG)
        if not isinstance(prefix, str):
            continue
        for att in stack.of_type(ROLE_POLICY_ATTACHMENT):
            if role in stack.refs(att, "role", ROLE)[0]:
                yield role.urn, f"{role.label}: a team writer with managed policy {att.props.get('policyArn')!r}"
        documents = _documents(stack, role)
        if documents is None:
            continue
        tags = _principal_tags(documents)
        named = {r for d in documents for st in statements(d) for r in as_list(st.get("Resource")) if isinstance(r, str)}
        buckets = {r.split(":::", 1)[1].split("/", 1)[0] for r in named if ":s3:::" in r}
        keys = sorted({r for r in named if ":kms:" in r} | {"*"})
        for bucket in sorted(buckets):
            arn = f"arn:aws:s3:::{bucket}"
            outside = f"{arn}/{FOREIGN}/x"
            probes = [("s3:GetObject", outside, {}), ("s3:PutObject", outside, {}),
                      ("s3:ListBucket", arn, {"s3:prefix": f"{FOREIGN}/"}), ("s3:ListBucketMultipartUploads", arn, {})]
            probes += [("kms:Decrypt", key, {"kms:EncryptionContext:aws:s3:arn": outside}) for key in keys]
            for action, resource, extra in probes:
                if decide(documents, action, resource, {**tags, **extra}) == ALLOW:
                    yield role.urn, (f"{role.label}: team writer for {prefix!r} is allowed {action} outside it "
                                     f"({resource} {extra or ''})".rstrip())


def _principal_tags(documents: list) -> dict[str, str]:
    """The session tags the documents ask for, as the request of the bound pod carries them."""
    return {k: v for d in documents for st in statements(d)
            for k, v in dig(st, "Condition", "StringEquals", default={}).items()
            if isinstance(k, str) and k.startswith("aws:PrincipalTag/") and isinstance(v, str)}


# --- the checkpoint bucket ----------------------------------------------------------------------

def _bucket_arn(bucket: Resource) -> Any:
    arn = bucket.props.get("arn")
    if isinstance(arn, str):
        return arn
    name = bucket.props.get("bucket")
    return f"arn:aws:s3:::{name}" if isinstance(name, str) else UNKNOWN


def _parts(stack: Stack, bucket: Resource, type_: str) -> list[Resource]:
    return [r for r in stack.of_type(type_) if bucket in stack.refs(r, "bucket", BUCKET)[0]]


def check_bucket_key_enforced(stack: Stack) -> Iterator[tuple[str, str]]:
    """Each bucket encrypts by default with a KMS key of this stack, bucket keys off (per-object
    encryption context); its policy refuses uploads asking for SSE-S3, SSE-C or another key; the
    key's policy refuses a team writer the key for an object outside its prefix."""
    for bucket in stack.of_type(BUCKET):
        arn = _bucket_arn(bucket)
        rules = [rule for enc in _parts(stack, bucket, "aws:s3/bucketServerSideEncryptionConfiguration:"
                                         "BucketServerSideEncryptionConfiguration")
                 for rule in as_list(enc.props.get("rules")) if isinstance(rule, Mapping)]
        keys = [k for enc in _parts(stack, bucket, "aws:s3/bucketServerSideEncryptionConfiguration:"
                                               "BucketServerSideEncryptionConfiguration")
                for k in stack.refs(enc, "rules", KMS_KEY)[0]]
        if not keys:
            yield bucket.urn, f"{bucket.label}: default encryption names no customer-managed KMS key of this stack (aws/s3 has no per-team scoping)"
        if any(r.get("bucketKeyEnabled") is True for r in rules):
            yield bucket.urn, (f"{bucket.label}: S3 Bucket Keys are on, so KMS sees the bucket ARN as encryption "
                               f"context and cannot scope a team to its prefix")
        policies = [parse_json(p.props.get("policy")) for p in _parts(stack, bucket, "aws:s3/bucketPolicy:BucketPolicy")]
        if arn is UNKNOWN or UNKNOWN in policies or not keys:
            continue
        put = {"aws:SecureTransport": "true"}
        for header, value in (("s3:x-amz-server-side-encryption", "AES256"),
                              ("s3:x-amz-server-side-encryption-aws-kms-key-id", f"arn:aws:kms:us-east-1:000000000000:key/{FOREIGN}"),
                              ("s3:x-amz-server-side-encryption-customer-algorithm", "AES256")):
            if decide(policies, "s3:PutObject", f"{arn}/k", {**put, header: value}) != DENY:
                yield bucket.urn, f"{bucket.label}: its policy does not refuse an upload with {header}={value}"
        for key in keys:
            for kp in stack.of_type(KEY_POLICY):
                if key not in stack.refs(kp, "keyId", KMS_KEY)[0]:
                    continue
                document = parse_json(kp.props.get("policy"))
                context = {f"aws:PrincipalTag/{PREFIX_TAG}": "checkpoints/teams/a/",
                           "kms:EncryptionContext:aws:s3:arn": f"{arn}/checkpoints/teams/b/x"}
                if document is not UNKNOWN and decide([document], "kms:Decrypt", "*", context,
                                                      {"AWS": f"arn:aws:iam::000000000000:role/{FOREIGN}"}) != DENY:
                    yield kp.urn, (f"{kp.label}: a role tagged {PREFIX_TAG}=checkpoints/teams/a/ may decrypt "
                                   f"{context['kms:EncryptionContext:aws:s3:arn']}")


def _kept_days(stack: Stack, bucket: Resource) -> Any:
    """Days the bucket keeps noncurrent versions (its lifecycle), 1 when it sets none."""
    days = [dig(rule, "noncurrentVersionExpiration", "noncurrentDays") for lc in _parts(stack, bucket, LIFECYCLE)
            for rule in as_list(lc.props.get("rules")) if isinstance(rule, Mapping)]
    return UNKNOWN if UNKNOWN in days else max([d for d in days if isinstance(d, (int, float))], default=1)


def _rule_vaults(stack: Stack, plan: Resource, rule: Mapping) -> list[Resource]:
    name = rule.get("targetVaultName")
    if isinstance(name, str):
        return [v for v in stack.of_type(BACKUP_VAULT) if name in v.identities()]
    return stack.refs(plan, "rules", BACKUP_VAULT)[0]


def _backup_problem(stack: Stack, bucket: Resource) -> str | None:
    """Why no locked backup keeps ``bucket`` as long as its versions, or None."""
    days = _kept_days(stack, bucket)
    plans = [p for sel in stack.of_type(BACKUP_SELECTION) if bucket in stack.refs(sel, "resources", BUCKET)[0]
             for p in stack.refs(sel, "planId", BACKUP_PLAN)[0]]
    if not plans:
        return "no AWS Backup plan selects it"
    rules = [(plan, r) for plan in plans for r in as_list(plan.props.get("rules")) if isinstance(r, Mapping)]
    kept = [(plan, r) for plan, r in rules
            if (d := dig(r, "lifecycle", "deleteAfter")) is UNKNOWN or days is UNKNOWN
            or (isinstance(d, (int, float)) and d >= days)]
    if not kept:
        return f"no rule of its backup plan keeps recovery points {days} days (its noncurrent versions' lifetime)"
    locks = stack.of_type(VAULT_LOCK)
    if not any(v in stack.refs(lock, "backupVaultName", BACKUP_VAULT)[0] and lock.props.get("minRetentionDays")
               for plan, r in kept for v in _rule_vaults(stack, plan, r) for lock in locks):
        return "the vault that keeps its backups has no Vault Lock with a minimum retention"
    return None


def check_bucket_retained(stack: Stack) -> Iterator[tuple[str, str]]:
    """A kept bucket (forceDestroy false) is selected by an AWS Backup plan with a rule keeping
    recovery points at least as long as its noncurrent versions, into a vault under Vault Lock; no
    file-system link imports S3 deletions; no pod role may delete objects, touch retention, or
    delete recovery points, unlock their vault or change the backups."""
    for bucket in stack.of_type(BUCKET):
        if bucket.props.get("forceDestroy") is True:
            continue
        problem = _backup_problem(stack, bucket)
        if problem:
            yield bucket.urn, f"{bucket.label}: kept on destroy but {problem}; a writer's overwrite would expire"
    for dra in stack.of_type(DATA_REPOSITORY):
        events = dig(dra.props, "s3", "autoImportPolicy", "events")
        if isinstance(events, list) and "DELETED" in events:
            yield dra.urn, f"{dra.label}: imports DELETED, so a delete in S3 deletes the file on the file system"
    for _, role, _, _ in _bindings(stack):
        documents = _documents(stack, role)
        if not documents:
            continue
        tags = _principal_tags(documents)
        buckets = [_bucket_arn(b) for b in stack.of_type(BUCKET)]
        for arn in (a for a in buckets if isinstance(a, str)):
            bad = [a for a in DESTRUCTIVE if decide(documents, a, f"{arn}/x" if "Object" in a else arn, tags) == ALLOW]
            if bad:
                yield role.urn, f"{role.label}: a pod role may {', '.join(bad)} on {arn}"
        vaults = [v.props.get("arn") for v in stack.of_type(BACKUP_VAULT)]
        for arn in (a for a in vaults if isinstance(a, str)):
            parts = _arn_parts(arn) or ["arn", "aws", "backup", "", "", ""]
            point = f"arn:{parts[1]}:backup:{parts[3]}:{parts[4]}:recovery-point:{FOREIGN}"
            bad = [a for a in BACKUP_DESTRUCTIVE
                   if any(decide(documents, a, r, tags) == ALLOW for r in (arn, point, "*"))]
            if bad:
                yield role.urn, f"{role.label}: a pod role may {', '.join(bad)} on {arn}"


def _dra_buckets(stack: Stack, dra: Resource) -> list[Resource]:
    """The buckets a data repository association links (``s3://<bucket>/...``), by name when known,
    else through the property dependencies of ``dataRepositoryPath``."""
    path = dra.props.get("dataRepositoryPath")
    if isinstance(path, str):
        name = path.removeprefix("s3://").split("/", 1)[0]
        return [b for b in stack.of_type(BUCKET) if name in b.identities()]
    return stack.refs(dra, "dataRepositoryPath", BUCKET)[0]


def check_notification_spares_fsx(stack: Stack) -> Iterator[tuple[str, str]]:
    """No BucketNotification on a bucket that an FSx data repository association imports from:
    PutBucketNotificationConfiguration replaces the association's own notification, and the
    association turns MISCONFIGURED, stopping automatic import and export (FSx for Lustre user
    guide, "Data repository association lifecycle state")."""
    importing = [dra for dra in stack.of_type(DATA_REPOSITORY)
                 if dig(dra.props, "s3", "autoImportPolicy", "events") not in (None, [])]
    for notification in stack.of_type(BUCKET_NOTIFICATION):
        buckets = stack.refs(notification, "bucket", BUCKET)[0]
        for dra in importing:
            shared = [b for b in _dra_buckets(stack, dra) if b in buckets]
            if shared:
                yield notification.urn, (f"{notification.label}: owns the notification configuration of "
                                         f"{shared[0].label}, which {dra.label} imports from; it would replace "
                                         f"FSx's notification and stop automatic import and export")


# --- nodes, endpoints, the API -----------------------------------------------------------------

def _managed_names(stack: Stack, role: Resource) -> list[tuple[Resource, str]]:
    return [(att, str(att.props.get("policyArn")).rsplit("/", 1)[-1]) for att in stack.of_type(ROLE_POLICY_ATTACHMENT)
            if role in stack.refs(att, "role", ROLE)[0]]


def _trusts_ec2(role: Resource) -> Any:
    trust = parse_json(role.props.get("assumeRolePolicy"))
    if trust is UNKNOWN:
        return UNKNOWN
    return any("ec2.amazonaws.com" in as_list(dig(s, "Principal", "Service")) for s in statements(trust))


def check_node_pulls_scoped(stack: Stack) -> Iterator[tuple[str, str]]:
    """No role trusted by EC2 may pull from a repository that the stack does not own (its own
    account's or another's), counting the managed policies it carries; it keeps
    ``ecr:GetAuthorizationToken``; no other role carries a node-only managed ECR policy."""
    owned = {r.props.get("arn") for r in stack.of_type("aws:ecr/repository:Repository")}
    for role in stack.of_type(ROLE):
        ec2 = _trusts_ec2(role)
        managed = _managed_names(stack, role)
        if ec2 is False:
            for att, name in managed:
                if name in NODE_REQUIRED_MANAGED:
                    yield att.urn, f"{att.label}: gives {role.label}, not a node role, {name}: every repository"
        if ec2 is not True:
            continue
        for att, name in managed:
            if name in BROAD_MANAGED - NODE_REQUIRED_MANAGED:
                yield att.urn, f"{att.label}: gives the node role {name}: every repository of the account"
        documents, parts = _documents(stack, role), _arn_parts(role.props.get("arn"))
        if documents is None or parts is None or has_unknown(owned):
            continue
        documents = documents + [MANAGED_DOCUMENTS[n] for _, n in managed if n in MANAGED_DOCUMENTS]
        if not documents:
            continue
        regions = {p[3] for d in documents for st in statements(d)
                   for r in as_list(st.get("Resource")) + as_list(st.get("NotResource"))
                   if (p := _arn_parts(r)) and p[2] == "ecr"}
        regions |= {p[3] for arn in owned if (p := _arn_parts(arn))}
        for region in sorted(regions):
            for account in (parts[4], "000000000000"):
                probe = f"arn:{parts[1]}:ecr:{region}:{account}:repository/{FOREIGN}"
                if probe not in owned and decide(documents, "ecr:BatchGetImage", probe) == ALLOW:
                    yield role.urn, f"{role.label}: may pull {probe}, a repository this stack does not own"
        if any(n in MANAGED_DOCUMENTS for _, n in managed) and decide(documents, "ecr:GetAuthorizationToken", "*") != ALLOW:
            yield role.urn, f"{role.label}: ecr:GetAuthorizationToken is not allowed, so no node can pull any image"


def check_s3_endpoint_limited(stack: Stack) -> Iterator[tuple[str, str]]:
    """An S3 gateway endpoint carries a policy that refuses buckets of other owners."""
    for ep in stack.of_type(VPC_ENDPOINT):
        service = ep.props.get("serviceName")
        if not (isinstance(service, str) and service.endswith(".s3")):
            continue
        policies = [parse_json(ep.props.get("policy"))] + [
            parse_json(p.props.get("policy")) for p in stack.of_type(ENDPOINT_POLICY)
            if ep in stack.refs(p, "vpcEndpointId", VPC_ENDPOINT)[0]]
        policies = [p for p in policies if p is not None]
        if UNKNOWN in policies:
            continue
        if not policies or decide(policies, "s3:PutObject", f"arn:aws:s3:::{FOREIGN}/x") == ALLOW:
            yield ep.urn, f"{ep.label}: lets any bucket through (no endpoint policy limiting it to the platform's)"


SECURITY_POLICIES = [
    ("imds-one-hop", check_imds_one_hop, (LAUNCH_TEMPLATE,)),
    ("iam-no-broad-allow", check_no_broad_allow, (ROLE_POLICY, IAM_POLICY, ROLE, ROLE_POLICY_ATTACHMENT)),
    (IAM_LINT, check_iam_valid, tuple(DOCUMENTS)),
    ("pod-roles-bound-to-session-tags", check_pod_roles_bound, ()),
    ("team-writers-scoped-to-prefix", check_team_writers_scoped, ()),
    ("checkpoint-key-enforced", check_bucket_key_enforced, ()),
    ("checkpoint-retained", check_bucket_retained, ()),
    ("node-pulls-scoped", check_node_pulls_scoped, ()),
    ("bucket-notification-spares-fsx", check_notification_spares_fsx, ()),
    ("s3-endpoint-limited", check_s3_endpoint_limited, ()),
]
"""(policy name, check, resource types: empty for a stack policy); the pack registers them as they
are, its description the check's first docstring paragraph."""

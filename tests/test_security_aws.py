"""Attacks a team member could try on the AWS side, played against the documents the shared stack
renders, statement by statement (``analysis.rules.iam_eval``): each would have succeeded before the
platform held pod roles to their session tags, put the bucket on its own key, kept deletes from
propagating, scoped node pulls and limited the S3 endpoint."""

from __future__ import annotations

import json

import pytest
from conftest import graph_of

from analysis.rules.iam_eval import ALLOW, DENY, decide
from components.iam import POD_IDENTITY_PRINCIPAL

STACK = "p5en-shared"
NAME = "rl-p5en-shared"
BUCKET = f"arn:aws:s3:::{NAME}-checkpoints"
POD = {"Service": POD_IDENTITY_PRINCIPAL}
ANYONE = {"AWS": "arn:aws:iam::123456789012:role/someone"}


@pytest.fixture(scope="module")
def g():
    return graph_of(STACK)


def doc(g, type_, name, key="policy"):
    return json.loads(g.named(type_, name).inputs[key])


def role_policy(g, name):
    return doc(g, "aws:iam/rolePolicy:RolePolicy", name)


def session(g, namespace, account="checkpoint-writer", prefix="aws:PrincipalTag"):
    """The tags EKS Pod Identity puts on a session of ``namespace/account`` pods of the cluster."""
    cluster = g.named("aws:eks/cluster:Cluster", NAME).outputs
    return {f"{prefix}/eks-cluster-arn": cluster["arn"], f"{prefix}/eks-cluster-name": cluster["name"],
            f"{prefix}/kubernetes-namespace": namespace,
            f"{prefix}/kubernetes-service-account": account}


def test_a_team_reads_and_writes_only_its_own_prefix(g):
    alpha = role_policy(g, f"{NAME}-team-alpha-writer")
    me = session(g, "team-alpha")
    assert decide([alpha], "s3:GetObject", f"{BUCKET}/checkpoints/teams/alpha/run/iter_1/x", me) == ALLOW
    for key in ("checkpoints/teams/beta/run/x", "checkpoints/run/x", "other"):
        for action in ("s3:GetObject", "s3:PutObject"):
            assert decide([alpha], action, f"{BUCKET}/{key}", me) is None, (action, key)
    assert decide([alpha], "s3:ListBucket", BUCKET, {**me, "s3:prefix": "checkpoints/teams/beta/"}) is None


def test_another_namespace_gets_nothing_from_a_teams_role(g):
    """An association moved or added to team-beta (or another service account) yields no session
    (trust) and, had it one, no permission."""
    role = g.named("aws:iam/role:Role", f"{NAME}-team-alpha-writer")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert decide([trust], "sts:AssumeRole", role.outputs["arn"], session(g, "team-alpha", prefix="aws:RequestTag"), POD) == ALLOW
    for ns, sa in (("team-beta", "checkpoint-writer"), ("team-alpha", "default"), ("rl", "checkpoint-writer")):
        assert decide([trust], "sts:AssumeRole", role.outputs["arn"], session(g, ns, sa, "aws:RequestTag"), POD) is None
        permissions = role_policy(g, f"{NAME}-team-alpha-writer")
        assert decide([permissions], "s3:GetObject", f"{BUCKET}/checkpoints/teams/alpha/x", session(g, ns, sa)) is None
    assert decide([trust], "sts:AssumeRole", role.outputs["arn"], {}, ANYONE) is None


@pytest.mark.parametrize("role", ["vpc-cni", "cloudwatch", "checkpoints-writer"])
def test_every_pod_role_trusts_only_its_session_tags(g, role):
    trust = doc(g, "aws:iam/role:Role", f"{NAME}-{role}", "assumeRolePolicy")
    assert [s["Principal"] for s in trust["Statement"]] == [POD]
    assert decide([trust], "sts:AssumeRole", "*", session(g, "team-alpha", prefix="aws:RequestTag"), POD) is None


def test_the_key_refuses_a_team_another_teams_objects(g):
    key = doc(g, "aws:kms/keyPolicy:KeyPolicy", f"{NAME}-checkpoints")
    alpha = {"aws:PrincipalTag/checkpoint-prefix": "checkpoints/teams/alpha/"}
    for obj in ("checkpoints/teams/beta/x", "checkpoints/x"):
        ctx = {**alpha, "kms:EncryptionContext:aws:s3:arn": f"{BUCKET}/{obj}"}
        assert decide([key], "kms:Decrypt", "*", ctx, ANYONE) == DENY
        assert decide([key], "kms:GenerateDataKey", "*", ctx, ANYONE) == DENY
    own = {**alpha, "kms:EncryptionContext:aws:s3:arn": f"{BUCKET}/checkpoints/teams/alpha/x"}
    assert decide([key], "kms:Decrypt", "*", own, ANYONE) != DENY
    writer = role_policy(g, f"{NAME}-team-alpha-writer")
    beta_ctx = {**session(g, "team-alpha"), "kms:EncryptionContext:aws:s3:arn": f"{BUCKET}/checkpoints/teams/beta/x"}
    key_arn = g.named("aws:kms/key:Key", f"{NAME}-checkpoints").outputs["arn"]
    assert decide([writer], "kms:Decrypt", key_arn, beta_ctx) is None


def test_uploads_with_another_encryption_or_key_are_refused(g):
    policy = doc(g, "aws:s3/bucketPolicy:BucketPolicy", f"{NAME}-checkpoints")
    key_arn = g.named("aws:kms/key:Key", f"{NAME}-checkpoints").outputs["arn"]
    tls = {"aws:SecureTransport": "true"}
    refused = [{"s3:x-amz-server-side-encryption": "AES256"},
               {"s3:x-amz-server-side-encryption": "aws:kms:dsse"},
               {"s3:x-amz-server-side-encryption": "aws:kms",
                "s3:x-amz-server-side-encryption-aws-kms-key-id": "arn:aws:kms:us-east-1:999999999999:key/mine"},
               {"s3:x-amz-server-side-encryption-customer-algorithm": "AES256"}]
    for headers in refused:
        assert decide([policy], "s3:PutObject", f"{BUCKET}/checkpoints/teams/alpha/x", {**tls, **headers}) == DENY, headers
    for headers in ({}, {"s3:x-amz-server-side-encryption": "aws:kms",
                         "s3:x-amz-server-side-encryption-aws-kms-key-id": key_arn}):
        assert decide([policy], "s3:PutObject", f"{BUCKET}/x", {**tls, **headers}) is None
    enc = g.named("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
                  f"{NAME}-checkpoints").inputs["rules"][0]
    assert enc["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"] == key_arn
    assert enc["bucketKeyEnabled"] is False


def test_no_writer_can_delete_or_shorten_retention(g):
    vault = g.named("aws:backup/vault:Vault", f"{NAME}-checkpoints-backup").outputs["arn"]
    for name, ns in ((f"{NAME}-checkpoints-writer", "rl"), (f"{NAME}-team-alpha-writer", "team-alpha")):
        policy = role_policy(g, name)
        for action in ("s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectRetention",
                       "s3:BypassGovernanceRetention", "s3:PutLifecycleConfiguration"):
            assert decide([policy], action, f"{BUCKET}/checkpoints/teams/alpha/x", session(g, ns)) is None
        for action in ("backup:DeleteRecoveryPoint", "backup:UpdateRecoveryPointLifecycle",
                       "backup:DeleteBackupVaultLockConfiguration", "backup:PutBackupVaultAccessPolicy"):
            assert decide([policy], action, vault, session(g, ns)) is None


def test_no_object_lock_asks_uploads_for_a_checksum(g):
    """A default Object Lock retention would make S3 refuse any PutObject/UploadPart without
    Content-MD5 or x-amz-checksum-*; FSx's export is not documented to send one."""
    assert not [r for r in g.resources if r.type == "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration"]


def test_a_kept_bucket_is_backed_up_into_a_locked_vault(g):
    days = g.named("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
                   f"{NAME}-checkpoints").inputs["rules"][0]["noncurrentVersionExpiration"]["noncurrentDays"]
    backup = f"{NAME}-checkpoints-backup"
    vault = g.named("aws:backup/vault:Vault", backup)
    assert vault.inputs["kmsKeyArn"] == g.named("aws:kms/key:Key", f"{backup}-vault").outputs["arn"]
    lock = g.named("aws:backup/vaultLockConfiguration:VaultLockConfiguration", backup).inputs
    assert lock["backupVaultName"] == vault.outputs["name"]
    assert lock["minRetentionDays"] == min(days, 35) and lock["maxRetentionDays"] == days
    assert "changeableForDays" not in lock  # governance: the stack did not opt in to compliance
    rules = {r["ruleName"]: r for r in g.named("aws:backup/plan:Plan", backup).inputs["rules"]}
    assert rules["continuous"]["enableContinuousBackup"] is True
    assert rules["continuous"]["lifecycle"]["deleteAfter"] == min(days, 35)
    assert rules["daily"]["lifecycle"]["deleteAfter"] == days and rules["daily"]["schedule"].startswith("cron(")
    assert {r["targetVaultName"] for r in rules.values()} == {vault.outputs["name"]}
    selection = g.named("aws:backup/selection:Selection", backup).inputs
    assert selection["resources"] == [BUCKET]
    role = g.named("aws:iam/role:Role", f"{backup}-role")
    assert selection["iamRoleArn"] == role.outputs["arn"]
    assert [s["Principal"] for s in json.loads(role.inputs["assumeRolePolicy"])["Statement"]] == [
        {"Service": "backup.amazonaws.com"}]
    attached = {r.inputs["policyArn"].rsplit("/", 1)[-1] for r in g.resources
                if r.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment" and r.inputs["role"] == role.outputs["name"]}
    assert attached == {"AWSBackupServiceRolePolicyForS3Backup", "AWSBackupServiceRolePolicyForS3Restore"}
    # No BucketNotification: it would replace FSx's and stop the DRA; AWS Backup turns EventBridge on.
    assert g.of_type("aws:s3/bucketNotification:BucketNotification") == []


def test_the_bucket_key_lets_the_backup_role_decrypt(g):
    """The key policy's team deny only hits roles tagged checkpoint-prefix; the backup role is not."""
    key = doc(g, "aws:kms/keyPolicy:KeyPolicy", f"{NAME}-checkpoints")
    role = g.named("aws:iam/role:Role", f"{NAME}-checkpoints-backup-role")
    assert not role.inputs.get("tags")
    ctx = {"kms:EncryptionContext:aws:s3:arn": f"{BUCKET}/checkpoints/teams/beta/x"}
    for action in ("kms:Decrypt", "kms:GenerateDataKey"):
        assert decide([key], action, "*", ctx, {"AWS": role.outputs["arn"]}) != DENY


def test_a_delete_in_s3_never_reaches_the_file_system(g):
    dra = g.named("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", f"{NAME}-fsx")
    assert "DELETED" not in dra.inputs["s3"]["autoImportPolicy"]["events"]
    assert "DELETED" not in dra.inputs["s3"]["autoExportPolicy"]["events"]


def test_nodes_pull_only_the_platforms_images(g):
    """The node role carries AmazonEC2ContainerRegistryReadOnly (EKS CreateNodegroup requires it,
    aws/containers-roadmap#1610), which allows every pull on ``*``; its own Deny keeps pulls to the
    platform's repository and the EKS registry, and the token is never denied."""
    from analysis.rules.security import MANAGED_DOCUMENTS
    node = g.named("aws:iam/role:Role", f"{NAME}-node")
    attached = {a.inputs["policyArn"].rsplit("/", 1)[-1] for a in g.children(node)}
    assert "AmazonEC2ContainerRegistryReadOnly" in attached
    assert "AmazonEC2ContainerRegistryPullOnly" not in attached
    documents = [role_policy(g, f"{NAME}-images-node-pulls"), MANAGED_DOCUMENTS["AmazonEC2ContainerRegistryReadOnly"]]
    repo = g.named("aws:ecr/repository:Repository", f"{NAME}-images").outputs["arn"]
    assert decide(documents, "ecr:GetAuthorizationToken", "*") == ALLOW
    for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"):
        assert decide(documents, action, repo) == ALLOW
        assert decide(documents, action, "arn:aws:ecr:us-east-1:602401143452:repository/eks/coredns") == ALLOW
        for other in ("arn:aws:ecr:us-east-1:123456789012:repository/finance/model",
                      "arn:aws:ecr:us-west-2:123456789012:repository/anything",
                      "arn:aws:ecr:us-east-1:999999999999:repository/public-looking"):
            assert decide(documents, action, other) == DENY, (action, other)


def test_the_s3_endpoint_reaches_only_the_platform_bucket_and_what_nodes_need(g):
    policy = doc(g, "aws:ec2/vpcEndpointPolicy:VpcEndpointPolicy", f"{NAME}-s3")
    assert decide([policy], "s3:PutObject", f"{BUCKET}/checkpoints/x") == ALLOW
    assert decide([policy], "s3:GetObject", "arn:aws:s3:::prod-us-east-1-starport-layer-bucket/l") == ALLOW
    assert decide([policy], "s3:GetObject", "arn:aws:s3:::al2023-repos-us-east-1-de612dc2/core/x.rpm") == ALLOW
    for action, resource in (("s3:PutObject", "arn:aws:s3:::attacker-bucket/loot"),
                             ("s3:GetObject", "arn:aws:s3:::someone-elses-data/x"),
                             ("s3:PutObject", "arn:aws:s3:::prod-us-east-1-starport-layer-bucket/l")):
        assert decide([policy], action, resource) is None, resource
    endpoint = g.named("aws:ec2/vpcEndpoint:VpcEndpoint", f"{NAME}-s3")
    assert g.named("aws:ec2/vpcEndpointPolicy:VpcEndpointPolicy", f"{NAME}-s3").inputs["vpcEndpointId"] == endpoint.outputs["id"]


def test_pull_through_caches_only_for_anonymous_upstreams_under_the_stacks_namespace(g):
    """The shared stack names no credential: no rule for Docker Hub, GHCR or GitLab, and every rule's
    prefix under the stack's own namespace (two stacks of one account never share a rule)."""
    rules = {r.inputs["upstreamRegistryUrl"]: r.inputs for r in g.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")}
    assert sorted(rules) == ["public.ecr.aws", "quay.io", "registry.k8s.io"]
    assert all(r["ecrRepositoryPrefix"].startswith(f"{NAME}/") and "credentialArn" not in r for r in rules.values())


# --- the evaluator itself ----------------------------------------------------------------------

def test_evaluator_follows_iam_semantics():
    deny_not = {"Statement": [{"Effect": "Deny", "Action": "s3:*", "Resource": "*",
                               "Condition": {"StringNotEquals": {"k": "v"}}}]}
    assert decide([deny_not], "s3:GetObject", "x", {}) == DENY          # negated operator, key absent: true
    assert decide([deny_not], "s3:GetObject", "x", {"k": "v"}) is None
    allow_if = {"Statement": [{"Effect": "Allow", "Action": "S3:Get*", "Resource": "arn:aws:s3:::b/${aws:PrincipalTag/p}*",
                               "Condition": {"StringEqualsIfExists": {"k": "v"}}}]}
    assert decide([allow_if], "s3:GetObject", "arn:aws:s3:::b/a/x", {"aws:PrincipalTag/p": "a/"}) == ALLOW
    assert decide([allow_if], "s3:GetObject", "arn:aws:s3:::b/c/x", {"aws:PrincipalTag/p": "a/"}) is None
    assert decide([allow_if], "s3:GetObject", "arn:aws:s3:::b/a/x", {}) is None    # variable without a value
    assert decide([allow_if], "s3:GetObject", "arn:aws:s3:::b/a/x", {"aws:PrincipalTag/p": "a/", "k": "w"}) is None
    both = {"Statement": allow_if["Statement"] + [{"Effect": "Deny", "NotAction": "s3:Put*", "Resource": "*"}]}
    assert decide([both], "s3:GetObject", "arn:aws:s3:::b/a/x", {"aws:PrincipalTag/p": "a/"}) == DENY
    unknown_op = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*",
                                 "Condition": {"DateGreaterThan": {"aws:CurrentTime": "2020-01-01"}}}]}
    assert decide([unknown_op], "s3:GetObject", "x", {"aws:CurrentTime": "2030-01-01"}) is None

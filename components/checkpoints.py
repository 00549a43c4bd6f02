"""CheckpointBucket: the S3 bucket that holds weeks of training and must never lose it.

Guarantees:
- versioning on (an overwrite keeps the previous object as a noncurrent version);
- every kept bucket is backed up by AWS Backup (``checkpoint_backup.CheckpointBackup``): continuous
  backups (point-in-time restore) and daily snapshots kept ``noncurrentVersionDays`` days, in a
  vault under Vault Lock that no role here may delete from. No S3 Object Lock: a default retention
  would require a ``Content-MD5`` or ``x-amz-checksum-*`` header on every upload (S3 API reference,
  PutObject), which FSx for Lustre's export is not documented to send;
- writers (pod roles) may read, write and abort uploads, never delete: no ``s3:DeleteObject*``;
- SSE-KMS with this bucket's own customer-managed key (rotated yearly), S3 Bucket Keys OFF: with a
  bucket key S3 asks KMS with the bucket ARN as encryption context, so a key policy could not tell
  one team's prefix from another's; without it every object's context is its own ARN
  (``kms:EncryptionContext:aws:s3:arn``, S3 user guide "Using server-side encryption with AWS KMS
  keys", encryption context, and "Reducing the cost of SSE-KMS with Amazon S3 Bucket Keys"). The
  price is one KMS request per object written or read, where a bucket key would cache one;
- the bucket policy denies any request not over TLS, and any upload that asks for another
  encryption (SSE-S3, DSSE, SSE-C) or names another KMS key;
- the key policy denies a role tagged ``checkpoint-prefix`` (every team writer) any use of the key
  for an object outside ``<bucket>/<its prefix>``, whatever its IAM policy says;
- every public access path blocked; ACLs disabled (owner enforced); incomplete multipart uploads
  aborted after 7 days; noncurrent versions expire after the configured days;
- ``pulumi destroy`` leaves bucket, key and data in place unless the stack sets
  ``checkpoints.retainOnDestroy: false`` (then no backup either: dev stays simple).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from stackconfig.stack import CheckpointSettings
from .checkpoint_backup import CheckpointBackup
from .iam import PodRole, policy_document

SSE_ALGORITHM = "aws:kms"
PREFIX_TAG = "checkpoint-prefix"
"""Role tag naming the one prefix a writer role may use the key for (read as aws:PrincipalTag)."""
KMS_DATA_ACTIONS = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:GenerateDataKey*", "kms:ReEncrypt*"]
WRITER_KMS_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey"]
"""What S3 asks KMS for on a writer's behalf: GenerateDataKey to write, Decrypt to read (and for
multipart uploads) (S3 user guide, "Using server-side encryption with AWS KMS keys", permissions)."""
FSX_S3_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"
"""The service-linked role FSx for Lustre uses to export to and import from a linked bucket."""
OBJECT_ACTIONS = ["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:AbortMultipartUpload",
                  "s3:ListMultipartUploadParts"]


def _object_arn_pattern(bucket_arn: str, prefix: str) -> str:
    return f"{bucket_arn}/{prefix}*"


def bucket_policy(bucket_arn: str, key_arn: str) -> str:
    """TLS only; uploads only with this bucket's KMS key (or no header: the default is that key)."""
    objects = f"{bucket_arn}/*"
    return policy_document([
        {"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
         "Resource": [bucket_arn, objects], "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        {"Sid": "DenyOtherEncryption", "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
         "Resource": objects, "Condition": {
             "Null": {"s3:x-amz-server-side-encryption": "false"},
             "StringNotEquals": {"s3:x-amz-server-side-encryption": SSE_ALGORITHM}}},
        {"Sid": "DenyOtherKmsKey", "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
         "Resource": objects, "Condition": {
             "Null": {"s3:x-amz-server-side-encryption-aws-kms-key-id": "false"},
             "StringNotEquals": {"s3:x-amz-server-side-encryption-aws-kms-key-id": key_arn}}},
        {"Sid": "DenyCustomerKeys", "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
         "Resource": objects, "Condition": {"Null": {"s3:x-amz-server-side-encryption-customer-algorithm": "false"}}},
    ])


def key_policy(key_arn: str, bucket_arn: str) -> str:
    """The account administers the key (IAM policies apply: KMS developer guide, "Default key
    policy"); FSx's S3-access role may use it for the data repository; a role tagged
    ``checkpoint-prefix`` may use it only for objects under that prefix."""
    _, partition, _, _, account, _ = key_arn.split(":", 5)
    return policy_document([
        {"Sid": "AccountAdministersKey", "Effect": "Allow", "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
         "Action": "kms:*", "Resource": "*"},
        {"Sid": "FsxDataRepository", "Effect": "Allow", "Principal": "*",
         "Action": [*KMS_DATA_ACTIONS, "kms:DescribeKey"], "Resource": "*", "Condition": {
             "StringEquals": {"aws:PrincipalAccount": account},
             "ArnLike": {"aws:PrincipalArn": f"arn:{partition}:iam::{account}:{FSX_S3_ROLE}"}}},
        {"Sid": "DenyPrefixWritersOutsideTheirPrefix", "Effect": "Deny", "Principal": "*",
         "Action": KMS_DATA_ACTIONS, "Resource": "*", "Condition": {
             "Null": {f"aws:PrincipalTag/{PREFIX_TAG}": "false"},
             "StringNotLike": {"kms:EncryptionContext:aws:s3:arn":
                               _object_arn_pattern(bucket_arn, f"${{aws:PrincipalTag/{PREFIX_TAG}}}")}}},
    ])


def _bucket_statements(bucket_arn: str, prefix: str) -> list[dict]:
    """Bucket-level reads. ``s3:prefix`` is a condition key of ListBucket only (Service
    Authorization Reference, Amazon S3, actions and their condition keys): on GetBucketLocation or
    ListBucketMultipartUploads it is never set, so an Allow conditioned on it never matches. A prefix
    writer lists only its prefix and asks the bucket's region without that condition (it names no object);
    it lists no multipart uploads, which no key can hold to a prefix and which would show every
    team's upload keys: it completes or aborts its own by upload id, the lifecycle rule the rest."""
    if not prefix:
        return [{"Sid": "List", "Effect": "Allow", "Resource": bucket_arn,
                 "Action": ["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"]}]
    return [{"Sid": "List", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket_arn,
             "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}}},
            {"Sid": "BucketLocation", "Effect": "Allow", "Action": ["s3:GetBucketLocation"], "Resource": bucket_arn}]


def writer_policy(bucket_arn: str, key_arn: str, prefix: str = "") -> str:
    """Read and write objects of the bucket, or only under ``prefix`` (listing limited to it too,
    ``_bucket_statements``); never delete; the bucket's key only for objects of that prefix (the S3
    encryption context)."""
    objects = _object_arn_pattern(bucket_arn, prefix)
    statements = [
        *_bucket_statements(bucket_arn, prefix),
        {"Sid": "Objects", "Effect": "Allow", "Action": OBJECT_ACTIONS, "Resource": objects},
        {"Sid": "Key", "Effect": "Allow", "Action": WRITER_KMS_ACTIONS, "Resource": key_arn,
         "Condition": {"StringLike": {"kms:EncryptionContext:aws:s3:arn": objects}}},
    ]
    if prefix:
        # S3 keeps ".." in a key as it is (S3 user guide, "Naming Amazon S3 objects": avoid "../"), so the
        # prefix Allow matches "<prefix>../<other team>/x"; a file system import or a sync to disk resolves
        # it into another team's directory. A ".." path segment is refused under the prefix.
        climbs = [f"{bucket_arn}/{prefix}{c}" for c in ("..", "../*", "*/..", "*/../*")]
        statements.append({"Sid": "NoClimb", "Effect": "Deny", "Action": ["s3:PutObject"], "Resource": climbs})
    return policy_document(statements)


class CheckpointBucket(pulumi.ComponentResource):
    """Versioned, backed-up, encrypted, private, TLS-only S3 bucket plus its writer role."""

    def __init__(self, name: str, settings: CheckpointSettings, cluster_name: pulumi.Input[str],
                 cluster_arn: pulumi.Input[str] | None = None, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:storage:CheckpointBucket", name, None, opts)
        retain = settings.retain_on_destroy
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=retain)
        self.bucket = aws.s3.Bucket(name, force_destroy=not retain, opts=kept)
        self.key = aws.kms.Key(name, description=f"checkpoint bucket {name}", enable_key_rotation=True,
                               deletion_window_in_days=30, opts=kept)
        on_bucket = pulumi.ResourceOptions(parent=self.bucket, retain_on_delete=retain)
        bucket_id = self.bucket.id
        aws.kms.KeyPolicy(name, key_id=self.key.id, policy=pulumi.Output.all(self.key.arn, self.bucket.arn).apply(
            lambda a: key_policy(*a)), opts=pulumi.ResourceOptions(parent=self.key, retain_on_delete=retain))
        aws.s3.BucketPublicAccessBlock(name, bucket=bucket_id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=True, opts=on_bucket)
        aws.s3.BucketOwnershipControls(name, bucket=bucket_id, rule=aws.s3.BucketOwnershipControlsRuleArgs(
            object_ownership="BucketOwnerEnforced"), opts=on_bucket)
        versioning = aws.s3.BucketVersioning(name, bucket=bucket_id,
                                             versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(
                                                 status="Enabled"), opts=on_bucket)
        aws.s3.BucketServerSideEncryptionConfiguration(name, bucket=bucket_id, rules=[
            aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                bucket_key_enabled=False,
                apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm=SSE_ALGORITHM, kms_master_key_id=self.key.arn))], opts=on_bucket)
        aws.s3.BucketPolicy(name, bucket=bucket_id, policy=pulumi.Output.all(self.bucket.arn, self.key.arn).apply(
            lambda a: bucket_policy(*a)), opts=on_bucket)
        aws.s3.BucketLifecycleConfiguration(name, bucket=bucket_id, rules=[
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="expire-old-versions", status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=settings.noncurrent_version_days),
                abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=7))],
            opts=pulumi.ResourceOptions(parent=self.bucket, retain_on_delete=retain, depends_on=[versioning]))
        self.backup = CheckpointBackup(f"{name}-backup", settings, self.bucket,
                                       opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning])) if retain else None
        self.name = self.bucket.bucket
        self.arn = self.bucket.arn
        self.key_arn = self.key.arn
        self._cluster = (cluster_name, cluster_arn)
        self.writer = self._writer(f"{name}-writer", settings.namespace, settings.service_account, "",
                                   pulumi.ResourceOptions(parent=self))
        self.register_outputs({"bucket": self.bucket.bucket, "writerRoleArn": self.writer.arn,
                               "kmsKeyArn": self.key.arn})

    def _writer(self, name: str, namespace: str, service_account: str, prefix: str,
                opts: pulumi.ResourceOptions) -> PodRole:
        cluster_name, cluster_arn = self._cluster
        policy = pulumi.Output.all(self.arn, self.key_arn).apply(lambda a: writer_policy(a[0], a[1], prefix))
        return PodRole(name, cluster_name, namespace, service_account, inline_policy=policy,
                       cluster_arn=cluster_arn, tags={PREFIX_TAG: prefix} if prefix else None, opts=opts)

    def prefix_writer(self, name: str, namespace: str, service_account: str, prefix: str,
                      opts: pulumi.ResourceOptions | None = None) -> PodRole:
        """A Pod Identity role for ``namespace/service_account`` that reaches only ``prefix`` of the
        bucket (a team's checkpoints: one team cannot read or write another's), and the bucket's
        key only for objects under it (its IAM policy, and the key policy through its
        ``checkpoint-prefix`` tag)."""
        if not prefix.endswith("/"):
            raise ValueError(f"prefix {prefix!r}: end it with '/' so it names a folder, not a name start")
        return self._writer(name, namespace, service_account, prefix, opts or pulumi.ResourceOptions(parent=self))

"""CheckpointBucket: the S3 bucket that holds weeks of training and must never lose it.

Guarantees: versioning on (an overwrite or delete keeps the previous object); SSE-KMS at rest
with a bucket key; every public access path blocked; ACLs disabled (owner enforced); a bucket
policy that denies any request not over TLS; noncurrent versions expire after the configured
days, incomplete multipart uploads after 7; ``pulumi destroy`` leaves the bucket and its data in
place unless the stack sets ``checkpoints.retainOnDestroy: false``. Writers get a Pod Identity
role that reaches this bucket only.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from stackconfig.stack import CheckpointSettings
from .iam import PodRole, policy_document


def tls_only_policy(bucket_arn: str) -> str:
    return policy_document([{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }])


def writer_policy(bucket_arn: str, prefix: str = "") -> str:
    """Read and write objects of the bucket, or only under ``prefix`` (listing limited to it too:
    ``s3:prefix`` condition of ListBucket, IAM user guide "Amazon S3 condition keys")."""
    listing: dict = {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation",
                                                   "s3:ListBucketMultipartUploads"], "Resource": bucket_arn}
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}*"]}}
    return policy_document([
        listing,
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                                       "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
         "Resource": f"{bucket_arn}/{prefix}*"},
    ])


class CheckpointBucket(pulumi.ComponentResource):
    """Versioned, encrypted, private, TLS-only S3 bucket plus its writer role."""

    def __init__(self, name: str, settings: CheckpointSettings, cluster_name: pulumi.Input[str],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:storage:CheckpointBucket", name, None, opts)
        retain = settings.retain_on_destroy
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=retain)
        self.bucket = aws.s3.Bucket(name, force_destroy=not retain, opts=kept)
        on_bucket = pulumi.ResourceOptions(parent=self.bucket, retain_on_delete=retain)
        bucket_id = self.bucket.id
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
                bucket_key_enabled=True,
                apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="aws:kms"))], opts=on_bucket)
        aws.s3.BucketPolicy(name, bucket=bucket_id, policy=self.bucket.arn.apply(tls_only_policy),
                            opts=on_bucket)
        aws.s3.BucketLifecycleConfiguration(name, bucket=bucket_id, rules=[
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="expire-old-versions", status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=settings.noncurrent_version_days),
                abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=7))],
            opts=pulumi.ResourceOptions(parent=self.bucket, retain_on_delete=retain, depends_on=[versioning]))
        self.writer = PodRole(f"{name}-writer", cluster_name, settings.namespace, settings.service_account,
                              inline_policy=self.bucket.arn.apply(writer_policy),
                              opts=pulumi.ResourceOptions(parent=self))
        self.name = self.bucket.bucket
        self.arn = self.bucket.arn
        self._cluster_name = cluster_name
        self.register_outputs({"bucket": self.bucket.bucket, "writerRoleArn": self.writer.arn})

    def prefix_writer(self, name: str, namespace: str, service_account: str, prefix: str,
                      opts: pulumi.ResourceOptions | None = None) -> PodRole:
        """A Pod Identity role for ``namespace/service_account`` that reaches only ``prefix`` of the
        bucket (a team's checkpoints: one team cannot read or write another's)."""
        if not prefix.endswith("/"):
            raise ValueError(f"prefix {prefix!r}: end it with '/' so it names a folder, not a name start")
        return PodRole(name, self._cluster_name, namespace, service_account,
                       inline_policy=self.arn.apply(lambda arn: writer_policy(arn, prefix)),
                       opts=opts or pulumi.ResourceOptions(parent=self))

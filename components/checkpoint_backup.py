"""CheckpointBackup: AWS Backup of a kept checkpoint bucket, in a vault under Vault Lock.

Guarantees (for a bucket kept on destroy):
- a backup vault on its own customer-managed KMS key (rotated yearly), not the bucket's: S3 backups
  are encrypted with the vault's key (AWS Backup developer guide, "Encryption for backups in AWS
  Backup": S3 backups use the vault's key), so scheduling the bucket's key for deletion leaves the
  recovery points readable;
- Vault Lock with a minimum retention (AWS Backup developer guide, "AWS Backup Vault Lock"): no
  recovery point in the vault can be deleted, or have its lifecycle shortened, before it expires, and
  a backup job asking for less than the minimum fails. Governance mode by default (no
  ``changeable_for_days``: a principal holding ``backup:DeleteBackupVaultLockConfiguration``, which no
  role here has, can remove the lock); ``checkpoints.backupVaultLock: compliance`` sets
  ``changeable_for_days`` (3, the least the API takes: 72-hour cooling-off) after which the lock
  is immutable, even for the account root, and the vault cannot be deleted while it holds points;
- the plan is created and updated after the lock (``depends_on``): a later change of
  ``noncurrentVersionDays`` moves the lock's bounds and the rules' lifetimes together, and under a
  compliance lock past its grace time AWS refuses the lock's change ("AWS Backup Vault Lock": a
  compliance lock can no longer be changed or deleted once the grace time has passed); the plan,
  waiting on it, is then left as it was, so no rule asks for a lifetime outside the lock's bounds
  (a backup job asking for a retention outside them fails). Such a change needs a new vault;
- one backup plan with a continuous rule (point-in-time restore, AWS Backup keeps it at most 35
  days: "Continuous backups and point-in-time recovery (PITR)") and a daily rule keeping each
  snapshot ``noncurrentVersionDays`` days; both into the same vault, as S3 requires ("Amazon S3
  backups": continuous and periodic backups of a bucket must reside in the same vault);
- a selection naming the bucket, with a role AWS Backup assumes that carries the two AWS managed
  policies the S3 prerequisites name (``AWSBackupServiceRolePolicyForS3Backup``,
  ``AWSBackupServiceRolePolicyForS3Restore``); they grant ``kms:Decrypt`` through S3 on any key, and
  the bucket's key policy lets the account's IAM policies apply (``AccountAdministersKey``) and
  denies only roles tagged ``checkpoint-prefix``, which this role is not;
- no ``aws.s3.BucketNotification``: PutBucketNotificationConfiguration replaces a bucket's whole
  notification configuration (S3 API reference; terraform-provider-aws
  ``internal/service/s3/bucket_notification.go`` sends only the declared blocks), and the FSx data
  repository association keeps its own notification on this bucket for automatic import; replaced,
  the association turns MISCONFIGURED and stops automatic export too (FSx for Lustre user guide,
  "Data repository association lifecycle state"). AWS Backup turns EventBridge delivery on itself
  when it starts the continuous backup: its S3 role policy ``AWSBackupServiceRolePolicyForS3Backup``
  (v4, AWS Managed Policy Reference) grants the ``AwsBackupManagedRule*`` EventBridge rules and
  bucket-level S3 calls (``S3BucketPermissions``) for that (AWS Backup developer guide, "Creating
  Amazon S3 backups"). The policy pack refuses a BucketNotification on a bucket a DRA imports from
  (``bucket-notification-spares-fsx``), and ``python -m components.fsx_status`` shows the lifecycle.

Nothing here is asked of an uploader: unlike an S3 Object Lock default retention, which requires a
``Content-MD5`` or ``x-amz-checksum-*`` header on every PutObject/UploadPart, backups read the bucket.
AWS Backup must be opted in for S3 in the region (AWS Backup developer guide, "Creating Amazon S3
backups": opt in to S3 in the Region's settings, ``aws backup update-region-settings``):
``backup_opt_in`` declares it in the first deploy's bootstrap phase (``deploy.backupOptIn`` turns it
off where another stack of the region or the account's administrators hold it).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from stackconfig.stack import CheckpointSettings
from .iam import MANAGED, trust_policy

CONTINUOUS_MAX_DAYS = 35
"""The longest AWS Backup keeps a continuous (point-in-time) backup."""
COMPLIANCE_GRACE_DAYS = 3
"""``ChangeableForDays`` of a compliance lock: the API's minimum (a 72-hour cooling-off)."""
BACKUP_POLICIES = ("AWSBackupServiceRolePolicyForS3Backup", "AWSBackupServiceRolePolicyForS3Restore")
DAILY = "cron(0 3 * * ? *)"
"""Daily at 03:00 UTC (AWS Backup schedule expressions are EventBridge cron, UTC by default)."""


BACKUP_PREFERENCES = ["resourceTypeOptInPreference", "resourceTypeManagementPreference"]
"""Read back whole: DescribeRegionSettings answers every resource type of the region (pulumi-aws
7.51.1's ``RegionSettings`` example lists them all), so a map naming S3 alone would show a diff on
every ``pulumi up``. Set at creation, then left alone."""


def backup_opt_in(name: str, parent: pulumi.Resource) -> aws.backup.RegionSettings:
    """The region's AWS Backup opt-in for S3 (UpdateRegionSettings with S3 alone: the other services'
    preferences stay as they are). Kept on destroy: opting the account out is not this stack's call."""
    return aws.backup.RegionSettings(f"{name}-backup-opt-in", resource_type_opt_in_preference={"S3": True},
                                     opts=pulumi.ResourceOptions(parent=parent, retain_on_delete=True,
                                                                 ignore_changes=BACKUP_PREFERENCES))


def retention_days(settings: CheckpointSettings) -> dict[str, int]:
    """Days each rule keeps its recovery points and the lock's bounds: the daily rule keeps them as
    long as S3 keeps noncurrent versions, the continuous rule as long as AWS allows up to that."""
    days = settings.noncurrent_version_days
    continuous = min(days, CONTINUOUS_MAX_DAYS)
    return {"continuous": continuous, "daily": days, "min": continuous, "max": days}


class CheckpointBackup(pulumi.ComponentResource):
    """Vault (own key, Vault Lock), plan (continuous + daily), selection of one bucket, service role."""

    def __init__(self, name: str, settings: CheckpointSettings, bucket: aws.s3.Bucket,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:storage:CheckpointBackup", name, None, opts)
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        days = retention_days(settings)
        self.key = aws.kms.Key(f"{name}-vault", description=f"backup vault {name}", enable_key_rotation=True,
                               deletion_window_in_days=30, opts=kept)
        self.vault = aws.backup.Vault(name, kms_key_arn=self.key.arn, force_destroy=False, opts=kept)
        compliance = settings.backup_vault_lock == "compliance"
        lock = aws.backup.VaultLockConfiguration(name, backup_vault_name=self.vault.name,
                                          min_retention_days=days["min"], max_retention_days=days["max"],
                                          changeable_for_days=COMPLIANCE_GRACE_DAYS if compliance else None,
                                          opts=pulumi.ResourceOptions(parent=self.vault, retain_on_delete=True))
        self.plan = aws.backup.Plan(name, rules=[
            aws.backup.PlanRuleArgs(rule_name="continuous", target_vault_name=self.vault.name,
                                    enable_continuous_backup=True,
                                    lifecycle=aws.backup.PlanRuleLifecycleArgs(delete_after=days["continuous"])),
            aws.backup.PlanRuleArgs(rule_name="daily", target_vault_name=self.vault.name, schedule=DAILY,
                                    lifecycle=aws.backup.PlanRuleLifecycleArgs(delete_after=days["daily"])),
        ], opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, depends_on=[lock]))
        # Kept with the plan: a selection whose role is gone would fail every backup job.
        self.role = aws.iam.Role(f"{name}-role", assume_role_policy=trust_policy("backup.amazonaws.com"), opts=kept)
        attachments = [aws.iam.RolePolicyAttachment(f"{name}-{policy}", role=self.role.name, policy_arn=MANAGED + policy,
                                                    opts=pulumi.ResourceOptions(parent=self.role, retain_on_delete=True))
                       for policy in BACKUP_POLICIES]
        aws.backup.Selection(name, plan_id=self.plan.id, iam_role_arn=self.role.arn, resources=[bucket.arn],
                             opts=pulumi.ResourceOptions(parent=self.plan, retain_on_delete=True,
                                                         depends_on=attachments))
        self.register_outputs({"vaultName": self.vault.name, "planId": self.plan.id})

"""AWS Backup of the checkpoint bucket: only kept buckets get it, governance by default,
compliance on opt-in, retention split between the continuous and daily rules."""

from __future__ import annotations

import pytest
from conftest import graph_of
from pydantic import ValidationError

from analysis import mocks
from components.checkpoint_backup import CONTINUOUS_MAX_DAYS, retention_days
from components.checkpoints import CheckpointBucket
from stackconfig.stack import CheckpointSettings

BACKUP_TYPES = ("aws:backup/vault:Vault", "aws:backup/plan:Plan", "aws:backup/selection:Selection",
                "aws:backup/vaultLockConfiguration:VaultLockConfiguration")


def _bucket_graph(**settings) -> mocks.Graph:
    cfg = CheckpointSettings.model_validate(settings)
    return mocks.run(lambda: CheckpointBucket("ckpt", cfg, "cluster"), region="us-east-1", stack="t")


def test_a_bucket_deleted_on_destroy_gets_no_backup():
    assert not [r for r in graph_of("dev").resources if r.type in BACKUP_TYPES]


def test_compliance_is_opt_in_and_sets_the_grace_days():
    governance = _bucket_graph().named("aws:backup/vaultLockConfiguration:VaultLockConfiguration", "ckpt-backup")
    assert "changeableForDays" not in governance.inputs
    compliance = _bucket_graph(backupVaultLock="compliance").named(
        "aws:backup/vaultLockConfiguration:VaultLockConfiguration", "ckpt-backup")
    assert compliance.inputs["changeableForDays"] == 3


def test_versions_longer_than_the_continuous_window_are_kept_by_the_daily_rule():
    days = retention_days(CheckpointSettings(noncurrent_version_days=90))
    assert days == {"continuous": CONTINUOUS_MAX_DAYS, "daily": 90, "min": CONTINUOUS_MAX_DAYS, "max": 90}
    plan = _bucket_graph(noncurrentVersionDays=90).named("aws:backup/plan:Plan", "ckpt-backup")
    assert [r["lifecycle"]["deleteAfter"] for r in plan.inputs["rules"]] == [CONTINUOUS_MAX_DAYS, 90]


def test_an_unknown_lock_mode_is_refused_by_name():
    with pytest.raises(ValidationError, match="backupVaultLock"):
        CheckpointSettings.model_validate({"backupVaultLock": "strict"})

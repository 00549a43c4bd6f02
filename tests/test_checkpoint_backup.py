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


@pytest.mark.parametrize("stack", ["p5en-prod", "p5"])
def test_no_bucket_notification_takes_over_the_file_systems(stack):
    """PutBucketNotificationConfiguration replaces the whole configuration, FSx's DRA notification
    with it: AWS Backup turns EventBridge on itself, the stack declares no notification."""
    graph = graph_of(stack)
    assert graph.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert graph.of_type("aws:s3/bucketNotification:BucketNotification") == []


# --- the DRA's lifecycle, as FSx reports it (botocore Stubber: moto 5.2.5 has no FSx DRA calls) ---

def _association(state: str, message: str | None = None) -> dict:
    """One entry of DescribeDataRepositoryAssociations in the FSx API's shape (the Stubber validates
    it against botocore's fsx service model)."""
    entry = {"AssociationId": "dra-0123456789abcdef0", "FileSystemId": "fs-0123456789abcdef0",
             "Lifecycle": state, "FileSystemPath": "/checkpoints",
             "DataRepositoryPath": "s3://rl-p5en-prod-checkpoints/checkpoints/",
             "S3": {"AutoImportPolicy": {"Events": ["NEW", "CHANGED"]},
                    "AutoExportPolicy": {"Events": ["NEW", "CHANGED"]}}}
    if message:
        entry["FailureDetails"] = {"Message": message}
    return entry


def _status(capsys, *pages: list[dict]) -> tuple[int, str]:
    import boto3
    from botocore.stub import Stubber
    from components import fsx_status
    client = boto3.client("fsx", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for i, page in enumerate(pages):
        request = {"Filters": [{"Name": "file-system-id", "Values": ["fs-0123456789abcdef0"]}]}
        if i:
            request["NextToken"] = f"page-{i}"
        response = {"Associations": page, **({"NextToken": f"page-{i + 1}"} if i + 1 < len(pages) else {})}
        stub.add_response("describe_data_repository_associations", response, request)
    with stub:
        code = fsx_status.main(["fs-0123456789abcdef0", "--region", "us-east-1"], client=client)
    stub.assert_no_pending_responses()
    out = capsys.readouterr()
    return code, out.out + out.err


def test_status_passes_an_available_association(capsys):
    code, text = _status(capsys, [_association("AVAILABLE")])
    assert code == 0 and "/checkpoints <-> s3://rl-p5en-prod-checkpoints/checkpoints/: AVAILABLE" in text


def test_status_shows_a_misconfigured_association_and_exits_non_zero(capsys):
    message = "The S3 bucket's event notification configuration was modified"
    code, text = _status(capsys, [_association("AVAILABLE")], [_association("MISCONFIGURED", message)])
    assert code == 1
    assert "MISCONFIGURED" in text and message in text and "automatic import and export are stopped" in text


def test_status_without_an_association_exits_non_zero(capsys):
    code, text = _status(capsys, [])
    assert code == 1 and "no data repository association" in text


def test_the_misconfigured_remedy_is_a_command_that_acts_on_the_association(capsys):
    """FSx re-checks a MISCONFIGURED association at once on UpdateDataRepositoryAssociation (FSx for
    Lustre user guide, "Data repository association lifecycle state"); `pulumi refresh` and `pulumi up`
    see no change in the association's inputs and do nothing. The command re-sends its own S3 policy."""
    import json
    import shlex
    code, text = _status(capsys, [_association("MISCONFIGURED", "notification modified")])
    assert code == 1 and "pulumi refresh" not in text
    command = text[text.index("aws fsx update-data-repository-association"):].splitlines()[0].rstrip("`")
    words = shlex.split(command)
    assert words[:3] == ["aws", "fsx", "update-data-repository-association"]
    assert words[words.index("--association-id") + 1] == "dra-0123456789abcdef0"
    assert words[words.index("--region") + 1] == "us-east-1"
    assert json.loads(words[words.index("--s3") + 1]) == _association("AVAILABLE")["S3"]

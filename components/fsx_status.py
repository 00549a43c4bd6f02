"""Lifecycle of the checkpoint file system's data repository associations, as FSx reports it.

``python -m components.fsx_status <file-system-id> --region <region>`` (the id is the stack output
``checkpointFileSystem``) prints one line per association: its id, paths and lifecycle, and FSx's
failure message where it has one. Exit 0 when every association is AVAILABLE, 1 otherwise (none
found included) and when FSx cannot be asked (a service that cannot be used, as a cluster for the other
commands); 2 a wrong argument.

Why: a DRA whose S3 event notification was replaced or deleted (any ``BucketNotification`` on its
bucket does that) turns MISCONFIGURED and stops automatic import AND export, so checkpoints stop
reaching S3 and AWS Backup while training goes on (FSx for Lustre user guide, "Data repository
association lifecycle state": MISCONFIGURED "Amazon FSx cannot automatically import updates from
the S3 bucket or automatically export updates to the S3 bucket until the data repository
association configuration is corrected"). Nothing else shows it. The call is FSx
DescribeDataRepositoryAssociations with the ``file-system-id`` filter (FSx API reference).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any, Sequence

HEALTHY = "AVAILABLE"
EXIT_OK, EXIT_NOT_HEALTHY, EXIT_NO_ANSWER = 0, 1, 1


def remedy(association: dict, region: str) -> str | None:
    """What to do about a state other than AVAILABLE. MISCONFIGURED: remove what overlaps FSx's event
    types on the bucket, then UpdateDataRepositoryAssociation with the association's own S3 policy,
    on which FSx checks it again at once instead of within 15 minutes (FSx for Lustre user guide,
    "Data repository association lifecycle state"); `pulumi up` would change nothing, the
    association's inputs being what they were."""
    state = association.get("Lifecycle")
    if state == "MISCONFIGURED":
        s3 = json.dumps(association.get("S3") or {}, separators=(",", ":"))
        return ("automatic import and export are stopped: remove any other event notification of the bucket "
                "(aws s3api get-bucket-notification-configuration), then "
                f"`aws fsx update-data-repository-association --association-id {association.get('AssociationId')} "
                f"--region {region} --s3 {shlex.quote(s3)}`")
    if state == "FAILED":
        return "the association could not be created or updated: see the message, fix, `pulumi up`"
    return None


def associations(client: Any, file_system_id: str) -> list[dict]:
    """Every data repository association of ``file_system_id`` (all pages)."""
    found, token = [], None
    while True:
        kwargs: dict[str, Any] = {"Filters": [{"Name": "file-system-id", "Values": [file_system_id]}]}
        if token:
            kwargs["NextToken"] = token
        page = client.describe_data_repository_associations(**kwargs)
        found += page.get("Associations", [])
        token = page.get("NextToken")
        if not token:
            return found


def report(found: Sequence[dict], file_system_id: str, region: str) -> tuple[int, list[str]]:
    """(exit code, lines) for the associations of one file system."""
    if not found:
        return EXIT_NOT_HEALTHY, [f"{file_system_id}: no data repository association: checkpoints do not reach S3"]
    lines, code = [], EXIT_OK
    for a in found:
        state = a.get("Lifecycle", "?")
        line = (f"{a.get('AssociationId')}: {a.get('FileSystemPath')} <-> {a.get('DataRepositoryPath')}: {state}")
        if state != HEALTHY:
            code = EXIT_NOT_HEALTHY
            message = (a.get("FailureDetails") or {}).get("Message")
            line += "".join(f"; {m}" for m in (message, remedy(a, region)) if m)
        lines.append(line)
    return code, lines


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m components.fsx_status`` (``moe-rl fsx-status``)."""
    p = argparse.ArgumentParser(prog="python -m components.fsx_status", description=__doc__.split("\n\n")[0])
    p.add_argument("file_system_id", help="the stack output checkpointFileSystem (fs-...)")
    p.add_argument("--region", required=True)
    return p


def main(argv: Sequence[str] | None = None, client: Any = None) -> int:
    args = parser().parse_args(argv)
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError
    client = client or boto3.client("fsx", region_name=args.region)
    try:
        found = associations(client, args.file_system_id)
    except (BotoCoreError, ClientError) as err:
        print(f"{args.file_system_id}: FSx DescribeDataRepositoryAssociations failed: {err}", file=sys.stderr)
        return EXIT_NO_ANSWER
    code, lines = report(found, args.file_system_id, args.region)
    print("\n".join(lines), file=sys.stdout if code == EXIT_OK else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

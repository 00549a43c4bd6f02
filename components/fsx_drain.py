"""Wait, before a teardown, until the checkpoint file system has exported everything to S3.

``moe-rl fsx-drain <file-system-id> --region <region> [--timeout-minutes 60]`` (alias ``python -m
components.fsx_drain``; the id is the stack output ``checkpointFileSystem``) polls CloudWatch until automatic
export has nothing queued, then exits 0; 1 when the queue is not empty by the deadline, FSx published nothing
to judge by, or CloudWatch cannot be asked (a refusal, as every ``moe-rl`` subcommand's: not bad input). Run it after the runs stopped writing and before ``pulumi destroy``.

Why: a destroy deletes the file system, and with it whatever automatic export has not yet written to the
bucket (the last checkpoint saved before the stop, the driver logs). AWS says how to know nothing is
left: "To ensure all of your data is written back to S3 before deleting your file system, you can either
monitor for the AgeOfOldestQueuedMessage metric to be zero (if using automatic export) or you can run an
export data repository task" (FSx API reference, DeleteFileSystem; FSx for Lustre user guide, "Deleting a
file system"). The stack's association exports automatically (``components.fsx.EXPORT_EVENTS``), and an
export task cannot run beside automatic export ("Exporting changes to the data repository"), so this
watches the metric: namespace ``AWS/FSx``, dimensions ``FileSystemId`` and ``Publisher`` =
``AutoExport`` (CloudWatch user guide, metrics of ``AWS::FSx::FileSystem``), statistic Maximum per minute.
Drained: every datapoint of the last ``QUIET_MINUTES`` is 0, there is at least one, and the newest is at most
``FRESH_MINUTES`` old (CloudWatch publishes a minute some minutes late: without it, "the last five minutes"
could be minutes -5 to -2, and a save queued since unseen).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence

NAMESPACE, METRIC, PUBLISHER = "AWS/FSx", "AgeOfOldestQueuedMessage", "AutoExport"
PERIOD_SECONDS = 60
QUIET_MINUTES = 5
"""How long the queue must have stayed empty: a save finishing just before the check queues again."""
FRESH_MINUTES = 3
"""The newest datapoint may be this old: an allowance, not a measurement (FSx publishes its metrics every minute,
CloudWatch shows them a few minutes later)."""
POLL_SECONDS = 60
EXIT_DRAINED, EXIT_NOT_DRAINED, EXIT_NO_ANSWER = 0, 1, 1


def ages(client: Any, file_system_id: str, now: datetime) -> list[tuple[datetime, float]]:
    """The queue's oldest message age (seconds), one Maximum per minute of the last ``QUIET_MINUTES``, oldest
    first, each with its minute."""
    answer = client.get_metric_statistics(
        Namespace=NAMESPACE, MetricName=METRIC, StartTime=now - timedelta(minutes=QUIET_MINUTES), EndTime=now,
        Period=PERIOD_SECONDS, Statistics=["Maximum"],
        Dimensions=[{"Name": "FileSystemId", "Value": file_system_id}, {"Name": "Publisher", "Value": PUBLISHER}])
    return [(p["Timestamp"], p["Maximum"]) for p in sorted(answer.get("Datapoints", []), key=lambda p: p["Timestamp"])]


def drained(seen: list[tuple[datetime, float]], now: datetime) -> bool:
    return (bool(seen) and all(a == 0 for _, a in seen)
            and now - seen[-1][0] <= timedelta(minutes=FRESH_MINUTES))


def wait(client: Any, file_system_id: str, timeout_s: float, clock: Callable[[], datetime] | None = None,
         sleep: Callable[[float], None] = time.sleep) -> tuple[int, str]:
    """(exit code, what was seen last) once the queue is drained or the time is up."""
    clock = clock or (lambda: datetime.now(timezone.utc))
    deadline = clock() + timedelta(seconds=timeout_s)
    while True:
        now = clock()
        seen = ages(client, file_system_id, now)
        if drained(seen, now):
            return EXIT_DRAINED, f"{file_system_id}: automatic export queue empty for {QUIET_MINUTES} minutes"
        if clock() >= deadline:
            late = seen and now - seen[-1][0] > timedelta(minutes=FRESH_MINUTES)
            why = (f"oldest queued export {max(a for _, a in seen):.0f} s old" if seen and not late else
                   f"CloudWatch's newest {METRIC} ({PUBLISHER}) is {(now - seen[-1][0]).total_seconds() / 60:.0f} "
                   f"minutes old" if late else
                   f"FSx published no {METRIC} ({PUBLISHER}) in the last {QUIET_MINUTES} minutes")
            return EXIT_NOT_DRAINED, (f"{file_system_id}: not drained after {timeout_s / 60:.0f} minutes: {why}; "
                                      f"do not destroy yet (or run an export data repository task with automatic "
                                      f"export turned off)")
        sleep(POLL_SECONDS)


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m components.fsx_drain`` (``moe-rl fsx-drain``)."""
    p = argparse.ArgumentParser(prog="python -m components.fsx_drain", description=__doc__.split("\n\n")[0])
    p.add_argument("file_system_id", help="the stack output checkpointFileSystem (fs-...)")
    p.add_argument("--region", required=True, help="the stack's region")
    p.add_argument("--timeout-minutes", type=float, default=60, metavar="MINUTES",
                   help="how long to wait for the queue to empty")
    return p


def main(argv: Sequence[str] | None = None, client: Any = None, sleep: Callable[[float], None] = time.sleep) -> int:
    args = parser().parse_args(argv)
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError
    client = client or boto3.client("cloudwatch", region_name=args.region)
    try:
        code, line = wait(client, args.file_system_id, args.timeout_minutes * 60, sleep=sleep)
    except (BotoCoreError, ClientError) as err:
        print(f"{args.file_system_id}: CloudWatch GetMetricStatistics failed: {err}", file=sys.stderr)
        return EXIT_NO_ANSWER
    print(line, file=sys.stdout if code == EXIT_DRAINED else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""The teardown's wait for the checkpoint file system's export queue (``components.fsx_drain``), against
CloudWatch's own request and response model (botocore's Stubber validates both)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import boto3
from botocore.stub import Stubber

from components import fsx_drain

FS = "fs-0123456789abcdef0"
T0 = datetime(2026, 12, 5, 8, 0, tzinfo=timezone.utc)


def _run(answers: list, timeout_minutes: float = 3, lag_minutes: int = 1) -> tuple[int, str, int]:
    """``wait`` with CloudWatch answering ``answers`` in turn (a list of per-minute Maximums, the newest
    ``lag_minutes`` before the poll); returns (exit code, output, polls). Each request is pinned, its window
    included: the last ``QUIET_MINUTES`` up to the poll (the clock moves one ``POLL_SECONDS`` per poll)."""
    client = boto3.client("cloudwatch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub, now = Stubber(client), [T0]
    for k, answer in enumerate(answers):
        at = T0 + timedelta(seconds=k * fsx_drain.POLL_SECONDS)
        request = {"Namespace": "AWS/FSx", "MetricName": "AgeOfOldestQueuedMessage", "StartTime": at - timedelta(minutes=5),
                   "EndTime": at, "Period": 60, "Statistics": ["Maximum"],
                   "Dimensions": [{"Name": "FileSystemId", "Value": FS}, {"Name": "Publisher", "Value": "AutoExport"}]}
        points = [{"Timestamp": at - timedelta(minutes=lag_minutes + len(answer) - 1 - i), "Maximum": a, "Unit": "Seconds"}
                  for i, a in enumerate(answer)]
        stub.add_response("get_metric_statistics", {"Label": "AgeOfOldestQueuedMessage", "Datapoints": points[::-1]},
                          request)

    def sleep(s):
        now[0] += timedelta(seconds=s)

    with stub:
        code, line = fsx_drain.wait(client, FS, timeout_minutes * 60, clock=lambda: now[0], sleep=sleep)
    return code, line, len(answers) - len(stub._queue)


def test_the_wait_ends_once_the_queue_stayed_empty():
    code, text, polls = _run([[0, 0, 120, 60, 0], [0, 120, 60, 0, 0], [0, 0, 0, 0, 0]], timeout_minutes=10)
    assert (code, polls) == (0, 3)
    assert "automatic export queue empty for 5 minutes" in text


def test_a_queue_still_full_at_the_deadline_stops_the_teardown():
    code, text, _ = _run([[30, 90, 150], [90, 150, 210], [150, 210, 270], [210, 270, 330]], timeout_minutes=3)
    assert code == 1 and "not drained after 3 minutes: oldest queued export 330 s old" in text


def test_an_empty_queue_seen_only_minutes_ago_is_not_drained():
    """CloudWatch publishes late: quiet minutes that all lie more than ``FRESH_MINUTES`` back say nothing of a
    save queued since."""
    code, text, polls = _run([[0, 0, 0]] * 4, timeout_minutes=3, lag_minutes=fsx_drain.FRESH_MINUTES + 1)
    assert (code, polls) == (1, 4)
    assert "CloudWatch's newest AgeOfOldestQueuedMessage (AutoExport) is 4 minutes old" in text
    assert _run([[0, 0, 0]], lag_minutes=fsx_drain.FRESH_MINUTES)[0] == 0


def test_no_datapoint_is_not_taken_for_an_empty_queue():
    code, text, _ = _run([[], [], [], []], timeout_minutes=3)
    assert code == 1 and "FSx published no AgeOfOldestQueuedMessage (AutoExport)" in text


def test_cloudwatch_refusing_is_a_refusal_not_bad_input(capsys):
    client = boto3.client("cloudwatch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_client_error("get_metric_statistics", service_error_code="AccessDenied", http_status_code=403)
    with stub:
        code = fsx_drain.main([FS, "--region", "us-east-1"], client=client, sleep=lambda s: None)
    assert code == 1 and "CloudWatch GetMetricStatistics failed" in capsys.readouterr().err  # 2 is bad input


def test_the_teardown_stops_the_runs_waits_for_their_pods_and_destroys_only_once_drained():
    """The documented order: runs cancelled (each asked for a checkpoint first), every Ray pod gone (a save in a
    preStop hook ends with its pod), then the drain, and ``pulumi destroy`` only chained after it (``&&``), so a
    pasted block never destroys a file system that has not exported."""
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "getting-started" / "first-deploy.md").read_text()
    text = text[text.index("## Tear down"):]
    start = text.index("```bash aws") + len("```bash aws")
    text = text[start:text.index("```", start)].replace("\\\n", " ")
    lines = [line.split("#")[0].strip() for line in text.splitlines() if line.split("#")[0].strip()]
    wait = next(i for i, line in enumerate(lines) if line.startswith("kubectl wait --for=delete pod -l ray.io/node-type"))
    drain = next(i for i, line in enumerate(lines) if line.startswith("moe-rl fsx-drain"))
    assert "moe-rl runs cancel" in text[:text.index("kubectl wait")] and wait < drain
    assert [line for line in lines if "pulumi destroy" in line] == [lines[drain]]
    assert lines[drain].split("&&")[1].strip().startswith("pulumi destroy")

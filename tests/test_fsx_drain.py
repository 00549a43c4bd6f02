"""The teardown's wait for the checkpoint file system's export queue (``components.fsx_drain``), against
CloudWatch's own request and response model (botocore's Stubber validates both)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import boto3
from botocore.stub import ANY, Stubber

from components import fsx_drain

FS = "fs-0123456789abcdef0"
T0 = datetime(2026, 12, 5, 8, 0, tzinfo=timezone.utc)


def _run(answers: list, timeout_minutes: float = 3) -> tuple[int, str, int]:
    """``wait`` with CloudWatch answering ``answers`` in turn (a list of per-minute Maximums); returns (exit code, output, polls)."""
    client = boto3.client("cloudwatch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub, now = Stubber(client), [T0]
    request = {"Namespace": "AWS/FSx", "MetricName": "AgeOfOldestQueuedMessage", "StartTime": ANY, "EndTime": ANY,
               "Period": 60, "Statistics": ["Maximum"],
               "Dimensions": [{"Name": "FileSystemId", "Value": FS}, {"Name": "Publisher", "Value": "AutoExport"}]}
    for answer in answers:
        points = [{"Timestamp": T0 + timedelta(minutes=i), "Maximum": a, "Unit": "Seconds"} for i, a in enumerate(answer)]
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

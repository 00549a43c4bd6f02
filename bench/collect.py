"""What ``bench run`` collects of an attempt: what it showed while it ran (``Seen``, read at every poll
because its Ray cluster goes ``ttlSecondsAfterFinished`` after it ends and a terminated node goes with its
instance), the artifacts written once it finished (``collect``), or what was seen when it did not
(``incomplete``: marked ``INCOMPLETE`` with the reason).

Guarantees: the driver log is the launcher's copy on FSx, read incrementally at every poll
(``bench.driverlog``) and from the bucket once the head is gone; nodes are recorded when first seen, so
a terminated node is still in ``nodes.json``; the Events about the attempt's own objects (its RayJobs, their Ray
clusters and PodGroups, its pods; ``Seen.objects``) are kept as first read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from workloads.derive.paths import CHECKPOINT_DIR
from workloads.pod.miles_launcher import driver_log_path
from workloads.cli.runs_client import RunClient, _attempt, _word
from workloads.render.runs import ATTEMPT_LABEL, RUN_LABEL, podgroup_name
from workloads.render.teams import namespace_of
from workloads.schema.stack import ProgramConfig

from .artifacts import INCOMPLETE
from .cloudwatch import collect as cw_collect, instance_id
from .driverlog import DriverLog, LogUnavailable
from .experiment import Attempt

def _sanitize(api: RunClient, obj) -> dict:
    return api.core.api_client.sanitize_for_serialization(obj)


class Seen:
    """What an attempt showed while it ran, read at every poll because its Ray cluster (the head that
    reaches the log, the pods) goes ``ttlSecondsAfterFinished`` (60 s) after it ends and a terminated
    node goes with its instance: each RayJob's driver log read incrementally from the launcher's copy
    (``bench.driverlog``), the nodes its pods ran on (kept as first read), and the run's Events."""

    def __init__(self, log_source: Callable[[str, str, dict], DriverLog]) -> None:
        self.log_source = log_source
        self.readers: dict[str, DriverLog] = {}
        self.logs: dict[str, str] = {}
        self.nodes: dict[str, dict] = {}
        self.events: dict[str, dict] = {}
        self.objects: set[str] = set()
        """Names of the attempt's objects seen so far (its RayJobs, their Ray clusters and PodGroups, its pods):
        the Events kept are about them, not about an earlier attempt's or another run's that shares a prefix."""

    def look(self, api: RunClient, team: str, run: str, jobs: list[dict], final: bool = False) -> None:
        """Read what is new in the logs of ``jobs`` (the run's RayJobs as just listed), the nodes of its
        pods and the Events about it; ``final``: read each log to its end (from the bucket once the head
        is gone), else a log without a running head is read later."""
        for job in jobs:
            name = job["metadata"]["name"]
            if name not in self.readers:
                self.readers[name] = self.log_source(team, run, job)
            try:
                self.logs[name] = self.logs.get(name, "") + (
                    self.readers[name].read_all(api) if final else self.readers[name].read(api))
            except LogUnavailable:
                if final:
                    raise
        attempts = {str(_attempt(job)) for job in jobs}
        for job in jobs:
            name = job["metadata"]["name"]
            self.objects |= {name, podgroup_name(name), (job.get("status") or {}).get("rayClusterName") or name}
        for pod in api.core.list_namespaced_pod(namespace_of(team), label_selector=RUN_LABEL + "=" + run).items:
            if pod.metadata.labels.get(ATTEMPT_LABEL) not in attempts:
                continue
            self.objects.add(pod.metadata.name)
            node = pod.spec.node_name
            if node and node not in self.nodes:
                self.nodes[node] = _sanitize(api, api.core.read_node(node))
        for e in api.core.list_namespaced_event(namespace_of(team)).items:
            if e.involved_object.name in self.objects:
                self.events[e.metadata.name] = _sanitize(api, e)


def collect(api: RunClient, attempt: Attempt, folder: Path, faults: list[dict], seen: Seen, jobs: list[dict],
            cloudwatch: tuple[object, str] | None = None) -> None:
    """The artifacts of the attempt's RayJobs ``jobs`` (not those an earlier run of it left); ``cloudwatch``
    = (boto3 CloudWatch client, EKS cluster name) adds ``cloudwatch.json`` over the RayJobs' times."""
    team, run = attempt.run.team, attempt.run.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / INCOMPLETE).unlink(missing_ok=True)
    seen.look(api, team, run, jobs, final=True)
    (folder / "driver.log").write_text("".join(seen.logs.get(j["metadata"]["name"], "") for j in jobs))
    (folder / "rayjob.json").write_text(json.dumps({"apiVersion": "ray.io/v1", "kind": "RayJobList", "items": jobs},
                                                   indent=1))
    nodes = [seen.nodes[n] for n in sorted(seen.nodes)]
    (folder / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": nodes}, indent=1))
    (folder / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "EventList",
                                                    "items": list(seen.events.values())}, indent=1, default=str))
    if cloudwatch is not None:
        starts = [datetime.fromisoformat(j["status"]["startTime"].replace("Z", "+00:00")) for j in jobs]
        ends = [datetime.fromisoformat(j["status"]["endTime"].replace("Z", "+00:00")) for j in jobs]
        pairs = [(n["metadata"]["name"], instance_id(n["spec"]["providerID"])) for n in nodes]
        doc = cw_collect(cloudwatch[0], cloudwatch[1], pairs, min(starts), max(ends))
        (folder / "cloudwatch.json").write_text(json.dumps(doc))
    if faults:
        (folder / "faults.json").write_text(json.dumps(faults, indent=1))


def log_source(cfg: ProgramConfig, s3: object | None = None, bucket: str | None = None):
    """How to read one RayJob's driver log: the launcher's copy (``--marker`` of its entrypoint), and
    the same file in the checkpoint bucket (the team's pods mount ``<team prefix>`` over
    ``<mount>/checkpoints``, ``render.teams.team_volumes``)."""
    def source(team: str, run: str, job: dict) -> DriverLog:
        marker = _word(job, "--marker")
        if marker is None:
            raise ValueError(f"RayJob {job['metadata']['name']}: no --marker in its entrypoint (not a platform run)")
        path = str(driver_log_path(marker, _attempt(job)))
        rel = path.split(f"/{CHECKPOINT_DIR}/", 1)[1]
        return DriverLog(team, run, _attempt(job), path, s3=s3, bucket=bucket,
                         key_of=lambda _p: f"{CHECKPOINT_DIR}/teams/{team}/{rel}")
    return source


def incomplete(attempt: Attempt, folder: Path, records: list[dict], seen: Seen, reason: str) -> str:
    """What was seen of an attempt that did not finish, marked ``INCOMPLETE`` with ``reason``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / INCOMPLETE).write_text(f"{attempt.folder}: {reason}\n")
    (folder / "driver.log").write_text("".join(seen.logs.values()))
    (folder / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList",
                                                   "items": [seen.nodes[n] for n in sorted(seen.nodes)]}, indent=1))
    (folder / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "EventList",
                                                    "items": list(seen.events.values())}, indent=1, default=str))
    if records:
        (folder / "faults.json").write_text(json.dumps(records, indent=1))
    return f"what was seen written to {folder} (marked {INCOMPLETE}: {reason})"

"""The collected artifacts of an experiment, read offline: ``DIR/experiment.yaml`` and, per arm and
attempt, ``DIR/<arm>/r<n>/`` with ``driver.log``, ``rayjob.json``, ``nodes.json`` and optionally
``cloudwatch.json``, ``events.json`` and ``faults.json``.

Guarantees: an attempt that does not add up (marked ``INCOMPLETE``, a file missing, no measured step, a
RayJob of another run, step ids beyond the run's last step) raises ``ArtifactError`` with one line naming the attempt
and what is wrong; nothing downstream ever sees half an attempt.

Times come from the RayJob status of KubeRay v1.7.0 (``workloads/schemas/crds/ray.io_rayjobs.json``:
``status.startTime``/``status.endTime``, when KubeRay started and finished the RayJob, cluster
start-up included; ``status.rayJobInfo.startTime``/``endTime``, the Ray job itself). Nodes carry the
EKS labels ``node.kubernetes.io/instance-type`` (Kubernetes well-known label) and
``eks.amazonaws.com/capacityType`` (EKS managed node groups: ``ON_DEMAND``, ``SPOT``,
``CAPACITY_BLOCK``), and the platform's ``rl.platform/role`` and ``rl.platform/pool``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from stackconfig.labels import POOL_LABEL, ROLE_LABEL
from workloads.schema.labels import RUN_LABEL

from .argv import rayjob_argv, rollout_num_gpus
from .experiment import Attempt, Experiment, load_experiment, schedule
from .logparse import ParsedLog, Step, parse_log

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
GPU_RESOURCE = "nvidia.com/gpu"
EXPERIMENT_FILE = "experiment.yaml"
INCOMPLETE = "INCOMPLETE"
"""The file ``bench run`` leaves in an attempt's folder it did not finish; it holds the reason."""


class ArtifactError(ValueError):
    """Artifacts that do not support a figure."""


@dataclass(frozen=True)
class Node:
    name: str
    role: str
    pool: str
    instance_type: str
    capacity_type: str
    gpus: int


@dataclass
class Collected:
    """One attempt's artifacts, checked."""

    attempt: Attempt
    log: ParsedLog
    rayjobs: list[dict]
    nodes: list[Node]
    start: datetime
    end: datetime
    cloudwatch: dict | None = None
    faults: list[dict] = field(default_factory=list)
    text: str = ""
    """The driver log as collected (its checkpoint and restart lines, ``bench.recovery``)."""
    serving: dict | None = None
    """``serving.json``: the serving benchmark's figures (``bench.serving``), or its error."""
    events: list[dict] = field(default_factory=list)
    """``events.json``: the run's Kubernetes Events as ``bench run`` read them (``bench.reaction``)."""

    @property
    def seconds(self) -> float:
        """Job completion time: KubeRay's ``status.startTime`` (the RayJob taken up, before its gang is
        scheduled) to ``status.endTime`` of the last RayJob: gang wait and start-up included."""
        return (self.end - self.start).total_seconds()

    @property
    def startup_seconds(self) -> float | None:
        """Of ``seconds``, the first RayJob's wait before its Ray job began (``status.startTime`` to
        ``status.rayJobInfo.startTime``): gang wait, pods and Ray cluster start; None when not recorded."""
        status = (self.rayjobs[0].get("status") or {}) if self.rayjobs else {}
        began = _time((status.get("rayJobInfo") or {}).get("startTime"))
        return None if began is None else (began - _time(status.get("startTime"))).total_seconds()

    def rollout_gpus(self) -> int:
        """``--rollout-num-gpus`` of the attempt's argv (``argv.rollout_num_gpus``), not the nodes touched."""
        words = rayjob_argv(self.rayjobs[0]) if self.rayjobs else None
        gpus = None if words is None else rollout_num_gpus(words)
        if gpus is None:
            raise ArtifactError(f"{self.attempt.folder}: its RayJob's argv (MILES_ARGV) has no --rollout-num-gpus")
        return gpus

    def measured(self, warmup: int) -> list[Step]:
        """First occurrences of the steps that carry a rollout throughput, by id, after the first ``warmup``
        of them the attempt logged (a resumed attempt, starting at a later step, warms up again)."""
        firsts = self.log.first()
        ids = sorted(i for i in firsts if "perf/tokens_per_gpu_per_sec" in firsts[i].metrics)
        return [firsts[i] for i in ids[warmup:]]


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _json(path: Path, where: str):
    if not path.is_file():
        raise ArtifactError(f"{where}: {path.name} missing")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ArtifactError(f"{where}: {path.name} is not JSON ({err.msg} at line {err.lineno})") from None


def _items(doc: dict) -> list[dict]:
    """A ``<Kind>List``/``List`` as the API returns it, or one object."""
    return list(doc.get("items") or []) if "items" in doc else [doc]


def read_nodes(doc: dict) -> list[Node]:
    out = []
    for n in _items(doc):
        md, labels = n.get("metadata", {}), n.get("metadata", {}).get("labels", {})
        gpus = (n.get("status") or {}).get("capacity", {}).get(GPU_RESOURCE, "0")
        out.append(Node(name=md.get("name", ""), role=labels.get(ROLE_LABEL, ""), pool=labels.get(POOL_LABEL, ""),
                        instance_type=labels.get(INSTANCE_TYPE_LABEL, ""),
                        capacity_type=labels.get(CAPACITY_TYPE_LABEL, ""), gpus=int(gpus)))
    return out


def read_attempt(root: Path, exp: Experiment, attempt: Attempt) -> Collected:
    where = f"{attempt.folder}"
    folder = root / attempt.folder
    if not folder.is_dir():
        raise ArtifactError(f"{where}: no folder (arm {attempt.arm} repeat {attempt.repeat} was not collected)")
    if (folder / INCOMPLETE).is_file():
        raise ArtifactError(f"{where}: marked {INCOMPLETE} by bench run ({(folder / INCOMPLETE).read_text().strip()}); "
                            f"run it again with bench run --only {attempt.folder}")
    log_path = folder / "driver.log"
    if not log_path.is_file():
        raise ArtifactError(f"{where}: driver.log missing")
    text = log_path.read_text(errors="replace")
    log = parse_log(text)
    rayjobs = _items(_json(folder / "rayjob.json", where))
    for job in rayjobs:
        run = (job.get("metadata", {}).get("labels") or {}).get(RUN_LABEL)
        if run != attempt.run.name:
            raise ArtifactError(f"{where}: rayjob.json is RayJob {job.get('metadata', {}).get('name')!r} of run "
                                f"{run!r}, not of run {attempt.run.name!r}")
    starts = [_time((j.get("status") or {}).get("startTime")) for j in rayjobs]
    ends = [_time((j.get("status") or {}).get("endTime")) for j in rayjobs]
    if not rayjobs or None in starts or None in ends:
        raise ArtifactError(f"{where}: rayjob.json has no status.startTime/endTime (the attempt did not finish)")
    nodes = read_nodes(_json(folder / "nodes.json", where))
    if not any(n.role == "rollout" and n.gpus for n in nodes):
        raise ArtifactError(f"{where}: nodes.json has no rollout node with {GPU_RESOURCE} capacity")
    beyond = sorted({s.rollout_id for s in log.steps if s.rollout_id >= exp.total_steps})
    if beyond:
        raise ArtifactError(f"{where}: driver.log has step {beyond[0]}, beyond the run's {exp.total_steps} steps "
                            f"(a log from another run?)")
    got = Collected(attempt, log, rayjobs, nodes, min(starts), max(ends),
                    _json(folder / "cloudwatch.json", where) if (folder / "cloudwatch.json").is_file() else None,
                    _json(folder / "faults.json", where) if (folder / "faults.json").is_file() else [], text,
                    _json(folder / "serving.json", where) if (folder / "serving.json").is_file() else None,
                    _items(_json(folder / "events.json", where)) if (folder / "events.json").is_file() else [])
    if not got.measured(exp.warmup_steps):
        raise ArtifactError(f"{where}: no measured step in driver.log (no perf line with perf/tokens_per_gpu_per_sec "
                            f"after the {exp.warmup_steps} warm-up steps; {len(log.malformed)} malformed perf lines)")
    return got


def read_experiment_dir(root: Path) -> tuple[Experiment, list[Collected]]:
    """The experiment the directory was collected for and every one of its attempts."""
    root = Path(root)
    if not (root / EXPERIMENT_FILE).is_file():
        raise ArtifactError(f"{root}: {EXPERIMENT_FILE} missing (the experiment file `run` copies there)")
    exp = load_experiment(root / EXPERIMENT_FILE)
    return exp, [read_attempt(root, exp, a) for a in schedule(exp)]

"""``python -m bench run``: submit the attempts one after another on the same nodes, wait for each,
inject a fault arm's faults, and collect each attempt's artifacts into ``OUT/<arm>/r<n>/``.

Everything a run is made of comes from the run command's own code (``workloads.runs``): the stack as
the run sees it and its RayJob (``submit.run_objects``), the Kubernetes calls (``client.RunClient``:
submit, list, next attempt), the image repository (``stackconfig.versions.with_repository``).

Guarantees: every attempt after the first is pinned to the first one's nodes (``pinning``) until
a fault terminates one of them (then the next attempt's nodes are the set, and ``report`` refuses a
comparison across node sets unless asked); ``--dry-run`` prints every attempt's RayJob in run order, as one multi-document YAML stream
(``---`` before each), and contacts no cluster; an
attempt is submitted only when the previous one has finished (the nodes are free again); faults go
through the stack's fault engine (``bench.faults``: AWS FIS, the bench user's AWS identity), never
through Kubernetes calls a team member may not make; a fault that makes the job fail is followed by
the next attempt of the same run, which resumes from its last complete checkpoint (as ``runs submit
--resume``); the driver log is the launcher's copy on FSx, read incrementally at every poll
(``bench.driverlog``) and from the bucket once the head is gone; nodes are recorded when first seen,
so a terminated node is still in ``nodes.json``; any failure leaves the cluster as it was found
(``run_attempt``) and says what it left.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import yaml

from stackconfig.files import STACKS_DIR
from stackconfig.versions import STACK_REPOSITORY, with_repository
from components.faults import FAULT_TARGET_LABEL
from stackconfig.faults import fault_kind
from workloads.derive.paths import CHECKPOINT_DIR
from workloads.pod.miles_launcher import driver_log_path
from workloads.cli.runs_client import FINISHED, RunClient, _attempt, _flag, _word, attempt_of
from workloads.checks.runs import run_pools
from workloads.deploy.submit import run_objects
from workloads.render.runs import RUN_LABEL
from workloads.render.teams import namespace_of
from workloads.schema.stack import ProgramConfig
from workloads.checks import gate

from .artifacts import EXPERIMENT_FILE
from .cloudwatch import collect as cw_collect, instance_id
from .experiment import Attempt, Experiment, load_experiment, schedule
from .driverlog import DriverLog, LogUnavailable
from .faults import Injector, detected
from .serving import parse_result, start_command as serving_start
from .logparse import parse_log
from .pinning import node_set, pinned

POLL_S = 30.0


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
        for pod in api.core.list_namespaced_pod(namespace_of(team), label_selector=RUN_LABEL + "=" + run).items:
            node = pod.spec.node_name
            if node and node not in self.nodes:
                self.nodes[node] = _sanitize(api, api.core.read_node(node))
        for e in api.core.list_namespaced_event(namespace_of(team)).items:
            if (e.involved_object.name or "").startswith(run):
                self.events[e.metadata.name] = _sanitize(api, e)


def _jobs(api: RunClient, attempt: Attempt) -> list[dict]:
    return api.rayjobs(attempt.run.team, attempt.run.name)


def _finished(job: dict | None) -> bool:
    return job is not None and (job.get("status") or {}).get("jobDeploymentStatus") in FINISHED


def collect(api: RunClient, attempt: Attempt, folder: Path, faults: list[dict], seen: Seen,
            cloudwatch: tuple[object, str] | None = None) -> None:
    """The attempt's artifacts; ``cloudwatch`` = (boto3 CloudWatch client, EKS cluster name) adds
    ``cloudwatch.json`` over the attempt's RayJob times."""
    team, run = attempt.run.team, attempt.run.name
    folder.mkdir(parents=True, exist_ok=True)
    jobs = api.rayjobs(team, run)
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


def without_dedup(rayjob: dict) -> dict:
    """The RayJob with ``RAY_DEDUP_LOGS=0`` in its runtime environment, so the driver prints every perf
    line: the driver reads it at import (ray 2.53.0 ``ray/_private/ray_constants.py:294``) and otherwise
    holds back lines that look alike across processes (``ray/_private/ray_logging/__init__.py:271-315``)."""
    spec = rayjob["spec"]
    env = yaml.safe_load(spec.get("runtimeEnvYAML") or "") or {}
    env.setdefault("env_vars", {})["RAY_DEDUP_LOGS"] = "0"
    return {**rayjob, "spec": {**spec, "runtimeEnvYAML": yaml.safe_dump(env, sort_keys=False)}}


def _objects(api: RunClient, cfg: ProgramConfig, run):
    """The run's objects with the cluster's network tiers, as ``runs submit`` makes them."""
    train, rollout = run_pools(cfg)
    return run_objects(cfg, run, api.tier_sizes((train.name, rollout.name)) or None,
                       api.tier_sizes((train.name,)) or None)


def with_fault_target(rayjob: dict) -> dict:
    """A fault arm's RayJob: its worker groups' pods carry ``FAULT_TARGET_LABEL`` (what the stack's FIS
    pod-delete templates select, ``components.faults``); KubeRay copies template labels onto the pods
    (ray-operator/controllers/ray/common/pod.go:1167-1189, v1.7.0)."""
    job = copy.deepcopy(rayjob)
    for group in job["spec"]["rayClusterSpec"].get("workerGroupSpecs", []):
        md = group["template"].setdefault("metadata", {})
        md.setdefault("labels", {})[FAULT_TARGET_LABEL] = group["groupName"]
    return job


def _submit(api: RunClient, cfg: ProgramConfig, run, repository: str, faulted: bool,
            pins: dict[str, list[str]] | None = None) -> None:
    job = without_dedup(with_repository(pinned(_objects(api, cfg, run).rayjob, pins or {}), repository, cfg.stack))
    api.submit(with_fault_target(job) if faulted else job)


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


class ServingRun:
    """One attempt's serving benchmark (``bench.serving``): started in the head once its step is logged,
    its result line read from the run's directory at later polls."""

    def __init__(self, bench, team: str, run: str):
        self.bench, self.team, self.run = bench, team, run
        self.output: str | None = None
        self.result: dict = {"error": f"not started: step {bench.at_step} was never logged"}

    def poll(self, api: RunClient, job: dict, steps: list, finished: bool) -> None:
        if "error" not in self.result:
            return
        head = api._head(self.team, self.run, job)
        if self.output is None and not finished and head and any(s.rollout_id >= self.bench.at_step for s in steps):
            self.output = str(driver_log_path(_word(job, "--marker"), _attempt(job)).with_name(
                f"bench-serving-{_attempt(job)}.jsonl"))
            code, _ = api._exec(self.team, head, serving_start(self.bench, _flag(job, "--hf-checkpoint"), self.output))
            self.result = {"error": f"bench_serving did not start (exec exited {code})"} if code != 0 else \
                {"error": "started; no result line yet", "startedAtStep": max(s.rollout_id for s in steps)}
        elif self.output is not None and head:
            code, text = api._exec(self.team, head, ["cat", self.output])
            if code == 0 and text.strip():
                self.result = parse_result(text) | {"startedAtStep": self.result.get("startedAtStep")}
        if finished and "error" in self.result and self.output is not None:
            self.result["error"] = f"no result before the attempt ended (see {self.output}.out)"


def run_attempt(api: RunClient, cfg: ProgramConfig, exp: Experiment, attempt: Attempt, folder: Path,
                repository: str, out: Callable[[str], None], poll_s: float = POLL_S,
                cloudwatch: object | None = None, injector: Injector | None = None,
                logs: Callable | None = None, pins: dict[str, list[str]] | None = None) -> list[dict]:
    """Submit, watch, inject, resume, collect. On any failure the cluster is left as it was found:
    the fault engine's experiments stopped and tags removed, the run's unfinished attempts cancelled
    (``RunClient.cancel``: suspended, their Ray clusters deleted), what was seen collected; each thing
    left or undone is printed, then the error goes on. ``pins``: pool -> the nodes of the experiment's
    first attempt (``pinning``). Returns the fault records."""
    run = attempt.run
    faults = exp.arm(attempt.arm).faults
    if faults and injector is None:
        raise ValueError(f"{attempt.folder}: a fault arm needs the fault engine (AWS credentials for FIS)")
    seen = Seen(logs or log_source(cfg))
    pending = {f.at_step: f.kind for f in faults}
    records: list[dict] = []
    bench = exp.arm(attempt.arm).serving
    serving = None if bench is None else ServingRun(bench, run.team, run.name)
    try:
        _submit(api, cfg, run, repository, bool(faults), pins)
        out(f"{attempt.folder}: submitted {run.name}")
        while True:
            jobs = api.rayjobs(run.team, run.name)
            job = jobs[-1] if jobs else None
            seen.look(api, run.team, run.name, jobs)
            if pending and job is not None and not _finished(job):
                done = parse_log(seen.logs.get(job["metadata"]["name"], "")).steps
                last = max((s.rollout_id for s in done), default=-1)
                for step in sorted(s for s in pending if s <= last):
                    record = injector.inject(api, pending.pop(step), run.team, run.name) | {
                        "step": step, "loggedStep": last, "rayjob": job["metadata"]["name"]}
                    records.append(record)
                    record |= detected(api, run.team, run.name, record)
                    out(f"{attempt.folder}: {record['kind']} at step {step} on {record['target']}")
            if serving is not None and job is not None:
                serving.poll(api, job, parse_log(seen.logs.get(job["metadata"]["name"], "")).steps, _finished(job))
            if _finished(job):
                if (job.get("status") or {}).get("jobStatus") == "SUCCEEDED" or not records:
                    break
                resumed = attempt_of(run, api.next_attempt(run))  # the job failed after a fault: resume
                _submit(api, cfg, resumed, repository, True, pins)
                out(f"{attempt.folder}: resumed as attempt {resumed.attempt}")
                run = resumed
                records[-1]["resumedAs"] = f"{run.name}-{run.attempt}"
            time.sleep(poll_s)
        collect(api, attempt, folder, records, seen, None if cloudwatch is None else (cloudwatch, cfg.cluster_name))
        if serving is not None:
            (folder / "serving.json").write_text(json.dumps(serving.result, indent=1))
    except BaseException as err:
        _leave_as_found(api, attempt, folder, records, seen, injector, out, err)
        raise
    out(f"{attempt.folder}: collected")
    return records


def _leave_as_found(api: RunClient, attempt: Attempt, folder: Path, records: list[dict], seen: Seen,
                    injector: Injector | None, out: Callable[[str], None], err: BaseException) -> None:
    """Undo what ``run_attempt`` started, each step on its own (one failing does not stop the next),
    and say what was done and what could not be."""
    out(f"{attempt.folder}: stopped by {type(err).__name__}: {err}")
    steps: list[tuple[str, Callable[[], str]]] = [
        ("fault engine", lambda: "; ".join(injector.undo()) or "nothing running" if injector else "none"),
        ("attempts", lambda: f"cancelled {', '.join(api.cancel(attempt.run.team, attempt.run.name)) or 'none (all finished)'}"),
        ("artifacts", lambda: _partial(api, attempt, folder, records, seen))]
    for what, step in steps:
        try:
            out(f"{attempt.folder}: left as found: {what}: {step()}")
        except Exception as undo_err:  # noqa: BLE001 (report and go on to the next step)
            out(f"{attempt.folder}: NOT undone: {what}: {type(undo_err).__name__}: {undo_err}")


def _partial(api: RunClient, attempt: Attempt, folder: Path, records: list[dict], seen: Seen) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "INCOMPLETE").write_text("bench run stopped before this attempt finished\n")
    (folder / "driver.log").write_text("".join(seen.logs.values()))
    if records:
        (folder / "faults.json").write_text(json.dumps(records, indent=1))
    return f"what was seen written to {folder} (marked INCOMPLETE)"


def run_experiment(path: Path, out_dir: Path | None, dry_run: bool, client: Callable[[], RunClient],
                   out: Callable[[str], None], repository: str = "", stack_dir: Path = STACKS_DIR,
                   cloudwatch: Callable[[str], object] | None = None, poll_s: float = POLL_S,
                   injector: Callable[[str, str], Injector] | None = None,
                   s3: Callable[[str], object] | None = None, log_bucket: str | None = None) -> int:
    """``cloudwatch(region)`` makes the boto3 CloudWatch client when the metrics are to be collected;
    ``injector(region, cluster)`` the fault engine (FIS, EC2 clients) when an arm has faults;
    ``s3(region)`` the client that reads driver logs from ``log_bucket`` once their heads are gone."""
    exp = load_experiment(path)
    cfg = gate.read(exp.stack, stack_dir)
    attempts = schedule(exp)
    if dry_run:
        for a in attempts:
            objs = run_objects(cfg, a.run)
            out("---")  # one YAML document per attempt: the stream parses with yaml.safe_load_all
            out(f"# {a.folder}: {objs.gang.describe()}; faults: "
                f"{', '.join(f'{f.kind} at step {f.at_step}' for f in exp.arm(a.arm).faults) or 'none'}")
            job = without_dedup(with_repository(objs.rayjob, repository or STACK_REPOSITORY))
            out(yaml.safe_dump(with_fault_target(job) if exp.arm(a.arm).faults else job, sort_keys=False))
        return 0
    if out_dir is None:
        raise ValueError("run: --out DIR is needed to collect the artifacts")
    if not log_bucket or s3 is None:
        raise ValueError("run: --log-bucket BUCKET (pulumi stack output checkpointBucket) is needed: the end of a "
                         "driver log is read from the bucket once its head is gone")
    for a in attempts:  # refuse before submitting anything
        with_repository(run_objects(cfg, a.run).rayjob, repository, cfg.stack)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, out_dir / EXPERIMENT_FILE)
    api = client()
    cw = None if cloudwatch is None else cloudwatch(cfg.region)
    engine = injector(cfg.region, cfg.cluster_name) if injector and any(a.faults for a in exp.arms) else None
    logs = log_source(cfg, s3(cfg.region) if s3 and log_bucket else None, log_bucket)
    pins = None
    for a in attempts:
        records = run_attempt(api, cfg, exp, a, out_dir / a.folder, repository, out, poll_s, cw, engine, logs, pins)
        if any(fault_kind(r["kind"]).removes_node for r in records):
            pins = None  # a pinned node is gone: the next attempt's nodes become the set
        else:
            pins = pins or node_set(out_dir / a.folder)  # every later attempt on the first one's nodes
    out(f"collected {len(attempts)} attempts into {out_dir}; next: python -m bench report {out_dir}")
    return 0

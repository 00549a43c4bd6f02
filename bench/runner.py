"""``python -m bench run``: submit the attempts one after another on the same nodes, wait for each,
inject a fault arm's faults, and collect each attempt's artifacts into ``OUT/<arm>/r<n>/``.

Everything a run is made of comes from the run command's own code (``workloads.runs``): the stack as
the run sees it and its RayJob (``submit.run_objects``), the Kubernetes calls (``client.RunClient``:
submit, list, next attempt), the image repository (``stackconfig.versions.with_repository``).

Guarantees: every attempt after the first is pinned to the first one's nodes (``pinning``);
``--dry-run`` prints every attempt's RayJob in run order, as one multi-document YAML
stream (``---`` before each), and contacts no cluster; a
drained node is uncordoned once the platform has reacted, so the run can return to the same
reserved nodes; an
attempt is submitted only when the previous one has finished (the nodes are free again); a fault
that makes the job fail is followed by the next attempt of the same run, which resumes from its last
complete checkpoint (as ``runs submit --resume``); the driver log is ``ray job logs`` of each
attempt read from its head at every poll (``RunClient.driver_log``; runs are submitted in HTTPMode,
with no submitter pod), since the head goes with the Ray cluster a minute after the attempt ends.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import yaml

from stackconfig.files import STACKS_DIR, read_stack
from stackconfig.versions import STACK_REPOSITORY, with_repository
from workloads.runs.client import FINISHED, RunClient, attempt_of
from workloads.runs.config import run_pools
from workloads.runs.submit import run_objects
from workloads.render.runs import RUN_LABEL
from workloads.render.teams import namespace_of
from workloads.stack import ProgramConfig

from .artifacts import EXPERIMENT_FILE
from .cloudwatch import collect as cw_collect, instance_id
from .experiment import Attempt, Experiment, load_experiment, schedule
from .faults import detected, inject, uncordon
from .logparse import parse_log
from .pinning import node_set, pinned

POLL_S = 30.0


def _sanitize(api: RunClient, obj) -> dict:
    return api.core.api_client.sanitize_for_serialization(obj)


class Seen:
    """What an attempt showed while it ran: each RayJob's driver log (the longest read) and the nodes
    its pods ran on. Its Ray cluster, and with it the head that serves the log and the pods, is
    deleted ``ttlSecondsAfterFinished`` (60 s) after it ends, so both are read at every poll."""

    def __init__(self) -> None:
        self.logs: dict[str, str] = {}
        self.nodes: set[str] = set()

    def look(self, api: RunClient, team: str, run: str, jobs: list[dict]) -> None:
        """Read the logs of ``jobs`` (the run's RayJobs as just listed) and the nodes of its pods."""
        for job in jobs:
            name = job["metadata"]["name"]
            text = api.driver_log(team, run, name)
            if len(text) >= len(self.logs.get(name, "")):
                self.logs[name] = text
        self.nodes |= {p.spec.node_name for p in api.core.list_namespaced_pod(
            namespace_of(team), label_selector=RUN_LABEL + "=" + run).items if p.spec.node_name}


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
    seen.look(api, team, run, jobs)
    (folder / "driver.log").write_text("".join(seen.logs.get(j["metadata"]["name"], "") for j in jobs))
    (folder / "rayjob.json").write_text(json.dumps({"apiVersion": "ray.io/v1", "kind": "RayJobList", "items": jobs},
                                                   indent=1))
    nodes = [_sanitize(api, api.core.read_node(n)) for n in sorted(seen.nodes)]
    (folder / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": nodes}, indent=1))
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


def run_attempt(api: RunClient, cfg: ProgramConfig, exp: Experiment, attempt: Attempt, folder: Path,
                repository: str, out: Callable[[str], None], poll_s: float = POLL_S,
                cloudwatch: object | None = None, pins: dict[str, list[str]] | None = None) -> None:
    """``pins``: pool -> the nodes of the experiment's first attempt (``pinning``)."""
    run = attempt.run
    objs = _objects(api, cfg, run)
    api.submit(without_dedup(with_repository(pinned(objs.rayjob, pins or {}), repository)))
    out(f"{attempt.folder}: submitted {run.name}")
    seen = Seen()
    pending = {f.at_step: f.kind for f in exp.arm(attempt.arm).faults}
    records: list[dict] = []
    while True:
        jobs = _jobs(api, attempt)
        job = jobs[-1] if jobs else None
        seen.look(api, run.team, run.name, jobs)
        if pending and job is not None:
            done = parse_log(seen.logs.get(job["metadata"]["name"], "")).steps
            last = max((s.rollout_id for s in done), default=-1)
            for step in sorted(s for s in pending if s <= last):
                record = inject(api, pending.pop(step), run.team, run.name) | {"step": step, "loggedStep": last}
                record["detectedAt"] = detected(api, run.team, run.name, record)
                uncordon(api, record)  # a drained node comes back: reserved capacity has no spare node
                records.append(record)
                out(f"{attempt.folder}: {record['kind']} at step {step} on {record['target']}")
        if _finished(job):
            if (job.get("status") or {}).get("jobStatus") == "SUCCEEDED" or not records:
                break
            resumed = attempt_of(run, api.next_attempt(run))  # the job failed after a fault: resume
            objs = _objects(api, cfg, resumed)
            api.submit(without_dedup(with_repository(pinned(objs.rayjob, pins or {}), repository)))
            out(f"{attempt.folder}: resumed as attempt {resumed.attempt}")
            run = resumed
            records[-1]["resumedAs"] = f"{run.name}-{run.attempt}"
        time.sleep(poll_s)
    collect(api, attempt, folder, records, seen, None if cloudwatch is None else (cloudwatch, cfg.cluster_name))
    out(f"{attempt.folder}: collected")


def run_experiment(path: Path, out_dir: Path | None, dry_run: bool, client: Callable[[], RunClient],
                   out: Callable[[str], None], repository: str = "", stack_dir: Path = STACKS_DIR,
                   cloudwatch: Callable[[str], object] | None = None, poll_s: float = POLL_S) -> int:
    """``cloudwatch(region)`` makes the boto3 CloudWatch client when the metrics are to be collected."""
    exp = load_experiment(path)
    cfg = read_stack(exp.stack, stack_dir, model=ProgramConfig)
    attempts = schedule(exp)
    if dry_run:
        for a in attempts:
            objs = run_objects(cfg, a.run)
            out("---")  # one YAML document per attempt: the stream parses with yaml.safe_load_all
            out(f"# {a.folder}: {objs.gang.describe()}; faults: "
                f"{', '.join(f'{f.kind.value} at step {f.at_step}' for f in exp.arm(a.arm).faults) or 'none'}")
            out(yaml.safe_dump(without_dedup(with_repository(objs.rayjob, repository or STACK_REPOSITORY)),
                               sort_keys=False))
        return 0
    if out_dir is None:
        raise ValueError("run: --out DIR is needed to collect the artifacts")
    for a in attempts:  # refuse before submitting anything
        with_repository(run_objects(cfg, a.run).rayjob, repository)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, out_dir / EXPERIMENT_FILE)
    api = client()
    cw = None if cloudwatch is None else cloudwatch(cfg.region)
    pins = None
    for a in attempts:
        run_attempt(api, cfg, exp, a, out_dir / a.folder, repository, out, poll_s, cw, pins)
        pins = pins or node_set(out_dir / a.folder)  # every later attempt on the first one's nodes
    out(f"collected {len(attempts)} attempts into {out_dir}; next: python -m bench report {out_dir}")
    return 0

"""Faults injected into a running attempt through AWS Fault Injection Service (FIS), with the
experiment templates the stack creates (``components.faults``), and the platform's first reaction.

Why FIS and not the Kubernetes API: the bench user is a team member (``render.teams.SUBMITTER_RULES``:
no pod delete, no node patch, no evictions, no cluster-wide pod list: 403), and a drain is refused by
the platform's own ``runs`` PodDisruptionBudget (maxUnavailable 0: every eviction of a run pod is
answered 429 TooManyRequests, Kubernetes ``pkg/registry/core/pod/storage/eviction.go``), so neither is
a fault the bench can or should inject. FIS is the field's engine: the stack creates one template
per fault and team, its own role acts, and the bench user only starts them (``fis:StartExperiment`` on
its team's templates, the IAM policy ``components.faults`` outputs). Every fault is a crash:

- ``delete-rollout-pod`` / ``delete-trainer-pod``: ``aws:eks:pod-delete`` with ``gracePeriodSeconds``
  0 on one pod of the attempt's ``rollout`` / ``trainer`` group (FIS User Guide, actions reference,
  "aws:eks:pod-delete"): SIGKILL, no preStop hook, so no save-on-stop checkpoint
  (``render.runs.SAVE_ON_STOP``) runs; the pods are found by the label ``FAULT_TARGET_LABEL`` the
  runner puts on a fault arm's worker groups;
- ``terminate-gpu-node``: ``aws:ec2:terminate-instances`` on the EC2 instance of one rollout pod's
  node, which the bench tags ``FAULT_TAG`` just before (FIS targets are fixed in the template; the tag
  is what picks the instance); the instance is gone, as in a hardware failure.

Each kind's action and group are data (``stackconfig/faults.yaml``, ``stackconfig.faults``).

Guarantees: every fault returns the time it was injected, the FIS experiment and what it hit, or
raises ``FaultError`` naming what failed; ``Injector.undo`` stops an experiment still running and
removes the tag (called by the runner on every path out); ``detected`` is the first Kubernetes Event
about the attempt after the fault (KubeRay's ``DeletedWorkerPod``/``CreatedWorkerPod``..., kubelet's
and the node controller's), with the event's own time, or the RayJob leaving RUNNING.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from workloads.render.common import RAY_GROUP_LABEL
from workloads.render.runs import RUN_LABEL
from workloads.render.teams import namespace_of
from workloads.cli.runs_client import RunClient

from .cloudwatch import instance_id
from components.faults import FAULT_KIND_TAG, FAULT_TAG, FAULT_TARGET_LABEL, CLUSTER_TAG, TEAM_TAG
from stackconfig.faults import fault_kind

DONE = {"completed", "stopped", "failed", "cancelled"}
"""FIS experiment states that do no more (FIS API ``ExperimentStatus``)."""


class FaultError(LookupError):
    """A fault that could not be injected; the message says what and why."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _group_pods(api: RunClient, team: str, run: str, group: str) -> list:
    pods = api.core.list_namespaced_pod(namespace_of(team), label_selector=f"{RUN_LABEL}={run},"
                                                                           f"{RAY_GROUP_LABEL}={group}").items
    return sorted((p for p in pods if p.status and p.status.phase == "Running"), key=lambda p: p.metadata.name)


@dataclass
class Injector:
    """Starts the stack's FIS templates with the bench user's AWS identity (``fis`` and ``ec2``: boto3
    clients) and keeps what it must undo."""

    fis: object
    ec2: object
    cluster: str
    poll_s: float = 5.0
    timeout_s: float = 600.0
    running: list[str] = field(default_factory=list)
    tagged: list[str] = field(default_factory=list)

    def template(self, kind: str, team: str) -> str:
        """The id of the stack's template for ``kind`` (and ``team`` for pod faults), found by its tags."""
        want = {CLUSTER_TAG: self.cluster, FAULT_KIND_TAG: kind}
        if fault_kind(kind).per_team:
            want[TEAM_TAG] = team
        found, token = [], None
        while True:
            page = self.fis.list_experiment_templates(**({"nextToken": token} if token else {}))
            found += [t["id"] for t in page.get("experimentTemplates", [])
                      if all((t.get("tags") or {}).get(k) == v for k, v in want.items())]
            token = page.get("nextToken")
            if not token:
                break
        if len(found) != 1:
            raise FaultError(f"{kind}: {len(found)} FIS experiment templates tagged {want} (expected 1: "
                             f"deploy the stack with faults enabled, components.faults)")
        return found[0]

    def inject(self, api: RunClient, kind: str, team: str, run: str) -> dict:
        """Inject one fault into the run's current pods and wait for FIS to finish it; a record for
        ``faults.json``."""
        spec = fault_kind(kind)
        group = spec.group
        pods = _group_pods(api, team, run, group)
        if not pods:
            raise FaultError(f"run {run}: no running pod of group {group} to inject {kind} into")
        template = self.template(kind, team)
        record = {"kind": kind, "group": group, "template": template,
                  "podsBefore": [p.metadata.name for p in pods]}
        if spec.removes_node:
            node = pods[0].spec.node_name
            iid = instance_id(api.core.api_client.sanitize_for_serialization(api.core.read_node(node))["spec"]["providerID"])
            self.ec2.create_tags(Resources=[iid], Tags=[{"Key": FAULT_TAG, "Value": self.cluster}])
            self.tagged.append(iid)
            record["target"] = f"node/{node} ({iid})"
        else:
            record["target"] = f"one pod of group {group} (label {FAULT_TARGET_LABEL})"
        record["injectedAt"] = _now().isoformat()
        exp = self.fis.start_experiment(experimentTemplateId=template, tags={RUN_LABEL: run})["experiment"]
        self.running.append(exp["id"])
        record["experiment"] = exp["id"]
        state = self._wait(exp["id"])
        self.running.remove(exp["id"])
        self._untag()
        if state.get("status") != "completed":
            raise FaultError(f"{kind}: FIS experiment {exp['id']} ended {state.get('status')}: "
                             f"{state.get('reason', 'no reason given')}")
        return record

    def _wait(self, experiment: str) -> dict:
        deadline = time.monotonic() + self.timeout_s
        while True:
            state = self.fis.get_experiment(id=experiment)["experiment"]["state"]
            if state.get("status") in DONE:
                return state
            if time.monotonic() > deadline:
                raise FaultError(f"FIS experiment {experiment} still {state.get('status')} after {self.timeout_s:.0f} s")
            time.sleep(self.poll_s)

    def _untag(self) -> None:
        if self.tagged:
            self.ec2.delete_tags(Resources=list(self.tagged), Tags=[{"Key": FAULT_TAG}])
            self.tagged.clear()

    def undo(self) -> list[str]:
        """Stop experiments still running and remove the instance tag; what was undone."""
        done = []
        for exp in list(self.running):
            self.fis.stop_experiment(id=exp)
            self.running.remove(exp)
            done.append(f"stopped FIS experiment {exp}")
        if self.tagged:
            done.append(f"untagged {', '.join(self.tagged)}")
            self._untag()
        return done


def _event_time(e) -> datetime | None:
    t = getattr(e, "event_time", None) or getattr(e, "last_timestamp", None) or getattr(e, "first_timestamp", None)
    return t


def detected(api: RunClient, team: str, run: str, record: dict, timeout_s: float = 1800,
             poll_s: float = 5.0) -> dict:
    """The platform's first reaction after the fault: the earliest Kubernetes Event in the team's
    namespace about a pod, RayCluster or RayJob of the run's current attempt (involvedObject name
    starting with the RayJob's name: KubeRay names the cluster and pods after it), with its own time and
    reason; else the RayJob leaving RUNNING, at the poll that saw it. ``{}`` within ``timeout_s``."""
    injected = datetime.fromisoformat(record["injectedAt"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = api.rayjobs(team, run)
        job = jobs[-1] if jobs else None
        prefix = job["metadata"]["name"] if job else run
        events = [e for e in api.core.list_namespaced_event(namespace_of(team)).items
                  if (e.involved_object.name or "").startswith(prefix) and _event_time(e)
                  and _event_time(e) >= injected]
        if events:
            first = min(events, key=_event_time)
            return {"detectedAt": _event_time(first).isoformat(), "detectedBy": f"Event {first.reason} "
                    f"({first.involved_object.kind} {first.involved_object.name})"}
        if job and (job.get("status") or {}).get("jobStatus") not in ("RUNNING", None, ""):
            return {"detectedAt": _now().isoformat(), "detectedBy": f"RayJob {prefix} {job['status']['jobStatus']}"}
        time.sleep(poll_s)
    return {}

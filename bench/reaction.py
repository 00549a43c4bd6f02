"""When a fault struck, and when the run and the platform first reacted to it, from the attempt's own
artifacts (``faults.json``, ``events.json``, ``driver.log``, ``rayjob.json``), each with its own time.

The kill (``killed``):

- a pod fault: the kubelet's ``Killing`` Event of the pod FIS hit (the kubelet's reason
  ``KillingContainer = "Killing"``, ``pkg/kubelet/events/event.go``, read at kubernetes/kubernetes
  00bdb3fa), recorded when it stops the container; not FIS' start, which is FIS' own start-up earlier.
  The kubelet records core/v1 Events, whose times are to the second;
- a node fault: FIS' own start time of its terminate action (``GetExperiment``
  ``actions.<name>.startTime``): the instance goes with its kubelet, which records nothing;
- artifacts of a ``bench run`` older than these records: the runner's ``injectedAt``, said so.

Two first reactions, each timed from the kill and named; both are reported, neither hides the other.

The run's (``run_reacted``), whichever of these comes first at or after the kill:

- Miles' health monitor failing the engine's health call (``Health check failed for rollout engine
  <i>``, radixark/miles@49cac7b5 ``miles/utils/health_monitor.py:154-156``; its message carries Ray's
  cause, such as an actor dead with its node), at its logging prefix's time;
- Miles' engine recovery (``Recovered <n> dead rollout engines``, ``miles/ray/rollout/server_group.py:209``);
- the hit RayJob leaving RUNNING: the end of its Ray job (``status.rayJobInfo.endTime``, else KubeRay's
  ``status.endTime``; KubeRay v1.7.0 ``rayjob_types.go``) when it ended FAILED or STOPPED.

The platform's (``platform_reacted``): the first Event KubeRay recorded about the hit RayJob or its
RayCluster (``status.rayClusterName``, else a name ``<rayjob>-...``, KubeRay v1.7.0
``utils.GenerateRayClusterName``), such as ``CreatedWorkerPod`` when it makes a lost worker pod again
(ray-project/kuberay v1.7.0 59d663ae ``ray-operator/controllers/ray/raycluster_controller.go:1183``
``diff > 0`` -> ``:1688``), ``DeletedWorkerPod`` (``:1121``) or the RayJob's ``DeletedRayCluster``
(``rayjob_controller.go:828``). Not another RayJob's (a resubmission is the runner's doing), and not
the kubelet's own Events (``Killing``, ...), which are the kill. Counted from ``KILL_SLACK_S`` (2 s)
before the kubelet's ``Killing``: a grace-0 delete removes the Pod object at once, so KubeRay's Pod watch
can record its Event (events.k8s.io, ``eventTime`` to the microsecond: KubeRay v1.7.0 records through
``mgr.GetEventRecorder``, ``raycluster_controller.go:60``) before the ``Killing``, whose time is cut to the
second; such a reaction is reported at its own time from the kill, 0 or below. Not from FIS' action
start: an Event about the cluster during FIS' start-up (a ``FailedToCreateWorkerPod`` retry, say) is no
reaction to a kill still to come. A node fault has no ``Killing``: its window opens at FIS' action start,
which is its kill.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from .artifacts import Collected
from .logparse import ANSI, stamp

HEALTH = re.compile(r"Health check failed for rollout engine (\d+)")
RECOVERED = re.compile(r"Recovered (\d+) dead rollout engines")
KILLING = "Killing"
BY_KILLING = "kubelet Event Killing"
KILL_SLACK_S = 2.0
"""How long before the kubelet's recorded ``Killing`` a platform reaction still counts: that time is cut to
the whole second (core/v1), and KubeRay reacts no earlier than the Pod object's deletion, which precedes the
kill; 1 s of truncation plus 1 s for the watch."""


def when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def event_time(e: dict) -> datetime | None:
    """When an Event first happened, as serialized: ``eventTime`` ("Time when this Event was first observed"),
    else ``firstTimestamp`` ("The time at which the event was first recorded"), else ``lastTimestamp`` ("The
    time at which the most recent occurrence of this event was recorded"): the core/v1 Event's field texts
    (kubernetes Python client 37.0.0 ``client/models/core_v1_event.py:114-118``, generated from k8s.io/api
    ``core/v1`` ``Event``). A repeated Event (``count`` > 1) is timed at its first occurrence."""
    return when(e.get("eventTime") or e.get("firstTimestamp") or e.get("lastTimestamp"))


def killed(c: Collected, fault: dict) -> tuple[datetime, str]:
    """(the kill's time, what says so); see the module."""
    pods = set(fault.get("hit") or fault.get("podsBefore") or [])
    started = when(fault.get("actionStartedAt"))
    kills = sorted((t, e) for e in c.events if e.get("reason") == KILLING
                   and (e.get("involvedObject") or {}).get("name") in pods
                   and (t := event_time(e)) is not None and (started is None or t >= started))
    if kills and not fault.get("tag"):
        t, e = kills[0]
        return t, f"{BY_KILLING} (Pod {e['involvedObject']['name']})"
    if started is not None:
        return started, "FIS action start (GetExperiment actions.startTime)"
    return when(fault["injectedAt"]), "the runner's injectedAt (no kill record in these artifacts)"


def _lines(c: Collected, after: datetime) -> list[tuple[datetime, str]]:
    out = []
    for raw in c.text.splitlines():
        line = ANSI.sub("", raw)
        for pattern, what in ((HEALTH, "Miles health check failed"), (RECOVERED, "Miles recovered engines")):
            m = pattern.search(line)
            if m and (t := stamp(line)) is not None and t >= after:
                out.append((t, f"{what} ({m.group(0)})"))
    return out


def hit_job(c: Collected, fault: dict) -> dict:
    """The RayJob the fault hit, as collected ({} when it was not)."""
    return next((j for j in c.rayjobs if (j.get("metadata") or {}).get("name") == fault.get("rayjob")), {})


def _job_end(c: Collected, fault: dict, after: datetime) -> list[tuple[datetime, str]]:
    status = hit_job(c, fault).get("status") or {}
    end = when((status.get("rayJobInfo") or {}).get("endTime") or status.get("endTime"))
    if status.get("jobStatus") in ("FAILED", "STOPPED") and end is not None and end >= after:
        return [(end, f"RayJob {fault['rayjob']} {status['jobStatus']} (its Ray job's end)")]
    return []


def run_reacted(c: Collected, fault: dict, kill: datetime) -> tuple[datetime, str] | None:
    """(the run's first reaction at or after ``kill``, which it was); None when the run showed none."""
    found = _lines(c, kill) + _job_end(c, fault, kill)
    return min(found, key=lambda x: x[0]) if found else None


def _hit_objects(c: Collected, fault: dict) -> tuple[str, str]:
    """(the hit RayJob's name, its RayCluster's name or, unrecorded, the prefix KubeRay gives it)."""
    job = fault.get("rayjob") or ""
    return job, (hit_job(c, fault).get("status") or {}).get("rayClusterName") or f"{job}-"


def platform_reacted(c: Collected, fault: dict, kill: datetime, by: str) -> tuple[datetime, str] | None:
    """(KubeRay's first Event about the hit RayJob or its RayCluster from ``KILL_SLACK_S`` before the kill
    when ``by`` (``killed``'s) is the kubelet's ``Killing``, else from FIS' action start, which is then the
    kill; which it was); None when KubeRay recorded none. See the module."""
    job, cluster = _hit_objects(c, fault)
    since = kill - timedelta(seconds=KILL_SLACK_S if by.startswith(BY_KILLING) else 0)
    found = []
    for e in c.events:
        o = e.get("involvedObject") or {}
        ours = (o.get("kind") == "RayJob" and o.get("name") == job) or (o.get("kind") == "RayCluster" and (
            o.get("name") == cluster or (cluster.endswith("-") and str(o.get("name", "")).startswith(cluster))))
        if ours and (t := event_time(e)) is not None and t >= since:
            found.append((t, f"KubeRay Event {e.get('reason')} ({o['kind']} {o['name']})"))
    return min(found, key=lambda x: x[0]) if found else None

"""When a fault struck, and when the platform or the run first reacted to it, from the attempt's own
artifacts (``faults.json``, ``events.json``, ``driver.log``, ``rayjob.json``), each with its own time.

The kill (``killed``):

- a pod fault: the kubelet's ``Killing`` Event of the pod FIS hit (the kubelet's reason
  ``KillingContainer = "Killing"``, ``pkg/kubelet/events/event.go``, read at kubernetes/kubernetes
  00bdb3fa), recorded when it stops the container; not FIS' start, which is FIS' own start-up earlier;
- a node fault: FIS' own start time of its terminate action (``GetExperiment``
  ``actions.<name>.startTime``): the instance goes with its kubelet, which records nothing;
- artifacts of a ``bench run`` older than these records: the runner's ``injectedAt``, said so.

The first reaction after the kill (``reacted``), whichever comes first, named:

- Miles' health monitor failing the engine's health call (``Health check failed for rollout engine
  <i>``, radixark/miles@49cac7b5 ``miles/utils/health_monitor.py:154-156``; its message carries Ray's
  cause, such as an actor dead with its node), at its logging prefix's time;
- Miles' engine recovery (``Recovered <n> dead rollout engines``, ``miles/ray/rollout/server_group.py:209``);
- the hit RayJob leaving RUNNING: the end of its Ray job (``status.rayJobInfo.endTime``, else KubeRay's
  ``status.endTime``; KubeRay v1.7.0 ``rayjob_types.go``) when it ended FAILED or STOPPED;
- KubeRay's Events about the attempt's RayCluster or RayJob (``CreatedWorkerPod``,
  ``DeletedWorkerPod``, ...): the operator replacing what was lost. The kubelet's own Events
  (``Killing``, ...) are the kill, not a reaction.
"""

from __future__ import annotations

import re
from datetime import datetime

from .artifacts import Collected
from .logparse import ANSI, stamp

HEALTH = re.compile(r"Health check failed for rollout engine (\d+)")
RECOVERED = re.compile(r"Recovered (\d+) dead rollout engines")
KILLING = "Killing"
KUBERAY_KINDS = ("RayCluster", "RayJob")


def when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def event_time(e: dict) -> datetime | None:
    """An Event's own time (``eventTime``, else ``lastTimestamp``, else ``firstTimestamp``), as serialized."""
    return when(e.get("eventTime") or e.get("lastTimestamp") or e.get("firstTimestamp"))


def killed(c: Collected, fault: dict) -> tuple[datetime, str]:
    """(the kill's time, what says so); see the module."""
    pods = set(fault.get("hit") or fault.get("podsBefore") or [])
    started = when(fault.get("actionStartedAt"))
    kills = sorted((t, e) for e in c.events if e.get("reason") == KILLING
                   and (e.get("involvedObject") or {}).get("name") in pods
                   and (t := event_time(e)) is not None and (started is None or t >= started))
    if kills and not fault.get("tag"):
        t, e = kills[0]
        return t, f"kubelet Event Killing (Pod {e['involvedObject']['name']})"
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


def _job_end(c: Collected, fault: dict, after: datetime) -> list[tuple[datetime, str]]:
    job = next((j for j in c.rayjobs if (j.get("metadata") or {}).get("name") == fault.get("rayjob")), None)
    status = (job or {}).get("status") or {}
    end = when((status.get("rayJobInfo") or {}).get("endTime") or status.get("endTime"))
    if status.get("jobStatus") in ("FAILED", "STOPPED") and end is not None and end >= after:
        return [(end, f"RayJob {fault['rayjob']} {status['jobStatus']} (its Ray job's end)")]
    return []


def _operator(c: Collected, after: datetime) -> list[tuple[datetime, str]]:
    return [(t, f"KubeRay Event {e.get('reason')} ({e['involvedObject']['kind']} {e['involvedObject']['name']})")
            for e in c.events if (e.get("involvedObject") or {}).get("kind") in KUBERAY_KINDS
            and (t := event_time(e)) is not None and t >= after]


def reacted(c: Collected, fault: dict, kill: datetime) -> tuple[datetime, str] | None:
    """(the first reaction's time, which it was) after ``kill``; None when nothing reacted."""
    found = _lines(c, kill) + _job_end(c, fault, kill) + _operator(c, kill)
    return min(found, key=lambda x: x[0]) if found else None

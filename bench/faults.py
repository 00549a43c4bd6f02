"""Faults injected into a running attempt through the Kubernetes API (``kubernetes`` client, as the
run command uses it), and the moment the platform reacted.

- ``delete-rollout-pod`` / ``delete-trainer-pod``: delete one pod of the run's ``rollout`` / ``trainer``
  worker group (label ``ray.io/group``, ``workloads.render.runs``), with its grace period, as Volcano
  or a failing node would;
- ``drain-gpu-node``: cordon the node of one rollout pod (``spec.unschedulable``) and evict every pod
  on it that no DaemonSet owns through the Eviction API (``policy/v1`` Eviction, which honours
  PodDisruptionBudgets), what ``kubectl drain`` does.

Guarantees: every fault returns the time it was injected and what it hit; ``detected`` returns when
the platform first reacted (the RayJob left RUNNING, or a replacement pod of the group was created).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from kubernetes import client as k8s

from workloads.render.common import RAY_GROUP_LABEL
from workloads.render.runs import ROLLOUT, RUN_LABEL, TRAINER
from workloads.render.teams import namespace_of
from workloads.runs.client import RunClient

from .experiment import FaultKind

GROUP = {FaultKind.DELETE_ROLLOUT_POD: ROLLOUT, FaultKind.DELETE_TRAINER_POD: TRAINER,
         FaultKind.DRAIN_GPU_NODE: ROLLOUT}


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _group_pods(api: RunClient, team: str, run: str, group: str) -> list:
    pods = api.core.list_namespaced_pod(namespace_of(team), label_selector=f"{RUN_LABEL}={run},"
                                                                           f"{RAY_GROUP_LABEL}={group}").items
    return sorted((p for p in pods if p.status and p.status.phase == "Running"), key=lambda p: p.metadata.name)


def inject(api: RunClient, kind: FaultKind, team: str, run: str) -> dict:
    """Inject one fault into the run's current pods; a record for ``faults.json``."""
    pods = _group_pods(api, team, run, GROUP[kind])
    if not pods:
        raise LookupError(f"run {run}: no running pod of group {GROUP[kind]} to inject {kind.value} into")
    pod = pods[0]
    at = _now()
    if kind is FaultKind.DRAIN_GPU_NODE:
        node = pod.spec.node_name
        api.core.patch_node(node, {"spec": {"unschedulable": True}})
        for victim in api.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
            owners = victim.metadata.owner_references or []
            if any(o.kind == "DaemonSet" for o in owners):
                continue
            eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=victim.metadata.name,
                                                                namespace=victim.metadata.namespace))
            api.core.create_namespaced_pod_eviction(victim.metadata.name, victim.metadata.namespace, eviction)
        target = f"node/{node}"
    else:
        api.core.delete_namespaced_pod(pod.metadata.name, namespace_of(team))
        target = f"pod/{pod.metadata.name}"
    return {"kind": kind.value, "target": target, "injectedAt": at.isoformat(), "group": GROUP[kind],
            "replaced": pod.metadata.name}


def detected(api: RunClient, team: str, run: str, record: dict, timeout_s: float = 1800,
             poll_s: float = 5.0) -> str | None:
    """When the platform first reacted to the fault (ISO time), or None within ``timeout_s``."""
    injected = datetime.fromisoformat(record["injectedAt"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = api.rayjobs(team, run)
        if jobs and (jobs[-1].get("status") or {}).get("jobStatus") not in ("RUNNING", None, ""):
            return _now().isoformat()
        pods = api.core.list_namespaced_pod(namespace_of(team), label_selector=f"{RUN_LABEL}={run},"
                                                                               f"{RAY_GROUP_LABEL}={record['group']}").items
        if any(p.metadata.creation_timestamp and p.metadata.creation_timestamp > injected
               and p.metadata.name != record["replaced"] for p in pods):
            return _now().isoformat()
        time.sleep(poll_s)
    return None


def uncordon(api: RunClient, record: dict) -> None:
    """Undo a drain's cordon (the node returns to the pool); nothing for a deleted pod."""
    if record["target"].startswith("node/"):
        api.core.patch_node(record["target"].removeprefix("node/"), {"spec": {"unschedulable": False}})

"""What the burn-in writes on a node, as the merge patches and Events it sends: one place for the
label and annotation keys, used by the agent on the node and by ``python -m nodes``.

Standard library only (it ships to the node in the burn-in's ConfigMap). Every patch carries the
node's ``resourceVersion``, so a write based on a stale read is refused (409) instead of dropping a
taint another writer added; the taint list is replaced whole (a JSON merge patch replaces lists).
The keys here are the only ones the admission policy (``nodes.policy``) lets the burn-in change.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Mapping

RESULT_LABEL = "rl.platform/burn-in"
"""``passed``, ``failed`` or ``retest``; absent on a node never tested."""
TIME_LABEL = "rl.platform/burn-in-time"
"""When the result was written, UTC, ``YYYYmmddTHHMMSSZ`` (a label value has no colons)."""
FIGURES_ANNOTATION = "rl.platform/burn-in-figures"
"""JSON: the measured figures of the last burn-in (NCCL busbw, EFA loopback, DCGM, seconds)."""
REASON_ANNOTATION = "rl.platform/burn-in-reason"
"""Why the last burn-in failed (absent after a pass)."""
LABELS = (RESULT_LABEL, TIME_LABEL)
ANNOTATIONS = (FIGURES_ANNOTATION, REASON_ANNOTATION)
PASSED, FAILED, RETEST = "passed", "failed", "retest"
DONE = (PASSED, FAILED)
"""Results that take the burn-in pod off the node (its DaemonSet's node affinity excludes them)."""
EVENT_REASON = {PASSED: "BurnInPassed", FAILED: "BurnInFailed", RETEST: "BurnInRetest"}


def stamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def parse_stamp(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        return None


def _same(taint: Mapping[str, Any], burn_in: Mapping[str, str]) -> bool:
    return taint.get("key") == burn_in["key"] and taint.get("effect") == burn_in["effect"]


def has_taint(node: Mapping[str, Any], burn_in: Mapping[str, str]) -> bool:
    return any(_same(t, burn_in) for t in node.get("spec", {}).get("taints") or [])


def _taints(node: Mapping[str, Any], burn_in: Mapping[str, str], present: bool) -> list[dict]:
    kept = [t for t in node.get("spec", {}).get("taints") or [] if not _same(t, burn_in)]
    return kept + [dict(burn_in)] if present else kept


def result_patch(node: Mapping[str, Any], burn_in: Mapping[str, str], result: str, figures: Mapping[str, Any],
                 reason: str | None, now: datetime) -> dict:
    """A pass removes the burn-in taint and the last reason; a failure keeps (or restores) the taint
    and states the reason. Both label the result and time and keep the figures."""
    if result not in DONE:
        raise ValueError(f"result {result!r}; one of {', '.join(DONE)}")
    return {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                         "labels": {RESULT_LABEL: result, TIME_LABEL: stamp(now)},
                         "annotations": {FIGURES_ANNOTATION: json.dumps(dict(figures), sort_keys=True),
                                         REASON_ANNOTATION: reason if result == FAILED else None}},
            "spec": {"taints": _taints(node, burn_in, present=result == FAILED)}}


def retest_patch(node: Mapping[str, Any], burn_in: Mapping[str, str]) -> dict:
    """Taint the node again and ask for a new burn-in (the DaemonSet's pod comes back to it)."""
    return {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                         "labels": {RESULT_LABEL: RETEST}},
            "spec": {"taints": _taints(node, burn_in, present=True)}}


def event(node: Mapping[str, Any], namespace: str, result: str, message: str, now: datetime) -> dict:
    """A core/v1 Event about the node (``kubectl describe node`` lists events whose involvedObject is it)."""
    md = node["metadata"]
    when = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{md['name']}.burn-in.", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": md["name"], "uid": md.get("uid", "")},
            "reason": EVENT_REASON[result], "message": message[:1024],
            "type": "Warning" if result == FAILED else "Normal",
            "source": {"component": "rl-burn-in", "host": md["name"]},
            "firstTimestamp": when, "lastTimestamp": when, "count": 1}


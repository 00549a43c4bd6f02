"""The per-pool replacement breaker: what it counts, when it trips, and how a reset holds (standard library
only: it ships to the controller's pod beside ``controller.py``).

It protects against replacing a pool's capacity again and again for a cause that is not each node's:
so it counts only what it guards, hardware failures and the replacements made for them, over a sliding
window (``windowMinutes``; NVIDIA NVSentinel's fault-quarantine breaker counts the unique nodes it
cordoned within its window, ``circuitBreaker.duration``, and trips above a share of the cluster,
``percentage``, docs/configuration/fault-quarantine.md). Software failures are never replaced, so they
never count. It trips when, within the window and since the last reset:
- more than ``maxFailedNodes`` nodes failed for a hardware reason (each node once, by the time its
  failure was written, ``marks.TIME_LABEL``; a node replaced since still counts by its record here);
- more than ``maxFailedPercent`` of the pool's nodes did;
- ``maxReplacementsPerHour`` replacements were requested in the last hour.
A trip stays until ``python -m nodes reset-breaker POOL`` (as NVSentinel's, which "requires manual human
intervention to reset"); a reset records when it happened, and only evidence newer than it counts, so
a reset holds until something fails again. The state lives in the ConfigMap ``burn-in-breaker`` (one
JSON document per pool); the nodes a trip holds back carry it too (``marks.REPLACEMENT_ANNOTATION``,
state ``held``), so a deleted ConfigMap is rebuilt tripped from them, never read as closed.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Mapping

try:  # in the pod: the ConfigMap puts it beside this file
    import marks
except ImportError:
    from nodes import marks

BREAKER = "burn-in-breaker"
HOUR = timedelta(hours=1)
HELD = "held"
"""The replacement record of a node the tripped breaker holds back (``marks.replacement``)."""


def state_of(cm: Mapping[str, Any] | None) -> dict[str, dict]:
    """Pool -> {tripped, at, reset, replacements: [{node, at, failed}]} from the breaker ConfigMap."""
    out = {}
    for pool, text in ((cm or {}).get("data") or {}).items():
        try:
            out[pool] = json.loads(text)
        except ValueError:
            out[pool] = {"tripped": f"unreadable state {text[:80]!r}"}
    return out


def config_map(namespace: str, state: Mapping[str, dict], cm: Mapping[str, Any] | None) -> dict:
    md = {"name": BREAKER, "namespace": namespace, **({"resourceVersion": cm["metadata"]["resourceVersion"]} if cm else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md,
            "data": {pool: json.dumps(doc, sort_keys=True) for pool, doc in state.items()}}


def reset(doc: Mapping[str, Any], now: datetime) -> dict:
    """The pool's state after an operator's reset: closed, and counting only what happens after ``now``."""
    return {"reset": marks.stamp(now), "replacements": list(doc.get("replacements", []))}


def _since(doc: Mapping[str, Any], floor: datetime) -> datetime:
    at = marks.parse_stamp(doc.get("reset", ""))
    return max(floor, at) if at else floor


def _after(stamp: str, since: datetime) -> bool:
    at = marks.parse_stamp(stamp)
    return at is not None and at >= since


def failed_for_hardware(node: Mapping[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return labels.get(marks.RESULT_LABEL) == marks.FAILED and labels.get(marks.FAULT_LABEL) == marks.HARDWARE


def hardware_failures(pool_nodes: list[Mapping[str, Any]], doc: Mapping[str, Any], since: datetime) -> set[str]:
    """The nodes that failed for a hardware reason since ``since``: those still here, and those replaced."""
    here = {n["metadata"]["name"] for n in pool_nodes if failed_for_hardware(n)
            and _after((n["metadata"].get("labels") or {}).get(marks.TIME_LABEL, ""), since)}
    return here | {r["node"] for r in doc.get("replacements", []) if _after(r.get("failed", ""), since)}


def replacements_since(doc: Mapping[str, Any], since: datetime) -> int:
    return sum(1 for r in doc.get("replacements", []) if _after(r.get("at", ""), since))


def trip_reason(pool_nodes: list[Mapping[str, Any]], limits: Mapping[str, Any], doc: Mapping[str, Any],
                now: datetime) -> str | None:
    """Why the breaker trips before one more replacement, or None."""
    window = _since(doc, now - timedelta(minutes=limits["windowMinutes"]))
    failed, total = len(hardware_failures(pool_nodes, doc, window)), len(pool_nodes)
    if failed > limits["maxFailedNodes"]:
        return (f"{failed} nodes failed for a hardware reason within {limits['windowMinutes']} min, more than "
                f"maxFailedNodes {limits['maxFailedNodes']}")
    pct = limits.get("maxFailedPercent")
    if pct is not None and total and failed * 100 / total > pct:
        return f"{failed} of {total} nodes failed for a hardware reason, more than maxFailedPercent {pct:g}%"
    replaced = replacements_since(doc, _since(doc, now - HOUR))
    if replaced >= limits["maxReplacementsPerHour"]:
        return f"{replaced} replacements in the last hour, maxReplacementsPerHour {limits['maxReplacementsPerHour']}"
    return None


def held_by(pool_nodes: list[Mapping[str, Any]]) -> str | None:
    """The trip a node's record says holds it back (the state to rebuild when the ConfigMap is gone)."""
    return next((r.get("reason") or "tripped" for n in pool_nodes
                 if (r := marks.replacement(n)).get("state") == HELD), None)


def tripped(state: dict[str, dict], pool: str, why: str, now: datetime) -> None:
    state.setdefault(pool, {}).update(tripped=why, at=marks.stamp(now))


def replaced(state: dict[str, dict], pool: str, node: Mapping[str, Any], now: datetime, window: timedelta) -> None:
    """Count a replacement of ``node`` (kept while it can still count: the window or the hour)."""
    doc = state.setdefault(pool, {})
    keep = now - max(window, HOUR)
    failed = (node["metadata"].get("labels") or {}).get(marks.TIME_LABEL, "")
    doc["replacements"] = [*(r for r in doc.get("replacements", []) if _after(r.get("at", ""), keep)),
                           {"node": node["metadata"]["name"], "at": marks.stamp(now), "failed": failed}]

"""The replacement controller: the one holder of ``autoscaling:SetInstanceHealth``, on the system pool.

Runs as a one-replica Deployment (``nodes.render``) in the workload image with the standard library
only. Every ``PERIOD_SECONDS`` it lists the GPU nodes of the pools with ``burnIn.replaceFailed`` and
replaces (``nodes.replace.mark_unhealthy``, instance id from ``spec.providerID``) only a node that is
labelled ``failed`` with fault ``hardware`` AND carries the quarantine taint; the burn-in agent only
labels. Per pool a circuit breaker (``stackconfig.burn_in.BreakerSettings``) trips instead of a
replacement when more nodes than ``maxFailedNodes`` (or ``maxFailedPercent`` of the pool) are failed,
or ``maxReplacementsPerHour`` were requested in the last hour; a trip is kept in the ConfigMap
``burn-in-breaker`` (one JSON document per pool), announced by a Warning Event and shown by
``python -m nodes status``, and only ``python -m nodes reset-breaker POOL`` closes it (as NVIDIA
NVSentinel's breaker, kept in its ``circuit-breaker`` ConfigMap, needs a manual reset). A refused
replacement is recorded on the node (annotation ``rl.platform/replacement``, state ``refused``) with
a Warning Event, and tried again ``RETRY_SECONDS`` later.

Every write meets the API server's refusals: a record on a node written by another since the list
(409) is written again on a fresh read, a node already gone (404: its instance was terminated) gets
none; the breaker ConfigMap saved by another since this pass read it (409 Conflict or AlreadyExists)
is read again and this pass's changes applied to it, so a replacement made is always counted.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

try:  # in the pod: the ConfigMap puts them beside this file
    import incluster
    import marks
    import replace
except ImportError:
    from nodes import incluster, marks, replace

BREAKER = "burn-in-breaker"
PERIOD_SECONDS = 60
RETRY_SECONDS = 600
COMPONENT = "rl-burn-in-replace"
HOUR = timedelta(hours=1)
TRIES = 3
"""Writes of one pass refused 409 (another writer in between) are tried this many times."""


def breaker_state(cm: Mapping[str, Any] | None) -> dict[str, dict]:
    """Pool -> {tripped: reason or absent, at, replacements: [stamps]} from the breaker ConfigMap."""
    out = {}
    for pool, text in ((cm or {}).get("data") or {}).items():
        try:
            out[pool] = json.loads(text)
        except ValueError:
            out[pool] = {"tripped": f"unreadable state {text[:80]!r}"}
    return out


def breaker_map(namespace: str, state: Mapping[str, dict], cm: Mapping[str, Any] | None) -> dict:
    md = {"name": BREAKER, "namespace": namespace, **({"resourceVersion": cm["metadata"]["resourceVersion"]} if cm else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md,
            "data": {pool: json.dumps(doc, sort_keys=True) for pool, doc in state.items()}}


def recent(doc: Mapping[str, Any], now: datetime) -> list[str]:
    return [s for s in doc.get("replacements", []) if (t := marks.parse_stamp(s)) and now - t < HOUR]


def is_failed(node: Mapping[str, Any]) -> bool:
    return (node["metadata"].get("labels") or {}).get(marks.RESULT_LABEL) == marks.FAILED


def replaceable(node: Mapping[str, Any], quarantine: Mapping[str, str]) -> bool:
    """Failed for a hardware reason and quarantined: the only nodes this controller ever replaces."""
    labels = node["metadata"].get("labels") or {}
    return is_failed(node) and labels.get(marks.FAULT_LABEL) == marks.HARDWARE and marks.has_taint(node, quarantine)


def due(node: Mapping[str, Any], now: datetime) -> bool:
    """Never asked, or refused at least ``RETRY_SECONDS`` ago."""
    last = marks.replacement(node)
    if not last:
        return True
    at = marks.parse_stamp(last.get("at", ""))
    return last.get("state") == "refused" and (at is None or (now - at).total_seconds() >= RETRY_SECONDS)


def trip_reason(pool_nodes: list[Mapping[str, Any]], limits: Mapping[str, Any], replaced_last_hour: int) -> str | None:
    failed, total = sum(1 for n in pool_nodes if is_failed(n)), len(pool_nodes)
    if failed > limits["maxFailedNodes"]:
        return f"{failed} nodes failed, more than maxFailedNodes {limits['maxFailedNodes']}"
    pct = limits.get("maxFailedPercent")
    if pct is not None and total and failed * 100 / total > pct:
        return f"{failed} of {total} nodes failed, more than maxFailedPercent {pct:g}%"
    if replaced_last_hour >= limits["maxReplacementsPerHour"]:
        return f"{replaced_last_hour} replacements in the last hour, maxReplacementsPerHour {limits['maxReplacementsPerHour']}"
    return None


def _tripped(state: dict[str, dict], pool: str, why: str, now: datetime) -> None:
    state.setdefault(pool, {}).update(tripped=why, at=marks.stamp(now))


def _replaced(state: dict[str, dict], pool: str, now: datetime) -> None:
    doc = state.setdefault(pool, {})
    doc["replacements"] = [*recent(doc, now), marks.stamp(now)]


def _record(api: incluster.Api, node: Mapping[str, Any], patch_of: Callable[[Mapping[str, Any]], dict]) -> None:
    """``patch_of(node)`` written on the node; on a 409 (written by another since it was read) again
    on a fresh read; nothing on a node that is gone (404)."""
    name = node["metadata"]["name"]
    for attempt in range(TRIES):
        try:
            api.patch_node(name, patch_of(api.node(name) if attempt else node))
            return
        except incluster.ApiError as e:
            if e.status == 404:
                return
            if e.status != 409 or attempt == TRIES - 1:
                raise


def _save(api: incluster.Api, ns: str, state: dict[str, dict], cm: Mapping[str, Any] | None,
          changes: list[Callable[[dict[str, dict]], None]]) -> None:
    """The breaker state saved; on a 409 (saved by another since ``cm`` was read) ``changes`` applied
    to a fresh read and saved again."""
    for attempt in range(TRIES):
        try:
            api.save_config_map(breaker_map(ns, state, cm))
            return
        except incluster.ApiError as e:
            if e.status != 409 or attempt == TRIES - 1:
                raise
            cm = api.config_map(ns, BREAKER)
            state = breaker_state(cm)
            for change in changes:
                change(state)


def _breaker_event(namespace: str, pool: str, why: str, now: datetime) -> dict:
    when = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{BREAKER}.", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": BREAKER, "namespace": namespace},
            "reason": "ReplacementBreakerTripped", "type": "Warning", "source": {"component": COMPONENT},
            "message": f"pool {pool}: replacement stopped ({why}); after a look: python -m nodes reset-breaker {pool}",
            "firstTimestamp": when, "lastTimestamp": when, "count": 1}


def reconcile(api: incluster.Api, plan: Mapping[str, Any], now: datetime,
              mark: Callable[[Mapping[str, Any]], None] = replace.mark_unhealthy) -> list[str]:
    """One pass over the replace-enabled pools; returns what it did, one line each."""
    ns, quarantine, done = plan["namespace"], plan["quarantine"], []
    cm = api.config_map(ns, BREAKER)
    state = breaker_state(cm)
    changes: list[Callable[[dict[str, dict]], None]] = []

    def change(step: Callable[[dict[str, dict]], None]) -> None:
        changes.append(step)
        step(state)

    nodes = api.nodes(f"{plan['poolLabel']} in ({','.join(sorted(plan['pools']))})")
    try:
        for pool, limits in sorted(plan["pools"].items()):
            mine = [n for n in nodes if (n["metadata"].get("labels") or {}).get(plan["poolLabel"]) == pool]
            todo = [n for n in mine if replaceable(n, quarantine) and due(n, now)]
            if not todo or state.get(pool, {}).get("tripped"):
                continue
            for node in todo:
                why = trip_reason(mine, limits, len(recent(state.get(pool, {}), now)))
                if why:
                    change(functools.partial(_tripped, pool=pool, why=why, now=now))
                    api.create_event(_breaker_event(ns, pool, why, now))
                    done.append(f"{pool}: breaker tripped: {why}")
                    break
                done.append(_replace(api, node, ns, now, mark, lambda: change(functools.partial(_replaced, pool=pool, now=now))))
    finally:  # what this pass did is kept even when a later write failed
        if changes:
            _save(api, ns, state, cm, changes)
    return done


def _replace(api: incluster.Api, node: Mapping[str, Any], ns: str, now: datetime,
             mark: Callable[[Mapping[str, Any]], None], counted: Callable[[], None]) -> str:
    """Ask for the node's replacement; record the answer on the node (and ``counted()`` a replacement)."""
    name, attempts = node["metadata"]["name"], marks.replacement(node).get("attempts", 0) + 1
    try:
        mark(node)
    except Exception as e:  # noqa: BLE001 - any refusal is recorded and tried again later
        refusal, why = str(e), f"{type(e).__name__}: {e}"
        _record(api, node, lambda n: marks.replacement_patch(n, "refused", now, attempts, why))
        api.create_event(marks.event(node, ns, marks.FAILED, f"replacement refused ({attempts}): {refusal}", now,
                                     reason="ReplacementRefused", warning=True, component=COMPONENT))
        return f"{name}: replacement refused: {refusal}"
    counted()
    _record(api, node, lambda n: marks.replacement_patch(n, "requested", now, attempts))
    api.create_event(marks.event(node, ns, marks.FAILED, "instance marked unhealthy: the node group replaces it",
                                 now, reason="ReplacementRequested", warning=False, component=COMPONENT))
    return f"{name}: replacement requested"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="JSON {namespace, poolLabel, quarantine, pools: {pool: limits}}")
    plan = json.loads(p.parse_args(argv).plan)
    api = incluster.Api()
    while True:
        try:
            for line in reconcile(api, plan, datetime.now(timezone.utc)):
                print(line, flush=True)
        except (incluster.ApiError, OSError) as e:  # a conflict or a blip: look again next period
            print(f"controller: {e}", flush=True)
        time.sleep(PERIOD_SECONDS)


if __name__ == "__main__":
    raise SystemExit(main())

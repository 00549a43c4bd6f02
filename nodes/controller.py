"""The burn-in controller, on the system pool: it frees the nodes asked to re-test and, with
``burnIn.replaceFailed``, replaces hardware failures (the one holder of ``autoscaling:SetInstanceHealth``).

Runs as a one-replica Deployment (``nodes.render``) in the workload image with the standard library
only. Every ``PERIOD_SECONDS`` it lists the GPU nodes of the burn-in's pools; on a node asked to re-test
it evicts the pods that hold its GPUs and EFA devices (``nodes.retest``); it pairs the new nodes waiting
for the check with a neighbour (``nodes.pairs``); in the pools with
``burnIn.replaceFailed`` it replaces (``nodes.replace.mark_unhealthy``, instance id from ``spec.providerID``) only a node that is
labelled ``failed`` with fault ``hardware`` AND carries the quarantine taint; the burn-in agent only
labels. Per pool a circuit breaker (``nodes.breaker``) trips instead of a replacement; a trip is kept in
the ConfigMap ``burn-in-breaker`` and on each node it holds back (record ``held``), announced by a
Warning Event and shown by ``python -m nodes status``; only ``python -m nodes reset-breaker POOL`` closes
it. A ConfigMap found missing while nodes of the pool are held is rebuilt tripped, with a Warning Event
(``ReplacementBreakerRestored``). A refused replacement is recorded on the node (annotation
``rl.platform/replacement``, state ``refused``) with a Warning Event, and tried again ``RETRY_SECONDS`` later.

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
    import breaker
    import incluster
    import marks
    import pairs
    import replace
    import retest
except ImportError:
    from nodes import breaker, incluster, marks, pairs, replace, retest

PERIOD_SECONDS = 60
RETRY_SECONDS = 600
COMPONENT = "rl-burn-in-replace"
TRIES = 3
"""Writes of one pass refused 409 (another writer in between) are tried this many times."""


def replaceable(node: Mapping[str, Any], quarantine: Mapping[str, str]) -> bool:
    """Failed for a hardware reason and quarantined: the only nodes this controller ever replaces."""
    return breaker.failed_for_hardware(node) and marks.has_taint(node, quarantine)


def due(node: Mapping[str, Any], now: datetime) -> bool:
    """Never asked, held back by the breaker (asked again once it is closed), or refused at least
    ``RETRY_SECONDS`` ago."""
    last = marks.replacement(node)
    if not last or last.get("state") == breaker.HELD:
        return True
    at = marks.parse_stamp(last.get("at", ""))
    return last.get("state") == "refused" and (at is None or (now - at).total_seconds() >= RETRY_SECONDS)


def _save(api: incluster.Api, ns: str, state: dict[str, dict], cm: Mapping[str, Any] | None,
          changes: list[Callable[[dict[str, dict]], None]]) -> None:
    """The breaker state saved; on a 409 (saved by another since ``cm`` was read) ``changes`` applied
    to a fresh read and saved again."""
    for attempt in range(TRIES):
        try:
            api.save_config_map(breaker.config_map(ns, state, cm))
            return
        except incluster.ApiError as e:
            if e.status != 409 or attempt == TRIES - 1:
                raise
            cm = api.config_map(ns, breaker.BREAKER)
            state = breaker.state_of(cm)
            for change in changes:
                change(state)


def _breaker_event(namespace: str, pool: str, why: str, now: datetime, reason: str = "ReplacementBreakerTripped") -> dict:
    when = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{breaker.BREAKER}.", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": breaker.BREAKER, "namespace": namespace},
            "reason": reason, "type": "Warning", "source": {"component": COMPONENT},
            "message": f"pool {pool}: replacement stopped ({why}); after a look: python -m nodes reset-breaker {pool}",
            "firstTimestamp": when, "lastTimestamp": when, "count": 1}


class Pass:
    """One pass's breaker state, and the changes it made to it (applied again to a fresh read on a 409)."""

    def __init__(self, api: incluster.Api, ns: str):
        self.api, self.ns = api, ns
        self.cm = api.config_map(ns, breaker.BREAKER)
        self.state = breaker.state_of(self.cm)
        self.changes: list[Callable[[dict[str, dict]], None]] = []

    def change(self, step: Callable[[dict[str, dict]], None]) -> None:
        self.changes.append(step)
        step(self.state)

    def trip(self, pool: str, why: str, now: datetime, reason: str = "ReplacementBreakerTripped") -> str:
        self.change(functools.partial(breaker.tripped, pool=pool, why=why, now=now))
        self.api.create_event(_breaker_event(self.ns, pool, why, now, reason))
        return f"{pool}: breaker tripped: {why}"

    def save(self) -> None:
        if self.changes:
            _save(self.api, self.ns, self.state, self.cm, self.changes)


def _hold(api: incluster.Api, nodes: list[Mapping[str, Any]], why: str, now: datetime) -> None:
    """Record on each node the trip that holds it back (what rebuilds a deleted breaker)."""
    for node in nodes:
        if marks.replacement(node).get("state") != breaker.HELD:
            attempts = marks.replacement(node).get("attempts", 0)
            api.record(node, lambda n: marks.replacement_patch(n, breaker.HELD, now, attempts, why))


def reconcile_pool(api: incluster.Api, run: Pass, pool: str, mine: list[Mapping[str, Any]], limits: Mapping[str, Any],
                   plan: Mapping[str, Any], now: datetime, mark: Callable[[Mapping[str, Any]], None]) -> list[str]:
    done: list[str] = []
    todo = [n for n in mine if replaceable(n, plan["quarantine"]) and due(n, now)]
    held = breaker.held_by(mine) if pool not in run.state else None
    if held:  # the ConfigMap lost this pool's state while its trip still holds nodes back
        done.append(run.trip(pool, held, now, reason="ReplacementBreakerRestored"))
    if run.state.get(pool, {}).get("tripped"):
        _hold(api, todo, run.state[pool]["tripped"], now)
        return done
    window = timedelta(minutes=limits["windowMinutes"])
    for i, node in enumerate(todo):
        why = breaker.trip_reason(mine, limits, run.state.get(pool, {}), now)
        if why:
            done.append(run.trip(pool, why, now))
            _hold(api, todo[i:], why, now)
            break
        counted = functools.partial(run.change, functools.partial(breaker.replaced, pool=pool, node=node, now=now,
                                                                  window=window))
        done.append(_replace(api, node, plan["namespace"], now, mark, counted))
    return done


def reconcile(api: incluster.Api, plan: Mapping[str, Any], now: datetime,
              mark: Callable[[Mapping[str, Any]], None] = replace.mark_unhealthy) -> list[str]:
    """One pass over the burn-in's pools: free the nodes asked to re-test, pair the nodes waiting for a
    neighbour, replace in the replace-enabled pools; returns what it did, one line each."""
    run, done = Pass(api, plan["namespace"]), []
    nodes = api.nodes(f"{plan['poolLabel']} in ({','.join(sorted(plan['pools']))})")
    try:
        for node in (n for n in nodes if retest.retesting(n, plan["taint"])):
            try:  # one node's refusal never stops the pass: pairing and replacement go on
                done += retest.release(api, node, plan["namespace"], now, PERIOD_SECONDS)
            except incluster.ApiError as e:
                done.append(f"{node['metadata']['name']}: re-test not freed ({e}): tried again in {PERIOD_SECONDS} s")
        try:  # a refused pairing write (a host pod's create, a node mark) never stops replacement either
            done += pairs.pair(api, nodes, plan, now)
        except incluster.ApiError as e:
            done.append(f"pairing not done ({e}): tried again in {PERIOD_SECONDS} s")
        for pool, limits in sorted(plan["pools"].items()):
            mine = [n for n in nodes if (n["metadata"].get("labels") or {}).get(plan["poolLabel"]) == pool]
            done += reconcile_pool(api, run, pool, mine, limits, plan, now, mark) if limits["replace"] else []
    finally:  # what this pass did is kept even when a later write failed
        run.save()
    return done


def _replace(api: incluster.Api, node: Mapping[str, Any], ns: str, now: datetime,
             mark: Callable[[Mapping[str, Any]], None], counted: Callable[[], None]) -> str:
    """Ask for the node's replacement; record the answer on the node (and ``counted()`` a replacement)."""
    name, attempts = node["metadata"]["name"], marks.replacement(node).get("attempts", 0) + 1
    try:
        mark(node)
    except Exception as e:  # noqa: BLE001 - any refusal is recorded and tried again later
        refusal, why = str(e), f"{type(e).__name__}: {e}"
        api.record(node, lambda n: marks.replacement_patch(n, "refused", now, attempts, why))
        api.create_event(marks.event(node, marks.FAILED, f"replacement refused ({attempts}): {refusal}", now,
                                     reason="ReplacementRefused", warning=True, component=COMPONENT))
        return f"{name}: replacement refused: {refusal}"
    counted()
    api.record(node, lambda n: marks.replacement_patch(n, "requested", now, attempts))
    api.create_event(marks.event(node, marks.FAILED, "instance marked unhealthy: the node group replaces it",
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

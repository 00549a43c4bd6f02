"""What the burn-in writes on a node, as the merge patches and Events it sends: one place for the
label and annotation keys, used by the agent on the node, the watcher, the replacement controller
and by ``python -m nodes``.

Standard library only (it ships to the node in the burn-in's ConfigMap). Every patch carries the
node's ``resourceVersion``, so a write based on a stale read is refused (409) instead of dropping a
taint another writer added; the taint list is replaced whole (a JSON merge patch replaces lists).
The keys here are the only ones the admission policy (``nodes.policy``) lets the burn-in change.

Two taints: the burn-in taint (``rl.platform/burn-in``, the node group's own: every GPU node
registers with it) goes at a pass and comes back for a re-test; a failure never touches it and adds
the quarantine taint (``rl.platform/quarantine``, no node group names it), so an EKS update of the
node group's taints (``burnIn.enabled`` toggled) cannot lift a failed node's quarantine. A pass
removes both.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Mapping

RESULT_LABEL = "rl.platform/burn-in"
"""``passed``, ``failed`` or ``retest``; absent on a node never tested."""
TIME_LABEL = "rl.platform/burn-in-time"
"""When the result was written, UTC, ``YYYYmmddTHHMMSSZ`` (a label value has no colons)."""
FAULT_LABEL = "rl.platform/burn-in-fault"
"""On a failed node: ``hardware`` (a DCGM test failed with a hardware error, an EFA device missing
or corrupting data), ``network`` (the check with a neighbour failed: ``nodes.pairs``) or ``software``
(everything else); only ``hardware`` is ever replaced."""
FIGURES_ANNOTATION = "rl.platform/burn-in-figures"
"""JSON: the measured figures of the last burn-in (NCCL busbw, EFA loopback, DCGM, seconds)."""
REASON_ANNOTATION = "rl.platform/burn-in-reason"
"""Why the last burn-in failed (absent after a pass)."""
BOOT_ANNOTATION = "rl.platform/burn-in-boot-id"
"""``status.nodeInfo.bootID`` when the node passed: another boot id means it rebooted since."""
REPLACEMENT_ANNOTATION = "rl.platform/replacement"
"""JSON {state: requested|refused|held, at, attempts, reason}: the replacement controller's last try."""
WAITING_ANNOTATION = "rl.platform/burn-in-waiting"
"""JSON {address, until}: the node passed its own checks and its agent waits for a neighbour
(``nodes.pairs``) until then, reachable at that pod address."""
PEER_ANNOTATION = "rl.platform/burn-in-peer"
"""JSON {node, address, rank}: the neighbour the controller paired the node with (its name and pod
address) and this node's rank in the pair (0 hosts the rendezvous and the ping-pong servers)."""
LABELS = (RESULT_LABEL, TIME_LABEL, FAULT_LABEL)
ANNOTATIONS = (FIGURES_ANNOTATION, REASON_ANNOTATION, BOOT_ANNOTATION, WAITING_ANNOTATION, PEER_ANNOTATION)
PASSED, FAILED, RETEST = "passed", "failed", "retest"
HARDWARE, SOFTWARE, NETWORK = "hardware", "software", "network"
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


def _same(taint: Mapping[str, Any], other: Mapping[str, str]) -> bool:
    return taint.get("key") == other["key"] and taint.get("effect") == other["effect"]


def has_taint(node: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
    return any(_same(t, taint) for t in node.get("spec", {}).get("taints") or [])


def boot_id(node: Mapping[str, Any]) -> str:
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")


def _taints(node: Mapping[str, Any], add: tuple[Mapping[str, str], ...] = (),
            remove: tuple[Mapping[str, str], ...] = ()) -> list[dict]:
    kept = [t for t in node.get("spec", {}).get("taints") or [] if not any(_same(t, x) for x in (*add, *remove))]
    have = node.get("spec", {}).get("taints") or []
    return kept + [next((dict(t) for t in have if _same(t, x)), dict(x)) for x in add]


def result_patch(node: Mapping[str, Any], burn_in: Mapping[str, str], quarantine: Mapping[str, str], result: str,
                 figures: Mapping[str, Any], reason: str | None, now: datetime, fault: str | None = None,
                 capabilities: Mapping[str, str] | None = None) -> dict:
    """A pass removes the burn-in and quarantine taints and the last reason and fault, and records the
    boot id; a failure adds the quarantine taint (the burn-in taint as it is), with the reason and the
    fault. Both label the result and time, keep the figures and set ``capabilities`` (labels)."""
    if result not in DONE:
        raise ValueError(f"result {result!r}; one of {', '.join(DONE)}")
    passed = result == PASSED
    taints = _taints(node, remove=(burn_in, quarantine)) if passed else _taints(node, add=(quarantine,))
    return {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                         "labels": {RESULT_LABEL: result, TIME_LABEL: stamp(now),
                                    FAULT_LABEL: None if passed else (fault or SOFTWARE), **(capabilities or {})},
                         "annotations": {FIGURES_ANNOTATION: json.dumps(dict(figures), sort_keys=True),
                                         REASON_ANNOTATION: None if passed else reason,
                                         BOOT_ANNOTATION: boot_id(node) or None if passed else None,
                                         WAITING_ANNOTATION: None, PEER_ANNOTATION: None}},
            "spec": {"taints": taints}}


def retest_patch(node: Mapping[str, Any], burn_in: Mapping[str, str]) -> dict:
    """Taint the node again and ask for a new burn-in (the DaemonSet's pod comes back to it); a
    quarantine stays until the node passes."""
    return {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                         "labels": {RESULT_LABEL: RETEST}},
            "spec": {"taints": _taints(node, add=(burn_in,))}}


def replacement_patch(node: Mapping[str, Any], state: str, now: datetime, attempts: int, reason: str = "") -> dict:
    """The replacement controller's record on the node (its only write there)."""
    doc = {"state": state, "at": stamp(now), "attempts": attempts, **({"reason": reason[:500]} if reason else {})}
    return {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                         "annotations": {REPLACEMENT_ANNOTATION: json.dumps(doc, sort_keys=True)}}}


def annotation(node: Mapping[str, Any], key: str) -> dict:
    """A JSON annotation of the node; empty when absent or unreadable."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}


def replacement(node: Mapping[str, Any]) -> dict:
    return annotation(node, REPLACEMENT_ANNOTATION)


NODE_EVENTS_NAMESPACE = "default"
"""Where an Event about a Node goes: a core/v1 Event without ``eventTime`` whose involved object has no
namespace must be in ``default`` (kubernetes v1.35.3 pkg/apis/core/validation/events.go:146-150; the API
server refuses it in any other namespace, as the control-plane tier showed), which is also where the
kubelet and the node controllers write theirs."""


def event(node: Mapping[str, Any], result: str, message: str, now: datetime,
          reason: str | None = None, warning: bool | None = None, component: str = "rl-burn-in") -> dict:
    """A core/v1 Event about the node (``kubectl describe node`` lists events whose involvedObject is it)."""
    md = node["metadata"]
    when = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{md['name']}.burn-in.", "namespace": NODE_EVENTS_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": md["name"], "uid": md.get("uid", "")},
            "reason": reason or EVENT_REASON[result], "message": message[:1024],
            "type": "Warning" if (result == FAILED if warning is None else warning) else "Normal",
            "source": {"component": component, "host": md["name"]},
            "firstTimestamp": when, "lastTimestamp": when, "count": 1}

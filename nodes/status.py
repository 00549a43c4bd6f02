"""The burn-in seen from outside, through the official Kubernetes client: each GPU node's state, and
re-tests.

Guarantees: every GPU node is listed (a node with GPUs in its capacity, the burn-in or quarantine
taint or a result label), never as passed unless its result label says so and both taints are gone;
a failed node's reason carries its fault and the replacement controller's last try; a node without a
result is "testing" while its burn-in pod is within its allowance (pulls, DCGM, the agent's budget),
"failed" once the pod is past it, and "not tested" with the reason (no pod on the node, the pod
pending and why) otherwise. The replacement breaker of each pool is read from its ConfigMap and
reset only on request (``reset_breaker``), which holds until a new failure (``nodes.breaker``).
A re-test taints the node again and labels it ``retest`` with its ``resourceVersion`` (a stale read is
refused, and retried), so the DaemonSet's pod returns to it; ``refused_nodes`` finds the passed nodes
on which a run pod's preflight failed (the watcher, ``nodes.watch``, does the same on each node).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable

from kubernetes import client as k8s

from components.gpu_node_setup import BURN_IN_TAINT
from stackconfig.stack import POOL_LABEL

from .burn_in import QUARANTINE_TAINT
from .breaker import BREAKER, config_map, reset, state_of
from .marks import FAILED, FAULT_LABEL, FIGURES_ANNOTATION, PASSED, REASON_ANNOTATION, RESULT_LABEL, TIME_LABEL, \
    RETEST, has_taint, parse_stamp, replacement, retest_patch
from .render import NAMESPACE, PROBE_GRACE_SECONDS
from .watch import parse_time, refusals

GPU = "nvidia.com/gpu"
TAINT = {"key": BURN_IN_TAINT.key, "value": BURN_IN_TAINT.value, "effect": BURN_IN_TAINT.effect}
QUARANTINE = {"key": QUARANTINE_TAINT.key, "value": QUARANTINE_TAINT.value, "effect": QUARANTINE_TAINT.effect}


@dataclass(frozen=True)
class NodeRow:
    node: str
    pool: str
    state: str
    """passed, failed, testing or not tested."""
    age_seconds: int
    tested: str
    figures: dict = field(default_factory=dict)
    reason: str = ""


def is_gpu_node(node: dict) -> bool:
    labels = node["metadata"].get("labels") or {}
    return (int((node.get("status", {}).get("capacity") or {}).get(GPU, "0")) > 0 or has_taint(node, TAINT)
            or has_taint(node, QUARANTINE) or RESULT_LABEL in labels)


def _plan_of(pod: dict) -> dict:
    for c in pod["spec"]["containers"]:
        cmd = c.get("command") or []
        if "--plan" in cmd:
            return json.loads(cmd[cmd.index("--plan") + 1])
    return {}


def _pending_why(pod: dict) -> str:
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "PodInitializing", "ContainerCreating"):
            return f"{cs['name']}: {waiting['reason']} {waiting.get('message', '')}".strip()
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"unschedulable: {c.get('message', c.get('reason', ''))}"
    return "waiting to start"


def classify(node: dict, pods: Iterable[dict], now: datetime) -> NodeRow:
    md = node["metadata"]
    labels, notes = md.get("labels") or {}, md.get("annotations") or {}
    created = parse_time(md.get("creationTimestamp")) or now
    tested = parse_stamp(labels.get(TIME_LABEL, ""))
    row = dict(node=md["name"], pool=labels.get(POOL_LABEL, "?"), age_seconds=int((now - created).total_seconds()),
               tested=tested.isoformat() if tested else "", figures=json.loads(notes.get(FIGURES_ANNOTATION, "{}")))
    result, tainted = labels.get(RESULT_LABEL), has_taint(node, TAINT) or has_taint(node, QUARANTINE)
    if result == PASSED and not tainted:
        return NodeRow(state="passed", **row)
    if result == PASSED:
        return NodeRow(state="not tested", reason="passed, but a burn-in or quarantine taint is back without a retest "
                                                  f"label: python -m nodes retest {md['name']}", **row)
    if result == FAILED:
        why = f"{labels.get(FAULT_LABEL, 'software')}: {notes.get(REASON_ANNOTATION, 'no reason recorded')}"
        tried = replacement(node)
        if tried:
            why += (f"; replacement {tried.get('state')} at {tried.get('at')} (attempt {tried.get('attempts')})"
                    f"{': ' + tried['reason'] if tried.get('reason') else ''}")
        return NodeRow(state="failed", reason=why, **row)
    mine = [p for p in pods if p["spec"].get("nodeName") == md["name"]]
    if not mine:
        return NodeRow(state="not tested", reason=f"no burn-in pod on the node: is its pool's DaemonSet there "
                                                  f"(kubectl -n {NAMESPACE} get ds) and burnIn.enabled on?", **row)
    pod = max(mine, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    phase, name = pod.get("status", {}).get("phase", "Pending"), pod["metadata"]["name"]
    plan = _plan_of(pod)
    budget = plan.get("nodeSeconds") or plan.get("budgetSeconds", 0)  # pulls, DCGM and the agent's own budget
    started = parse_time((pod.get("status") or {}).get("startTime"))
    elapsed = int((now - started).total_seconds()) if started else 0
    late = started is not None and budget and elapsed > budget + PROBE_GRACE_SECONDS
    if phase == "Pending":
        return NodeRow(state="failed" if late else "not tested",
                       reason=f"burn-in pod {name} pending{f' {elapsed} s, past its allowance of {budget} s' if late else ''}"
                              f": {_pending_why(pod)}", **row)
    if phase != "Running":
        return NodeRow(state="not tested", reason=f"burn-in pod {name} {phase}", **row)
    if late:
        return NodeRow(state="failed", reason=f"burn-in pod {name} running {elapsed} s, past its budget of {budget} s, "
                                              f"without a result", **row)
    again = " (re-test)" if result == RETEST else ""
    return NodeRow(state="testing", reason=f"burn-in pod {name}{again}: {elapsed} s of {budget or '?'} s", **row)


class NodesClient:
    """``api``: a configured ``kubernetes.client.ApiClient``."""

    def __init__(self, api: k8s.ApiClient):
        self.api, self.core = api, k8s.CoreV1Api(api)

    def _dicts(self, listing) -> list[dict]:
        return [self.api.sanitize_for_serialization(o) for o in listing.items]

    def rows(self, now: datetime | None = None) -> list[NodeRow]:
        now = now or datetime.now(timezone.utc)
        nodes = [n for n in self._dicts(self.core.list_node(label_selector=POOL_LABEL)) if is_gpu_node(n)]
        pods = self._dicts(self.core.list_namespaced_pod(NAMESPACE))
        return sorted((classify(n, pods, now) for n in nodes), key=lambda r: (r.pool, r.node))

    def retest(self, name: str, attempts: int = 5) -> None:
        for attempt in range(attempts):
            node = self.api.sanitize_for_serialization(self.core.read_node(name))
            try:
                self.core.patch_node(name, retest_patch(node, TAINT), _content_type="application/merge-patch+json")
                return
            except k8s.ApiException as e:
                if e.status != 409 or attempt == attempts - 1:
                    raise

    def _breaker(self) -> dict | None:
        """The replacement breaker's ConfigMap (``nodes.controller``); None before any replacement."""
        try:
            return self.api.sanitize_for_serialization(self.core.read_namespaced_config_map(BREAKER, NAMESPACE))
        except k8s.ApiException as e:
            if e.status == 404:
                return None
            raise

    def breakers(self) -> dict[str, dict]:
        """Pool -> the replacement breaker's state; empty before any replacement."""
        return state_of(self._breaker())

    def reset_breaker(self, pool: str, attempts: int = 5, now: datetime | None = None) -> bool:
        """Close a pool's breaker (a person looked): from now on it counts only new failures and
        replacements (``nodes.breaker.reset``); False if it was not tripped. A write refused because the
        controller saved the breaker since the read (409) is done again on a fresh read, keeping what
        the controller wrote for the other pools."""
        for attempt in range(attempts):
            cm = self._breaker()
            state = state_of(cm)
            if not state.get(pool, {}).get("tripped"):
                return False
            state[pool] = reset(state[pool], now or datetime.now(timezone.utc))
            try:
                self.core.replace_namespaced_config_map(BREAKER, NAMESPACE, config_map(NAMESPACE, state, cm))
                return True
            except k8s.ApiException as e:
                if e.status != 409 or attempt == attempts - 1:
                    raise

    def refused_nodes(self) -> list[str]:
        """Nodes that passed their burn-in and on which a run pod's preflight has since failed."""
        pods = self._dicts(self.core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded"))
        names = sorted({p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName") and refusals(p)})
        passed = {n["metadata"]["name"] for n in self._dicts(self.core.list_node(label_selector=f"{RESULT_LABEL}={PASSED}"))}
        return [n for n in names if n in passed]

"""A re-test frees its node: the pods that hold what the burn-in needs are evicted through the Eviction API
(standard library only: it ships to the controller's pod beside ``controller.py``).

A node asked to re-test (result ``retest``, burn-in taint back: ``nodes.watch`` or ``python -m nodes
retest``) takes no new pod of a run (the taint is ``NoSchedule``), but a pod already there keeps its GPUs
and EFA devices: a Ray worker whose preflight fails crash-loops in place (KubeRay v1.7.0 leaves the pod),
and after a reboot the worker starts again on the unchecked node. Each pass the controller asks the API
server to evict every pod on such a node that requests GPUs or EFA devices, except DaemonSet pods (the
device plugins, the burn-in's own pod: the DaemonSet controller would put them back, and the burn-in
needs the plugins) and pods already ending. An eviction (policy/v1 ``Eviction`` posted to the pod's
``eviction`` subresource) honours the pod's PodDisruptionBudget and its graceful termination, so a run
pod's preStop hook saves its checkpoint (``workloads.render.runs``: save-on-stop) before it stops. The API
server ignores the budget for a pod that is Pending (a preflight that keeps failing leaves the pod Pending
in its init container), Succeeded, Failed or already terminating (kubernetes/kubernetes
pkg/registry/core/pod/storage/eviction.go ``canIgnorePDB``, read at 01aa0f3f), so the crash-looping worker
goes at once; a healthy run pod whose budget allows no disruption (the runs' ``maxUnavailable: 0``) is
refused 429 and asked again next pass, until its run ends. Any other refusal (a pod under two budgets,
500; an admission policy, 403) is reported for that pod and asked again next pass, so it never stops the
controller's pass (pairing and replacement in every pool go on). Not ``NoExecute``: the taint manager would
evict every pod that does not tolerate the taint, the device plugins included, and ignore the budgets.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

try:  # in the pod: the ConfigMap puts them beside this file
    import incluster
    import marks
except ImportError:
    from nodes import incluster, marks

HELD_RESOURCES = ("nvidia.com/gpu", "vpc.amazonaws.com/efa")
"""What the burn-in pod needs all of: the device plugins' extended resources."""
REFUSED = 429
"""TooManyRequests: the pod's disruption budget allows no disruption now (``checkAndDecrement``)."""


def _asks(container: Mapping[str, Any]) -> bool:
    res = container.get("resources") or {}
    return any(int(str((res.get(kind) or {}).get(r, "0")) or 0) > 0 for kind in ("requests", "limits")
               for r in HELD_RESOURCES)


def asks(pod: Mapping[str, Any]) -> bool:
    """Some container of the pod asks for GPUs or EFA devices."""
    spec = pod.get("spec") or {}
    return any(_asks(c) for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])])


def holds(pod: Mapping[str, Any], burn_in_namespace: str) -> bool:
    """The pod holds GPUs or EFA devices the burn-in needs, and an eviction would free them."""
    md = pod["metadata"]
    if md.get("namespace") == burn_in_namespace or md.get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if any(o.get("kind") == "DaemonSet" for o in md.get("ownerReferences") or []):
        return False
    return asks(pod)


def retesting(node: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
    return (node["metadata"].get("labels") or {}).get(marks.RESULT_LABEL) == marks.RETEST and marks.has_taint(node, taint)


def release(api: incluster.Api, node: Mapping[str, Any], namespace: str, now: datetime, period: int) -> list[str]:
    """Evict what holds the node; one line per pod."""
    name, done = node["metadata"]["name"], []
    for pod in (p for p in api.pods_on(name) if holds(p, namespace)):
        ref = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        try:
            api.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
        except incluster.ApiError as e:
            if e.status == 404:
                continue
            why = "its disruption budget" if e.status == REFUSED else str(e)
            done.append(f"{name}: eviction of {ref} refused ({why}): tried again in {period} s")
            continue
        done.append(f"{name}: evicted {ref} to re-test the node")
        api.create_event(marks.event(node, marks.RETEST, f"evicted {ref} to re-test the node", now,
                                     reason="BurnInRetestEviction", warning=False, component="rl-burn-in-controller"))
    return done

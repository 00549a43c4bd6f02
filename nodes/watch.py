"""Between runs: a node that rebooted, or on which a run pod's preflight failed, is tainted again and re-tested.

Runs in the pod of the ``burn-in-watch`` DaemonSet (``nodes.render``) on every GPU node that passed
its burn-in, in the workload image with the standard library only, and asks for nothing but a little
CPU and memory. Every ``PERIOD_SECONDS`` it lists the pods on its own node; when a pod's ``preflight``
init container (``workloads/render/ray.py``) has ended with a failure that is the node's (``NODE_FAULTS``:
not the run's configuration) after the node's last burn-in,
or when the node's ``status.nodeInfo.bootID`` is not the one recorded at its pass (it rebooted: EKS
node auto-repair reboots for several GPU XIDs, and kubelet applies ``--register-with-taints`` and
``--node-labels`` only in ``initialNode``, when it creates the Node object; an existing Node gets
only its default labels reconciled, kubernetes/kubernetes pkg/kubelet/kubelet_node_status.go
``tryRegisterWithAPIServer``/``updateDefaultLabels``: so neither the burn-in taint nor a capability
label comes back by itself), it writes ``nodes.marks.retest_patch`` on its node (the burn-in taint
back, result ``retest``) and an Event; the re-test sets the capability labels again. The node then no
longer matches this DaemonSet and matches the pool's burn-in DaemonSet again, the controller evicts the
run pods that still hold it (``nodes.retest``), and the next attempt of the run cannot land on it before
it passes once more. The admission policy
(``nodes.policy``) holds the watcher to exactly that write on its own node.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

try:  # in the pod: the ConfigMap puts them beside this file
    import incluster
    import marks
except ImportError:
    from nodes import incluster, marks

PERIOD_SECONDS = 30
PREFLIGHT_CONTAINER = "preflight"
"""The init container every GPU pod of a run starts with (``workloads/render/ray.py``)."""
FAILED_LINE = re.compile(r"preflight FAILED on \S+: (.*)")
"""The preflight's last line on a failure (``workloads/pod/preflight.py`` ``main``), which the kubelet keeps
as the container's termination message (``terminationMessagePolicy: FallbackToLogsOnError``: the last
2048 bytes or 80 lines of its log when it exits with an error, Kubernetes API core/v1 Container)."""
NODE_FAULTS = ("GPU: ", "EFA: ", "memlock: ", "hugepages: ", "GDRCopy: ", "GIN: /proc/driver/nvidia/params",
               "GIN: the NVIDIA driver was loaded", "NCCL: uses network", "NCCL: a one-rank communicator did not start",
               "reboot: ")
"""The preflight's findings that are the node's (its GPUs, EFA devices, memlock and huge pages, the gdrdrv
module, the NVIDIA driver's options, NCCL falling back from EFA, a GPU that hangs a one-rank NCCL
communicator, a reboot under the pod), by the start of the line each check prints; held to the checks' own texts by
``tests/test_nodes_watch.py``. The others (SGLang's refusal, NCCL or plugin versions, /dev/shm, GIN
settings) are the run's configuration or image: a re-test of the node would find nothing."""


def parse_time(text: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, ``Z``)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def node_fault(message: str) -> str | None:
    """The preflight's finding in a termination message when it is the node's, else None."""
    found = FAILED_LINE.findall(message or "")
    return found[-1] if found and found[-1].startswith(NODE_FAULTS) else None


def refusals(pod: Mapping[str, Any]) -> list[datetime]:
    """When the pod's preflight container ended with a failure that is the node's (its current and its
    last state)."""
    out = []
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if cs.get("name") != PREFLIGHT_CONTAINER:
            continue
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            done = state.get("terminated")
            if done and done.get("exitCode", 0) != 0 and node_fault(done.get("message", "")):
                out.append(parse_time(done.get("finishedAt")) or datetime.now(timezone.utc))
    return out


def refused_since(pods: Iterable[Mapping[str, Any]], node: Mapping[str, Any]) -> str | None:
    """The first pod whose preflight failed after the node's last burn-in, if any."""
    tested = marks.parse_stamp((node["metadata"].get("labels") or {}).get(marks.TIME_LABEL, ""))
    for pod in pods:
        if any(tested is None or t > tested for t in refusals(pod)):
            return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"
    return None


def rebooted(node: Mapping[str, Any]) -> str | None:
    """Why the node is not the one that passed: its boot id differs from the one recorded at the pass."""
    then = (node["metadata"].get("annotations") or {}).get(marks.BOOT_ANNOTATION)
    now = marks.boot_id(node)
    return f"the node rebooted since its burn-in (boot id {then} -> {now})" if then and now and then != now else None


def check(api: incluster.Api, node_name: str, taint: Mapping[str, str]) -> str | None:
    """One look at the node: re-test it when it rebooted since its pass or a run's preflight refused
    it; returns why."""
    node = api.node(node_name)
    if (node["metadata"].get("labels") or {}).get(marks.RESULT_LABEL) != marks.PASSED:
        return None
    why = rebooted(node)
    if why is None:
        pod = refused_since(api.pods_on(node_name), node)
        why = f"the preflight of pod {pod} failed on this node" if pod else None
    if why is None:
        return None
    api.patch_node(node_name, marks.retest_patch(node, taint))
    api.create_event(marks.event(node, marks.RETEST, f"{why}: burn-in again", datetime.now(timezone.utc)))
    return why


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--taint", required=True, help="the burn-in taint, JSON {key, value, effect}")
    args = p.parse_args(argv)
    api, taint = incluster.Api(), json.loads(args.taint)
    while True:
        try:
            why = check(api, os.environ["NODE_NAME"], taint)
            if why:
                print(f"re-test asked: {why}", flush=True)
        except (incluster.ApiError, OSError) as e:  # a conflict or a blip: look again next period
            print(f"watch: {e}", flush=True)
        time.sleep(PERIOD_SECONDS)


if __name__ == "__main__":
    raise SystemExit(main())

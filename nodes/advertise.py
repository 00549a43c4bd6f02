"""Advertises a GPU node's pool resource (``stackconfig.labels.pool_gpu_resource``), and a head-pool node's head
slots (``stackconfig.labels.HEAD_SLOT_RESOURCE``): run by the GPU resource DaemonSet (``nodes.pool_resources``)
on every GPU and head-pool node, with the standard library and ``incluster`` only.

On a node of ``--head-pool`` it sets ``status.capacity[<head slot>]`` to ``--head-slots`` (the run heads a node
holds, ``workloads.derive.layout.heads_per_node``) the same way, when it is not that already.

Every ``--interval`` seconds it reads its own node and, once the NVIDIA device plugin has advertised
``nvidia.com/gpu``, sets ``status.capacity[<its pool's resource>]`` by a merge patch of the node's status, when
it is not that already, to:
- the node's *allocatable* ``nvidia.com/gpu`` while the node may take a run's pod: it carries none of the
  ``--taints`` (the burn-in and quarantine taints, by key: no run pod tolerates them), is not cordoned
  (``spec.unschedulable``), and has at least ``--whole-node`` GPUs of its pool allocatable (a team pod on a GPU
  pool takes a whole node, all its GPUs: ``workloads.render.pod_limits.whole_node``; the count is the instance
  catalog's, ``nodes.pool_resources.whole_node_gpus``);
- ``0`` otherwise: under the burn-in taint (a new node, or one re-tested), the quarantine taint (its burn-in
  failed), cordoned, or with a GPU unhealthy (allocatable 7 of 8: no whole-node pod fits) or all.
Volcano sums every node's allocatable into the total each queue's ``realCapability`` comes from, taints and
cordons notwithstanding (v1.15.1 pkg/scheduler/framework/session.go:273-275; cache/cache.go:1507-1516 keeps
every node ``Ready``, api/node_info.go:309-329), so a node counted there that no run pod can use would let
another team's ``realCapability`` take GPUs of a guarantee. The full value comes back on the first pass after
the node may take a run again (burn-in passed, taint gone, GPUs healthy): until then, at most ``--interval``,
the node takes no run pod.

0, not the key removed: the kubelet drops a pod's request of an extended resource its node does not list before
its admission check, and fits one its node lists at 0 against 0 (kubernetes v1.35.3
pkg/kubelet/lifecycle/predicate.go:175-186, :348-370), and its admission looks only at ``NoExecute`` taints
(:432-438); so with 0 a pod a scheduler bound before the taint was seen is refused by the kubelet, with the key
removed it would run. The kubelet itself writes 0, not nothing, for a device plugin's resource that went away
(pkg/kubelet/nodestatus/setters.go:273-284). Volcano reads 0 and absent alike (a missing dimension is zero).

A run pod already on the node when it is tainted, cordoned or loses a GPU keeps running: the kubelet admits a pod
once, when it is added (pkg/kubelet/kubelet.go:2748-2753 ``HandlePodAdditions``, allocation/allocation_manager.go
``AddPod`` -> ``canAdmitPod``), not when the node's allocatable changes later, and its eviction manager evicts
only on node pressure (memory, file systems, PIDs: pkg/kubelet/eviction/api/types.go). Volcano keeps the pod in
its queue's allocation and the node in its cache (``Used`` above ``Allocatable`` is only logged, node_info.go:320-322).
The one exception: a kubelet *restart* admits every pod that is not terminal again (kubelet.go:2748), and a run
pod then finds its pool resource at 0 and is rejected (``OutOf<resource>``), as it is already when a GPU it
holds turned unhealthy (``nvidia.com/gpu`` allocatable 7 of its 8). A node gets the quarantine taint only from a
burn-in, whose pod holds all the node's GPUs, so no run pod is there then; a node tainted for a re-test is being
freed of its run pods anyway (``nodes.retest``). The burn-in's own pod does not request the pool resource
(``nodes.render.daemonset``), so it runs on the tainted node at 0.

An extended resource no device plugin manages is advertised this way (Kubernetes docs, "Advertise Extended
Resources for a Node": a PATCH of the node's ``status.capacity``); the kubelet keeps the key in its own status
updates and copies it to allocatable (kubernetes v1.35.3 pkg/kubelet/nodestatus/setters.go:265-313), but zeroes
every extended resource when the node registers again without a device-manager checkpoint
(pkg/kubelet/kubelet_node_status.go:190-204), hence the re-reading. Allocatable, not capacity, of
``nvidia.com/gpu``: the kubelet's device manager counts a device plugin's unhealthy devices in the resource's
capacity and only its healthy ones in its allocatable (pkg/kubelet/cm/devicemanager/manager.go ``GetCapacity``).
The node's pool is its ``--pool-label``; ``--resources`` maps each GPU pool to its resource. The admission policy
``rl-gpu-resource-own-node`` lets this account write only that one key of its own node, to 0 or the node's
allocatable ``nvidia.com/gpu``, and never remove it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Collection, Mapping

try:  # in the pod: the ConfigMap puts it beside this file
    import incluster
except ImportError:
    from nodes import incluster

GPU = "nvidia.com/gpu"
HEAD_SLOT = "rl.platform/head-slot"
"""``stackconfig.labels.HEAD_SLOT_RESOURCE`` (this file runs in the pod without the repository)."""


def takes_a_run(node: Mapping, gpus: str, whole_node: int, taints: Collection[str]) -> bool:
    """Whether a run's pod may land on the node: none of ``taints`` (by key) on it, not cordoned, and ``gpus``
    (its allocatable ``nvidia.com/gpu``) at least ``whole_node``."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable") or any(t.get("key") in taints for t in spec.get("taints") or []):
        return False
    return int(gpus) >= whole_node


def wanted(node: Mapping, resources: Mapping[str, str], pool_label: str, head_pool: str | None = None,
           head_slots: int = 0, *, whole_node: Mapping[str, int], taints: Collection[str]) -> dict | None:
    """The status patch that makes the node's pool resource its allocatable GPUs while it may take a run's pod
    (``takes_a_run``: ``whole_node`` maps each GPU pool to the GPUs a run's pod there takes, ``taints`` are the
    keys no run pod tolerates), else 0; or on a node of ``head_pool`` its head slots equal ``head_slots``. None
    when it is that already, or the node is of neither, or its GPUs are not advertised yet."""
    pool = (node.get("metadata", {}).get("labels") or {}).get(pool_label)
    status = node.get("status", {})
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    if head_pool is not None and pool == head_pool:
        slots = str(head_slots)
        return None if capacity.get(HEAD_SLOT) == slots else {"status": {"capacity": {HEAD_SLOT: slots}}}
    key, gpus = resources.get(pool), allocatable.get(GPU)
    if key is None or gpus is None:
        return None
    value = gpus if takes_a_run(node, gpus, whole_node[pool], taints) else "0"
    return None if capacity.get(key) == value else {"status": {"capacity": {key: value}}}


def step(api: incluster.Api, name: str, resources: Mapping[str, str], pool_label: str, head_pool: str | None = None,
         head_slots: int = 0, *, whole_node: Mapping[str, int], taints: Collection[str]) -> dict | None:
    """Read the node, write the patch it needs; the patch written, if any."""
    patch = wanted(api.node(name), resources, pool_label, head_pool, head_slots, whole_node=whole_node, taints=taints)
    if patch is not None:
        api.patch_node_status(name, patch)
    return patch


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--resources", required=True, help="JSON: GPU pool -> its resource name")
    ap.add_argument("--pool-label", required=True)
    ap.add_argument("--head-pool", help="the head pool, whose nodes advertise --head-slots")
    ap.add_argument("--head-slots", type=int, default=0)
    ap.add_argument("--whole-node", required=True, help="JSON: GPU pool -> the GPUs a run's pod there takes")
    ap.add_argument("--taints", required=True, help="JSON: the taint keys no run pod tolerates")
    ap.add_argument("--interval", type=float, default=30)
    args = ap.parse_args(argv)
    api, name, resources = incluster.Api(), os.environ["NODE_NAME"], json.loads(args.resources)
    whole_node, taints = json.loads(args.whole_node), frozenset(json.loads(args.taints))
    while True:
        try:
            if (patch := step(api, name, resources, args.pool_label, args.head_pool, args.head_slots,
                              whole_node=whole_node, taints=taints)) is not None:
                print(f"node {name}: set {json.dumps(patch['status']['capacity'])}", flush=True)
        except (incluster.ApiError, OSError) as e:  # the API server unreachable or a refused write: tried again
            print(f"node {name}: {e}", file=sys.stderr, flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    main()

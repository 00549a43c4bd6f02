"""Advertises a GPU node's pool resource (``stackconfig.labels.pool_gpu_resource``), and a head-pool node's head
slots (``stackconfig.labels.HEAD_SLOT_RESOURCE``): run by the GPU resource DaemonSet (``nodes.pool_resources``)
on every GPU and head-pool node, with the standard library and ``incluster`` only.

On a node of ``--head-pool`` it sets ``status.capacity[<head slot>]`` to ``--head-slots`` (the run heads a node
holds, ``workloads.derive.layout.heads_per_node``) the same way, when it is not that already.

Every ``--interval`` seconds it reads its own node and, once the NVIDIA device plugin has advertised
``nvidia.com/gpu``, sets ``status.capacity[<its pool's resource>]`` to the node's *allocatable* ``nvidia.com/gpu``
(0 included) by a merge patch of the node's status, when it is not that already. Allocatable, not capacity: the
kubelet's device manager counts a device plugin's unhealthy devices in the resource's capacity and only its
healthy ones in its allocatable (kubernetes v1.35 pkg/kubelet/cm/devicemanager/manager.go ``GetCapacity``), and
for a resource no device plugin manages it copies capacity to allocatable unchanged (setters.go, below). So the
pool resource's allocatable, which Volcano sums into the cluster total its queues' ``realCapability`` comes from
(v1.15.1 pkg/scheduler/framework/session.go:273-275), counts the GPUs a pod can be given, and a node whose GPUs
all fail or whose device plugin went away (capacity and allocatable 0) advertises 0 rather than keeping the
last count. An extended resource no device plugin manages is advertised this
way (Kubernetes docs, "Advertise Extended Resources for a Node": a PATCH of the node's ``status.capacity``);
the kubelet keeps the key in its own status updates and copies it to allocatable (kubernetes v1.35.3
pkg/kubelet/nodestatus/setters.go:265-313), but zeroes every extended resource when the node registers again
without a device-manager checkpoint (pkg/kubelet/kubelet_node_status.go:190-204), hence the re-reading. The
node's pool is its ``--pool-label``; ``--resources`` maps each GPU pool to its resource. The admission policy
``rl-gpu-resource-own-node`` lets this account write only that one key of its own node, to that value.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Mapping

try:  # in the pod: the ConfigMap puts it beside this file
    import incluster
except ImportError:
    from nodes import incluster

GPU = "nvidia.com/gpu"
HEAD_SLOT = "rl.platform/head-slot"
"""``stackconfig.labels.HEAD_SLOT_RESOURCE`` (this file runs in the pod without the repository)."""


def wanted(node: Mapping, resources: Mapping[str, str], pool_label: str, head_pool: str | None = None,
           head_slots: int = 0) -> dict | None:
    """The status patch that makes the node's pool resource equal its allocatable GPUs (the healthy ones, 0
    included), or on a node of ``head_pool`` its head slots equal ``head_slots``; None when it is already, or
    the node is of neither, or its GPUs are not advertised yet."""
    pool = (node.get("metadata", {}).get("labels") or {}).get(pool_label)
    status = node.get("status", {})
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    if head_pool is not None and pool == head_pool:
        slots = str(head_slots)
        return None if capacity.get(HEAD_SLOT) == slots else {"status": {"capacity": {HEAD_SLOT: slots}}}
    key, gpus = resources.get(pool), allocatable.get(GPU)
    if key is None or gpus is None or capacity.get(key) == gpus:
        return None
    return {"status": {"capacity": {key: gpus}}}


def step(api: incluster.Api, name: str, resources: Mapping[str, str], pool_label: str, head_pool: str | None = None,
         head_slots: int = 0) -> dict | None:
    """Read the node, write the patch it needs; the patch written, if any."""
    patch = wanted(api.node(name), resources, pool_label, head_pool, head_slots)
    if patch is not None:
        api.patch_node_status(name, patch)
    return patch


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--resources", required=True, help="JSON: GPU pool -> its resource name")
    ap.add_argument("--pool-label", required=True)
    ap.add_argument("--head-pool", help="the head pool, whose nodes advertise --head-slots")
    ap.add_argument("--head-slots", type=int, default=0)
    ap.add_argument("--interval", type=float, default=30)
    args = ap.parse_args(argv)
    api, name, resources = incluster.Api(), os.environ["NODE_NAME"], json.loads(args.resources)
    while True:
        try:
            if (patch := step(api, name, resources, args.pool_label, args.head_pool, args.head_slots)) is not None:
                print(f"node {name}: set {json.dumps(patch['status']['capacity'])}", flush=True)
        except (incluster.ApiError, OSError) as e:  # the API server unreachable or a refused write: tried again
            print(f"node {name}: {e}", file=sys.stderr, flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    main()

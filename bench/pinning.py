"""Every attempt on the nodes of the first: the node set the first attempt ran on, per pool, and a
RayJob whose worker groups may only schedule there.

The pin is a required node affinity on ``kubernetes.io/hostname`` (a Kubernetes well-known label) in
each worker group's pod template, ANDed into every node-selector term already there (the run's
network-tier affinity, ``workloads.render.runs.network_affinity``), so a node set that is one
topology tier stays that tier. Kubernetes ORs ``nodeSelectorTerms`` and ANDs the expressions of one
term (Kubernetes API reference, NodeAffinity / NodeSelector). A group whose pool the first attempt
did not use is left as it is. ``checks.check_same_nodes`` verifies afterwards that it held.

Pins follow the nodes that exist (``existing``): a pool whose pinned node is gone (a terminated
instance's replacement joins under a new name) is not pinned, since its pods could never schedule.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

from stackconfig.labels import POOL_LABEL

from .artifacts import read_nodes

HOSTNAME = "kubernetes.io/hostname"


def node_set(folder: Path) -> dict[str, list[str]]:
    """Pool -> node names of a collected attempt (its ``nodes.json``)."""
    out: dict[str, list[str]] = {}
    for n in read_nodes(json.loads((Path(folder) / "nodes.json").read_text())):
        out.setdefault(n.pool, []).append(n.name)
    return {k: sorted(v) for k, v in sorted(out.items())}


def pinned(rayjob: dict, pools: dict[str, list[str]]) -> dict:
    """``rayjob`` with each worker group held to ``pools[<its pool>]``."""
    job = copy.deepcopy(rayjob)
    for group in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        spec = group["template"]["spec"]
        names = pools.get((spec.get("nodeSelector") or {}).get(POOL_LABEL, ""))
        if not names:
            continue
        expr = {"key": HOSTNAME, "operator": "In", "values": list(names)}
        required = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {}).setdefault(
            "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []})
        terms = required.setdefault("nodeSelectorTerms", [])
        if not terms:
            terms.append({})
        for term in terms:
            term.setdefault("matchExpressions", []).append(expr)
    return job


def _exists(api, name: str) -> bool:
    try:
        api.core.read_node(name)
    except Exception as err:  # kubernetes ApiException: 404 is a node that is gone, anything else goes on
        if getattr(err, "status", None) == 404:
            return False
        raise
    return True


def existing(api, pins: dict[str, list[str]] | None, say: Callable[[str], None] = lambda _: None
             ) -> dict[str, list[str]] | None:
    """``pins`` without the pools one of whose pinned nodes the API no longer has (``read_node`` 404)."""
    if not pins:
        return pins
    kept = {}
    for pool, names in pins.items():
        gone = [n for n in names if not _exists(api, n)]
        if gone:
            say(f"pool {pool} not pinned: its pinned node(s) {', '.join(gone)} are gone")
        else:
            kept[pool] = names
    return kept

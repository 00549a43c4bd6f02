"""Each new node with a neighbour: after its own checks, a two-node all-reduce and an EFA ping-pong with
another new node of the pool, or with a proven one (standard library only: it ships to the node beside
``agent.py``).

Why: the common EKS EFA failures (a security group that does not admit the group's own EFA traffic, a
node outside the placement group's fabric) show only between nodes, and without this check they show
first in a run; SageMaker HyperPod's deep health checks likewise run multi-node NCCL tests.

How (no object besides the two nodes): the agent that passed its single-node checks offers itself on its
node (``marks.WAITING_ANNOTATION``: its pod address, and until when it waits); the controller pairs two
offers of the same pool that have at least ``MARGIN_SECONDS`` left (``pair``) and writes each node's
neighbour on it (``marks.PEER_ANNOTATION``: node, address, rank); each agent starts once the pairing is
mutual (its neighbour's node names it). Rank 0 hosts the torch rendezvous and the ping-pong servers:
``torchrun --nnodes 2`` runs ``fabric_bench`` (``--scope world``, all-reduce, wrong elements fail) across
the two nodes' GPUs, and ``fi_pingpong -c`` (``nodes.efa``) runs from each EFA device of rank 1 to the
same device of rank 0, the control connection over the pod network, the bytes over EFA. A failure is
the fault class ``network`` (quarantined, never replaced: it may be either node, the security group or
the placement). A node that has waited alone ``LONE_SECONDS`` (the usual single replacement after a
hardware failure) is checked with a proven node of its pool instead, when one is idle: passed, untainted,
schedulable, no pod on it asking for GPUs or EFA devices. The controller starts there a host pod (the
pool's burn-in pod with only ``host``, rank 0: the all-reduce's rendezvous and the ping-pong servers; no
API access; ``nodes.render.host_pod_spec``), pairs the two once the pod has its address, and deletes the
pod when the check is over; the proven node is never marked, whatever the check finds. An agent that
finds no neighbour within its wait withdraws its offer (a write refused because the controller paired it
meanwhile, 409, is read again and the pairing kept) and passes with a warning: a pool of one, or one
whose other nodes are all busy, has no neighbour to prove it with.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

try:  # in the pod: the ConfigMap puts them beside this file
    import collectives
    import efa
    import incluster
    import marks
    import retest
except ImportError:
    from nodes import collectives, efa, incluster, marks, retest

RDZV_PORT = 29511
"""The torch rendezvous on rank 0 (``torchrun --master-port``)."""
PINGPONG_PORT = 47600
"""fi_pingpong's control port for device i is this + i (one server per device on rank 0)."""
POLL_SECONDS = 10
MARGIN_SECONDS = 120
"""The controller pairs only offers with at least this long left, so the agent sees its neighbour
(polling every ``POLL_SECONDS``) before it gives up."""
CONNECT_ERROR = "failed to connect"
"""What fi_pingpong's client prints when the server's control port does not answer yet
(libfabric v2.6.0 util/pingpong.c ``pp_ctrl_init_client``): tried again until the deadline."""
LONE_SECONDS = 120
"""How long a new node waits for another new node (same scale-up) before a proven one is asked."""
HOST_LABEL = "rl.platform/burn-in-host"
"""On a host pod: the node it checks (its name is ``host-<that node>``)."""
SIZES = ("64M", "1G")
"""The two-node all-reduce: a small range, it proves the path, not the fabric's bandwidth."""
Found = tuple[list[str], dict, list[str]]


# --- the controller: pair the offers ------------------------------------------------------------------

def offer(node: Mapping[str, Any], now: datetime) -> dict | None:
    """The node's offer if it is unpaired with at least ``MARGIN_SECONDS`` left."""
    waiting = marks.annotation(node, marks.WAITING_ANNOTATION)
    until = marks.parse_stamp(waiting.get("until", ""))
    if not waiting or marks.annotation(node, marks.PEER_ANNOTATION) or until is None:
        return None
    return waiting if until - now >= timedelta(seconds=MARGIN_SECONDS) else None


def _peer_patch(peer: Mapping[str, Any] | None, rank: int) -> Callable[[Mapping[str, Any]], dict]:
    doc = None if peer is None else json.dumps({"node": peer["node"], "address": peer["address"], "rank": rank})
    return lambda n: {"metadata": {"resourceVersion": n["metadata"]["resourceVersion"],
                                   "annotations": {marks.PEER_ANNOTATION: doc}}}


def _pool(node: Mapping[str, Any], pool_label: str) -> str | None:
    return (node["metadata"].get("labels") or {}).get(pool_label)


def pair(api: incluster.Api, nodes: list[Mapping[str, Any]], plan: Mapping[str, Any], now: datetime) -> list[str]:
    """Pair the offers of each pool two by two (by name), the odd one out with a proven node of its pool
    when it has waited ``LONE_SECONDS`` (``plan["hosts"]``: the pool's host pod); one line per pair."""
    done, pools, label = [], {}, plan["poolLabel"]
    for n in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        if (o := offer(n, now)) is not None:
            pools.setdefault(_pool(n, label), []).append((n, o))
    for pool, offers in pools.items():
        for (a, wa), (b, wb) in zip(offers[::2], offers[1::2]):
            na, nb = a["metadata"]["name"], b["metadata"]["name"]
            if api.record(a, _peer_patch({"node": nb, "address": wb["address"]}, 0)) is None:
                continue
            if api.record(b, _peer_patch({"node": na, "address": wa["address"]}, 1)) is None:
                api.record(api.node(na), _peer_patch(None, 0))  # b is gone: a waits on
                continue
            done.append(f"{na} and {nb}: paired for the check with a neighbour")
        spec = (plan.get("hosts") or {}).get(pool)
        if len(offers) % 2 and spec:
            done += _with_host(api, *offers[-1], [n for n in nodes if _pool(n, label) == pool], spec, plan, now,
                               os.environ.get(host_image_env(pool)))
    return done + _end_hosts(api, nodes, plan["namespace"])


def idle(api: incluster.Api, node: Mapping[str, Any], plan: Mapping[str, Any]) -> bool:
    """A proven node nothing uses: passed, without the burn-in or quarantine taint, schedulable, and no pod on
    it asking for the GPUs or EFA devices (a run's, another check's host)."""
    labels, spec = node["metadata"].get("labels") or {}, node.get("spec") or {}
    if labels.get(marks.RESULT_LABEL) != marks.PASSED or spec.get("unschedulable"):
        return False
    if any(marks.has_taint(node, plan[t]) for t in ("taint", "quarantine")):
        return False
    return not any(retest.asks(p) for p in api.pods_on(node["metadata"]["name"])
                   if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def host_image_env(pool: str) -> str:
    """The controller's variable holding the pool's host image: the deploy fills the stack registry's URL into
    an environment value (``stackconfig.images.fill`` replaces strings that start with the token), never into
    the JSON plan the controller is given."""
    return "HOST_IMAGE_" + "".join(ch if ch.isalnum() else "_" for ch in pool.upper())


def host_pod(spec: Mapping[str, Any], namespace: str, host: str, checked: str, image: str | None = None) -> dict:
    """The pool's host pod (``spec``, rendered) on ``host``, checking ``checked``; ``image``: the deployed
    image in place of the rendered one."""
    md = spec["metadata"]
    env = [{"name": "PEER_NODE", "value": checked}]
    containers = [{**c, "env": [*c.get("env", []), *env], **({"image": image} if image else {})}
                  for c in spec["spec"]["containers"]]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**md, "name": f"host-{checked}", "namespace": namespace,
                         "labels": {**md.get("labels", {}), HOST_LABEL: checked}},
            "spec": {**spec["spec"], "nodeName": host, "containers": containers}}


def _with_host(api: incluster.Api, node: Mapping[str, Any], waiting: Mapping[str, Any], pool: list[Mapping[str, Any]],
               spec: Mapping[str, Any], plan: Mapping[str, Any], now: datetime, image: str | None) -> list[str]:
    """Start a host pod for the lone ``node`` on an idle proven node; pair them once it has its address."""
    name, ns = node["metadata"]["name"], plan["namespace"]
    since = marks.parse_stamp(waiting.get("since", ""))
    if since is None or (now - since).total_seconds() < LONE_SECONDS:
        return []
    pod = api.pod(ns, f"host-{name}")
    if pod is None:
        host = next((h["metadata"]["name"] for h in sorted(pool, key=lambda n: n["metadata"]["name"])
                     if h["metadata"]["name"] != name and idle(api, h, plan)), None)
        if host is None:
            return []
        api.create_pod(host_pod(spec, ns, host, name, image))
        return [f"{name}: proven node {host} asked to check it"]
    status, host = pod.get("status") or {}, pod["spec"]["nodeName"]
    if status.get("phase") != "Running" or not status.get("podIP"):
        return []
    if api.record(api.node(host), _peer_patch({"node": name, "address": waiting["address"]}, 0)) is None:
        return []
    if api.record(node, _peer_patch({"node": host, "address": status["podIP"]}, 1)) is None:
        return []
    return [f"{name} and {host}: paired for the check with a proven neighbour"]


def _end_hosts(api: incluster.Api, nodes: list[Mapping[str, Any]], namespace: str) -> list[str]:
    """Delete the host pods whose check is over (the pod ended, or its node no longer waits on it), and their
    pairing on the proven node."""
    done, by_name = [], {n["metadata"]["name"]: n for n in nodes}
    for pod in api.pods(namespace, HOST_LABEL):
        checked, host = pod["metadata"]["labels"][HOST_LABEL], pod["spec"]["nodeName"]
        node = by_name.get(checked)
        peer = marks.annotation(node, marks.PEER_ANNOTATION) if node else {}
        waits = node is not None and (peer.get("node") == host or marks.annotation(node, marks.WAITING_ANNOTATION))
        if waits and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            continue
        api.delete_pod(namespace, pod["metadata"]["name"])
        proven = by_name.get(host)
        if proven is not None and marks.annotation(proven, marks.PEER_ANNOTATION).get("node") == checked:
            api.record(proven, _peer_patch(None, 0))
        done.append(f"{checked}: the check from {host} is over")
    return done


# --- the agent: offer, wait, check ---------------------------------------------------------------------

def _offer_patch(address: str | None, until: float, since: float = 0) -> Callable[[Mapping[str, Any]], dict]:
    at = lambda t: marks.stamp(datetime.fromtimestamp(t, timezone.utc))  # noqa: E731
    doc = None if address is None else json.dumps({"address": address, "until": at(until), "since": at(since)})
    return lambda n: {"metadata": {"resourceVersion": n["metadata"]["resourceVersion"],
                                   "annotations": {marks.WAITING_ANNOTATION: doc}}}


def _mutual(api: incluster.Api, me: str, peer: Mapping[str, Any]) -> bool:
    try:
        theirs = marks.annotation(api.node(peer["node"]), marks.PEER_ANNOTATION)
    except incluster.ApiError:
        return False
    return theirs.get("node") == me


def await_peer(api: incluster.Api, me: str, address: str, wait: float,
               clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None) -> dict | None:
    """Offer this node for ``wait`` seconds; the neighbour the controller paired it with, or None."""
    clock, sleep = clock or time.time, sleep or time.sleep
    since = clock()
    until = since + wait
    node = api.record(api.node(me), _offer_patch(address, until, since))
    while node is not None and clock() < until:
        peer = marks.annotation(node, marks.PEER_ANNOTATION)
        if peer and _mutual(api, me, peer):
            return peer
        sleep(POLL_SECONDS)
        node = api.node(me)
    while node is not None:  # withdraw, unless paired: a 409 means the controller wrote since the read
        if marks.annotation(node, marks.PEER_ANNOTATION):
            return marks.annotation(node, marks.PEER_ANNOTATION)
        try:
            api.patch_node(me, _offer_patch(None, until)(node))
            return None
        except incluster.ApiError as e:
            if e.status != 409:
                raise
        node = api.node(me)
    return None


def all_reduce(plan: dict, peer: Mapping[str, Any], master: str, left: float, results: Path) -> Found:
    """The all-reduce over both nodes' GPUs (rank 0 keeps the document)."""
    out, (low, high), with_peer = results / "pair.json", SIZES, f"with {peer['node']}"
    done, why = collectives.torchrun(["--nnodes=2", f"--node-rank={peer['rank']}", f"--nproc-per-node={plan['gpus']}",
                                f"--master-addr={master}", f"--master-port={RDZV_PORT}"],
                               ["--scope", "world", "--ops", "all_reduce", "--min-bytes", low, "--max-bytes", high,
                                "--out", str(out)], left, f"the all-reduce {with_peer}")
    if done is None:
        return [f"neighbour: {why}"], {}, []
    if done.returncode:
        return [f"neighbour: the all-reduce {with_peer} failed (exit {done.returncode}): {done.stderr[-300:]}"], {}, []
    if peer["rank"] or not out.exists():
        return [], {}, []
    sizes = [s for series in json.loads(out.read_text()).get("results", []) for s in series["sizes"]]
    wrong = sum(s.get("wrong", 0) for s in sizes)
    figures = {"pairAllReduceGBs": round(max((s["busbw"] for s in sizes), default=0.0), 1)}
    return ([f"neighbour: the all-reduce {with_peer} gave {wrong} wrong elements"] if wrong else []), figures, []


def _serve_all(devices: list[str], extra: list[str], deadline: float, peer: str) -> list[str]:
    try:
        servers = [efa.serve(d, extra, PINGPONG_PORT + i) for i, d in enumerate(devices)]
    except FileNotFoundError:
        return ["neighbour: fi_pingpong not found in the image"]
    problems = []
    for d, server in zip(devices, servers):
        try:
            served, _ = server.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
            problems.append(f"neighbour: EFA {d} <- {peer}: no answer")
            continue
        problem, _ = efa.judge(f"neighbour: EFA {d} <- {peer}", "", served, (0, server.returncode))
        problems += [problem] if problem else []
    return problems


def _connect(device: str, i: int, address: str, extra: list[str], deadline: float, peer: str) -> str | None:
    while True:
        try:
            client = efa.connect(device, address, extra, max(1.0, deadline - time.monotonic()), PINGPONG_PORT + i)
        except subprocess.TimeoutExpired:
            return f"neighbour: EFA {device} -> {peer}: no answer"
        said = client.stdout + client.stderr
        if CONNECT_ERROR in said and time.monotonic() < deadline:
            time.sleep(1)
            continue
        return efa.judge(f"neighbour: EFA {device} -> {peer}", said, "", (client.returncode, 0))[0]


def pingpong(peer: Mapping[str, Any], left: float) -> Found:
    """fi_pingpong -c from each device of rank 1 to the same device of rank 0, over EFA."""
    devices, problem, _ = efa.census(0)
    if problem:
        return [f"neighbour: {problem}"], {}, []
    extra, deadline = dict(efa.RUNS)["check"], time.monotonic() + left
    if peer["rank"] == 0:
        problems = _serve_all(devices, extra, deadline, peer["node"])
    else:
        problems = [p for i, d in enumerate(devices) if (p := _connect(d, i, peer["address"], extra, deadline,
                                                                       peer["node"]))]
    return problems, {"pairEfaDevices": len(devices)}, []


def step(plan: dict, left: float, results: Path, api: incluster.Api, me: str, address: str) -> Found:
    """Wait for a neighbour, then check the pair; no neighbour within the wait is a warning."""
    deadline = time.monotonic() + left
    wait = max(0.0, min(plan["pairWaitSeconds"], left - plan["pairCheckSeconds"]))
    peer = await_peer(api, me, address, wait)
    if peer is None:
        return [], {"neighbour": "none", "warnings": [f"no neighbour to check with within {wait:.0f} s"]}, []
    master = address if peer["rank"] == 0 else peer["address"]
    problems, figures, _ = all_reduce(plan, peer, master, deadline - time.monotonic(), results)
    if not problems:
        more, figs, _ = pingpong(peer, deadline - time.monotonic())
        problems, figures = more, {**figures, **figs}
    return problems, {"neighbour": peer["node"], **figures}, []


def host(plan: dict, checked: str, address: str, results: Path) -> Found:
    """The proven side of a check: rank 0 of the all-reduce (its rendezvous on ``address``), then the
    ping-pong servers, within the check's allowance."""
    peer, deadline = {"node": checked, "address": "", "rank": 0}, time.monotonic() + plan["pairCheckSeconds"]
    problems, figures, _ = all_reduce(plan, peer, address, plan["pairCheckSeconds"], results)
    if not problems:
        more, figs, _ = pingpong(peer, deadline - time.monotonic())
        problems, figures = more, {**figures, **figs}
    return problems, figures, []


def main(argv: list[str] | None = None) -> int:
    """The host pod: check ``$PEER_NODE`` from this proven node; the verdict is the checked node's own."""
    import argparse
    import os
    p = argparse.ArgumentParser(description=host.__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--results", default="/results")
    args = p.parse_args(argv)
    problems, figures, _ = host(json.loads(args.plan), os.environ["PEER_NODE"], os.environ.get("POD_IP", ""),
                                Path(args.results))
    print(json.dumps({"checked": os.environ["PEER_NODE"], "problems": problems, "figures": figures}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

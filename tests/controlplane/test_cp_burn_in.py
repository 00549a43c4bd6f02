"""The burn-in against the real API server: GPU nodes registered with the burn-in taint take the burn-in's
pods and no run pod; the agent's and the watcher's own calls (``nodes.incluster``), made with their service
accounts' tokens, are allowed by the RBAC and the node admission policy the stack renders; a pass lets the
run's gang bind, a reboot sends the node back to a re-test."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from conftest import ROOT, recorded
from kubernetes import client

from components.gpu_node_setup import BURN_IN_TAINT
from nodes import incluster, marks, watch
from nodes.burn_in import QUARANTINE_TAINT
from nodes.render import NAMESPACE, SERVICE_ACCOUNT, WATCH_ACCOUNT
from workloads.checks.runs import load_run
from workloads.render.teams import namespace_of

from controlplane import runs
from controlplane.kube import eventually
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane
RUN = ROOT / "runs" / "grpo-qwen3-30b.yaml"
COUNTS = {"train": 8, "rollout": 16}
"""As many GPU nodes as the run needs: it can start only on nodes that passed."""


def _taint(t) -> dict:
    return {"key": t.key, "value": t.value, "effect": t.effect}


def _api(platform, account: str, node: str) -> incluster.Api:
    """``nodes.incluster.Api`` as ``account``'s pod on ``node`` has it: a token bound to that pod (the kubelet's
    projected token) and the cluster's CA."""
    core = client.CoreV1Api(platform.cp.client())
    pod = eventually(f"a pod of {account} on {node}", lambda: next(
        (p for p in core.list_namespaced_pod(NAMESPACE, field_selector=f"spec.nodeName={node}").items
         if p.spec.service_account_name == account and p.status.phase == "Running"), None), 60)
    token = platform.cp.root / f"{account}-{node}.token"
    token.write_text(platform.cp.service_account_token(NAMESPACE, account, pod))
    return incluster.Api(platform.cp.url, str(token), str(platform.cp.pki.ca))


def _gpu_nodes(platform) -> list:
    return [n for n in client.CoreV1Api(platform.cp.client()).list_node().items
            if n.metadata.labels.get("rl.platform/pool") in COUNTS]


def test_untested_nodes_hold_runs_off_until_the_agent_passes_them_and_a_reboot_sends_them_back():
    platform = platform_of("p5en-shared", recorded, proven=False, counts=COUNTS)
    core = client.CoreV1Api(platform.cp.client())
    gpu_nodes = _gpu_nodes(platform)
    assert all(any(t.key == BURN_IN_TAINT.key for t in n.spec.taints) for n in gpu_nodes)
    eventually("a burn-in pod Running on every GPU node", lambda: {
        p.spec.node_name for p in core.list_namespaced_pod(NAMESPACE).items
        if p.status.phase == "Running" and p.spec.node_name in {n.metadata.name for n in gpu_nodes}
    } == {n.metadata.name for n in gpu_nodes}, 120)

    run = load_run(RUN)
    runs.submit(platform, RUN, runs.member_of(platform, run.team))
    job = next(j for j in runs.rayjobs(platform.admin, run.team) if j["metadata"]["labels"]["rl.platform/run"] == run.name)
    name, ns = job["metadata"]["name"], namespace_of(run.team)
    try:
        eventually("the run's pods created", lambda: len(runs.run_pods(platform, run.team, name)) == 1 + sum(run.nodes.values()), 120)
        time.sleep(10)  # ten Volcano sessions (schedule period 1 s)
        bound = [p.metadata.name for p in runs.run_pods(platform, run.team, name) if p.spec.node_name]
        assert bound == [], f"run pods bound to untested nodes: {bound}"

        now = datetime.now(timezone.utc)
        for n in gpu_nodes:  # the boot id a kubelet reports (kwok's nodes have none)
            core.patch_node_status(n.metadata.name, {"status": {"nodeInfo": {"bootID": f"{n.metadata.name}-boot-1"}}})
        for n in gpu_nodes:
            agent = _api(platform, SERVICE_ACCOUNT, n.metadata.name)
            node = agent.node(n.metadata.name)
            agent.patch_node(n.metadata.name, marks.result_patch(node, _taint(BURN_IN_TAINT), _taint(QUARANTINE_TAINT),
                                                                 marks.PASSED, {"seconds": 1}, None, now))
            agent.create_event(marks.event(node, marks.PASSED, "passed", now))
        runs.all_running(platform, run.team, name, 1 + sum(run.nodes.values()), 180)

        rebooted = gpu_nodes[0].metadata.name
        watcher = _api(platform, WATCH_ACCOUNT, rebooted)
        assert watch.check(watcher, rebooted, _taint(BURN_IN_TAINT)) is None  # passed, same boot
        core.patch_node_status(rebooted, {"status": {"nodeInfo": {"bootID": "after-a-reboot"}}})
        assert watch.check(watcher, rebooted, _taint(BURN_IN_TAINT))
        node = core.read_node(rebooted)
        assert node.metadata.labels[marks.RESULT_LABEL] == marks.RETEST
        assert any(t.key == BURN_IN_TAINT.key for t in node.spec.taints)
    finally:
        runs.delete_run(platform, run.team, name)

"""Each new node with a neighbour (``nodes.pairs``): the controller pairs the nodes that wait, the agents
run a two-node all-reduce and an EFA ping-pong (tools faked on PATH, the API server faked at the HTTP
layer with both nodes), and a failure between them is the fault class ``network``."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from test_nodes_agent import QUARANTINE, _tool, new_node, node_env, train_plan  # noqa: F401 - fixtures
from test_nodes_controller import NOW, PLAN, cluster  # noqa: F401 - fixture

from nodes import controller, marks, pairs


def _waiting(name, until, address, pool="train"):
    n = new_node(name, pool)
    n["metadata"]["annotations"][marks.WAITING_ANNOTATION] = json.dumps({"address": address, "until": marks.stamp(until)})
    return n


def test_the_controller_pairs_the_waiting_nodes_of_a_pool_two_by_two(cluster):
    soon, later = NOW + timedelta(seconds=pairs.MARGIN_SECONDS - 1), NOW + timedelta(minutes=9)
    c = cluster([_waiting("n-a", later, "10.0.1.1"), _waiting("n-b", later, "10.0.1.2"), _waiting("n-c", later, "10.0.1.3"),
                 _waiting("n-d", soon, "10.0.1.4"), _waiting("r-a", later, "10.0.2.1", pool="rollout")])
    done = controller.reconcile(c.api, PLAN, NOW, mark=lambda n: pytest.fail("no replacement"))
    assert done == ["n-a and n-b: paired for the check with a neighbour"]
    peer = {n: marks.annotation(c.nodes[n], marks.PEER_ANNOTATION) for n in c.nodes}
    assert peer["n-a"] == {"node": "n-b", "address": "10.0.1.2", "rank": 0}
    assert peer["n-b"] == {"node": "n-a", "address": "10.0.1.1", "rank": 1}
    assert not peer["n-c"] and not peer["n-d"] and not peer["r-a"]  # odd one out, too late, alone in its pool
    assert controller.reconcile(c.api, PLAN, NOW, mark=lambda n: None) == []  # paired once


def _pair_plan(plan, wait=600):
    return {**plan, "steps": {**plan["steps"], "neighbours": wait + 300}, "pairWaitSeconds": wait,
            "pairCheckSeconds": 300}


def _run_with_neighbour(node_env, plan, c, me, monkeypatch):
    """The agent on ``me`` while the controller pairs it (at its wait) with the other waiting node."""
    monkeypatch.setenv("POD_IP", "10.0.1.5")

    def sleep(seconds):
        if seconds == pairs.POLL_SECONDS:  # the agent waits for a neighbour: the controller's pass
            controller.reconcile(c.api, PLAN, NOW, mark=lambda n: None)
    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(pairs, "MARGIN_SECONDS", -10 ** 9)  # the test's NOW is not the agent's clock
    return node_env["run"](plan, node=c.nodes[me], cluster=c).nodes[me]


def test_a_node_checked_with_its_neighbour_passes_and_names_it(node_env, train_plan, cluster, monkeypatch):
    c = cluster([new_node("ip-10-0-1-5.ec2.internal"), _waiting("ip-10-0-1-6.ec2.internal", NOW, "10.0.1.6")])
    node = _run_with_neighbour(node_env, _pair_plan(train_plan), c, "ip-10-0-1-5.ec2.internal", monkeypatch)
    figures = json.loads(node["metadata"]["annotations"][marks.FIGURES_ANNOTATION])
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed", node["metadata"]["annotations"]
    assert figures["neighbour"] == "ip-10-0-1-6.ec2.internal" and figures["pairEfaDevices"] == 2
    assert figures["pairAllReduceGBs"] > 0  # rank 0 keeps the two-node document
    calls = node_env["calls"].read_text().splitlines()
    served = [c.split(" -B ")[1] for c in calls if " -B " in c and int(c.split(" -B ")[1]) >= pairs.PINGPONG_PORT]
    assert sorted(served) == ["47600", "47601"]  # rank 0 serves each device
    notes = node["metadata"]["annotations"]
    assert marks.WAITING_ANNOTATION not in notes and marks.PEER_ANNOTATION not in notes  # cleared with the result


def test_rank_one_connects_to_each_device_and_tries_again_until_the_server_listens(node_env, train_plan, cluster,
                                                                                     monkeypatch, tmp_path):
    bin_dir, tries = node_env["results"].parent / "bin", tmp_path / "tries"
    real = (bin_dir / "fi_pingpong").read_text()
    _tool(bin_dir, "fi_pingpong", real.replace("#!/bin/sh\n", "#!/bin/sh\n"
          f"case \"$*\" in *10.0.1.6*) if [ ! -e {tries} ]; then touch {tries}; "
          "echo 'pingpong.c:410: failed to connect: Connection refused'; exit 1; fi;; esac\n", 1))
    c = cluster([new_node("ip-10-0-1-7.ec2.internal"), _waiting("ip-10-0-1-6.ec2.internal", NOW, "10.0.1.6")])
    node = _run_with_neighbour(node_env, _pair_plan(train_plan), c, "ip-10-0-1-7.ec2.internal", monkeypatch)
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed", node["metadata"]["annotations"]
    clients = [ln for ln in node_env["calls"].read_text().splitlines() if " -P " in ln and "10.0.1.6" in ln]
    assert tries.exists()  # the first connection was refused, and tried again
    assert [ln.split(" -P ")[1] for ln in clients] == ["47600 10.0.1.6", "47601 10.0.1.6"]


def test_a_failure_between_the_two_nodes_is_a_network_fault(node_env, train_plan, cluster, monkeypatch):
    node_env["pingpong_corrupt"] = "1"  # the loopback passes (checked first), then the pair corrupts data
    c = cluster([new_node("ip-10-0-1-7.ec2.internal"), _waiting("ip-10-0-1-6.ec2.internal", NOW, "10.0.1.6")])
    plan = {**_pair_plan(train_plan), "steps": {**_pair_plan(train_plan)["steps"], "efa": 0}}
    node = _run_with_neighbour(node_env, plan, c, "ip-10-0-1-7.ec2.internal", monkeypatch)
    labels, notes = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert (labels[marks.RESULT_LABEL], labels[marks.FAULT_LABEL]) == ("failed", "network")
    assert "neighbour: EFA rdmap16s27-rdm -> ip-10-0-1-6.ec2.internal: data corrupted" in notes[marks.REASON_ANNOTATION]
    assert QUARANTINE["key"] in [t["key"] for t in node["spec"]["taints"]]


def test_a_node_without_a_neighbour_passes_with_a_warning_and_withdraws(node_env, train_plan, cluster, monkeypatch):
    c = cluster([new_node("ip-10-0-1-5.ec2.internal")])
    monkeypatch.setattr(time, "sleep", lambda s: None)
    node = node_env["run"](_pair_plan(train_plan, wait=0), node=c.nodes["ip-10-0-1-5.ec2.internal"],
                           cluster=c).nodes["ip-10-0-1-5.ec2.internal"]
    figures = json.loads(node["metadata"]["annotations"][marks.FIGURES_ANNOTATION])
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed"
    assert figures["neighbour"] == "none" and "no neighbour to check with within 0 s" in figures["warnings"]


def test_a_pairing_written_as_the_agent_gives_up_is_kept(cluster):
    """The controller paired the node after the agent's last look: the withdrawal carries the old
    resourceVersion, is refused 409, and the agent reads the pairing instead of dropping it."""
    c = cluster([new_node("n-a"), _waiting("n-b", NOW + timedelta(hours=1), "10.0.1.2")])
    clock = iter(range(0, 100, 10))
    real = c.api.patch_node

    def patch_node(name, patch):
        if patch["metadata"]["annotations"].get(marks.WAITING_ANNOTATION, "x") is None:  # the withdrawal
            c.change("/api/v1/nodes/n-a", {"metadata": {"annotations": {marks.PEER_ANNOTATION: json.dumps(
                {"node": "n-b", "address": "10.0.1.2", "rank": 0})}}})
        return real(name, patch)
    c.api.patch_node = patch_node
    peer = pairs.await_peer(c.api, "n-a", "10.0.1.1", wait=15, clock=lambda: next(clock), sleep=lambda s: None)
    assert peer == {"node": "n-b", "address": "10.0.1.2", "rank": 0}


def test_the_check_with_a_neighbour_is_in_the_budget_of_pools_that_can_have_one():
    from conftest import load, raw_config
    from test_workloads import variant

    from nodes.burn_in import LOOPBACK_SECONDS_PER_DEVICE, PAIR_BENCH_SECONDS, plans
    from workloads.derive.model import derive

    cfg = load("p5en-prod")
    found = {b.pool.name: b for b in plans(derive(cfg), cfg)}
    train, reward = found["train"], found["reward"]
    assert train.steps["neighbours"] == 10 * 60 + PAIR_BENCH_SECONDS + LOOPBACK_SECONDS_PER_DEVICE * train.efa_devices
    assert train.agent_plan["pairWaitSeconds"] == 600 and train.agent_plan["pairCheckSeconds"] == train.steps["neighbours"] - 600
    assert train.budget_seconds == sum(train.steps[s] for s in ("preflight", "nccl", "efa", "neighbours"))
    assert reward.steps["neighbours"] == 0  # no EFA: nothing between nodes to prove
    off = variant("p5en-prod", {"burnIn": {"pairWaitMinutes": 0}})
    assert all(b.steps["neighbours"] == 0 for b in plans(derive(off), off))
    one = variant("p5en-prod", {"pools": [{**p, "nodes": 1} if p["name"] == "train" else p
                                          for p in raw_config("p5en-prod")["pools"]]})
    assert next(b for b in plans(derive(one), one) if b.pool.name == "train").steps["neighbours"] == 0

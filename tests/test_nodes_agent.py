"""The burn-in agent on a node, against a Kubernetes API faked at the HTTP layer (a local server that
answers as the API server does: merge patches applied, resourceVersion checked) and the node's tools
faked on PATH (nvidia-smi, fi_info, torchrun, fi_pingpong). The preflight's and the bench's own code runs."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import load, send_json, serve
from dcgm_docs import diagnostic
from fake_kube import merge_patch as merge
from test_workloads import variant

from nodes import agent, efa, incluster, marks
from nodes.burn_in import plans
from stackconfig.stack import StackConfigError
from workloads.pod import fabric_bench, preflight
from workloads.acceptance.compare import compare
from workloads.derive.model import derive

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
NODE_NAME = "ip-10-0-1-5.ec2.internal"
BURN_IN = {"key": "rl.platform/burn-in", "value": "pending", "effect": "NoSchedule"}
QUARANTINE = {"key": "rl.platform/quarantine", "value": "failed", "effect": "NoSchedule"}


def new_node(name="ip-10-0-1-5.ec2.internal", pool="train"):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "u1", "resourceVersion": "100",
                         "labels": {"rl.platform/pool": pool, "topology.kubernetes.io/region": "us-east-1"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0", "taints": [GPU_TAINT, BURN_IN]},
            "status": {"nodeInfo": {"bootID": "boot-1"}}}


class FakeApiServer:
    """Nodes and events, as the API server keeps them; ``conflicts`` PATCHes answer 409 first."""

    def __init__(self, node: dict, conflicts: int = 0):
        self.node, self.conflicts, self.requests, self.events, self.pods = node, conflicts, [], [], []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, body):
                send_json(self, status, body)

            def _body(self):
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

            def do_GET(self):
                fake.requests.append(("GET", self.path, None, None))
                self._send(200, {"items": fake.pods} if self.path.startswith("/api/v1/pods") else fake.node)

            def do_PATCH(self):
                body = self._body()
                fake.requests.append(("PATCH", self.path, self.headers["Content-Type"], body))
                if fake.conflicts:
                    fake.conflicts -= 1
                    fake.node = merge(fake.node, {"metadata": {"resourceVersion": str(int(fake.node["metadata"]["resourceVersion"]) + 1)}})
                if body["metadata"]["resourceVersion"] != fake.node["metadata"]["resourceVersion"]:
                    return self._send(409, {"kind": "Status", "reason": "Conflict"})
                fake.node = merge(fake.node, body)
                fake.node["metadata"]["resourceVersion"] = str(int(fake.node["metadata"]["resourceVersion"]) + 1)
                self._send(200, fake.node)

            def do_POST(self):
                body = self._body()
                fake.requests.append(("POST", self.path, self.headers["Content-Type"], body))
                fake.events.append(body)
                self._send(201, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serve(self.server)
        self.api = incluster.Api(f"http://127.0.0.1:{self.server.server_port}", token_file="/nonexistent", ca_file=None)

    def close(self):
        self.server.shutdown()


def _tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def bench_doc(all_reduce: float, all_to_all: float, wrong: int = 0) -> dict:
    """What fabric_bench writes on one 8-GPU node (its own point/document functions)."""
    n, size = 8, 4 * 1024 ** 3
    results = []
    for op, busbw in (("all_reduce", all_reduce), ("all_to_all", all_to_all)):
        seconds = size / (busbw / fabric_bench.bus_factor(op, n) * 1e9)
        results.append({"scope": "world", "op": op, "ranks": n, "nodes": [0],
                        "sizes": [fabric_bench.point(op, size, seconds, n, wrong)]})
    return fabric_bench.document({"env": {}}, {"ranks": n, "nodes": 1, "ranks_per_node": n, "node_of_rank": [0] * n},
                                 {}, results, [])


def train_floor() -> float:
    from catalog import CATALOG
    return CATALOG["p5en.48xlarge"].efa_loopback_floor_mbs


@pytest.fixture(scope="module")
def train_plan():
    cfg = load("p5en-prod")
    b = next(p for p in plans(derive(cfg), cfg) if p.pool.name == "train")
    # the node's own checks (the check with a neighbour: tests/test_nodes_pairs.py)
    return {**b.agent_plan, "preflight": ["--gpus", "8", "--efa", "2"], "efaDevices": 2,
            "steps": {**b.agent_plan["steps"], "neighbours": 0}}


@pytest.fixture
def node_env(tmp_path, monkeypatch):
    """A node whose tools answer as a healthy p5en would (2 EFA devices for speed); returns knobs."""
    bin_dir, results, devices = tmp_path / "bin", tmp_path / "results", tmp_path / "infiniband"
    for d in (bin_dir, results, devices):
        d.mkdir()
    for i in range(2):  # the device plugin's mounts: /dev/infiniband/uverbsN (nodes.efa.DEVICE_DIR)
        (devices / f"uverbs{i}").write_text("")
    knobs = {"gpus": 8, "bench": bench_doc(420.0, 300.0), "pingpong_rc": 0, "results": results,
             "pingpong_mbs": 2 * train_floor(), "pingpong_corrupt": "", "server_spam": 0, "calls": tmp_path / "calls",
             "devices": devices}
    _tool(bin_dir, "nvidia-smi", "#!/bin/sh\ni=0\nwhile [ $i -lt ${FAKE_GPUS:-8} ]; do echo \"GPU $i: NVIDIA H200 (UUID: x)\"; "
                                 "i=$((i+1)); done\n")
    _tool(bin_dir, "fi_info", "#!/bin/sh\nfor d in rdmap16s27 rdmap32s27; do printf 'provider: efa\\n    domain: %s-rdm\\n' $d; done\n")
    _tool(bin_dir, "torchrun", f"#!{sys.executable}\nimport sys, shutil, os\nout = sys.argv[sys.argv.index('--out') + 1]\n"
                               "shutil.copy(os.environ['FAKE_BENCH'], out)\n")
    # fi_pingpong as libfabric v2.6.0 util/pingpong.c prints: show_perf's header and line; with -c a
    # mismatch prints "Error at iteration=..." and exits 1. The server may print much (FAKE_SERVER_SPAM).
    _tool(bin_dir, "fi_pingpong", "#!/bin/sh\necho \"$*\" >> \"$FAKE_CALLS\"\n"
                                  "case \"$*\" in *' -P '*) ;; *) head -c ${FAKE_SERVER_SPAM:-0} /dev/zero | tr '\\0' x;; esac\n"
                                  "case \"$*\" in *-c*) if [ -n \"$FAKE_CORRUPT\" ]; then "
                                  "echo 'Error at iteration=3 size=4194304 byte=17'; exit 1; fi;; esac\n"
                                  "case \"$*\" in *' -P '*) printf 'bytes   #sent   #ack     total       time     MB/sec    "
                                  "usec/xfer   Mxfers/sec\\n4m      100     =100     800m        0.07s %s 335.00 0.00\\n' "
                                  "\"$FAKE_MBS\";; esac\n"
                                  "exit ${FAKE_PINGPONG_RC:-0}\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(efa, "DEVICE_DIR", devices)
    for check in ("check_memlock", "check_ofi_plugin", "check_nccl_network"):  # the test machine has no RDMA stack
        monkeypatch.setattr(preflight, check, lambda *a: None)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    (results / "dcgm.rc").write_text("0\n")
    (results / "dcgm.json").write_text(json.dumps(diagnostic("v4.5.2", {"memory": [("Pass", [])], "pcie": [("Pass", [])]})))

    def run(plan, node=None, conflicts=0, cluster=None):
        """The agent on ``node`` against a fake API server (or ``cluster``'s, which it returns)."""
        bench = results.parent / "bench.json"
        bench.write_text(json.dumps(knobs["bench"]))
        monkeypatch.setenv("FAKE_BENCH", str(bench))
        monkeypatch.setenv("FAKE_GPUS", str(knobs["gpus"]))
        monkeypatch.setenv("FAKE_PINGPONG_RC", str(knobs["pingpong_rc"]))
        monkeypatch.setenv("FAKE_MBS", f"{knobs['pingpong_mbs']:.2f}")
        monkeypatch.setenv("FAKE_CORRUPT", knobs["pingpong_corrupt"])
        monkeypatch.setenv("FAKE_SERVER_SPAM", str(knobs["server_spam"]))
        monkeypatch.setenv("FAKE_CALLS", str(knobs["calls"]))
        monkeypatch.setenv("NODE_NAME", (node or new_node())["metadata"]["name"])
        monkeypatch.setenv("POD_NAMESPACE", "rl-burn-in")
        if cluster is not None:
            assert agent.main(["--plan", json.dumps(plan), "--results", str(results)], api=cluster.api) == 0
            return cluster
        server = FakeApiServer(node or new_node(), conflicts)
        try:
            assert agent.main(["--plan", json.dumps(plan), "--results", str(results)], api=server.api) == 0
        finally:
            server.close()
        return server

    knobs["run"] = run
    return knobs


def taint_keys(node):
    return [t["key"] for t in node["spec"].get("taints", [])]


def test_a_healthy_node_loses_the_taint_and_keeps_its_figures(node_env, train_plan):
    server = node_env["run"](train_plan)
    node = server.node
    assert taint_keys(node) == ["nvidia.com/gpu"]
    assert node["metadata"]["annotations"][marks.BOOT_ANNOTATION] == "boot-1"  # the boot that passed
    labels, notes = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels[marks.RESULT_LABEL] == "passed" and marks.parse_stamp(labels[marks.TIME_LABEL]) is not None
    figures = json.loads(notes[marks.FIGURES_ANNOTATION])
    assert figures["all_reduceGBs"] == 420.0 and figures["efaLoopbackPairs"] == 2
    assert figures["efaLoopbackMBsMin"] == round(node_env["pingpong_mbs"], 2) and figures["dcgm"] == "pass (level 2)"
    assert marks.REASON_ANNOTATION not in notes and labels["rl.platform/pool"] == "train"
    patch = next(r for r in server.requests if r[0] == "PATCH")
    assert patch[2] == "application/merge-patch+json" and patch[3]["metadata"]["resourceVersion"] == "100"
    assert [e["reason"] for e in server.events] == ["BurnInPassed"]
    assert server.events[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"],
                                                  "uid": "u1"}
    # A second start of the same pod writes nothing again.
    again = node_env["run"](train_plan, node=node)
    assert [r[0] for r in again.requests] == []


@pytest.mark.parametrize("fault, reason", [
    ("gpu", "preflight GPU: 7 visible, 8 expected"),
    ("dcgm", "DCGM: dcgmi diag -r 2 failed (exit 226): pcie"),
    ("dcgm-timeout", "DCGM: dcgmi diag -r 2 did not finish within 420 s"),
    ("nccl", "NCCL all_reduce: peak busbw 200.0 GB/s < floor 379.3"),
    ("wrong", "NCCL all_reduce: 3 wrong elements"),
    ("efa", "EFA rdmap16s27-rdm <- rdmap32s27-rdm: fi_pingpong failed"),
])
def test_a_node_that_fails_any_check_keeps_the_taint_with_the_reason(node_env, train_plan, fault, reason):
    results = node_env["results"]
    if fault == "gpu":
        node_env["gpus"] = 7
    elif fault == "dcgm":
        (results / "dcgm.rc").write_text("226\n")
        (results / "dcgm.json").write_text(json.dumps(diagnostic("v4.5.2", {"memory": [("Pass", [])],
                                                                          "pcie": [("Fail", [])]})))
    elif fault == "dcgm-timeout":
        (results / "dcgm.rc").write_text("124\n")
    elif fault == "nccl":
        node_env["bench"] = bench_doc(200.0, 300.0)
    elif fault == "wrong":
        node_env["bench"] = bench_doc(420.0, 300.0, wrong=3)
    else:
        node_env["pingpong_rc"] = 1
    node = node_env["run"](train_plan).node
    assert taint_keys(node) == ["nvidia.com/gpu", "rl.platform/burn-in", "rl.platform/quarantine"]
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "failed"
    assert reason in node["metadata"]["annotations"][marks.REASON_ANNOTATION]
    # The DCGM Fail above carries no hardware error category: nothing here is the node's hardware.
    assert node["metadata"]["labels"][marks.FAULT_LABEL] == "software"


def test_a_derived_floor_only_warns_as_in_the_acceptance_report(node_env, train_plan):
    node_env["bench"] = doc = bench_doc(420.0, 100.0)  # all-to-all under its derived floor
    node = node_env["run"](train_plan).node
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed"
    figures = json.loads(node["metadata"]["annotations"][marks.FIGURES_ANNOTATION])
    assert figures["warnings"] == ["NCCL all_to_all: peak busbw 100.0 GB/s < floor 288"]
    report = compare(doc, "p5en")  # the acceptance itself: same floors, same verdict
    assert {c["op"]: c["floor"] for c in report["checks"]} == {f["op"]: f["busbw"] for f in train_plan["floors"]}
    assert report["ok"] and report["warnings"]


def test_a_burn_in_that_died_or_hung_past_its_budget_is_a_failure_never_a_pass(node_env, train_plan):
    results = node_env["results"]
    (results / "progress.json").write_text(json.dumps({"step": "nccl", "figures": {"preflight": "ok"}}))
    node = node_env["run"](train_plan).node  # the container starts again after dying in the NCCL step
    reason = node["metadata"]["annotations"][marks.REASON_ANNOTATION]
    assert reason == "burn-in its container stopped before the result (see kubectl describe pod), in step nccl"
    assert "rl.platform/burn-in" in taint_keys(node)
    for f in ("verdict.json", "written"):
        (results / f).unlink()
    (results / "started").write_text(str(int(time.time()) - train_plan["budgetSeconds"] - 5))
    node = node_env["run"](train_plan).node  # stopped by the liveness probe past the budget
    assert node["metadata"]["annotations"][marks.REASON_ANNOTATION] == (
        f"burn-in did not finish within its budget of {train_plan['budgetSeconds']} s, in step nccl")
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "failed"


def test_no_time_left_for_a_step_is_a_failure(node_env, train_plan):
    (node_env["results"] / "started").write_text(str(int(time.time()) - train_plan["budgetSeconds"]))
    node = node_env["run"](train_plan).node
    assert "did not finish within its budget" in node["metadata"]["annotations"][marks.REASON_ANNOTATION]
    assert "rl.platform/burn-in" in taint_keys(node)


def test_a_conflicting_write_is_read_again_and_retried(node_env, train_plan):
    server = node_env["run"](train_plan, conflicts=1)
    patches = [r for r in server.requests if r[0] == "PATCH"]
    assert [p[3]["metadata"]["resourceVersion"] for p in patches] == ["100", "101"]
    assert server.node["metadata"]["labels"][marks.RESULT_LABEL] == "passed"


# --- between runs: the watcher on a passed node -----------------------------------------------------------

GPU_MISSING = "preflight ok: memlock\npreflight FAILED on ip-10-0-1-5.ec2.internal: GPU: 7 visible, 8 expected\n"
"""The preflight's last lines as the kubelet keeps them (``terminationMessagePolicy: FallbackToLogsOnError``)."""


def run_pod(exit_code: int, finished: str, last: bool = False, message: str = GPU_MISSING) -> dict:
    term = {"terminated": {"exitCode": exit_code, "finishedAt": finished, "message": message}}
    cs = {"name": "preflight", **({"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": term}
                                   if last else {"state": term})}
    return {"metadata": {"name": "miles-worker-trainer-x", "namespace": "team-a"},
            "status": {"initContainerStatuses": [cs]}}


def test_the_watcher_taints_its_node_again_when_a_runs_preflight_refused_it_after_its_burn_in():
    from nodes import watch
    node = merge(new_node(), {"metadata": {"labels": {marks.RESULT_LABEL: "passed", marks.TIME_LABEL: "20261201T150000Z"}},
                              "spec": {"taints": [GPU_TAINT]}})
    server = FakeApiServer(node)
    try:
        server.pods = [run_pod(1, "2026-12-01T14:00:00Z"), run_pod(0, "2026-12-01T16:00:00Z")]
        assert watch.check(server.api, node["metadata"]["name"], BURN_IN) is None  # refused before
        assert [r[0] for r in server.requests] == ["GET", "GET"]
        server.pods.append(run_pod(1, "2026-12-01T16:00:00Z", last=True))
        assert watch.check(server.api, node["metadata"]["name"], BURN_IN) == \
            "the preflight of pod team-a/miles-worker-trainer-x failed on this node"
    finally:
        server.close()
    assert server.requests[-3][1] == f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node['metadata']['name']}"
    assert taint_keys(server.node) == ["nvidia.com/gpu", "rl.platform/burn-in"]
    assert server.node["metadata"]["labels"][marks.RESULT_LABEL] == "retest"
    assert [e["reason"] for e in server.events] == ["BurnInRetest"]


@pytest.mark.parametrize("problem", [
    "SGLang refuses the engine Miles would start: ValueError: tp_size 16 > 8 GPUs",
    "NCCL: the loaded library is 2.27.5, 2.28.9 or newer needed", "/dev/shm: 64.0 GiB, 256 GiB expected"])
def test_the_watcher_leaves_a_node_whose_run_failed_its_own_configuration(problem):
    """A refusal that names the run's configuration or image, not the node, re-burns nothing."""
    from nodes import watch
    node = merge(new_node(), {"metadata": {"labels": {marks.RESULT_LABEL: "passed", marks.TIME_LABEL: "20261201T150000Z"}},
                              "spec": {"taints": [GPU_TAINT]}})
    server = FakeApiServer(node)
    try:
        server.pods = [run_pod(1, "2026-12-01T16:00:00Z", message=f"preflight FAILED on {NODE_NAME}: {problem}\n")]
        assert watch.check(server.api, NODE_NAME, BURN_IN) is None
    finally:
        server.close()
    assert server.node["metadata"]["labels"][marks.RESULT_LABEL] == "passed" and not server.events


def test_the_watcher_retests_a_node_that_rebooted_since_its_pass():
    from nodes import watch
    node = merge(new_node(), {"metadata": {"labels": {marks.RESULT_LABEL: "passed", marks.TIME_LABEL: "20261201T150000Z"},
                                           "annotations": {marks.BOOT_ANNOTATION: "boot-1"}},
                              "spec": {"taints": [GPU_TAINT]}})
    server = FakeApiServer(node)
    try:
        assert watch.check(server.api, node["metadata"]["name"], BURN_IN) is None  # same boot
        server.node = merge(server.node, {"status": {"nodeInfo": {"bootID": "boot-2"}}})  # EKS auto-repair rebooted it
        assert "rebooted" in watch.check(server.api, node["metadata"]["name"], BURN_IN)
    finally:
        server.close()
    assert taint_keys(server.node) == ["nvidia.com/gpu", "rl.platform/burn-in"]
    assert server.node["metadata"]["labels"][marks.RESULT_LABEL] == "retest"
    assert "boot id boot-1 -> boot-2" in server.events[-1]["message"]


# --- what is the node's hardware, what is not ---------------------------------------------------------------

def test_preflight_image_and_floor_failures_are_software(node_env, train_plan):
    node_env["gpus"] = 7  # the preflight
    node_env["bench"] = bench_doc(200.0, 300.0)  # an NCCL floor
    node = node_env["run"](train_plan).node
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "failed"
    assert node["metadata"]["labels"][marks.FAULT_LABEL] == "software"
    assert "quarantine" in taint_keys(node)[-1]


def test_the_efa_loopback_checks_the_data_and_never_runs_verbose(node_env, train_plan):
    node_env["run"](train_plan)
    calls = node_env["calls"].read_text().splitlines()
    assert calls and all(" -v" not in f" {c}" for c in calls)
    checked = [c for c in calls if " -c" in f" {c}"]
    assert len(checked) == 2 * train_plan["efaDevices"]  # server and client of each pair
    assert all("-S 4194304" in c for c in calls)


def test_corrupted_efa_data_is_a_hardware_failure(node_env, train_plan):
    node_env["pingpong_corrupt"] = "1"
    node = node_env["run"](train_plan).node
    reason = node["metadata"]["annotations"][marks.REASON_ANNOTATION]
    assert "data corrupted in transit (Error at iteration=3" in reason
    assert node["metadata"]["labels"][marks.FAULT_LABEL] == "hardware"


def test_an_efa_rate_under_the_derived_floor_only_warns(node_env, train_plan):
    """No public fi_pingpong figure backs the derived floor (half a device's line rate): below it warns."""
    assert train_plan["loopbackFloorMBs"] == train_floor() > 0 and train_plan["loopbackFloorAdvisory"]
    node_env["pingpong_mbs"] = train_floor() / 2
    node = node_env["run"](train_plan).node
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed"
    warnings = json.loads(node["metadata"]["annotations"][marks.FIGURES_ANNOTATION])["warnings"]
    assert warnings and all(f"MB/s < floor {train_floor():g} (derived, not measured" in w for w in warnings)


def test_an_efa_rate_under_a_measured_floor_fails_as_software(node_env):
    cfg = variant("p5en-prod", {"burnIn": {"efaLoopbackFloors": {"p5en.48xlarge": {
        "mbs": 9000, "source": "fi_pingpong on ip-10-0-1-5, 2026-12-01, EFA installer 1.47"}}}})
    b = next(p for p in plans(derive(cfg), cfg) if p.pool.name == "train")
    assert (b.loopback_floor_mbs, b.agent_plan["loopbackFloorAdvisory"]) == (9000, False)
    node_env["pingpong_mbs"] = 8000
    plan = {**b.agent_plan, "preflight": ["--gpus", "8", "--efa", "2"], "efaDevices": 2,
            "steps": {**b.agent_plan["steps"], "neighbours": 0}}
    node = node_env["run"](plan).node
    assert "8000 MB/s < floor 9000" in node["metadata"]["annotations"][marks.REASON_ANNOTATION]
    assert node["metadata"]["labels"][marks.FAULT_LABEL] == "software"


def test_a_measured_floor_for_a_type_no_efa_pool_has_is_refused():
    with pytest.raises(StackConfigError, match=r"burnIn.efaLoopbackFloors.p4d.24xlarge: not the instance type"):
        cfg = variant("p5en-prod", {"burnIn": {"efaLoopbackFloors": {"p4d.24xlarge": {"mbs": 1, "source": "x"}}}})
        plans(derive(cfg), cfg)
    with pytest.raises(Exception, match="source"):
        variant("p5en-prod", {"burnIn": {"efaLoopbackFloors": {"p5en.48xlarge": {"mbs": 1}}}})


def test_the_servers_output_is_drained(node_env, train_plan):
    node_env["server_spam"] = 1 << 20  # far more than a pipe holds: a server never read would block
    started = time.monotonic()
    node = node_env["run"](train_plan).node
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed" and time.monotonic() - started < 20


def test_the_budget_starts_when_the_agent_starts(node_env, train_plan):
    results = node_env["results"]
    assert not (results / "started").exists()  # nothing before the agent records a start
    before = int(time.time())
    node_env["run"](train_plan)
    assert before <= int((results / "started").read_text()) <= int(time.time())


def test_the_capability_labels_are_set_from_the_preflight_after_a_reboot(node_env, train_plan, monkeypatch):
    plan = {**train_plan, "preflight": [*train_plan["preflight"], "--gin", "proxy"],
            "capabilities": {"rl.platform/gdrcopy": ["gdrdrv"]},
            "steps": {**train_plan["steps"], "nccl": 0, "efa": 0}}  # the preflight is what sets the labels
    monkeypatch.setattr(preflight, "check_gin_plugin", lambda: None)
    monkeypatch.setattr(preflight, "check_gdrdrv", lambda: "GDRCopy: /dev/gdrdrv does not open")
    # registered with gdrcopy=true at its first boot; after the reboot gdrdrv did not load
    rebooted = merge(new_node(), {"metadata": {"labels": {"rl.platform/gdrcopy": "true", marks.RESULT_LABEL: "retest"}}})
    node = node_env["run"](plan, node=rebooted).node
    assert node["metadata"]["labels"]["rl.platform/gdrcopy"] == "false"
    for f in ("verdict.json", "written", "progress.json"):
        (node_env["results"] / f).unlink()
    monkeypatch.setattr(preflight, "check_gdrdrv", lambda: None)
    node = node_env["run"](plan, node=node).node
    assert node["metadata"]["labels"]["rl.platform/gdrcopy"] == "true"
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed"


def test_a_pass_waits_until_the_node_has_been_up_as_long_as_a_run_pod_asks(tmp_path):
    """A run pod made again after a reboot refuses a node up for less than ``passedUptimeSeconds``
    (``preflight.check_boot``), so the burn-in writes no pass sooner: a node passed 120 s after its boot
    waits the rest; a failure is written at once."""
    uptime, slept = tmp_path / "uptime", []
    uptime.write_text("120.00 900.00\n")
    plan = {"passedUptimeSeconds": preflight.PASSED_UPTIME_SECONDS}
    agent.hold(plan, {"result": marks.PASSED}, str(uptime), slept.append)
    assert slept == [preflight.PASSED_UPTIME_SECONDS - 120]
    agent.hold(plan, {"result": marks.FAILED}, str(uptime), slept.append)
    uptime.write_text(f"{preflight.PASSED_UPTIME_SECONDS + 5}.0 0\n")
    agent.hold(plan, {"result": marks.PASSED}, str(uptime), slept.append)
    assert len(slept) == 1


def test_the_agent_writes_a_pass_only_once_the_node_has_been_up_long_enough(node_env, train_plan, monkeypatch, tmp_path):
    uptime, slept = tmp_path / "uptime", []
    uptime.write_text("300.00 10.00\n")
    monkeypatch.setattr(preflight, "UPTIME", str(uptime))
    monkeypatch.setattr(time, "sleep", slept.append)
    assert node_env["run"](train_plan).node["metadata"]["labels"][marks.RESULT_LABEL] == marks.PASSED
    assert train_plan["passedUptimeSeconds"] - 300 in slept


def test_a_reboot_during_the_burn_in_tests_again_instead_of_failing(node_env, train_plan, monkeypatch, tmp_path):
    """The node rebooted in the NCCL step (EKS auto-repair, a GPU XID): the pod's containers start again
    on the new boot with the old results folder; the burn-in starts over and counts the reboot."""
    results, boot = node_env["results"], tmp_path / "boot_id"
    boot.write_text("boot-2\n")
    monkeypatch.setattr(agent, "BOOT_ID", boot)
    (results / "started").write_text(str(int(time.time()) - train_plan["budgetSeconds"] - 5))  # the old clock ran out
    (results / "boot").write_text("boot-1")
    (results / "progress.json").write_text(json.dumps({"step": "nccl", "figures": {"preflight": "ok"}}))
    node = node_env["run"](train_plan).node
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed"
    assert json.loads(node["metadata"]["annotations"][marks.FIGURES_ANNOTATION])["reboots"] == 1
    assert (results / "boot").read_text() == "boot-2"

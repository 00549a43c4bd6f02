"""``python -m nodes``: status, plan and retest, through the real kubernetes client with the API faked
at the HTTP layer (as the run command's tests do)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from test_nodes_agent import BURN_IN, GPU_TAINT, merge, new_node
from test_runs import FakeApi, _Response

from nodes import marks
from nodes.__main__ import main
from nodes.render import NAMESPACE
from nodes.status import NodesClient

NOW = datetime.now(timezone.utc)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name, result=None, tainted=True, reason=None, figures=None, age_h=2):
    n = new_node(name)
    n["metadata"]["creationTimestamp"] = iso(NOW - timedelta(hours=age_h))
    n["status"] = {"capacity": {"nvidia.com/gpu": "8"}}
    if result:
        n["metadata"]["labels"].update({marks.RESULT_LABEL: result, marks.TIME_LABEL: marks.stamp(NOW)})
    if reason:
        n["metadata"]["annotations"][marks.REASON_ANNOTATION] = reason
    if figures:
        n["metadata"]["annotations"][marks.FIGURES_ANNOTATION] = json.dumps(figures)
    if not tainted:
        n["spec"]["taints"] = [GPU_TAINT]
    return n


def burn_in_pod(node_name, phase, started_s=60, waiting=None, budget=1460):
    status = {"phase": phase, "startTime": iso(NOW - timedelta(seconds=started_s))}
    if waiting:
        status["initContainerStatuses"] = [{"name": "dcgm", "ready": False, "restartCount": 0, "image": "x",
                                            "imageID": "", "state": {"waiting": {"reason": waiting, "message": "pull denied"}}}]
    plan = json.dumps({"budgetSeconds": budget})
    return {"metadata": {"name": f"burn-in-train-{node_name[:6]}", "namespace": NAMESPACE,
                         "creationTimestamp": iso(NOW - timedelta(seconds=started_s))},
            "spec": {"nodeName": node_name, "containers": [{"name": "agent", "command": ["python3", "agent.py", "--plan", plan]}]},
            "status": status}


@pytest.fixture
def fake(monkeypatch):
    from kubernetes import client as k8s
    from kubernetes.client import rest

    def make(routes):
        api = FakeApi(routes)
        monkeypatch.setattr(rest.RESTClientObject, "request",
                            lambda self, *a, **kw: rest.RESTResponse(api.request(*a, **kw)))
        return api, (lambda: NodesClient(k8s.ApiClient(k8s.Configuration(host="https://cluster.example"))))
    return make


def test_status_lists_every_gpu_node_with_its_result_and_why_it_is_not_tested(fake):
    nodes = [node("n-passed", "passed", tainted=False, figures={"all_reduceGBs": 420.0, "all_to_allGBs": 300.0,
                                                                 "efaLoopbackMBsMin": 11800.5, "seconds": 1300,
                                                                 "neighbour": "n-other"}),
             node("n-failed", "failed", reason="DCGM: dcgmi diag -r 2 failed (exit 226): pcie"),
             node("n-nopod"), node("n-pull"), node("n-testing"), node("n-hung"),
             {**node("cpu-1"), "status": {"capacity": {}}, "spec": {}}]
    pods = [burn_in_pod("n-pull", "Pending", waiting="ImagePullBackOff"), burn_in_pod("n-testing", "Running", 300),
            burn_in_pod("n-hung", "Running", 1460 + 61)]
    api, client = fake({("GET", "/api/v1/nodes"): {"items": nodes},
                        ("GET", f"/api/v1/namespaces/{NAMESPACE}/pods"): {"items": pods}})
    rows = {r.node: r for r in client().rows(NOW)}
    assert set(rows) == {"n-passed", "n-failed", "n-nopod", "n-pull", "n-testing", "n-hung"}
    assert {k: r.state for k, r in rows.items()} == {
        "n-passed": "passed", "n-failed": "failed", "n-nopod": "not tested", "n-pull": "not tested",
        "n-testing": "testing", "n-hung": "failed"}
    assert rows["n-failed"].reason == "software: DCGM: dcgmi diag -r 2 failed (exit 226): pcie"
    assert rows["n-nopod"].reason.startswith("no burn-in pod on the node")
    assert "pending: dcgm: ImagePullBackOff pull denied" in rows["n-pull"].reason
    assert "past its budget of 1460 s" in rows["n-hung"].reason
    assert rows["n-passed"].figures["all_reduceGBs"] == 420.0 and rows["n-passed"].pool == "train"
    lines: list[str] = []
    assert main(["status"], client=client, out=lines.append) == 1  # not every node passed
    assert lines[0].split()[:3] == ["NODE", "POOL", "BURN-IN"]
    assert any("n-passed" in ln and "AR 420.0 / A2A 300.0 GB/s, EFA >= 11800.5 MB/s, with n-other, 1300 s" in ln
               for ln in lines)
    calls = [(m, p, q) for m, p, q, _ in api.calls]
    assert ("GET", "/api/v1/nodes", {"labelSelector": "rl.platform/pool"}) in calls


def test_status_exits_zero_when_every_gpu_node_passed(fake):
    _, client = fake({("GET", "/api/v1/nodes"): {"items": [node("a", "passed", tainted=False)]}})
    assert main(["status", "--json"], client=client, out=lambda s: None) == 0


def test_retest_taints_the_node_again_with_its_resource_version(fake):
    passed = node("n1", "passed", tainted=False)
    api, client = fake({("GET", "/api/v1/nodes/n1"): passed})
    out: list[str] = []
    assert main(["retest", "n1"], client=client, out=out.append) == 0
    method, path, _, body = api.calls[-1]
    assert (method, path) == ("PATCH", "/api/v1/nodes/n1")
    assert body == marks.retest_patch(passed, BURN_IN)
    after = merge(passed, body)
    assert after["spec"]["taints"] == [GPU_TAINT, BURN_IN] and after["metadata"]["labels"][marks.RESULT_LABEL] == "retest"
    assert out == ["n1: tainted, burn-in asked again"]


def test_retest_sends_a_merge_patch(monkeypatch):
    from kubernetes.client import rest
    seen = {}
    passed = node("n1", "passed", tainted=False)

    def request(self, method, url, headers=None, body=None, **kw):
        seen.setdefault(method, headers)
        return rest.RESTResponse(_Response(json.dumps(passed).encode()))
    monkeypatch.setattr(rest.RESTClientObject, "request", request)
    from kubernetes import client as k8s
    NodesClient(k8s.ApiClient(k8s.Configuration(host="https://cluster.example"))).retest("n1")
    assert seen["PATCH"]["Content-Type"] == "application/merge-patch+json"


def test_retest_refused_finds_the_passed_nodes_a_runs_preflight_refused(fake):
    def run_pod(node_name, exit_code, last=False, problem="EFA: libfabric sees 15 EFA devices, 16 requested"):
        term = {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed",
                               "message": f"preflight FAILED on {node_name}: {problem}" if exit_code else ""}}
        cs = {"name": "preflight", "ready": False, "restartCount": 1, "image": "x", "imageID": "",
              "state": {"waiting": {"reason": "CrashLoopBackOff"}} if last else term}
        if last:
            cs["lastState"] = term
        return {"metadata": {"name": f"trainer-{node_name}", "namespace": "team-a"},
                "spec": {"nodeName": node_name, "containers": [{"name": "ray-worker"}]},
                "status": {"phase": "Pending", "initContainerStatuses": [cs]}}
    pods = [run_pod("n1", 1), run_pod("n2", 1, last=True), run_pod("n3", 0), run_pod("n4", 1),
            run_pod("n3", 1, problem="SGLang refuses the engine Miles would start: ValueError: x")]  # the run's own
    passed = [node(n, "passed", tainted=False) for n in ("n1", "n2", "n3")]  # n4 already failed its burn-in
    routes = {("GET", "/api/v1/pods"): {"items": pods}, ("GET", "/api/v1/nodes"): {"items": passed},
              **{("GET", f"/api/v1/nodes/{n['metadata']['name']}"): n for n in passed}}
    api, client = fake(routes)
    out: list[str] = []
    assert main(["retest", "--refused"], client=client, out=out.append) == 0
    assert [p for m, p, _, _ in api.calls if m == "PATCH"] == ["/api/v1/nodes/n1", "/api/v1/nodes/n2"]
    assert ("GET", "/api/v1/nodes", {"labelSelector": "rl.platform/burn-in=passed"}) in [
        (m, p, q) for m, p, q, _ in api.calls]


def test_plan_prints_the_burn_in_time_each_pool_adds(tmp_path):
    lines: list[str] = []
    assert main(["plan", "p5en-prod"], out=lines.append) == 0
    assert lines[0] == "stack p5en-prod: each new GPU node is tainted until its burn-in passes"
    from workloads.derive.model import derive

    from conftest import load
    from nodes.burn_in import plans
    cfg = load("p5en-prod")
    b = next(x for x in plans(derive(cfg), cfg) if x.pool.name == "train")
    assert lines[1].startswith(f"  train: p5en.48xlarge x 16, DCGM level 2, up to {b.node_seconds // 60} min per node "
                               f"(pull {b.steps['pull'] // 60} min, dcgm {b.steps['dcgm'] // 60} min, ")
    assert f"; EFA loopback >= {b.pool.instance.efa_loopback_floor_mbs:g} MB/s" in lines[1]
    assert any(ln.startswith("  reward: ") and "floors: none for this family" in ln for ln in lines)


def test_status_shows_a_tripped_breaker_and_reset_breaker_closes_it(fake):
    from nodes.breaker import BREAKER
    trip = {"tripped": "3 nodes failed, more than maxFailedNodes 2", "at": "20261201T150000Z"}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": BREAKER, "namespace": NAMESPACE,
                                                              "resourceVersion": "7"},
          "data": {"train": json.dumps(trip), "rollout": json.dumps({})}}
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{BREAKER}"
    api, client = fake({("GET", "/api/v1/nodes"): {"items": [node("a", "passed", tainted=False)]}, ("GET", path): cm})
    lines: list[str] = []
    main(["status"], client=client, out=lines.append)
    assert lines[-1] == ("replacement breaker train: TRIPPED at 20261201T150000Z: 3 nodes failed, more than "
                         "maxFailedNodes 2; no replacement until python -m nodes reset-breaker train")
    out: list[str] = []
    assert main(["reset-breaker", "train"], client=client, out=out.append) == 0 and out == ["train: replacement breaker reset"]
    method, put, _, body = api.calls[-1]
    reset = json.loads(body["data"]["train"])
    assert (method, put) == ("PUT", path) and "tripped" not in reset and marks.parse_stamp(reset["reset"])
    assert body["metadata"]["resourceVersion"] == "7"  # a stale copy is refused, never overwrites a new trip


def test_status_says_a_failed_nodes_fault_and_its_refused_replacement(fake):
    failed = node("n-failed", "failed", reason="EFA: 15 of the node's 16 EFA devices visible")
    failed["metadata"]["labels"][marks.FAULT_LABEL] = "hardware"
    failed["metadata"]["annotations"][marks.REPLACEMENT_ANNOTATION] = json.dumps(
        {"state": "refused", "at": "20261201T150000Z", "attempts": 2, "reason": "AccessDenied"})
    pending = node("n-pull")
    pods = [burn_in_pod("n-pull", "Pending", started_s=4000, waiting="ErrImagePull")]
    pods[0]["spec"]["containers"][0]["command"][-1] = json.dumps({"budgetSeconds": 900, "nodeSeconds": 3000})
    _, client = fake({("GET", "/api/v1/nodes"): {"items": [failed, pending]},
                      ("GET", f"/api/v1/namespaces/{NAMESPACE}/pods"): {"items": pods}})
    rows = {r.node: r for r in client().rows(NOW)}
    assert rows["n-failed"].reason == ("hardware: EFA: 15 of the node's 16 EFA devices visible; replacement refused at "
                                       "20261201T150000Z (attempt 2): AccessDenied")
    assert rows["n-pull"].state == "failed" and "past its allowance of 3000 s" in rows["n-pull"].reason


def test_reset_breaker_before_any_replacement_says_it_was_not_tripped(fake):
    """No replacement yet, so no ConfigMap (404): nothing to reset."""
    _, client = fake({})
    out: list[str] = []
    assert main(["reset-breaker", "train"], client=client, out=out.append) == 0
    assert out == ["train: replacement breaker was not tripped"]


def test_reset_breaker_on_a_breaker_the_controller_just_saved_is_done_again_on_a_fresh_read(fake):
    """The controller saved the breaker between the reset's read and its write: the write is
    refused (409), the reset reads it again and keeps the controller's other pools."""
    from nodes.breaker import BREAKER
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{BREAKER}"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": BREAKER, "namespace": NAMESPACE},
          "data": {"train": json.dumps({"tripped": "3 nodes failed", "at": "20261201T150000Z"})}}
    api, client = fake({})
    api.put(path.rsplit("/", 1)[0], cm)
    real, puts = api.answer, []

    def answer(method, p, body=None):
        if method == "PUT" and not puts:  # the controller, first
            api.change(path, {"data": {"rollout": json.dumps({"replacements": ["20261201T150500Z"]})}})
        if method == "PUT":
            puts.append(method)
        return real(method, p, body)
    api.answer = answer
    assert main(["reset-breaker", "train"], client=client, out=lambda _: None) == 0
    data = api.get(path)["data"]
    assert "tripped" not in json.loads(data["train"])
    assert json.loads(data["rollout"]) == {"replacements": ["20261201T150500Z"]}
    assert puts == ["PUT", "PUT"]

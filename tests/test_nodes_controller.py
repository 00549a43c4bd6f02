"""The replacement controller (``nodes.controller``) against an API server faked at the HTTP layer:
it replaces only nodes failed for a hardware reason and quarantined, records refusals and retries
them, and its per-pool breaker trips (Event, ConfigMap) instead of a replacement storm."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import pytest
from conftest import send_json, serve
from fake_kube import ApiServer, status
from test_nodes_agent import BURN_IN, QUARANTINE, merge, new_node

from nodes import breaker, controller, incluster, marks, replace

NOW = datetime(2026, 12, 1, 15, 0, tzinfo=timezone.utc)
LIMITS = {"maxFailedNodes": 2, "maxFailedPercent": None, "maxReplacementsPerHour": 2, "windowMinutes": 120}
NODES = "/api/v1/nodes"
MAPS = "/api/v1/namespaces/rl-burn-in/configmaps"
PLAN = {"namespace": "rl-burn-in", "poolLabel": "rl.platform/pool", "quarantine": QUARANTINE, "taint": BURN_IN,
        "pools": {"train": {**LIMITS, "replace": True}}}


class Cluster(ApiServer):
    """Nodes, pods, the burn-in namespace's ConfigMaps and Events, as the API server keeps them
    (``fake_kube``: a write on a stale copy is refused 409, a missing object is 404), over HTTP; every
    request is kept (``requests``). A pod list across namespaces honours ``spec.nodeName`` field
    selectors; an eviction (policy/v1, the pod's ``eviction`` subresource) deletes the pod, or is refused
    429 TooManyRequests for a pod in ``guarded`` (its PodDisruptionBudget allows no disruption:
    kubernetes pkg/registry/core/pod/storage/eviction.go ``checkAndDecrement``)."""

    def __init__(self, nodes):
        super().__init__([(NODES, n) for n in nodes])
        self.events, self.requests, self.guarded, self.refusing = [], [], set(), {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self):
                url = urlparse(self.path)
                path = unquote(url.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
                fake.requests.append((self.command, path))
                if self.command == "POST" and path.endswith("/events"):
                    fake.events.append(body)
                send_json(self, *fake.respond(self.command, path, unquote(url.query), body))

            do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serve(self.server)
        self.api = incluster.Api(f"http://127.0.0.1:{self.server.server_port}", token_file="/nonexistent", ca_file=None)

    def respond(self, method: str, path: str, query: str, body) -> tuple[int, dict]:
        if (method, path) == ("GET", "/api/v1/pods"):
            node = query.split("spec.nodeName=", 1)[1] if "spec.nodeName=" in query else None
            return 200, {"items": [o for o in self.pods.values() if node is None or o["spec"].get("nodeName") == node]}
        if method == "GET" and path.endswith("/pods") and "labelSelector=" in query:  # by a label's presence
            key, ns = query.split("labelSelector=", 1)[1], path.split("/")[4]
            return 200, {"items": [o for o in self.pods.values() if o["metadata"]["namespace"] == ns
                                   and key in (o["metadata"].get("labels") or {})]}
        if method == "POST" and path.endswith("/eviction"):
            return self.evict(path.rsplit("/", 1)[0], body)
        return self.answer(method, path, body)

    def evict(self, pod: str, body: dict) -> tuple[int, dict]:
        assert (body["apiVersion"], body["kind"], body["metadata"]["name"]) == ("policy/v1", "Eviction", pod.rsplit("/", 1)[-1])
        if pod in self.refusing:
            return self.refusing[pod], status(self.refusing[pod], "InternalError", "refused")
        if pod in self.guarded:
            return 429, status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        return self.answer("DELETE", pod)

    @property
    def pods(self) -> dict[str, dict]:
        return {p: o for p, o in self.objects.items() if "/pods/" in p}

    @property
    def nodes(self) -> dict[str, dict]:
        return {p.rsplit("/", 1)[-1]: o for p, o in self.objects.items() if p.startswith(f"{NODES}/")}

    @property
    def maps(self) -> dict[str, dict]:
        return {p.rsplit("/", 1)[-1]: o for p, o in self.objects.items() if p.startswith(f"{MAPS}/")}

    def only(self, *nodes) -> None:
        """The node group replaced every node: these are the nodes now."""
        for name in self.nodes:
            self.answer("DELETE", f"{NODES}/{name}")
        for n in nodes:
            self.put(NODES, n)

    def close(self):
        self.server.shutdown()


def gpu_node(i, result=None, fault=None, quarantined=None):
    n = new_node(f"ip-10-0-1-{i}.ec2.internal")
    n["spec"]["providerID"] = f"aws:///us-east-1a/i-0{i:016x}"
    if result:
        n = merge(n, marks.result_patch(n, BURN_IN, QUARANTINE, result, {}, "why", NOW, fault=fault))
    if quarantined is False:
        n["spec"]["taints"] = [t for t in n["spec"]["taints"] if t["key"] != QUARANTINE["key"]]
    return n


@pytest.fixture
def cluster():
    made = []

    def make(nodes):
        made.append(Cluster(nodes))
        return made[-1]
    yield make
    for c in made:
        c.close()


def test_only_a_quarantined_node_failed_for_its_hardware_is_replaced_by_its_instance_id(cluster):
    c = cluster([gpu_node(1, "failed", "hardware"), gpu_node(2, "failed", "software"),
                 gpu_node(3, "failed", "hardware", quarantined=False), gpu_node(4, "passed"), gpu_node(5)])
    asked = []
    plan = {**PLAN, "pools": {"train": {**PLAN["pools"]["train"], "maxFailedNodes": 3}}}  # three failed: within the breaker
    done = controller.reconcile(c.api, plan, NOW, mark=lambda n: asked.append(replace.instance_id(n)))
    assert asked == [f"i-0{1:016x}"] and done == ["ip-10-0-1-1.ec2.internal: replacement requested"]
    assert marks.replacement(c.nodes["ip-10-0-1-1.ec2.internal"])["state"] == "requested"
    assert [e["reason"] for e in c.events] == ["ReplacementRequested"]
    assert controller.reconcile(c.api, plan, NOW + timedelta(minutes=5), mark=asked.append) == []  # asked once


def test_a_refused_replacement_is_recorded_with_a_warning_and_tried_again_later(cluster):
    c = cluster([gpu_node(1, "failed", "hardware")])

    def refuse(node):
        raise RuntimeError("HTTP Error 403: AccessDenied")
    controller.reconcile(c.api, PLAN, NOW, mark=refuse)
    record = marks.replacement(c.nodes["ip-10-0-1-1.ec2.internal"])
    assert record["state"] == "refused" and record["attempts"] == 1 and "AccessDenied" in record["reason"]
    assert [(e["reason"], e["type"]) for e in c.events] == [("ReplacementRefused", "Warning")]
    assert controller.reconcile(c.api, PLAN, NOW + timedelta(seconds=60), mark=refuse) == []  # not yet
    later = NOW + timedelta(seconds=controller.RETRY_SECONDS)
    assert controller.reconcile(c.api, PLAN, later, mark=lambda n: None) == ["ip-10-0-1-1.ec2.internal: replacement requested"]
    assert marks.replacement(c.nodes["ip-10-0-1-1.ec2.internal"])["attempts"] == 2


def test_the_breaker_trips_when_too_many_nodes_failed_and_stays_open_until_reset(cluster):
    c = cluster([gpu_node(i, "failed", "hardware") for i in range(1, LIMITS["maxFailedNodes"] + 2)])
    asked = []
    done = controller.reconcile(c.api, PLAN, NOW, mark=asked.append)
    assert asked == [] and done[0].startswith("train: breaker tripped:")
    state = breaker.state_of(c.maps[breaker.BREAKER])
    assert f"more than maxFailedNodes {LIMITS['maxFailedNodes']}" in state["train"]["tripped"]
    (event,) = c.events
    assert event["reason"] == "ReplacementBreakerTripped" and event["type"] == "Warning"
    assert "python -m nodes reset-breaker train" in event["message"]
    c.only(next(iter(c.nodes.values())))  # the failed nodes go away: the breaker stays open until a person resets it
    assert controller.reconcile(c.api, PLAN, NOW + timedelta(hours=2), mark=asked.append) == [] and asked == []


HOURLY = {**PLAN, "pools": {"train": {**PLAN["pools"]["train"], "maxFailedNodes": 10}}}
"""The hourly limit alone: the replaced nodes' failures stay within maxFailedNodes."""


def test_the_breaker_trips_after_the_hourly_limit_of_replacements(cluster):
    limit = LIMITS["maxReplacementsPerHour"]
    c = cluster([gpu_node(1, "failed", "hardware")])
    asked = []
    for i in range(limit):
        c.only(gpu_node(10 + i, "failed", "hardware"))
        controller.reconcile(c.api, HOURLY, NOW + timedelta(minutes=i), mark=asked.append)
    assert len(asked) == limit
    c.only(gpu_node(99, "failed", "hardware"))
    done = controller.reconcile(c.api, HOURLY, NOW + timedelta(minutes=limit), mark=asked.append)
    assert len(asked) == limit and f"{limit} replacements in the last hour" in done[0]


def test_the_percentage_limit_counts_the_whole_pool(cluster):
    plan = {**PLAN, "pools": {"train": {**PLAN["pools"]["train"], "maxFailedNodes": 10, "maxFailedPercent": 25}}}
    nodes = [gpu_node(1, "failed", "hardware"), gpu_node(2, "failed", "hardware"), gpu_node(3, "failed", "software"),
             gpu_node(4, "passed"), gpu_node(5, "passed"), gpu_node(6, "passed")]
    done = controller.reconcile(cluster(nodes).api, plan, NOW, mark=lambda n: None)
    assert "2 of 6 nodes failed for a hardware reason, more than maxFailedPercent 25%" in done[0]


# --- what the API server refuses: the controller's records survive it ---------------------------------

NAME = "ip-10-0-1-1.ec2.internal"


def _replacements(c) -> list[str]:
    return breaker.state_of(c.maps[breaker.BREAKER])["train"].get("replacements", [])


def test_a_node_written_since_the_list_gets_the_record_on_a_fresh_read_and_the_replacement_counts(cluster):
    """The kubelet or the agent wrote the node after the controller listed it: the record carrying
    the listed resourceVersion is refused 409; the controller reads the node again and writes it."""
    c = cluster([gpu_node(1, "failed", "hardware")])

    def mark(node):
        c.change(f"{NODES}/{NAME}", {"metadata": {"labels": {"other-writer": "yes"}}})
    assert controller.reconcile(c.api, PLAN, NOW, mark=mark) == [f"{NAME}: replacement requested"]
    assert marks.replacement(c.nodes[NAME])["state"] == "requested"
    assert c.nodes[NAME]["metadata"]["labels"]["other-writer"] == "yes"  # the other write is kept
    assert len(_replacements(c)) == 1


def test_a_node_gone_once_its_instance_is_marked_still_counts_against_the_breaker(cluster):
    """The group terminated the instance and the node object went (404 to the record): the
    replacement happened, so the hourly limit counts it."""
    c = cluster([gpu_node(1, "failed", "hardware")])

    def mark(node):
        c.answer("DELETE", f"{NODES}/{NAME}")
    assert controller.reconcile(c.api, PLAN, NOW, mark=mark) == [f"{NAME}: replacement requested"]
    assert NAME not in c.nodes and len(_replacements(c)) == 1


@pytest.mark.parametrize("existing", [False, True], ids=["created-meanwhile", "written-meanwhile"])
def test_a_breaker_written_by_another_during_the_pass_keeps_both_writes(cluster, existing):
    """Another writer (``python -m nodes reset-breaker``, a second controller) saved the breaker after
    this pass read it: the save is refused (409 Conflict or AlreadyExists), the controller reads it
    again and applies this pass's replacement to it."""
    c = cluster([gpu_node(1, "failed", "hardware")])
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": breaker.BREAKER, "namespace": "rl-burn-in"},
             "data": {"rollout": json.dumps({"tripped": "by hand", "at": "20261201T140000Z"})}}
    if existing:
        c.put(MAPS, {**other, "data": {}})

    def mark(node):
        c.put(MAPS, other)
    controller.reconcile(c.api, PLAN, NOW, mark=mark)
    state = breaker.state_of(c.maps[breaker.BREAKER])
    assert state["rollout"] == {"tripped": "by hand", "at": "20261201T140000Z"} and len(state["train"]["replacements"]) == 1


# --- the breaker counts what it protects against, and an operator's reset holds -------------------------

def _failed_at(i, fault, when):
    n = gpu_node(i, "failed", fault)
    n["metadata"]["labels"][marks.TIME_LABEL] = marks.stamp(when)
    return n


def _reset(c, now, pool="train"):
    """``python -m nodes reset-breaker POOL``, through the kubernetes client against this API server."""
    from kubernetes import client as k8s

    from nodes.status import NodesClient
    api = k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{c.server.server_port}"))
    return NodesClient(api).reset_breaker(pool, now=now)


def test_software_failures_never_trip_the_breaker(cluster):
    """Software failures are never replaced, so they are not what the breaker protects against."""
    c = cluster([*(gpu_node(i, "failed", "software") for i in range(1, 5)), gpu_node(9, "failed", "hardware")])
    done = controller.reconcile(c.api, PLAN, NOW, mark=lambda n: None)
    assert done == ["ip-10-0-1-9.ec2.internal: replacement requested"]


def test_a_reset_holds_until_new_evidence(cluster):
    plan = {**PLAN, "pools": {"train": {**PLAN["pools"]["train"], "maxReplacementsPerHour": 5}}}
    held = [_failed_at(i, "hardware", NOW) for i in range(1, LIMITS["maxFailedNodes"] + 2)]
    c = cluster(held)
    asked = []
    assert controller.reconcile(c.api, plan, NOW, mark=asked.append)[0].startswith("train: breaker tripped:")
    assert {marks.replacement(n)["state"] for n in c.nodes.values()} == {"held"} and asked == []
    assert controller.reconcile(c.api, plan, NOW + timedelta(minutes=1), mark=asked.append) == []  # stays open
    assert _reset(c, NOW + timedelta(minutes=5)) is True
    later = NOW + timedelta(minutes=10)
    done = controller.reconcile(c.api, plan, later, mark=asked.append)
    assert done == [f"{n['metadata']['name']}: replacement requested" for n in held]  # the held nodes, no new trip
    # a hardware failure after the reset is new evidence: with the window's others it trips again
    c.only(*(_failed_at(20 + i, "hardware", later + timedelta(minutes=1)) for i in range(LIMITS["maxFailedNodes"] + 1)))
    done = controller.reconcile(c.api, plan, later + timedelta(minutes=2), mark=asked.append)
    assert done[0].startswith("train: breaker tripped: 3 nodes failed for a hardware reason")


def test_failures_outside_the_window_are_not_counted(cluster):
    window = timedelta(minutes=LIMITS["windowMinutes"])
    old = [_failed_at(i, "hardware", NOW - window - timedelta(minutes=1)) for i in range(1, 3)]
    c = cluster([*old, _failed_at(3, "hardware", NOW)])
    asked = []
    controller.reconcile(c.api, PLAN, NOW, mark=lambda n: asked.append(n["metadata"]["name"]))
    assert len(asked) == LIMITS["maxReplacementsPerHour"]  # three failed, two of them long ago: no trip


def test_deleting_the_breaker_configmap_does_not_reset_it(cluster):
    """The hourly limit tripped it; the ConfigMap is deleted: the node it held still says so."""
    c = cluster([gpu_node(1, "failed", "hardware")])
    asked = []
    for i in range(LIMITS["maxReplacementsPerHour"]):
        c.only(gpu_node(10 + i, "failed", "hardware"))
        controller.reconcile(c.api, HOURLY, NOW + timedelta(minutes=i), mark=asked.append)
    c.only(gpu_node(99, "failed", "hardware"))
    assert "replacements in the last hour" in controller.reconcile(c.api, HOURLY, NOW + timedelta(minutes=3),
                                                                   mark=asked.append)[0]
    c.answer("DELETE", f"{MAPS}/{breaker.BREAKER}")
    done = controller.reconcile(c.api, HOURLY, NOW + timedelta(minutes=4), mark=asked.append)
    assert len(asked) == LIMITS["maxReplacementsPerHour"], done
    assert "replacements in the last hour" in breaker.state_of(c.maps[breaker.BREAKER])["train"]["tripped"]
    assert c.events[-1]["reason"] == "ReplacementBreakerRestored"


# --- a re-test evicts what holds the node ---------------------------------------------------------------

def _pod(name, node, ns="team-a", gpus=8, phase="Running", owner=None, ready=True, ending=False):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, **({"ownerReferences": [{"kind": owner, "name": "x"}]} if owner else {}),
                        **({"deletionTimestamp": "2026-12-01T14:59:00Z"} if ending else {})},
           "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": (
               {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": "16"} if gpus else {"cpu": "1"})}}]},
           "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    return pod


def _retest_node(i):
    n = gpu_node(i, "passed")
    return merge(n, marks.retest_patch(n, BURN_IN))


@pytest.fixture
def held_node(cluster):
    """A node asked to re-test that a run still holds: its crash-looping worker (Pending: the preflight
    init container fails, KubeRay v1.7.0 leaves the pod in place) and a healthy one guarded by the run's
    budget, beside the device plugin and the burn-in pod (DaemonSets), a GPU DaemonSet pod of another
    namespace, a run pod already ending (its grace period runs) and a CPU pod."""
    retest, other = _retest_node(1), gpu_node(2, "passed")
    c = cluster([retest, other])
    name = retest["metadata"]["name"]
    pods = [_pod("miles-worker-crashing", name, phase="Pending", ready=False), _pod("miles-worker-healthy", name),
            _pod("nvidia-device-plugin-x", name, ns="kube-system", gpus=0, owner="DaemonSet"),
            _pod("burn-in-train-x", name, ns="rl-burn-in", owner="DaemonSet"), _pod("cpu-only", name, gpus=0),
            _pod("gpu-exporter-x", name, ns="monitoring", owner="DaemonSet"), _pod("miles-worker-ending", name, ending=True),
            _pod("miles-worker-elsewhere", other["metadata"]["name"])]
    for p in pods:
        c.put(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
    c.guarded.add("/api/v1/namespaces/team-a/pods/miles-worker-healthy")
    return c, name


def test_a_retest_evicts_the_run_pods_that_hold_the_node_through_the_eviction_api(held_node):
    c, name = held_node
    plan = {**PLAN, "pools": {"train": {**PLAN["pools"]["train"], "replace": False}}}  # evictions need no replacement
    done = controller.reconcile(c.api, plan, NOW, mark=lambda n: pytest.fail("no replacement"))
    assert done == [f"{name}: evicted team-a/miles-worker-crashing to re-test the node",
                    f"{name}: eviction of team-a/miles-worker-healthy refused (its disruption budget): tried again "
                    f"in {controller.PERIOD_SECONDS} s"]
    assert {p.rsplit("/", 1)[-1] for p in c.pods} == {"miles-worker-healthy", "nvidia-device-plugin-x", "burn-in-train-x",
                                                      "cpu-only", "miles-worker-elsewhere", "gpu-exporter-x",
                                                      "miles-worker-ending"}
    assert [e["reason"] for e in c.events] == ["BurnInRetestEviction"]
    c.guarded.clear()  # the run saved and stopped: its budget no longer holds the pod
    assert controller.reconcile(c.api, plan, NOW + timedelta(minutes=1), mark=lambda n: None) == [
        f"{name}: evicted team-a/miles-worker-healthy to re-test the node"]


def test_the_replacement_reaches_auto_scaling_signed_with_the_pod_identity_credentials(cluster, tmp_path, monkeypatch):
    """``nodes.replace.mark_unhealthy`` end to end against a fake Pod Identity agent and Auto Scaling
    (``tests/fake_asg.py``: botocore checks the signature), reached through the SDKs' endpoint variable."""
    from fake_asg import FakeAws
    aws = FakeAws(tmp_path)
    try:
        for k, v in aws.env().items():
            monkeypatch.setenv(k, v)
        c = cluster([gpu_node(1, "failed", "hardware"), gpu_node(2, "failed", "hardware")])
        aws.refuse = "ValidationError"
        done = controller.reconcile(c.api, PLAN, NOW)
        assert done[0].startswith("ip-10-0-1-1.ec2.internal: replacement refused: HTTP Error 400")
        aws.refuse = None
        done = controller.reconcile(c.api, PLAN, NOW + timedelta(seconds=controller.RETRY_SECONDS))
        assert done == ["ip-10-0-1-1.ec2.internal: replacement requested", "ip-10-0-1-2.ec2.internal: replacement requested"]
        assert aws.marked == [replace.instance_id(gpu_node(1)), replace.instance_id(gpu_node(2))]
    finally:
        aws.close()


@pytest.mark.parametrize("answer", [500, 403])
def test_an_eviction_refused_otherwise_is_reported_and_the_pass_goes_on_to_replacement(held_node, answer):
    """A pod under two budgets (500) or an admission policy's denial (403) is that pod's problem: the
    other pods are evicted and every pool's replacement still runs."""
    c, name = held_node
    c.refusing["/api/v1/namespaces/team-a/pods/miles-worker-crashing"] = answer
    c.guarded.clear()
    c.put(NODES, gpu_node(3, "failed", "hardware"))
    marked = []
    done = controller.reconcile(c.api, PLAN, NOW, mark=marked.append)
    assert done[0].startswith(f"{name}: eviction of team-a/miles-worker-crashing refused (HTTP {answer}: ")
    assert done[1:] == [f"{name}: evicted team-a/miles-worker-healthy to re-test the node",
                        "ip-10-0-1-3.ec2.internal: replacement requested"]
    assert [n["metadata"]["name"] for n in marked] == ["ip-10-0-1-3.ec2.internal"]


def test_a_node_whose_pods_cannot_be_listed_does_not_stop_the_pass(held_node):
    c, name = held_node
    c.put(NODES, gpu_node(3, "failed", "hardware"))
    real = c.respond
    c.respond = lambda m, p, q, b: (403, status(403, "Forbidden", "no")) if p == "/api/v1/pods" else real(m, p, q, b)
    done = controller.reconcile(c.api, PLAN, NOW, mark=lambda n: None)
    assert done[0].startswith(f"{name}: re-test not freed (HTTP 403: ")
    assert done[1:] == ["ip-10-0-1-3.ec2.internal: replacement requested"]


def test_every_call_of_the_controller_is_allowed_by_the_rbac_the_stack_renders(held_node):
    from rbac import allows, attributes, rules_of

    from nodes.render import NAMESPACE, REPLACE_ACCOUNT, base_objects, eviction_roles
    c, _ = held_node
    c.put(NODES, gpu_node(3, "failed", "hardware"))
    controller.reconcile(c.api, PLAN, NOW, mark=lambda n: None)  # evicts, replaces, creates the breaker
    c.put(NODES, gpu_node(4, "failed", "hardware"))
    controller.reconcile(c.api, PLAN, NOW + timedelta(minutes=20), mark=lambda n: None)  # replaces, updates it
    lone, proven = gpu_node(5), gpu_node(6, "passed")  # a lone new node, checked from a proven one
    lone["metadata"]["annotations"][marks.WAITING_ANNOTATION] = json.dumps(
        {"address": "10.0.1.5", "until": marks.stamp(NOW + timedelta(minutes=8)), "since": marks.stamp(NOW - timedelta(minutes=3))})
    c.put(NODES, lone)
    c.put(NODES, proven)
    hosts = {**PLAN, "hosts": {"train": {"metadata": {"labels": {}}, "spec": {"containers": [{"name": "host"}]}}}}
    host = f"/api/v1/namespaces/rl-burn-in/pods/host-{lone['metadata']['name']}"
    assert controller.reconcile(c.api, hosts, NOW, mark=lambda n: None)[-1].endswith("asked to check it")
    c.change(host, {"status": {"phase": "Running", "podIP": "10.0.9.9"}})
    assert controller.reconcile(c.api, hosts, NOW, mark=lambda n: None)[-1].endswith("with a proven neighbour")
    c.change(host, {"status": {"phase": "Succeeded"}})
    assert controller.reconcile(c.api, hosts, NOW, mark=lambda n: None)[-1].endswith("is over")
    rules = rules_of([*base_objects(), *eviction_roles(["team-a"])], REPLACE_ACCOUNT, NAMESPACE)
    made = {attributes(method, path) for method, path in c.requests}
    assert {r.verb for r in made} >= {"list", "get", "patch", "create", "update"}
    assert {r.resource for r in made} >= {"pods/eviction", "nodes", "pods", "configmaps", "events"}
    assert {r.verb for r in made if r.resource == "pods"} == {"list", "get", "create", "delete"}
    assert [r for r in made if not allows(rules, r)] == []


def test_what_the_controller_may_evict_unguarded_is_what_the_docs_say():
    """On a stack whose rollout pool is Spot (p4d), no budget in the namespaces the controller may evict in
    holds the rollout workers: the operations page says so, instead of claiming every pod there is guarded."""
    from conftest import ROOT, graph_of, load
    from test_workloads_security import registered_objects

    from nodes.render import eviction_namespaces
    from workloads.derive.model import derive
    from workloads.render.ray import ray_pod_labels

    cfg = load("p4d")
    m = derive(cfg)
    assert m.rollout_spot
    rollout = ray_pod_labels(m, "rollout")
    guarded = [o for o in registered_objects(graph_of("p4d")) if o.get("kind") == "PodDisruptionBudget"
               and o["metadata"]["namespace"] in eviction_namespaces(m)
               and (o["spec"]["selector"].get("matchLabels") or {}).items() <= rollout.items()]
    assert guarded == []
    page = " ".join((ROOT / "docs" / "operations" / "burn-in.md").read_text().split())
    assert "a Spot rollout pool's workers are under none" in page
    assert "every pod it can evict is under a run budget" not in page

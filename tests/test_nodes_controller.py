"""The replacement controller (``nodes.controller``) against an API server faked at the HTTP layer:
it replaces only nodes failed for a hardware reason and quarantined, records refusals and retries
them, and its per-pool breaker trips (Event, ConfigMap) instead of a replacement storm."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest
from conftest import send_json, serve
from test_nodes_agent import BURN_IN, QUARANTINE, merge, new_node

from nodes import controller, incluster, marks, replace

NOW = datetime(2026, 12, 1, 15, 0, tzinfo=timezone.utc)
LIMITS = {"maxFailedNodes": 2, "maxFailedPercent": None, "maxReplacementsPerHour": 2}
PLAN = {"namespace": "rl-burn-in", "poolLabel": "rl.platform/pool", "quarantine": QUARANTINE, "pools": {"train": LIMITS}}


class Cluster:
    """Nodes, one ConfigMap namespace and events, as the API server keeps them."""

    def __init__(self, nodes):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.maps, self.events, self.version = {}, [], 100
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _body(self):
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

            def do_GET(self):
                path = unquote(self.path)
                if path.startswith("/api/v1/nodes?labelSelector="):
                    return send_json(self, 200, {"items": list(fake.nodes.values())})
                if "/configmaps/" in path:
                    cm = fake.maps.get(path.rsplit("/", 1)[-1])
                    return send_json(self, 200, cm) if cm else send_json(self, 404, {"kind": "Status"})
                send_json(self, 200, fake.nodes[path.rsplit("/", 1)[-1]])

            def do_PATCH(self):
                name, body = self.path.rsplit("/", 1)[-1], self._body()
                node = fake.nodes[name]
                if body["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]:
                    return send_json(self, 409, {"kind": "Status"})
                fake.version += 1
                fake.nodes[name] = merge(node, merge(body, {"metadata": {"resourceVersion": str(fake.version)}}))
                send_json(self, 200, fake.nodes[name])

            def _save(self, status):
                body = self._body()
                fake.version += 1
                body["metadata"]["resourceVersion"] = str(fake.version)
                fake.maps[body["metadata"]["name"]] = body
                send_json(self, status, body)

            def do_PUT(self):
                self._save(200)

            def do_POST(self):
                if self.path.endswith("/events"):
                    fake.events.append(self._body())
                    return send_json(self, 201, {})
                self._save(201)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serve(self.server)
        self.api = incluster.Api(f"http://127.0.0.1:{self.server.server_port}", token_file="/nonexistent", ca_file=None)

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
    plan = {**PLAN, "pools": {"train": {**LIMITS, "maxFailedNodes": 3}}}  # three failed: within the breaker
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
    state = controller.breaker_state(c.maps[controller.BREAKER])
    assert f"more than maxFailedNodes {LIMITS['maxFailedNodes']}" in state["train"]["tripped"]
    (event,) = c.events
    assert event["reason"] == "ReplacementBreakerTripped" and event["type"] == "Warning"
    assert "python -m nodes reset-breaker train" in event["message"]
    for name in list(c.nodes)[1:]:  # the failed nodes go away: the breaker stays open until a person resets it
        del c.nodes[name]
    assert controller.reconcile(c.api, PLAN, NOW + timedelta(hours=2), mark=asked.append) == [] and asked == []


def test_the_breaker_trips_after_the_hourly_limit_of_replacements(cluster):
    limit = LIMITS["maxReplacementsPerHour"]
    c = cluster([gpu_node(1, "failed", "hardware")])
    asked = []
    for i in range(limit):
        c.nodes = {n["metadata"]["name"]: n for n in [gpu_node(10 + i, "failed", "hardware")]}
        controller.reconcile(c.api, PLAN, NOW + timedelta(minutes=i), mark=asked.append)
    assert len(asked) == limit
    c.nodes = {n["metadata"]["name"]: n for n in [gpu_node(99, "failed", "hardware")]}
    done = controller.reconcile(c.api, PLAN, NOW + timedelta(minutes=limit), mark=asked.append)
    assert len(asked) == limit and f"{limit} replacements in the last hour" in done[0]


def test_the_percentage_limit_counts_the_whole_pool(cluster):
    plan = {**PLAN, "pools": {"train": {**LIMITS, "maxFailedNodes": 10, "maxFailedPercent": 25}}}
    nodes = [gpu_node(1, "failed", "hardware"), gpu_node(2, "failed", "software"), gpu_node(3, "passed"), gpu_node(4, "passed")]
    done = controller.reconcile(cluster(nodes).api, plan, NOW, mark=lambda n: None)
    assert "2 of 4 nodes failed, more than maxFailedPercent 25%" in done[0]

"""The shared reward server under hostile requests (issue 26 item 5, issue 35 item 5): a real server on
loopback, one port per team, graded in a child with time and memory limits. A crafted answer is refused in
bounded time while ``/health`` and the next request are answered; one team's flood neither delays another
team's gradings nor holds the server's memory, and what is over a team's share is refused at once."""

from __future__ import annotations

import http.client
import json
import re
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workloads" / "pod"))
import reward_server  # noqa: E402 (shipped as a script, imported by path)

LIMIT_S = 1


def boxed_eval(body: dict) -> float:
    """A grader that evaluates the boxed answer, as symbolic graders do: ``9**9**9`` has 369 million digits."""
    answer = re.search(r"\\boxed\{(.*)\}", body["response"]).group(1)
    return float(eval(answer, {"__builtins__": {}}) == eval(body["label"], {"__builtins__": {}}))  # noqa: S307


def hoard(body: dict) -> float:
    return float(len(bytearray(8 * 1024 ** 3)))


def _call(port: int, method: str, path: str, body: dict | None = None, headers: dict | None = None,
          raw: bytes | None = None) -> tuple[int, object, float]:
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    out = resp.status, json.loads(resp.read()), time.monotonic() - start
    conn.close()
    return out


@pytest.fixture
def serving():
    def start(grade, teams=("a",), slots=2, waiting=4, max_body=1024 ** 2, seconds=LIMIT_S):
        limits = reward_server.Limits(seconds=seconds, memory=256 * 1024 ** 2, max_body=max_body, waiting=waiting)
        servers = reward_server.servers(grade, host="127.0.0.1", ports={t: 0 for t in teams}, limits=limits, slots=slots)
        for httpd in servers:
            threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
        started.extend(servers)
        return {t: s.server_address[1] for t, s in zip(teams, servers)}
    started: list = []
    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


BOMB = {"prompt": "?", "response": "\\boxed{9**9**9}", "label": "1"}
HONEST = {"prompt": "1+1?", "response": "\\boxed{2}", "label": "2"}


def test_a_grading_bomb_is_refused_in_bounded_time_and_health_stays_up(serving):
    port = serving(boxed_eval)["a"]
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(bomb=_call(port, "POST", "/reward", BOMB)))
    worker.start()
    time.sleep(0.1)
    status, health, took = _call(port, "GET", "/health")
    assert status == 200 and health["status"] == "ok" and took < 0.5
    worker.join(timeout=LIMIT_S + 5)
    status, reply, took = result["bomb"]
    assert status == 422 and "grading" in reply["error"] and took < LIMIT_S + 2, (status, reply, took)
    assert _call(port, "POST", "/reward", HONEST)[:2] == (200, 1.0)


def test_a_grading_that_hoards_memory_is_refused(serving):
    status, reply, _ = _call(serving(hoard)["a"], "POST", "/reward", {"response": "x"})
    assert status == 422 and "MiB" in reply["error"], reply


def test_one_teams_flood_does_not_delay_another_teams_grading(serving):
    """Crafted requests of team ``flood`` (each runs to the 4 s limit) on a replica of two slots: team
    ``honest`` is graded while the first of them still runs (before, it waited for a slot they held)."""
    ports = serving(boxed_eval, teams=("flood", "honest"), slots=2, waiting=16, seconds=4)
    results: list = []
    start = time.monotonic()
    for _ in range(4):
        threading.Thread(target=lambda: results.append(_call(ports["flood"], "POST", "/reward", BOMB)),
                         daemon=True).start()
    time.sleep(0.3)
    took = [_call(ports["honest"], "POST", "/reward", HONEST) for _ in range(3)]
    assert all(status == 200 and reward == 1.0 for status, reward, _ in took), took
    assert results == [] and time.monotonic() - start < 4, (took, results)  # the flood's first grading still runs


def test_over_a_teams_share_is_answered_429_at_once(serving):
    ports = serving(boxed_eval, teams=("a", "b"), slots=2, waiting=1)  # a: 1 running + 1 waiting
    held = [threading.Thread(target=_call, args=(ports["a"], "POST", "/reward", BOMB)) for _ in range(2)]
    for t in held:
        t.start()
    time.sleep(0.3)
    status, reply, took = _call(ports["a"], "POST", "/reward", HONEST)
    assert status == 429 and reply["caller"] == "a" and "1 gradings running and 1 waiting" in reply["error"]
    assert took < 0.3, took
    assert _call(ports["b"], "POST", "/reward", HONEST)[:2] == (200, 1.0)  # b's share is untouched
    for t in held:
        t.join(timeout=30)


def test_a_body_over_the_limit_or_of_no_stated_length_is_refused_from_its_headers(serving):
    port = serving(boxed_eval, max_body=1000)["a"]
    status, reply, took = _call(port, "POST", "/reward", raw=b"x" * 1001)
    assert status == 413 and "1000" in reply["error"] and took < 0.5
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # says 64 MiB, sends none of it
        s.sendall(b"POST /reward HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 413")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"POST /reward HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 411")
    assert _call(port, "POST", "/reward", raw=b"{not json")[:2] == (400, {"error": "body is not JSON"})


def test_idle_connections_beyond_a_teams_share_cost_no_thread(serving):
    ports = serving(boxed_eval, teams=("a", "b"), slots=2, waiting=2)  # a: 2 x (1 + 2) connections at most
    idle = [socket.create_connection(("127.0.0.1", ports["a"]), timeout=5) for _ in range(6)]
    time.sleep(0.2)
    with socket.create_connection(("127.0.0.1", ports["a"]), timeout=5) as s:
        assert s.recv(4096).startswith(b"HTTP/1.1 429")  # answered before it sent anything
    assert _call(ports["b"], "POST", "/reward", HONEST)[:2] == (200, 1.0)
    for s in idle:
        s.close()


@pytest.mark.parametrize("cpu_max, memory_max, slots", [
    ("400000 100000\n", "17179869184\n", 4),   # 4 CPUs, 16 GiB: one grading per CPU
    ("max 100000\n", "max\n", None),             # no limit: the CPUs the process may run on
    ("150000 100000\n", "max\n", 1),             # 1.5 CPUs: one whole CPU
    ("800000 100000\n", "4294967296\n", 2),      # 8 CPUs but 4 GiB: two gradings of 2 GiB
])
def test_grading_slots_follow_the_containers_cgroup_limits_not_the_nodes_cpus(tmp_path, cpu_max, memory_max, slots):
    (tmp_path / "cpu.max").write_text(cpu_max)
    (tmp_path / "memory.max").write_text(memory_max)
    cpus = reward_server.cgroup_cpus(tmp_path)
    got = reward_server.grading_slots(cpus, reward_server.cgroup_memory(tmp_path))
    affinity = len(__import__("os").sched_getaffinity(0))
    assert got == (min(slots, affinity) if slots else affinity)

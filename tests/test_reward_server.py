"""The shared reward server under a hostile request (issue 26 item 5): a real server on loopback,
graded in a child with time and memory limits; a crafted answer is refused in bounded time while
``/health`` and the next request are answered."""

from __future__ import annotations

import http.client
import json
import re
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


def _call(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, object, float]:
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = resp.status, json.loads(resp.read()), time.monotonic() - start
    conn.close()
    return out


@pytest.fixture
def serving():
    def start(grade):
        httpd = reward_server.server(grade, host="127.0.0.1", port=0, seconds=LIMIT_S,
                                     memory=256 * 1024 ** 2, workers=2)
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
        started.append(httpd)
        return httpd.server_address[1]
    started: list = []
    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def test_a_grading_bomb_is_refused_in_bounded_time_and_health_stays_up(serving):
    port = serving(boxed_eval)
    bomb = {"prompt": "?", "response": "\\boxed{9**9**9}", "label": "1"}
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(bomb=_call(port, "POST", "/reward", bomb)))
    worker.start()
    time.sleep(0.1)
    status, health, took = _call(port, "GET", "/health")
    assert status == 200 and health["status"] == "ok" and took < 0.5
    worker.join(timeout=LIMIT_S + 5)
    status, reply, took = result["bomb"]
    assert status == 422 and "grading" in reply["error"] and took < LIMIT_S + 2, (status, reply, took)
    assert _call(port, "POST", "/reward", {"prompt": "1+1?", "response": "\\boxed{2}", "label": "2"})[:2] == (200, 1.0)


def test_a_grading_that_hoards_memory_is_refused(serving):
    status, reply, _ = _call(serving(hoard), "POST", "/reward", {"response": "x"})
    assert status == 422 and "MiB" in reply["error"], reply

"""Rule-based reward service for Miles' ``--rm-type remote_rm``, shared by every team.

Miles posts ``{"prompt", "response", "label"}`` (JSON) to ``--rm-url`` and reads the JSON reply as
the sample's reward. This server answers with Miles' own rule-based reward
(``miles.rollout.rm_hub.async_rm``) for the rule in ``RM_TYPE`` (deepscaler, dapo, math, f1, ...),
so rewards are the same as computed in-process, but run on their own (Spot-tolerant) pool.
Stateless: any replica answers any request; ``GET /health`` is the probe.

A response is model output and every team sends them, so no request and no team may hold the service:

- *Who is asking* is the port a request arrives on, one per caller (``REWARD_PORTS``, ``{"<caller>": port}``:
  the platform's namespace, then ``team <name>`` for each team): the platform's NetworkPolicies let only
  that team's namespace reach that port
  (``workloads.render.network_policies``), so a tenant cannot claim another's share by anything it sends.
- *Each team's share*: at most ``running`` of its gradings run at once (the replica's grading slots,
  ``grading_slots``, divided among the teams, at least one each) and ``waiting`` more wait in its own
  queue; the next is answered ``429`` at once, before its body is read. A team's requests wait only
  behind its own, so one team's flood does not delay another's gradings; the slots are sized from the
  container's own limits (cgroup v2 ``cpu.max`` and ``memory.max``), not the node's CPU count.
- *Each request*: a body over ``MAX_BODY_BYTES`` is answered ``413`` from its ``Content-Length`` alone
  (none: ``411``); the body is read only once a slot is held and parsed in the grading child, so a
  waiting request holds no memory of the server's and a large one no lock of its interpreter. Each grading
  runs in a child process (forked, so Miles is imported once) with ``GRADE_SECONDS`` of CPU and
  ``GRADE_MEMORY_BYTES`` of address space beyond what it inherits (``resource.setrlimit``), killed at
  ``GRADE_SECONDS`` of wall time: a crafted answer (``\\boxed{9**9**9}`` makes a symbolic grader evaluate
  a number of hundreds of millions of digits) is answered ``422`` with the reason.

Miles' ``remote_rm`` (radixark/miles 49cac7b5, rm_hub/__init__.py:19-28) raises on any such status for
that sample and does not retry; an honest run stays below ``running + waiting`` per replica
(``docs/design/shared-services.md``).
Standard library only, besides Miles in the child; runs in the Miles image, shipped as a ConfigMap.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

RM_TYPE = os.environ.get("RM_TYPE", "deepscaler")
PORT = int(os.environ.get("PORT", "8000"))
GRADE_SECONDS = 10
"""CPU seconds (RLIMIT_CPU) and wall seconds one grading may take."""
GRADE_MEMORY_BYTES = 2 * 1024 ** 3
"""Address space (RLIMIT_AS) one grading may add to what the child inherits."""
MAX_BODY = int(os.environ.get("MAX_BODY_BYTES", str(1024 ** 2)))
WAITING = int(os.environ.get("QUEUE_PER_TEAM", "1024"))
READ_SECONDS = 30
"""Longest a connection may take to send its request line, headers or body."""
CGROUP = Path("/sys/fs/cgroup")
FORK = multiprocessing.get_context("fork")

Grader = Callable[[dict], Any]


def sample_of(body: dict) -> SimpleNamespace:
    """The attributes Miles v0.1.0's async_rm reads: reward_spec (per-sample override, none here)
    and tokens (only for the deterministic_random rule)."""
    return SimpleNamespace(prompt=body.get("prompt"), response=body.get("response") or "",
                           label=body.get("label"), metadata=body.get("metadata") or {},
                           reward_spec=None, tokens=body.get("tokens") or [])


def miles_reward(body: dict) -> Any:
    """Miles' rule-based reward of one request (in the grading child)."""
    import asyncio

    from miles.rollout.rm_hub import async_rm
    return asyncio.run(async_rm(SimpleNamespace(rm_type=RM_TYPE, custom_rm_path=None), sample_of(body)))


# --- the container's limits ------------------------------------------------------------------

def cgroup_cpus(root: Path = CGROUP) -> int:
    """Whole CPUs the container may use: cgroup v2 ``cpu.max`` (``$MAX $PERIOD``, ``max`` for none;
    Linux Documentation/admin-guide/cgroup-v2.rst, "cpu.max"), which the kubelet sets from the CPU
    limit, and the CPUs the process may run on; at least one. ``os.cpu_count()`` is the node's."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cpus
    return cpus if quota == "max" else max(1, min(cpus, int(quota) // int(period)))


def cgroup_memory(root: Path = CGROUP) -> int | None:
    """Bytes the container may use (cgroup v2 ``memory.max``; None for ``max`` or no cgroup)."""
    try:
        value = (root / "memory.max").read_text().strip()
    except OSError:
        return None
    return None if value == "max" else int(value)


def grading_slots(cpus: int, memory: int | None, grade_memory: int = GRADE_MEMORY_BYTES) -> int:
    """Gradings one replica runs at once: one per CPU, no more than its memory holds at
    ``grade_memory`` each (a grading is CPU-bound: more would only share the CPUs); at least one."""
    return max(1, min(cpus, memory // grade_memory if memory else cpus))


# --- grading ---------------------------------------------------------------------------------

def _address_space() -> int:
    """Bytes of address space this process maps now (/proc/self/statm, first field, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _child(grade: Grader, raw: bytes, conn, seconds: int, memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))  # SIGXCPU, then SIGKILL
    limit = _address_space() + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        body = json.loads(raw)
    except ValueError:
        conn.send(("bad", "body is not JSON"))
        return
    try:
        conn.send(("ok", grade(body if isinstance(body, dict) else {})))
    except MemoryError:
        conn.send(("refused", f"grading needed more than {memory // 1024 ** 2} MiB"))
    except Exception as err:  # the grader's own failure: the sample's problem, not the server's
        conn.send(("refused", f"grading failed: {type(err).__name__}"))


def grade_bounded(grade: Grader, raw: bytes, seconds: int = GRADE_SECONDS,
                  memory: int = GRADE_MEMORY_BYTES) -> tuple[int, Any]:
    """(200, reward); (400, why) for a body that is not JSON; (422, why) when the grading ran out of
    time or memory or failed."""
    parent, child = FORK.Pipe(duplex=False)
    proc = FORK.Process(target=_child, args=(grade, raw, child, seconds, memory), daemon=True)
    proc.start()
    child.close()
    try:
        if parent.poll(seconds):
            status, value = parent.recv()
            return {"ok": 200, "bad": 400}.get(status, 422), value
        return 422, f"grading took more than {seconds} s"
    except EOFError:  # killed by RLIMIT_CPU or the kernel
        return 422, f"grading stopped by its limits ({seconds} s CPU, {memory // 1024 ** 2} MiB)"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()


# --- admission -------------------------------------------------------------------------------

class Share:
    """One team's share of a replica: ``running`` gradings at once, ``waiting`` more queued in
    arrival order (threading.Condition wakes its waiters first in, first out), the next refused."""

    def __init__(self, running: int, waiting: int):
        self.running, self.waiting = running, waiting
        self._slots = threading.Semaphore(running)
        self._lock = threading.Lock()
        self._held = {"requests": 0, "connections": 0}

    def _take(self, what: str, most: int) -> bool:
        with self._lock:
            if self._held[what] >= most:
                return False
            self._held[what] += 1
            return True

    def _give(self, what: str) -> None:
        with self._lock:
            self._held[what] -= 1

    def enter(self) -> bool:
        """Count one more request; False (count unchanged) when the team's queue is full."""
        return self._take("requests", self.running + self.waiting)

    def leave(self) -> None:
        self._give("requests")

    def connect(self) -> bool:
        """Count one more open connection; False when the team already holds twice as many as it may
        have requests (room for connections that are closing or sent their request to be refused)."""
        return self._take("connections", 2 * (self.running + self.waiting))

    def disconnect(self) -> None:
        self._give("connections")

    def __enter__(self) -> "Share":
        self._slots.acquire()
        return self

    def __exit__(self, *_: Any) -> None:
        self._slots.release()


@dataclass(frozen=True)
class Limits:
    seconds: int = GRADE_SECONDS
    memory: int = GRADE_MEMORY_BYTES
    max_body: int = MAX_BODY
    waiting: int = WAITING


def _json(status: int, value: Any) -> bytes:
    data = json.dumps(value).encode()
    head = (f"HTTP/1.1 {status} {BaseHTTPRequestHandler.responses[status][0]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n")
    return head.encode() + data


def handler(team: str, share: Share, grade: Grader, limits: Limits) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = READ_SECONDS

        def _reply(self, status: int, value: Any) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self, status: int, why: str) -> None:
            self.close_connection = True  # the body, if any, is not read
            self._reply(status, {"error": why, "caller": team})

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                self._reply(200, {"status": "ok", "rmType": RM_TYPE})
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/reward":
                self._refuse(404, "not found")
                return
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self._refuse(411, "a Content-Length is required")
                return
            if int(length) > limits.max_body:
                self._refuse(413, f"body of {length} bytes is over this service's {limits.max_body}")
                return
            if not share.enter():
                self._refuse(429, f"{team} already has {share.running} gradings running and {share.waiting} "
                                  f"waiting on this replica; retry later")
                return
            try:
                with share:
                    raw = self.rfile.read(int(length))
                    status, value = grade_bounded(grade, raw, limits.seconds, limits.memory)
            finally:
                share.leave()
            self._reply(status, value if status == 200 else {"error": value})

        def log_message(self, *_: Any) -> None:  # one line per request is too much at rollout rates
            pass

    return Handler


class TeamServer(ThreadingHTTPServer):
    """One team's port: a connection beyond what the team may have open is answered ``429`` and
    closed by the accepting thread, so a flood of idle connections costs no thread."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], team: str, share: Share, grade: Grader, limits: Limits):
        self.team, self.share = team, share
        super().__init__(address, handler(team, share, grade, limits))

    def process_request(self, request, client_address) -> None:
        if not self.share.connect():
            try:
                request.sendall(_json(429, {"error": f"{self.team} has too many connections open", "caller": self.team}))
            finally:
                self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.share.disconnect()


def team_ports() -> dict[str, int]:
    """``REWARD_PORTS`` (JSON ``{"<caller>": port}``, from the stack), else one caller on ``PORT``."""
    raw = os.environ.get("REWARD_PORTS")
    return {k: int(v) for k, v in json.loads(raw).items()} if raw else {"default": PORT}


def servers(grade: Grader = miles_reward, host: str = "0.0.0.0", ports: dict[str, int] | None = None,
            limits: Limits = Limits(), slots: int | None = None) -> list[TeamServer]:
    """One server per team, bound but not yet serving (``serve_forever``); ``slots`` (default: the
    container's, ``grading_slots``) shared out among the teams, at least one each."""
    ports = team_ports() if ports is None else ports
    slots = grading_slots(cgroup_cpus(), cgroup_memory(), limits.memory) if slots is None else slots
    running = max(1, slots // len(ports))
    return [TeamServer((host, port), team, Share(running, limits.waiting), grade, limits)
            for team, port in ports.items()]


def main() -> None:
    threading.stack_size(512 * 1024)  # a waiting request's thread holds little; the default reserves 8 MiB
    *rest, last = servers()
    for s in rest:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    last.serve_forever()


if __name__ == "__main__":
    main()

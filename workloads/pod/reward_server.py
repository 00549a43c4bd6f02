"""Rule-based reward service for Miles' ``--rm-type remote_rm``.

Miles posts ``{"prompt", "response", "label"}`` (JSON) to ``--rm-url`` and reads the JSON reply as
the sample's reward. This server answers with Miles' own rule-based reward
(``miles.rollout.rm_hub.async_rm``) for the rule in ``RM_TYPE`` (deepscaler, dapo, math, f1, ...),
so rewards are the same as computed in-process, but run on their own (Spot-tolerant) pool.
Stateless: any replica answers any request; ``GET /health`` is the probe.

The service is shared by every team, and a response is model output: one request must not hold it.
A rule's grader may run for minutes on a crafted answer (``\\boxed{9**9**9}`` makes a symbolic grader
evaluate a number with hundreds of millions of digits). So each request is graded in a child process
(forked, so Miles is imported once) with ``GRADE_SECONDS`` of CPU and ``GRADE_MEMORY_BYTES`` of address
space beyond what it inherits (``resource.setrlimit`` in the child), killed at ``GRADE_SECONDS`` of wall
time; a grading that does not finish is answered ``422`` with the reason and the server keeps serving
(Miles v0.1.0's ``remote_rm`` raises on that status for that one sample). At most ``WORKERS`` gradings
run at once; the threads that answer ``/health`` never wait for one.

Standard library only, besides Miles in the child; runs in the Miles image, shipped as a ConfigMap.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, Callable

RM_TYPE = os.environ.get("RM_TYPE", "deepscaler")
PORT = int(os.environ.get("PORT", "8000"))
GRADE_SECONDS = 10
"""CPU seconds (RLIMIT_CPU) and wall seconds one grading may take."""
GRADE_MEMORY_BYTES = 2 * 1024 ** 3
"""Address space (RLIMIT_AS) one grading may add to what the child inherits."""
MAX_BODY = 64 * 1024 ** 2
WORKERS = os.cpu_count() or 1
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


def _address_space() -> int:
    """Bytes of address space this process maps now (/proc/self/statm, first field, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _child(grade: Grader, body: dict, conn, seconds: int, memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))  # SIGXCPU, then SIGKILL
    limit = _address_space() + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        conn.send(("ok", grade(body)))
    except MemoryError:
        conn.send(("refused", f"grading needed more than {memory // 1024 ** 2} MiB"))
    except Exception as err:  # the grader's own failure: the sample's problem, not the server's
        conn.send(("refused", f"grading failed: {type(err).__name__}"))


def grade_bounded(grade: Grader, body: dict, seconds: int = GRADE_SECONDS,
                  memory: int = GRADE_MEMORY_BYTES) -> tuple[bool, Any]:
    """(True, reward), or (False, why) when the grading ran out of time or memory or failed."""
    parent, child = FORK.Pipe(duplex=False)
    proc = FORK.Process(target=_child, args=(grade, body, child, seconds, memory), daemon=True)
    proc.start()
    child.close()
    try:
        if parent.poll(seconds):
            status, value = parent.recv()
            return status == "ok", value
        return False, f"grading took more than {seconds} s"
    except EOFError:  # killed by RLIMIT_CPU or the kernel
        return False, f"grading stopped by its limits ({seconds} s CPU, {memory // 1024 ** 2} MiB)"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()


def handler(grade: Grader, seconds: int, memory: int, workers: int) -> type[BaseHTTPRequestHandler]:
    slots = threading.BoundedSemaphore(workers)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, status: int, value: Any) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                self._reply(200, {"status": "ok", "rmType": RM_TYPE})
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/reward":
                self._reply(404, {"error": "not found"})
                return
            size = int(self.headers.get("Content-Length") or 0)
            if size > MAX_BODY:
                self.close_connection = True
                self._reply(413, {"error": f"body over {MAX_BODY} bytes"})
                return
            try:
                body = json.loads(self.rfile.read(size))
            except ValueError:
                self._reply(400, {"error": "body is not JSON"})
                return
            with slots:
                ok, value = grade_bounded(grade, body if isinstance(body, dict) else {}, seconds, memory)
            self._reply(200, value) if ok else self._reply(422, {"error": value})

        def log_message(self, *_: Any) -> None:  # one line per request is too much at rollout rates
            pass

    return Handler


def server(grade: Grader = miles_reward, host: str = "0.0.0.0", port: int = PORT, seconds: int = GRADE_SECONDS,
           memory: int = GRADE_MEMORY_BYTES, workers: int = WORKERS) -> ThreadingHTTPServer:
    """The reward server, bound but not yet serving (``serve_forever``)."""
    httpd = ThreadingHTTPServer((host, port), handler(grade, seconds, memory, workers))
    httpd.daemon_threads = True
    return httpd


def main() -> None:
    server().serve_forever()


if __name__ == "__main__":
    main()

"""The control plane's processes: started by the test session on 127.0.0.1, logged to files, stopped by it.

A process that exits while the session waits for it fails the wait with the tail of its log, so a
component that cannot start says why instead of leaving a test to time out."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable


_GIVEN: set[int] = set()


def free_port() -> int:
    """A port free now and not handed out before in this process (a port is bound only when its server
    starts, so two calls in a row could otherwise get the same one)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


class Process:
    def __init__(self, name: str, args: list[str], logs: Path):
        self.name, self.args = name, args
        self.log = logs / f"{name}.log"
        logs.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def wait_for(what: str, ready: Callable[[], bool], process: Process | None = None, timeout: float = 120) -> None:
    """Poll ``ready`` until it holds; fail with the process's log when it dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and not process.alive():
            raise RuntimeError(f"{process.name} exited ({process.popen.returncode}) before {what}:\n{process.tail()}")
        try:
            if ready():
                return
        except Exception:  # not up yet: connection refused, 5xx, a CRD not yet served
            pass
        time.sleep(0.25)
    log = f":\n{process.tail()}" if process else ""
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s{log}")


def https_ok(url: str, ca: Path, token: str | None = None) -> bool:
    """GET ``url`` answered 200 (TLS verified against ``ca``)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=str(ca)), timeout=5) as r:
        return r.status == 200


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200

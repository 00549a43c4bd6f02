"""The burn-in's EFA step on one node: which EFA devices the pod holds, and a loopback between them
(standard library only: it ships to the node beside ``agent.py``).

Devices: the EFA device plugin gives the pod its devices as ``/dev/infiniband/uverbsN`` character
devices (``DEVICE_DIR``); libibverbs lists only the uverbs devices whose character device it can stat
there (rdma-core v64.0 ``libibverbs/init.c`` ``setup_sysfs_dev``, ``try_access_device`` on
``RDMA_CDEV_DIR``), and libfabric's efa provider builds its device list from that
(libfabric v2.6.0 ``prov/efa/src/efa_device.c`` ``efa_device_list_initialize``). So the fault classes:
- ``fi_info`` missing, or no efa provider listed at all: the image (libfabric without efa, no rdma-core)
  or a device failing to open, which makes the provider drop every device (``efa_device_list_initialize``
  fails on any device it cannot construct): software, never replaced;
- fewer devices mounted than the pod requested: the allocation, not the node (software);
- libfabric lists some devices but fewer than were mounted: the node's hardware.

Loopback: ``fi_pingpong`` (libfabric v2.6.0 ``util/pingpong.c``, man/fi_pingpong.1.md: ``-p efa -e rdm``,
``-d`` on both sides) from each device to the next one of the node, shared memory off
(``FI_EFA_ENABLE_SHM_TRANSFER=0``, fi_efa(7)) so the bytes cross the devices: once with ``-c`` ("data
integrity checks at the receiver"; a mismatch prints ``Error at iteration=`` and fails the run,
``pp_check_buf``), a hardware fault; once without it for the rate (``-c`` "will degrade performance"),
whose MB/s (bytes over microseconds, ``show_perf``) is held to the floor the plan gives: a measured floor
(``burnIn.efaLoopbackFloors``) fails the node below it, the derived one only warns. Never ``-v``: that is
"output debugging (warning: highly verbose)".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

try:  # in the pod: the ConfigMap puts it beside this file
    import preflight
except ImportError:
    from workloads.pod import preflight

DEVICE_DIR = Path("/dev/infiniband")
"""Where the device plugin's EFA devices appear in the pod (rdma-core's ``RDMA_CDEV_DIR``)."""
PORT = 47592
"""fi_pingpong's default control port (fi_pingpong(1), ``-B``/``-P``)."""
ARGS = ["-p", "efa", "-e", "rdm", "-S", "4194304"]
"""4 MiB messages (below fi_pingpong's 6 MiB ``PP_MAX_DATA_MSG``): the rate is the device's, not the
per-message cost's (``catalog.EFA_LOOPBACK_FLOOR_SHARE``)."""
RUNS = (("check", ["-c", "-I", "10"]), ("rate", ["-I", "100"]))
ENV = {"FI_EFA_ENABLE_SHM_TRANSFER": "0"}
DATA_ERROR = "Error at iteration="
"""What fi_pingpong prints when ``-c`` finds a received byte that differs (``pp_check_buf``)."""
Found = tuple[list[str], dict, list[str]]


FI_INFO_SECONDS = 60
"""How long ``fi_info`` may take to list the providers; past it the census lists none (software)."""


def mounted() -> list[str]:
    """The uverbs devices the device plugin put into the pod."""
    return sorted(p.name for p in DEVICE_DIR.glob("uverbs*")) if DEVICE_DIR.is_dir() else []


def listed() -> tuple[list[str] | None, str]:
    """(libfabric's EFA RDM domains, or None when ``fi_info`` is not in the image; what it said when it
    listed none: ``fi_getinfo: -61 (No data available)`` and exit 61, util/info.c ``run``)."""
    if shutil.which("fi_info") is None:
        return None, ""
    try:
        done = subprocess.run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"], capture_output=True, text=True,
                              timeout=FI_INFO_SECONDS)
    except subprocess.TimeoutExpired:
        return [], f"fi_info gave no answer within {FI_INFO_SECONDS} s"
    if done.returncode:
        return [], (done.stderr or done.stdout).strip()[-200:]
    return sorted(preflight.efa_domains(done.stdout)), ""


def census(requested: int) -> tuple[list[str], str | None, bool]:
    """(the devices to test, the problem, whether it is the node's hardware)."""
    devices, said = listed()
    have = mounted()
    if devices is None:
        return [], "EFA: fi_info not found in the image", False
    if len(have) < requested:
        return [], f"EFA: {len(have)} EFA devices mounted into the pod, {requested} requested", False
    if not devices:
        return [], f"EFA: libfabric lists no efa provider ({len(have)} EFA devices mounted into the pod): {said}", False
    if len(devices) < len(have):
        return [], f"EFA: libfabric lists {len(devices)} of the {len(have)} EFA devices mounted into the pod", True
    return devices, None, False


def rate(output: str) -> float | None:
    """MB/sec of fi_pingpong's result line (the column under its ``MB/sec`` header)."""
    lines = [ln.split() for ln in output.splitlines() if ln.strip()]
    for i, cols in enumerate(lines):
        if "MB/sec" in cols and i + 1 < len(lines) and len(lines[i + 1]) == len(cols):
            try:
                return float(lines[i + 1][cols.index("MB/sec")])
            except ValueError:
                return None
    return None


def serve(device: str, extra: list[str], port: int = PORT) -> subprocess.Popen:
    """The server side of one exchange (raises FileNotFoundError without fi_pingpong)."""
    return subprocess.Popen(["fi_pingpong", *ARGS, *extra, "-d", device, "-B", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **ENV})


def connect(device: str, address: str, extra: list[str], timeout: float, port: int = PORT) -> subprocess.CompletedProcess:
    return subprocess.run(["fi_pingpong", *ARGS, *extra, "-d", device, "-P", str(port), address],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **ENV})


def judge(pair: str, said: str, served: str, codes: tuple[int, int]) -> tuple[str | None, bool]:
    """(problem, data corrupted) of one exchange from both sides' output and exit codes."""
    if DATA_ERROR in said or DATA_ERROR in served:
        line = next(ln for ln in (said + "\n" + served).splitlines() if DATA_ERROR in ln)
        return f"{pair}: data corrupted in transit ({line.strip()})", True
    if any(codes):
        return f"{pair}: fi_pingpong failed (client {codes[0]}, server {codes[1]}): {said[-200:]}", False
    return None, False


def loopback(server_dev: str, client_dev: str, timeout: float, extra: list[str]) -> tuple[str | None, bool, float | None]:
    """One fi_pingpong between two of this node's EFA devices: (problem, data corrupted, MB/s). The
    server's output is read to its end (it never blocks on a full pipe) and judged with the client's."""
    pair = f"EFA {server_dev} <- {client_dev}"
    try:
        server = serve(server_dev, extra)
    except FileNotFoundError:
        return "EFA: fi_pingpong not found in the image", False, None
    try:
        time.sleep(1)  # the server binds its control port before the client connects
        client = connect(client_dev, "127.0.0.1", extra, timeout)
        served, _ = server.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.kill()
        server.communicate()
        return f"{pair}: no answer within {timeout:.0f} s", False, None
    problem, corrupted = judge(pair, client.stdout + client.stderr, served, (client.returncode, server.returncode))
    return problem, corrupted, None if problem else rate(client.stdout)


def floor_text(mbs: float, floor: float, advisory: bool) -> str:
    return f"{mbs:g} MB/s < floor {floor:g}{' (derived, not measured: a warning)' if advisory else ''}"


def step(plan: dict, left: float) -> Found:
    """The EFA step: the census, then each device's loopback to the next, checked and timed."""
    devices, problem, hardware = census(plan["efaDevices"])
    if problem:
        return [problem], {}, [problem] if hardware else []
    if len(devices) < 2:
        return [f"EFA: {len(devices)} EFA device(s) in the pod, a loopback needs two"], {}, []
    deadline = time.monotonic() + left
    problems, corrupt, warnings, rates, bad = [], [], [], {}, set()
    floor, advisory = plan.get("loopbackFloorMBs") or 0, plan.get("loopbackFloorAdvisory", True)
    for i, dev in enumerate(devices):
        peer = devices[(i + 1) % len(devices)]
        for what, extra in RUNS:
            problem, corrupted, mbs = loopback(dev, peer, max(1.0, min(30.0, deadline - time.monotonic())), extra)
            if problem:
                problems.append(problem)
                corrupt += [problem] if corrupted else []
                bad.add(dev)
                break
            if what == "rate" and mbs is None:
                problems.append(f"EFA {dev} <- {peer}: fi_pingpong printed no MB/sec")
            elif what == "rate":
                rates[dev] = mbs
                if mbs < floor:
                    (warnings if advisory else problems).append(f"EFA {dev} <- {peer}: {floor_text(mbs, floor, advisory)}")
    figures = {"efaLoopbackPairs": len(devices) - len(bad), **({"warnings": warnings} if warnings else {})}
    if rates:
        figures["efaLoopbackMBsMin"] = min(rates.values())
    return problems, figures, corrupt

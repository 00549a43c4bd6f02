"""Preflight of a GPU pod, run before Ray starts: does this node give the pod what its
configuration assumes? Standard library only (it runs in the workload image before anything else).

Each check returns ``None`` or one line naming what is missing; the first failure ends the run
with exit code 1 and that line, so the pod stays failed (never Running on a degraded fabric) and
its node is named (``NODE_NAME`` from the downward API) to be cordoned. Checks:

- GPUs: ``nvidia-smi -L`` lists the expected count;
- EFA: ``fi_info -p efa -t FI_EP_RDM`` lists as many EFA domains as the pod requested devices
  (libfabric's own view: a device the plugin allocated but libfabric cannot open counts missing);
- aws-ofi-nccl: the plugin library NCCL loads for ``NCCL_NET_PLUGIN=ofi`` (``libnccl-net-ofi.so``,
  or ``libnccl-net.so``) opens, and a one-rank NCCL communicator on this GPU reports the network it
  chose (``NCCL_DEBUG=INFO``: ``Using network ...``): Libfabric (NET/OFI), not Socket;
- NCCL: the library's version (``ncclGetVersion``) is at least the one the run needs;
- DeepEP V2 over GIN: ``/dev/gdrdrv`` exists (GDRCopy's kernel module on the host);
- memlock unlimited, 2-MiB huge pages available, ``/dev/shm`` at least the expected size.

Usage: ``python3 preflight.py --gpus 8 --efa 16 --gin --nccl 2.31.2 --shm-gib 256 --hugepages-mi 5120``
(``--efa 0`` skips the EFA and plugin checks on pools without EFA).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import resource
import shutil
import subprocess
import sys
from typing import Callable

OFI_PLUGINS = ("libnccl-net-ofi.so",)
"""What NCCL loads for NCCL_NET_PLUGIN=ofi (NCCL 2.28 plugin_open.cc: ``ofi``, then ``libnccl-net-ofi.so``)."""
NCCL_LIBRARY = "libnccl.so.2"


def run(cmd: list[str]) -> str | None:
    """stdout of ``cmd``, or None when it is not installed or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return done.stdout if done.returncode == 0 else None


def count_gpus(nvidia_smi_l: str) -> int:
    return len(re.findall(r"^GPU \d+: ", nvidia_smi_l, re.M))


def efa_domains(fi_info: str) -> set[str]:
    """Distinct EFA RDM domains in ``fi_info -p efa -t FI_EP_RDM`` output (one per EFA device)."""
    return set(re.findall(r"^\s*domain:\s*(\S+-rdm)\s*$", fi_info, re.M))


def nccl_version(code: int) -> tuple[int, int, int]:
    """ncclGetVersion's integer: major*10000 + minor*100 + patch since NCCL 2.9."""
    return code // 10000, code // 100 % 100, code % 100


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def check_gpus(want: int) -> str | None:
    out = run(["nvidia-smi", "-L"])
    if out is None:
        return "GPU: nvidia-smi not found or failed (no NVIDIA driver in the pod?)"
    have = count_gpus(out)
    return None if have == want else f"GPU: {have} visible, {want} expected"


def check_efa(want: int) -> str | None:
    out = run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
    if out is None:
        return (f"EFA: fi_info -p efa finds no EFA provider ({want} devices expected): no EFA device in the pod "
                f"or no libfabric with the efa provider in the image")
    have = len(efa_domains(out))
    return None if have == want else f"EFA: libfabric sees {have} EFA devices, {want} requested"


def _dlopen(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return None


def check_ofi_plugin() -> str | None:
    if os.environ.get("NCCL_NET_PLUGIN", "ofi") != "ofi":
        return f"NCCL: NCCL_NET_PLUGIN={os.environ['NCCL_NET_PLUGIN']!r}; the short name 'ofi' is required"
    if _dlopen(OFI_PLUGINS) is None:
        return f"NCCL: aws-ofi-nccl ({' or '.join(OFI_PLUGINS)}) does not load: NCCL would fall back to sockets"
    return None


NET_LINE = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.M)
NCCL_PROBE = (
    "import os, torch, torch.distributed as dist\n"
    "dist.init_process_group('nccl', init_method='tcp://127.0.0.1:' + os.environ['PREFLIGHT_PORT'], rank=0, world_size=1)\n"
    "x = torch.ones(1, device='cuda'); dist.all_reduce(x); torch.cuda.synchronize(); dist.destroy_process_group()\n")


def nccl_network(log: str) -> str | None:
    """The network NCCL picked, from its INFO log (e.g. ``Libfabric``, ``AWS Libfabric``, ``Socket``, ``IB``)."""
    found = NET_LINE.findall(log)
    return found[-1] if found else None


def check_nccl_network() -> str | None:
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "PREFLIGHT_PORT": "29555"}
    env.pop("NCCL_DEBUG_FILE", None)  # the log must reach this process
    try:
        done = subprocess.run([sys.executable, "-c", NCCL_PROBE], capture_output=True, text=True, timeout=300,
                              env=env)
    except subprocess.TimeoutExpired:
        return "NCCL: a one-rank communicator did not start within 300 s"
    net = nccl_network(done.stdout + done.stderr)
    if net is None:
        return f"NCCL: a one-rank communicator did not report its network (exit {done.returncode})"
    # aws-ofi-nccl 1.21 names itself "Libfabric" ("AWS Libfabric" / "OFI" when NCCL_NET asks for those).
    ofi = "libfabric" in net.lower() or net.strip() == "OFI"
    return None if ofi else f"NCCL: uses network {net!r}, not NET/OFI (aws-ofi-nccl over EFA)"


def check_nccl(want: str) -> str | None:
    try:
        lib = ctypes.CDLL(NCCL_LIBRARY)
    except OSError:
        return f"NCCL: {NCCL_LIBRARY} not found"
    code = ctypes.c_int()
    if lib.ncclGetVersion(ctypes.byref(code)) != 0:
        return "NCCL: ncclGetVersion failed"
    have = nccl_version(code.value)
    need = parse_version(want)
    return None if have[:len(need)] >= need else f"NCCL: {'.'.join(map(str, have))} found, {want} or newer needed"


def check_gdrdrv() -> str | None:
    return None if os.path.exists("/dev/gdrdrv") else (
        "GDRCopy: /dev/gdrdrv missing (DeepEP V2 GIN needs the gdrdrv kernel module on the host)")


def check_memlock() -> str | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else f"memlock: limit {soft} bytes, unlimited needed for RDMA"


def hugepages_free_mi(meminfo: str) -> int:
    free = int(re.search(r"^HugePages_Free:\s+(\d+)", meminfo, re.M).group(1))
    size_kb = int(re.search(r"^Hugepagesize:\s+(\d+) kB", meminfo, re.M).group(1))
    return free * size_kb // 1024


def check_hugepages(want_mi: int) -> str | None:
    with open("/proc/meminfo") as f:
        have = hugepages_free_mi(f.read())
    return None if have >= want_mi else f"hugepages: {have} MiB of 2-MiB pages free, {want_mi} MiB requested"


def check_shm(want_gib: int) -> str | None:
    st = os.statvfs("/dev/shm")
    have = st.f_frsize * st.f_blocks / 1024 ** 3
    return None if have >= want_gib * 0.99 else f"/dev/shm: {have:.1f} GiB, {want_gib} GiB expected"


def checks(args: argparse.Namespace) -> list[tuple[str, Callable[[], str | None]]]:
    out = [("gpus", lambda: check_gpus(args.gpus)), ("memlock", check_memlock),
           ("shm", lambda: check_shm(args.shm_gib))]
    if args.hugepages_mi:
        out.append(("hugepages", lambda: check_hugepages(args.hugepages_mi)))
    if args.efa:
        out += [("efa", lambda: check_efa(args.efa)), ("ofi", check_ofi_plugin), ("nccl-net", check_nccl_network)]
    if args.nccl:
        out.append(("nccl", lambda: check_nccl(args.nccl)))
    if args.gin:
        out.append(("gdrdrv", check_gdrdrv))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as ``checks`` takes it (the GPU burn-in, ``nodes/agent.py``, parses with it too)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--efa", type=int, default=0)
    parser.add_argument("--nccl", default="", help="minimum NCCL version (checked only when given)")
    parser.add_argument("--gin", action="store_true", help="DeepEP V2 over NCCL GIN: require /dev/gdrdrv")
    parser.add_argument("--shm-gib", type=int, default=0)
    parser.add_argument("--hugepages-mi", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    node = os.environ.get("NODE_NAME", "this node")
    for name, check in checks(args):
        problem = check()
        if problem:
            print(f"preflight FAILED on {node}: {problem}", file=sys.stderr)
            return 1
        print(f"preflight ok: {name}")
    print(f"preflight passed on {node}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

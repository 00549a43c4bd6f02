"""Preflight of a GPU pod, run before Ray starts: does this node give the pod what its
configuration and its software profile assume? Standard library only (it runs in the workload
image before anything else; torch is asked in a child process).

Each check returns ``None`` or one line naming what is missing; the first failure ends the run
with exit code 1 and that line, so the pod stays failed (never Running on a degraded fabric) and
its node is named (``NODE_NAME`` from the downward API) to be cordoned. Checks:

- GPUs: ``nvidia-smi -L`` lists the expected count;
- EFA: ``fi_info -p efa -t FI_EP_RDM`` lists as many EFA domains as the pod requested devices
  (libfabric's own view: a device the plugin allocated but libfabric cannot open counts missing);
- aws-ofi-nccl: the plugin NCCL loads for ``NCCL_NET_PLUGIN`` (the short name ``ofi``, or a full path,
  which every pinned NCCL dlopens as given first: NVIDIA/nccl v2.27.5-1 src/plugin/plugin_open.cc:63-67,
  v2.28.9-1 :69-75, v2.30.7-1 :85-90) opens, and a one-rank NCCL communicator on this GPU reports, in
  NCCL's own INFO lines, the network it chose and, for DeepEP V2, the GIN plugin and its type
  (``nccl_init``): Libfabric (NET/OFI), not Socket (with ``--fabric sockets`` the reverse), and the GIN
  type the pod's ``NCCL_GIN_TYPE`` names;
- NCCL: the library torch maps, as it reports itself (``ncclGetVersion`` through the image's
  ``LOADED_NCCL``; not ``torch.cuda.nccl.version()``, torch's compile-time figure), is at least the profile's;
- DeepEP V2 over GIN: ``/dev/gdrdrv`` opens (GDRCopy's kernel module on the host, passed into the
  pod), the plugin exports a GIN interface; GPU-initiated (``--gin gpu``): ``NCCL_GIN_TYPE=5``,
  ``NCCL_SYM_GIN_KERNELS_ENABLE=0`` and the driver's ``PeerMappingOverride=1``;
- SGLang (rollout pods, ``--sglang-engine``): the image's SGLang resolves the engine's ``ServerArgs``
  from the ``--sglang-*`` flags Miles will pass (``sglang_server_args``), in a child process on this GPU,
  so a refusal (e.g. DeepEP V2's dispatch budget) costs seconds, not a model load;
- memlock: unlimited, or ``CAP_IPC_LOCK`` (the kernel skips RLIMIT_MEMLOCK for a task that has it:
  mm/mlock.c ``can_do_mlock``, and ib_umem pins against it only without it); 2-MiB huge pages
  available; ``/dev/shm`` at least the expected size.

- boot (``--boot-record``, Ray pods only): the node has not rebooted since this pod's preflight first
  passed on it. A reboot recreates the pod's sandbox, and the kubelet runs the init containers again
  from the first (kubernetes v1.35.3 pkg/kubelet/kuberuntime/kuberuntime_manager.go:1150-1204), while
  the pod's disk ``emptyDir`` keeps the boot id recorded there (pkg/volume/emptydir/empty_dir.go:246-256:
  a volume already set up is kept). Refused, the pod stays not Ready, so the run's disruption budget
  (``unhealthyPodEvictionPolicy: AlwaysAllow``) lets the burn-in controller evict it and the node is
  re-tested before a run lands on it again (``nodes.retest``). A pod with no record yet (``--min-uptime``,
  where the burn-in runs) is refused on a node up for less than ``PASSED_UPTIME_SECONDS``: the burn-in
  passes no node sooner after its boot (``nodes.agent``), so such a node rebooted after its last pass and
  the pod is a new one (deleted with the node unreachable, or refused re-admission after the reboot, and
  made again by KubeRay), whose empty volume would otherwise pass it unchecked.

Usage: ``python3 preflight.py --gpus 8 --efa 16 --nccl 2.31.2 --gin gpu --shm-gib 256 --hugepages-mi 5120``
(``--efa 0`` skips the EFA and plugin checks on pools without EFA).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

OFI_PLUGINS = ("libnccl-net-ofi.so",)
"""What NCCL loads for NCCL_NET_PLUGIN=ofi (NCCL 2.28 plugin_open.cc: ``ofi``, then ``libnccl-net-ofi.so``)."""


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


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def check_gpus(want: int) -> str | None:
    out = run(["nvidia-smi", "-L"])
    if out is None:
        return "GPU: nvidia-smi not found or failed (no NVIDIA driver in the pod?)"
    have = count_gpus(out)
    return None if have == want else f"GPU: {have} visible, {want} expected"


BOOT_ID = "/proc/sys/kernel/random/boot_id"
"""The kernel's random id of this boot (proc(5)), the kubelet's ``status.nodeInfo.bootID``."""


UPTIME = "/proc/uptime"
"""Seconds since this boot, first of its two numbers (proc(5))."""
PASSED_UPTIME_SECONDS = 900
"""The burn-in passes no node that has been up for less (``nodes.agent`` holds its pass until then), so a run
pod that finds a node up for less, with no boot of its own recorded, follows a reboot the burn-in did not see.
An allowance, not a measurement: longer than a GPU node takes from its kernel's start to a run pod's
preflight (kubelet, the device plugins, an image already on the node), far shorter than a first burn-in
(its image pulls alone are allowed 20 minutes, ``nodes.burn_in.PULL_SECONDS``)."""


def check_boot(record: str, boot_id: str = BOOT_ID, min_uptime: float = 0, uptime: str = UPTIME) -> str | None:
    """The first run records this boot's id in ``record`` (the pod's own volume); a later run on another
    boot is refused: the node rebooted under the pod and has not been checked since. With ``min_uptime``,
    a first run on a node up for less is refused, and records nothing (its next run is refused again)."""
    now = Path(boot_id).read_text().strip()
    path = Path(record)
    try:
        first = path.read_text().strip()
    except FileNotFoundError:
        up = float(Path(uptime).read_text().split()[0]) if min_uptime else 0.0
        if up < min_uptime:
            return (f"reboot: the node has been up {up:.0f} s, less than any burn-in pass ({min_uptime:.0f} s), "
                    f"and this pod holds no boot of its own: the node rebooted since it was checked and is "
                    f"checked again before a run lands there")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(now + "\n")
        return None
    return None if first == now else (f"reboot: the node rebooted under this pod (boot {first[:8]} -> {now[:8]}): "
                                      f"the pod leaves it and the node is checked again before a run lands there")


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


LOADED_NCCL = "/usr/local/lib/rl-platform/loaded_nccl.py"  # workloads/image/loaded_nccl.py, in both images


def loaded_nccl() -> str | None:
    """The NCCL torch maps, ``major.minor.patch``, read in a child with torch; None when it cannot be read."""
    out = run([sys.executable, LOADED_NCCL])
    return out.strip() if out and re.fullmatch(r"\d+\.\d+\.\d+", out.strip()) else None


def check_ofi_plugin() -> str | None:
    name = os.environ.get("NCCL_NET_PLUGIN", "ofi")
    if name != "ofi" and not os.path.isabs(name):
        return f"NCCL: NCCL_NET_PLUGIN={name!r}; allowed: 'ofi' or the plugin's full path"
    if _dlopen((name,) if os.path.isabs(name) else OFI_PLUGINS) is None:
        return f"NCCL: aws-ofi-nccl ({name if os.path.isabs(name) else ' or '.join(OFI_PLUGINS)}) does not load: NCCL would fall back to sockets"
    return None


NET_LINE = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.M)
"""NVIDIA/nccl src/init.cc ``INFO(NCCL_INIT, "Using network %s", ...)`` (v2.27.5-1 :346, v2.30.7-1 :486);
the line prefix is src/debug.cc's ``"[%d] NCCL INFO %s"`` (v2.30.7-1 :354)."""
NET_PLUGIN_LINE = re.compile(r"NCCL INFO Assigned NET plugin (.+?) to comm\s*$", re.M)
"""src/plugin/net.cc ``"Assigned NET plugin %s to comm"`` (v2.27.5-1 :174, v2.30.7-1 :228)."""
GIN_LINE = re.compile(r"NCCL INFO GIN/Plugin: Assigned plugin (.+?) type (\d+) to comm\s*$", re.M)
"""src/plugin/gin.cc ``"GIN/Plugin: Assigned plugin %s type %d to comm"`` (v2.30.7-1 :158; 2.31.0a7 db761c88
:160, the nearest to 2.31.2 readable here), logged at communicator init (v2.30.7-1 init.cc:477 ``ncclGinInit``
before :486). NCCL 2.28 logs ``"Assigned GIN plugin %s to comm"`` without the type (v2.28.9-1 net.cc:249);
GIN needs the DeepEP V2 profile's NCCL 2.31.2 here.
A plugin whose type differs from ``NCCL_GIN_TYPE`` is skipped (gin.cc:145), so a missing line means GIN
is not there at all."""
NCCL_PROBE = (
    "import os, torch, torch.distributed as dist\n"
    "dist.init_process_group('nccl', init_method='tcp://127.0.0.1:' + os.environ['PREFLIGHT_PORT'], rank=0, world_size=1)\n"
    "x = torch.ones(1, device='cuda'); dist.all_reduce(x); torch.cuda.synchronize(); dist.destroy_process_group()\n")


def nccl_network(log: str) -> str | None:
    """The network NCCL picked, from its INFO log (e.g. ``Libfabric``, ``AWS Libfabric``, ``Socket``, ``IB``)."""
    found = NET_LINE.findall(log)
    return found[-1] if found else None


def nccl_gin(log: str) -> tuple[str, int] | None:
    """(plugin, GIN type) NCCL assigned to the communicator, from its INFO log; None without GIN."""
    found = GIN_LINE.findall(log)
    return (found[-1][0], int(found[-1][1])) if found else None


def check_gin_type(log: str, want: str) -> str | None:
    """GIN as the profile names it (``NCCL_GIN_TYPE``: 2 proxy, 5 EFA GDA), not another type or none."""
    gin = nccl_gin(log)
    if gin is None:
        return f"GIN: NCCL assigned no GIN plugin (NCCL_GIN_TYPE={want} expected): DeepEP V2 cannot run across nodes"
    return None if str(gin[1]) == want else (
        f"GIN: NCCL assigned {gin[0]!r} type {gin[1]}, the profile needs type {want}")


def check_nccl_network(sockets: bool = False, gin_type: str | None = None) -> str | None:
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
    if sockets:
        return None if net.strip() == "Socket" else f"NCCL: uses network {net!r}, not Socket (fabric sockets)"
    # aws-ofi-nccl 1.21 names itself "Libfabric" ("AWS Libfabric" / "OFI" when NCCL_NET asks for those).
    ofi = "libfabric" in net.lower() or net.strip() == "OFI"
    if not ofi:
        plugin = NET_PLUGIN_LINE.findall(done.stdout + done.stderr)
        return (f"NCCL: uses network {net!r} (NET plugin {plugin[-1] if plugin else 'none assigned'!r}), "
                f"not NET/OFI (aws-ofi-nccl over EFA)")
    return check_gin_type(done.stdout + done.stderr, gin_type) if gin_type else None


def check_nccl(want: str, have: str | None) -> str | None:
    if have is None:
        return f"NCCL: {LOADED_NCCL} could not read the loaded NCCL (no torch with NCCL, or an older image)"
    need = parse_version(want)
    return None if parse_version(have)[:len(need)] >= need else f"NCCL: the loaded library is {have}, {want} or newer needed"


GIN_SYMBOL = "ncclGinPlugin_v14"
"""aws-ofi-nccl 1.21.1's EFA-GDA GIN table; builds without EFA-GDA export v11/v13 only (AWS's gate: awslabs/
awsome-distributed-ai@232e9b7 deepep-v2-benchmark/deepep.Dockerfile)."""


def check_gdrdrv() -> str | None:
    try:
        os.close(os.open("/dev/gdrdrv", os.O_RDWR))
        return None
    except OSError as err:
        return (f"GDRCopy: /dev/gdrdrv does not open ({err.strerror}): DeepEP V2 GIN needs the gdrdrv kernel "
                f"module on the host and the device in the pod")


def check_gin_plugin() -> str | None:
    name = os.environ.get("NCCL_NET_PLUGIN", "ofi")
    try:
        lib = ctypes.CDLL(name if os.path.isabs(name) else OFI_PLUGINS[0])
    except OSError:
        return "GIN: aws-ofi-nccl does not load"
    return None if hasattr(lib, GIN_SYMBOL) else f"GIN: aws-ofi-nccl exports no {GIN_SYMBOL} (>= 1.21.1 needed)"


def check_gda(params: str | None = None) -> str | None:
    """GPU-initiated EFA: NCCL's GIN type 5 with symmetric GIN kernels off, and the driver option."""
    for var, want in (("NCCL_GIN_TYPE", "5"), ("NCCL_SYM_GIN_KERNELS_ENABLE", "0")):
        if os.environ.get(var) != want:
            return f"GIN: {var}={os.environ.get(var)!r}, {want!r} needed for GPU-initiated EFA"
    if params is None:
        try:
            with open("/proc/driver/nvidia/params") as f:
                params = f.read()
        except OSError:
            return "GIN: /proc/driver/nvidia/params unreadable (is the NVIDIA driver loaded?)"
    return None if re.search(r"PeerMappingOverride=1", params) else (
        "GIN: the NVIDIA driver was loaded without PeerMappingOverride=1 (GPU-initiated EFA needs it)")


SGLANG_SKIPPED = ("model_path", "config", "trust_remote_code", "random_seed", "enable_memory_saver", "port", "nnodes",
                  "node_rank", "dist_init_addr", "gpu_id_step", "base_gpu_id", "nccl_port", "skip_server_warmup",
                  "enable_return_routed_experts", "enable_return_indexer_topk")
"""Miles 49cac7b5 sglang_utils/arguments.py ``_SKIPPED_SERVER_ARGS``: no ``--sglang-`` flag; Miles sets them."""


def sglang_flags(argv: list[str]) -> list[str]:
    """The ``--sglang-*`` flags of a Miles argv with their values."""
    out, take = [], False
    for tok in argv:
        take = tok.startswith("--sglang-") if tok.startswith("--") else take
        if take:
            out.append(tok)
    return out


def sglang_tokens(argv: list[str]) -> list[str]:
    """``sglang_flags`` without the prefix, as SGLang's own parser reads them."""
    return ["--" + t[len("--sglang-"):] if t.startswith("--sglang-") else t for t in sglang_flags(argv)]


def sglang_server_args(engine: dict, server_args_cls=None, device: str | None = None):
    """``ServerArgs`` as Miles 49cac7b5 builds it: SGLang's own ``add_cli_args`` under the ``--sglang-``
    prefix with parallel sizes under their short names (arguments.py:60-130), ``tp_size`` from
    ``--rollout-num-gpus-per-engine`` and DP > 1 only with DP attention (``validate_args``), then the fixed
    kwargs and every parsed field of ``sglang_engine.py:_compute_server_args`` (:711-739, :807-817), keys
    this SGLang lacks dropped. Slime v0.2.4 (bd217a63) builds the same: slime/backends/sglang_utils/
    arguments.py:139-152 maps the long parallel-size names to the short ones, sglang_engine.py:514-539.
    ``engine``: ``argv`` (the ``--sglang-*`` flags), ``gpus_per_engine``,
    ``gpus_per_node``, ``model_path``."""
    import dataclasses
    if server_args_cls is None:
        from sglang.srt.server_args import ServerArgs as server_args_cls
    tokens = sglang_tokens(engine["argv"])
    skipped = [t for t in tokens if t.startswith("--") and t[2:].replace("-", "_") in SGLANG_SKIPPED]
    if skipped:
        raise ValueError(f"Miles registers no --sglang-{skipped[0][2:]} (arguments.py _SKIPPED_SERVER_ARGS)")
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add = parser.add_argument

    def short_dest(*names, **kw):
        short = [n[2:].replace("-", "_") for n in names if isinstance(n, str) and n.startswith("--")]
        dest = next((d for d in short if d in ("tp_size", "dp_size", "pp_size", "ep_size")), None)
        return add(*names, **({"dest": dest} if dest and "dest" not in kw else {}), **kw)

    parser.add_argument = short_dest
    server_args_cls.add_cli_args(parser)
    parser.add_argument = add
    ns = parser.parse_args(["--model-path", engine["model_path"], *tokens])
    if ns.dp_size > 1 and not ns.enable_dp_attention:
        raise ValueError("Miles validate_args: --sglang-dp-size > 1 needs --sglang-enable-dp-attention")
    per_engine = engine["gpus_per_engine"]
    kwargs = {"model_path": engine["model_path"], "trust_remote_code": True, "random_seed": 1234,
              "enable_memory_saver": False, "host": "127.0.0.1", "port": 30000, "nccl_port": 30001,
              "nnodes": max(1, per_engine // engine["gpus_per_node"]), "node_rank": 0, "dist_init_addr": "127.0.0.1:30002",
              "gpu_id_step": 1, "base_gpu_id": 0, "tp_size": per_engine, "dp_size": ns.dp_size, "pp_size": ns.pp_size,
              "ep_size": ns.ep_size, "skip_server_warmup": True, "enable_draft_weights_cpu_backup": True,
              "enable_metrics": True, **({"device": device} if device else {})}
    fields = {f.name for f in dataclasses.fields(server_args_cls)}
    kwargs.update({n: getattr(ns, n) for n in fields if n not in kwargs and hasattr(ns, n)})
    return server_args_cls(**{k: v for k, v in kwargs.items() if k in fields})


def resolve_sglang(engine: dict, server_args_cls=None, device: str | None = None):
    """The resolved ``ServerArgs`` (0.5.19: ``resolve_once()``, server_args.py:3673; before: the constructor's
    ``__post_init__``); raises what SGLang raises."""
    args = sglang_server_args(engine, server_args_cls, device)
    if hasattr(args, "resolve_once"):
        args.resolve_once()
    return args


def check_sglang(engine_json: str) -> str | None:
    """The image's SGLang resolves the engine in a child process (``--resolve-sglang``)."""
    try:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--resolve-sglang", engine_json],
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "SGLang: resolving the engine's ServerArgs took over 600 s"
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return f"SGLang refuses the engine Miles would start: {lines[-1] if lines else f'exit {done.returncode}'}"


CAP_IPC_LOCK = 14


def has_cap_ipc_lock(status: str) -> bool:
    """``CapEff`` of /proc/self/status has bit 14 (include/uapi/linux/capability.h)."""
    found = re.search(r"^CapEff:\s*([0-9a-fA-F]+)$", status, re.M)
    return bool(found) and bool(int(found.group(1), 16) >> CAP_IPC_LOCK & 1)


def check_memlock() -> str | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY:
        return None
    with open("/proc/self/status") as f:
        if has_cap_ipc_lock(f.read()):
            return None
    return f"memlock: limit {soft} bytes and no CAP_IPC_LOCK; RDMA pinning needs one of them"


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
    nccl = loaded_nccl() if args.nccl else None
    out = [("boot", lambda: check_boot(args.boot_record, min_uptime=args.min_uptime))] if args.boot_record else []
    out += [("gpus", lambda: check_gpus(args.gpus)), ("memlock", check_memlock),
            ("shm", lambda: check_shm(args.shm_gib))]
    if args.hugepages_mi:
        out.append(("hugepages", lambda: check_hugepages(args.hugepages_mi)))
    if args.nccl:
        out.append(("nccl", lambda: check_nccl(args.nccl, nccl)))
    if args.efa and args.fabric == "sockets":
        out += [("efa", lambda: check_efa(args.efa)), ("nccl-net", lambda: check_nccl_network(sockets=True))]
    elif args.efa:
        gin_type = os.environ.get("NCCL_GIN_TYPE") if args.gin else None
        out += [("efa", lambda: check_efa(args.efa)), ("ofi", check_ofi_plugin),
                ("nccl-net", lambda: check_nccl_network(False, gin_type))]
    if args.gin:
        out += [("gdrdrv", check_gdrdrv), ("gin-plugin", check_gin_plugin)]
    if args.gin == "gpu":
        out.append(("gin-gda", check_gda))
    if args.sglang_engine:
        out.append(("sglang", lambda: check_sglang(args.sglang_engine)))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as ``checks`` takes it (the GPU burn-in, ``nodes/agent.py``, parses with it too)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--efa", type=int, default=0)
    parser.add_argument("--nccl", default="", help="minimum NCCL torch must load (checked only when given)")
    parser.add_argument("--fabric", choices=["efa", "sockets"], default="efa")
    parser.add_argument("--gin", choices=["proxy", "gpu"], default=None,
                        help="DeepEP V2 over NCCL GIN: gdrdrv and the plugin's GIN; gpu: also the EFA-GDA path")
    parser.add_argument("--shm-gib", type=int, default=0)
    parser.add_argument("--hugepages-mi", type=int, default=0)
    parser.add_argument("--sglang-engine", default="", help="JSON engine (rollout pods): SGLang resolves its ServerArgs")
    parser.add_argument("--boot-record", default="", help="file in the pod's volume: refuse a node that rebooted since")
    parser.add_argument("--min-uptime", type=int, default=0,
                        help="with --boot-record and no record yet: refuse a node up for fewer seconds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--resolve-sglang"]:  # the child of check_sglang: SGLang's own refusal, one line
        try:
            resolve_sglang(json.loads(argv[1]))
        except Exception as err:  # noqa: BLE001 - whatever SGLang raises is the finding
            print(f"{type(err).__name__}: {err}".replace("\n", " "), file=sys.stderr)
            return 1
        return 0
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

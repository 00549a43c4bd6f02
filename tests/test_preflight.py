"""The GPU-pod preflight: its parsers on real output formats, and its verdicts on a machine
without GPUs or EFA (this one). The run on a real H200 is in docs/measurements/preflight-h200.log."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, load

from workloads.pod import preflight as P
from workloads.derive.model import derive

# `nvidia-smi -L` as printed on an H200 (docs/measurements/preflight-h200.log).
NVIDIA_SMI_L = "GPU 0: NVIDIA H200 (UUID: GPU-415e89a7-7c22-dd0a-1500-7c731133b576)\n"

# `fi_info -p efa -t FI_EP_RDM` in the format the EC2 EFA user guide shows (one block per EFA
# device; domains named <device>-rdm), for two devices.
FI_INFO_TWO = """provider: efa
    fabric: efa
    domain: rdmap16s27-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
provider: efa
    fabric: efa
    domain: rdmap32s27-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
"""

MEMINFO = "HugePages_Total:    5128\nHugePages_Free:     5128\nHugepagesize:       2048 kB\n"


def test_parsers_on_real_formats():
    assert P.count_gpus(NVIDIA_SMI_L) == 1
    assert P.count_gpus(NVIDIA_SMI_L * 8) == 8
    assert P.efa_domains(FI_INFO_TWO) == {"rdmap16s27-rdm", "rdmap32s27-rdm"}
    assert P.efa_domains(FI_INFO_TWO + FI_INFO_TWO) == {"rdmap16s27-rdm", "rdmap32s27-rdm"}  # per device
    assert P.hugepages_free_mi(MEMINFO) == 10256


def test_without_gpus_the_pod_fails_with_one_line_naming_the_node():
    done = subprocess.run([sys.executable, str(ROOT / "workloads" / "pod" / "preflight.py"), "--gpus", "8", "--efa", "16"],
                          capture_output=True, text=True, env={"PATH": "/nonexistent", "NODE_NAME": "ip-10-0-1-7"})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "preflight FAILED on ip-10-0-1-7: GPU: nvidia-smi not found or failed (no NVIDIA driver in the pod?)"]


def test_efa_check_names_the_missing_devices(monkeypatch):
    monkeypatch.setattr(P, "run", lambda cmd: FI_INFO_TWO if cmd[0] == "fi_info" else None)
    assert P.check_efa(2) is None
    assert P.check_efa(16) == "EFA: libfabric sees 2 EFA devices, 16 requested"
    monkeypatch.setattr(P, "run", lambda cmd: None)
    assert P.check_efa(16).startswith("EFA: fi_info -p efa finds no EFA provider (16 devices expected)")


def test_every_gpu_pod_of_the_raycluster_runs_the_preflight_first():
    from conftest import load
    from workloads import render
    from workloads.derive.model import derive
    for stack in ("p5en-prod", "p4d"):
        m = derive(load(stack))
        for g in m.workers:
            spec = render.ray_pod_template(m, g)["spec"]
            if not g.gpus:
                assert "initContainers" not in spec
                continue
            (init,) = spec["initContainers"]
            (main,) = spec["containers"]
            assert init["image"] == main["image"] and init["resources"] == main["resources"]
            args = init["command"][2:]
            assert args[:4] == ["--gpus", str(g.gpus), "--efa", str(g.efa)] and g.gpus == g.pool.instance.gpus
            assert ("--gin" in args) == (g.efa > 0 and "NCCL_GIN_TYPE" in g.env), (stack, g.name)
            assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in init["env"]
            assert "preflight.py" in render.scripts_configmap(m)["data"]


def test_torchx_gpu_pods_run_the_same_preflight():
    import warnings

    from test_workloads import variant
    from test_workloads_torchx import REPOSITORY, scheduler_cfg, serialize
    from torchx.runner import get_runner

    from workloads.derive.model import derive
    from workloads.deploy.torchx_miles import appdef
    cfg = variant("p5en-prod", {"workloads": {"submit": "torchx"}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = serialize(get_runner().dryrun(appdef(derive(cfg), REPOSITORY), "kubernetes", cfg=scheduler_cfg(cfg),
                                            workspace=None).request.resource)
    by_task = {t["name"]: t["template"]["spec"] for t in job["spec"]["tasks"]}
    trainer = next(spec for name, spec in by_task.items() if "trainer" in name)
    (init,) = trainer["initContainers"]
    assert init["command"][:2] == ["python3", "/opt/scripts/preflight.py"] and "--efa" in init["command"]
    assert any(v["name"] == "scripts" for v in trainer["volumes"])
    head = next(spec for name, spec in by_task.items() if "head" in name)
    assert "initContainers" not in head


def test_nccl_network_is_read_from_real_logs():
    """The preflight's NCCL check reads the network NCCL chose from its INFO log: captured on an H200
    (socket fallback, also when NCCL_NET_PLUGIN=ofi names a plugin that is not installed) and the
    aws-ofi-nccl-over-EFA lines AWS's nccl-tests recipe shows (tests/data/nccl/README.md)."""
    data = ROOT / "tests" / "data" / "nccl"
    assert P.nccl_network((data / "info-socket-h200.log").read_text()) == "Socket"
    missing = (data / "info-ofi-plugin-missing-h200.log").read_text()
    assert "Could not find: ofi libnccl-net-ofi.so" in missing and P.nccl_network(missing) == "Socket"
    assert P.nccl_network((data / "info-ofi-efa-p5.log").read_text()) == "AWS Libfabric"
    assert P.nccl_network("NCCL INFO NCCL version 2.31.2\n") is None


def test_memlock_passes_with_cap_ipc_lock_or_unlimited(monkeypatch, tmp_path):
    """16.11: the kernel skips RLIMIT_MEMLOCK for a task with CAP_IPC_LOCK (the GPU pods keep it), so
    a finite limit with the capability passes; without either the pod fails."""
    assert P.has_cap_ipc_lock("CapEff:\t000001fffeffffff\n")  # as read on the H200 (docs/measurements)
    assert P.has_cap_ipc_lock(f"CapEff:\t{1 << 14:016x}\n") and not P.has_cap_ipc_lock("CapEff:\t0000000000000000\n")
    monkeypatch.setattr(P.resource, "getrlimit", lambda _: (65536, 65536))
    status = tmp_path / "status"
    real_open = open

    def fake_open(path, *a, **kw):
        return real_open(status if path == "/proc/self/status" else path, *a, **kw)
    monkeypatch.setattr("builtins.open", fake_open)
    status.write_text("CapEff:\t0000000000004000\n")
    assert P.check_memlock() is None
    status.write_text("CapEff:\t0000000000000000\n")
    assert P.check_memlock() == "memlock: limit 65536 bytes and no CAP_IPC_LOCK; RDMA pinning needs one of them"


def test_the_plugin_may_be_a_path(monkeypatch, tmp_path):
    """16.10: NCCL_NET_PLUGIN may be a full path from NCCL 2.28, not before. (The NCCL version checked is
    the library torch maps: tests/test_loaded_nccl.py.)"""
    plugin = tmp_path / "libnccl-net-ofi.so"
    plugin.write_text("")
    monkeypatch.setenv("NCCL_NET_PLUGIN", str(plugin))
    monkeypatch.setattr(P, "_dlopen", lambda names: names[0])
    # NCCL 2.27.5 (slime-0.2.4) dlopens the value as given first too (plugin_open.cc:63-67 at v2.27.5-1).
    assert P.check_ofi_plugin() is None
    monkeypatch.setenv("NCCL_NET_PLUGIN", "libfoo")
    assert P.check_ofi_plugin().startswith("NCCL: NCCL_NET_PLUGIN='libfoo'; allowed: 'ofi' or")


def _init_log(*messages: str) -> str:
    """NCCL INFO lines as src/debug.cc (v2.30.7-1 :354) prints them: host:pid:tid, "[dev] NCCL INFO msg"."""
    return "".join(f"p5en-1:4211:4211 [0] NCCL INFO {m}\n" for m in messages)


# The messages, from NVIDIA/nccl's own format strings (v2.30.7-1): src/plugin/net.cc:228, gin.cc:158, init.cc:486.
GDA_LOG = _init_log("Assigned NET plugin Libfabric to comm", "GIN/Plugin: Assigned plugin Libfabric type 5 to comm",
                    "Using network Libfabric")


def test_the_gin_type_is_read_from_ncclss_own_init_lines():
    assert P.nccl_gin(GDA_LOG) == ("Libfabric", 5) and P.nccl_network(GDA_LOG) == "Libfabric"
    assert P.check_gin_type(GDA_LOG, "5") is None
    proxy = GDA_LOG.replace("type 5", "type 2")
    assert P.check_gin_type(proxy, "5") == "GIN: NCCL assigned 'Libfabric' type 2, the profile needs type 5"
    none = _init_log("Assigned NET plugin Libfabric to comm", "Using network Libfabric")
    assert P.check_gin_type(none, "2").startswith("GIN: NCCL assigned no GIN plugin (NCCL_GIN_TYPE=2 expected)")


def test_the_preflight_collective_fails_when_gin_is_not_the_profiles(monkeypatch):
    class Done:
        returncode, stderr = 0, ""
        stdout = GDA_LOG.replace("type 5", "type 2")

    monkeypatch.setattr(P.subprocess, "run", lambda *a, **k: Done)
    assert P.check_nccl_network(gin_type="5") == "GIN: NCCL assigned 'Libfabric' type 2, the profile needs type 5"
    assert P.check_nccl_network(gin_type="2") is None and P.check_nccl_network() is None
    Done.stdout = _init_log("Assigned NET plugin Socket to comm", "Using network Socket")
    assert "NET plugin 'Socket'" in P.check_nccl_network(gin_type="5")


def test_gdrdrv_must_open_and_the_gda_path_is_checked_in_the_pod(monkeypatch, tmp_path):
    """16.11: /dev/gdrdrv must open, not only exist; GPU-initiated GIN needs its env and driver option."""
    def refuse(path, flags):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(P.os, "open", refuse)
    assert P.check_gdrdrv().startswith("GDRCopy: /dev/gdrdrv does not open (Permission denied)")
    monkeypatch.setenv("NCCL_GIN_TYPE", "5")
    monkeypatch.setenv("NCCL_SYM_GIN_KERNELS_ENABLE", "0")
    assert P.check_gda("RegistryDwords: \"PeerMappingOverride=1;\"\n") is None
    assert "PeerMappingOverride=1" in P.check_gda("RegistryDwords: \"\"\n")
    monkeypatch.setenv("NCCL_GIN_TYPE", "2")
    assert P.check_gda("PeerMappingOverride=1").startswith("GIN: NCCL_GIN_TYPE='2', '5' needed")


def test_the_pods_ask_the_preflight_for_their_profiles_contract():
    from conftest import load
    from test_workloads import MILES_01, variant
    from workloads.derive.model import derive
    from workloads.render.ray import preflight_args
    m = derive(load("p5en-prod"))  # miles-deepep-v2 on p5en: GPU-initiated GIN, NCCL 2.31.2
    args = preflight_args(m, m.worker("rollout"))
    assert args[args.index("--nccl") + 1] == "2.31.2" and args[args.index("--gin") + 1] == "gpu"
    old = derive(variant("p5en-prod", MILES_01))
    args = preflight_args(old, old.worker("rollout"))
    assert args[args.index("--nccl") + 1] == "2.28.9" and "--gin" not in args
    sockets = derive(variant("p5en-prod", {"workloads": {"run": {"fabric": "sockets", "deepep": {"version": "off"}}}}))
    assert "--fabric" in preflight_args(sockets, sockets.worker("trainer"))


FAKE_SGLANG = '''
import dataclasses


@dataclasses.dataclass
class ServerArgs:
    """Stands for sglang's: its CLI, the Miles kwargs, and a resolution that refuses as 0.5.19 does."""
    model_path: str = ""
    tp_size: int = 1
    dp_size: int = 1
    pp_size: int = 1
    ep_size: int = 1
    enable_dp_attention: bool = False
    chunked_prefill_size: int = 8192

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path")
        parser.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
        parser.add_argument("--data-parallel-size", "--dp-size", type=int, default=1)
        parser.add_argument("--pipeline-parallel-size", "--pp-size", type=int, default=1)
        parser.add_argument("--expert-parallel-size", "--ep-size", type=int, default=1)
        parser.add_argument("--enable-dp-attention", action="store_true")
        parser.add_argument("--chunked-prefill-size", type=int, default=8192)

    def resolve_once(self):
        per_rank = self.chunked_prefill_size // (self.dp_size if self.enable_dp_attention else 1)
        if per_rank > 128:
            raise ValueError("DeepEP v2 per-rank prefill budget exceeds "
                             f"SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK: required={per_rank}, capacity=128")
'''


def _fake_sglang(tmp_path):
    pkg = tmp_path / "sglang" / "srt"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "sglang", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "server_args.py").write_text(FAKE_SGLANG)
    return tmp_path


def test_rollout_pods_resolve_the_engines_server_args_and_fail_in_seconds(monkeypatch, tmp_path):
    from workloads.render.ray import preflight_args, raycluster
    m = derive(load("p5en-prod"))
    groups = {g["groupName"]: g for g in raycluster(m)["spec"]["workerGroupSpecs"]}
    init = next(c for c in groups["rollout"]["template"]["spec"]["initContainers"] if c["name"] == "preflight")
    args = P.parse_args(init["command"][2:])
    engine = json.loads(args.sglang_engine)
    flags = list(m.run_argv()[3:])
    assert engine["argv"] == [t for i, t in enumerate(flags) if t.startswith("--sglang-")
                              or (i and flags[i - 1].startswith("--sglang-") and not t.startswith("--"))]
    assert engine["gpus_per_engine"] == 16 and engine["model_path"] == m.paths.model
    trainer = next(c for c in groups["trainer"]["template"]["spec"]["initContainers"] if c["name"] == "preflight")
    assert "--sglang-engine" not in trainer["command"]
    assert "--sglang-engine" not in preflight_args(m, m.worker("rollout"))  # the burn-in checks nodes only
    monkeypatch.setenv("PYTHONPATH", str(_fake_sglang(tmp_path)))
    refused = dict(engine, argv=["--sglang-enable-dp-attention", "--sglang-dp-size", "16"])
    assert P.check_sglang(json.dumps(refused)) == (
        "SGLang refuses the engine Miles would start: ValueError: DeepEP v2 per-rank prefill budget exceeds "
        "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK: required=512, capacity=128")
    assert P.check_sglang(json.dumps(dict(refused, argv=[*refused["argv"], "--sglang-chunked-prefill-size", "2048"]))) is None
    nodes = dict(refused, argv=["--sglang-nnodes", "2"])
    assert "Miles registers no --sglang-nnodes" in P.check_sglang(json.dumps(nodes))

"""The GPU-pod preflight: its parsers on real output formats, and its verdicts on a machine
without GPUs or EFA (this one). The run on a real H200 is in docs/measurements/preflight-h200.log."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

from workloads import preflight as P

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
    done = subprocess.run([sys.executable, str(ROOT / "workloads" / "preflight.py"), "--gpus", "8", "--efa", "16"],
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
    from workloads.model import derive
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

    from workloads.model import derive
    from workloads.torchx_miles import appdef
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

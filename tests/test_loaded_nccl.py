"""The NCCL a process runs is the library mapped into it, as that library reports itself
(``ncclGetVersion``), not ``torch.cuda.nccl.version()``: torch returns the NCCL_VERSION_CODE it was compiled
with (torch csrc/cuda/nccl.cpp ``version()``), so torch 2.14.1 running nvidia-nccl-cu13 2.31.2 says
(2, 30, 7) (verl-project/verl#6621; contracts/tests/test_loaded_nccl.py runs it). Every NCCL check reads
``workloads/image/loaded_nccl.py``, which both image recipes install."""

from __future__ import annotations

import runpy
import sys

from conftest import ROOT

from workloads.pod import fabric_bench, preflight as P

LOADED = ROOT / "workloads" / "image" / "loaded_nccl.py"
RECIPES = (ROOT / "workloads" / "image" / "Dockerfile", ROOT / "workloads" / "image" / "slime.Dockerfile")
MAPS = """7f00-7f01 r-xp 00000000 103:01 42 /usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so
7f02-7f03 r-xp 00000000 103:01 43 /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2
7f04-7f05 r--p 00100000 103:01 43 /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2
7f06-7f07 r-xp 00000000 103:01 44 /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so
"""


def test_no_check_reads_the_nccl_torch_was_compiled_with():
    for path in (*RECIPES, ROOT / "workloads" / "pod" / "preflight.py", ROOT / "workloads" / "pod" / "fabric_bench.py"):
        assert "torch.cuda.nccl.version()" not in path.read_text().replace('``torch.cuda.nccl.version()``', ""), path
    for recipe in RECIPES:
        assert f"COPY loaded_nccl.py {P.LOADED_NCCL}" in recipe.read_text(), recipe
    assert fabric_bench.LOADED_NCCL == P.LOADED_NCCL


def test_the_version_is_the_one_mapped_library_as_it_reports_itself():
    ns = runpy.run_path(str(LOADED))
    assert ns["mapped"](MAPS) == ["/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"]
    assert ns["version_text"](23102) == "2.31.2" and ns["version_text"](22707) == "2.27.7"
    assert ns["version_text"](2708) == "2.7.8"  # NCCL_VERSION(X,Y,Z) below 2.9 (nvidia-nccl-cu13 2.31.2 nccl.h:26)


def test_the_preflight_asks_the_mapped_library_in_a_child_with_torch(monkeypatch):
    seen = []
    monkeypatch.setattr(P, "run", lambda cmd: seen.append(cmd) or "2.31.2\n")
    assert P.loaded_nccl() == "2.31.2" and seen == [[sys.executable, P.LOADED_NCCL]]
    assert P.check_nccl("2.31.2", "2.31.2") is None
    assert P.check_nccl("2.31.2", "2.30.7") == "NCCL: the loaded library is 2.30.7, 2.31.2 or newer needed"
    assert P.check_nccl("2.31.2", None).startswith(f"NCCL: {P.LOADED_NCCL} could not read the loaded NCCL")


def test_the_gpu_host_check_reads_nccls_own_version_line_and_starts_engines_as_miles_would():
    """scripts/gpu_host_checks.py (run on one H200: loaded_nccl.py 2.28.9 = NCCL's INFO line 2.28.9 = torch's
    (2, 28, 9) with torch 2.11.0's own nvidia-nccl-cu13 wheel)."""
    ns = runpy.run_path(str(ROOT / "scripts" / "gpu_host_checks.py"))
    log = (ROOT / "tests" / "data" / "nccl" / "info-socket-h200.log").read_text()
    assert ns["VERSION_LINE"].search(log).group(1) == "2.28.9"
    engine = {"name": "e", "model_path": "/m", "gpus_per_engine": 2, "env": {},
              "argv": ["--rollout-num-gpus-per-engine", "2", "--sglang-ep-size", "1", "--sglang-moe-runner-backend",
                       "deep_gemm"]}
    argv = ns["launch_argv"](engine, 30000)
    assert argv[argv.index("--tp-size") + 1] == "2" and "--load-format" in argv
    assert argv[-4:] == ["--ep-size", "1", "--moe-runner-backend", "deep_gemm"]

"""What AWS's own DeepEP-V2-over-EFA builds needed, in both image recipes (issue 34 A4, A6):

- the EFA installer without its NGC branch (``--disable-ngc``, as awslabs/awsome-distributed-ai@232e9b7
  micro-benchmarks/expert-parallelism/deepep-v2-benchmark/deepep.Dockerfile runs it): otherwise it pulls
  apt's libnccl2 2.28.3 and holds it, and ldconfig resolves ``libnccl.so.2`` to it for every process that
  does not load torch's wheel by path (whn09/ep-benchmarks-efa@006b7bf deepep-v2-efa-official/README.md);
- aws-ofi-nccl's ``ncclGinPlugin_v14`` interface (the same Dockerfile's gate: v11/v13 are exported by
  builds without EFA-GDA, e.g. aws-ofi-nccl 1.20.0 in a 1.50.0-named installer);
- a DeepEP tree with the EFA fixes (``workloads/image/Dockerfile``'s ``# contract: deepep-tree``), run
  here on made-up trees and in the contract stage on the sgl-deep-ep 0.1.2 wheel's tree; among them the QP
  clamp AWS's NeMo-RL build gates grep for (``unordered_gin_qps`` in ``deep_ep/buffers/elastic.py``,
  awslabs/awsome-distributed-ai 3.test_cases/pytorch/nemo-rl/deepep-v2-efa/setup_nemo_rl_deepep_efa.sh), or
  the fork's C++ bound on the unordered kernels' QPs (``kMaxGinContextCnt``, amazon-contributing/DeepEP@2542d96
  gin_resource_alloc.cuh) in trees whose elastic.py no longer names it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from software.recipe import snippets
from workloads.pod import preflight as P

RECIPE = ROOT / "workloads" / "image" / "Dockerfile"
RECIPES = (RECIPE, ROOT / "workloads" / "image" / "slime.Dockerfile")
UNORDERED = ("deep_ep/include/deep_ep/impls/hybrid_dispatch_unordered.cuh",
             "deep_ep/include/deep_ep/impls/hybrid_combine_unordered.cuh")
PROBE = "def _get_sysfs_rdma_gbs(nic_name: str) -> float:\n"
ELASTIC = "deep_ep/buffers/elastic.py"
CLAMP = "num_allocated_qps = max(_C.min_unordered_gin_qps, min(num_allocated_qps, _C.max_unordered_gin_qps))\n"
GIN_ALLOC = "deep_ep/include/deep_ep/common/gin_resource_alloc.cuh"
GIN_BOUND = "static constexpr int kMaxGinContextCnt = kMaxGinContextBudget;\n"
NCCL_CU = "csrc/kernels/backend/nccl.cu"
FIXED = {**{u: "" for u in UNORDERED}, "deep_ep/utils/envs.py": PROBE, ELASTIC: CLAMP}


def test_the_efa_installer_runs_without_its_ngc_branch():
    for recipe in RECIPES:
        calls = [line for line in recipe.read_text().splitlines() if "./efa_installer.sh" in line]
        assert calls and all("--disable-ngc" in line for line in calls), recipe


class _Plugin:
    def __init__(self, *symbols: str):
        for s in symbols:
            setattr(self, s, object())


def test_gin_needs_the_efa_gda_interface(monkeypatch):
    monkeypatch.setattr(P.ctypes, "CDLL", lambda name: _Plugin("ncclGinPlugin_v11", "ncclGinPlugin_v13"))
    assert P.check_gin_plugin() == "GIN: aws-ofi-nccl exports no ncclGinPlugin_v14 (>= 1.21.1 needed)"
    monkeypatch.setattr(P.ctypes, "CDLL", lambda name: _Plugin("ncclGinPlugin_v13", "ncclGinPlugin_v14"))
    assert P.check_gin_plugin() is None
    last = RECIPE.read_text()
    assert 'hasattr(plugin, "ncclGinPlugin_v14")' in last and "for v in (14, 13, 11)" not in last


def _tree(root, files: dict[str, str]):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _check(tree) -> subprocess.CompletedProcess:
    code = snippets(RECIPE)["deepep-tree"].code
    return subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True)


@pytest.mark.parametrize("missing", [*UNORDERED, "deep_ep/utils/envs.py", ELASTIC])
def test_a_deepep_tree_without_the_efa_fixes_fails_the_build(tmp_path, missing):
    files = dict(FIXED)
    files[missing] = "" if missing.endswith(".py") else None  # a .py without its fix, a kernel absent
    done = _check(_tree(tmp_path, {k: v for k, v in files.items() if v is not None}))
    assert done.returncode != 0 and missing.rsplit("/", 1)[-1].split(".")[0] in done.stderr, done.stderr
    whole = _check(_tree(tmp_path / "fixed", FIXED))
    assert whole.returncode == 0, whole.stderr


NCCL_ASSERT = ("        EP_HOST_ASSERT(ctx >= elastic::gin_alloc::kMinGinContextCnt and\n"
               "                       ctx <= elastic::gin_alloc::kMaxGinContextCnt and\n"
               "                       \"num_allocated_qps must be 0 (auto -> kDefaultGinContextCnt) or within \"\n"
               "                       \"[kMinGinContextCnt, kMaxGinContextCnt]: one GIN context supplies one QP\");\n")
"""The bound as amazon-contributing/DeepEP@17b7abc csrc/kernels/backend/nccl.cu asserts it (resolve_gin_context_cnt)."""


def test_the_qp_clamp_may_be_the_unordered_kernels_cpp_bound(tmp_path):
    """A fork tree that resolves the unordered kernels' QPs in C++ (11 by default, at most kMaxGinContextCnt,
    asserted in nccl.cu) and whose elastic.py no longer names unordered_gin_qps passes; the header without
    the assertion does not, nor an nccl.cu that names the constant without asserting the bound."""
    files = {**FIXED, ELASTIC: "", GIN_ALLOC: GIN_BOUND}
    done = _check(_tree(tmp_path / "header", files))
    assert done.returncode != 0 and "QP clamp" in done.stderr, done.stderr
    named = {**files, NCCL_CU: "// ctx <= elastic::gin_alloc::kMaxGinContextCnt\nconst int most = kMaxGinContextCnt;\n"}
    done = _check(_tree(tmp_path / "named", named))
    assert done.returncode != 0 and "QP clamp" in done.stderr, done.stderr
    whole = _check(_tree(tmp_path / "both", {**files, NCCL_CU: NCCL_ASSERT}))
    assert whole.returncode == 0, whole.stderr
    clamp = "const int n = std::clamp(requested, unordered::kMinGinContextCnt, unordered::kMaxGinContextCnt);\n"
    assert _check(_tree(tmp_path / "clamp", {**files, NCCL_CU: clamp})).returncode == 0


@pytest.mark.parametrize("elastic", [
    'unordered_gin_qps = int(os.environ.get("EP_UNORDERED_GIN_QPS", "11"))\n',  # reads it, clamps nothing
    "# num_allocated_qps = max(_C.min_unordered_gin_qps, min(num_allocated_qps, _C.max_unordered_gin_qps))\n",
    "num_allocated_qps = _C.max_unordered_gin_qps\n",
    'unordered_gin_qps = max(int(os.getenv("EP_UNORDERED_GIN_QPS", "129")), 1)\n',  # a floor, no upper bound
    'print("unordered_gin_qps is not clamped: see min(x, _C.max_unordered_gin_qps)")\n',  # a string literal
    'logger.info(f"unordered_gin_qps max({unordered_gin_qps})")\n',
    "num_allocated_qps = min(_C.max_unordered_gin_qps * 100, num_allocated_qps)\n"])
def test_an_elastic_py_that_names_the_qp_bound_without_clamping_to_it_fails_the_build(tmp_path, elastic):
    """The Python form of the clamp is a min() against max_unordered_gin_qps, as code: a tree that reads an
    environment variable of that name, with or without a floor (``max(..., 1)``, review34c F5), comments the clamp
    out, names it in a string or takes the bound unclamped has none (review of #34 F6); the clamp itself
    (``CLAMP``) passes, and so does the same clamp split over lines."""
    done = _check(_tree(tmp_path / "named", {**FIXED, ELASTIC: elastic}))
    assert done.returncode != 0 and "QP clamp" in done.stderr, done.stderr
    assert _check(_tree(tmp_path / "clamped", {**FIXED, ELASTIC: elastic + CLAMP})).returncode == 0
    split = "num_allocated_qps = min(\n    int(num_allocated_qps),\n    _C.max_unordered_gin_qps)\n"
    assert _check(_tree(tmp_path / "split", {**FIXED, ELASTIC: elastic + split})).returncode == 0


def test_an_nccl_cu_that_asserts_the_bound_on_another_count_fails_the_build(tmp_path):
    """review34c F5: an EP_HOST_ASSERT naming kMaxGinContextCnt on another variable (the SM count) or on a
    multiple of it bounds no GIN context count; the fork's own assertion (``NCCL_ASSERT``) passes."""
    files = {**FIXED, ELASTIC: "", GIN_ALLOC: GIN_BOUND}
    for i, other in enumerate(("EP_HOST_ASSERT(num_sms <= kMaxGinContextCnt * 100);\n",
                               "EP_HOST_ASSERT(num_sms <= elastic::gin_alloc::kMaxGinContextCnt);\n",
                               "EP_HOST_ASSERT(ctx <= kMaxGinContextCnt * 2);\n",
                               'EP_HOST_ASSERT(ok and "ctx <= kMaxGinContextCnt");\n')):
        done = _check(_tree(tmp_path / str(i), {**files, NCCL_CU: other}))
        assert done.returncode != 0 and "QP clamp" in done.stderr, (other, done.stderr)
    assert _check(_tree(tmp_path / "real", {**files, NCCL_CU: NCCL_ASSERT})).returncode == 0


def test_the_build_checks_its_deepep_tree_before_building_it():
    text = RECIPE.read_text()
    assert text.index("python3 /usr/local/lib/rl-platform/deepep_tree.py /opt/deepep") < text.index(
        'cd /opt/deepep && EP_NCCL_ROOT_DIR="${NCCL_ROOT}" pip install')

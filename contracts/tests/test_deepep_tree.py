"""Issue 34 A4/A6: the Miles recipe's DeepEP tree check (workloads/image/Dockerfile ``# contract: deepep-tree``)
run on the tree of the DeepEP SGLang 0.5.19 depends on (sgl-deep-ep 0.1.2, DeepEP 2.1.0, laid out as the
source tree's ``deep_ep/`` folder): it has neither the unordered hybrid kernels AWS's EFA port added, nor
the sysfs link-rate probe, nor a QP clamp (its hybrid mode allocates 129 QPs on EFA, elastic.py:328-332), so a
build from that tree stops. A tree with both (amazon-contributing/DeepEP
main, e0f110a for the probe) is not reachable from this stage (no package carries it); the main suite
runs the snippet on made-up trees (tests/test_image_efa.py)."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT
from wheels import unpack, wheel

from software.recipe import snippets

RECIPE = ROOT / "workloads" / "image" / "Dockerfile"


def test_upstream_deepep_2_1_0_lacks_the_efa_fixes(tmp_path):
    tree = unpack(wheel("sgl-deep-ep", "0.1.2"), tmp_path / "deepep", only=("deep_ep/",))
    assert (tree / "deep_ep" / "utils" / "envs.py").is_file()  # the layout the check reads
    done = subprocess.run([sys.executable, "-c", snippets(RECIPE)["deepep-tree"].code, str(tree)],
                          capture_output=True, text=True)
    assert done.returncode != 0
    for missing in ("hybrid_dispatch_unordered.cuh", "hybrid_combine_unordered.cuh", "_get_sysfs_rdma_gbs",
                    "QP clamp"):
        assert missing in done.stderr, done.stderr

"""DeepEP V2's own variables on the rollout pods: its JIT cache on the shared file system, per image; none
on the trainer pods, which run no DeepEP (workloads.derive.moe_backend.choose)."""

from __future__ import annotations

import pytest
from conftest import load
from stackconfig.stack import StackConfigError
from test_workloads import MILES_01, variant

from workloads.derive.model import derive
from workloads.derive.sglang_budget import AUTO_HYBRID_QPS, HYBRID_NUM_SMS, check_hybrid_ranks, hybrid_qps


def _env(m, group: str) -> dict[str, str]:
    return m.worker(group).env


def test_the_deepep_jit_cache_is_on_the_file_system_and_per_image():
    """DeepEP compiles its kernels into $HOME/.deep_ep unless EP_JIT_CACHE_DIR says otherwise
    (deepseek-ai/DeepEP csrc/jit/compiler.hpp, ``Compiler()``): every pod start recompiled them. The key
    hashes code, flags and NVCC version but not header contents, so one directory per image."""
    m = derive(load("p5en-prod"))
    cache = _env(m, "rollout")["EP_JIT_CACHE_DIR"]
    assert cache.startswith(f"{m.paths.mount}/")
    other = derive(variant("p5en-prod", {"versions": {"software": {"images": {"miles-deepep-v2": (
        "{imageRepository}:miles-sglang0.5.19-deepepv2-nccl2.31.2-efa1.50.0@sha256:" + "1" * 64)}}}}))
    assert _env(other, "rollout")["EP_JIT_CACHE_DIR"] != cache
    off = derive(variant("p5en-prod", MILES_01))  # no DeepEP V2: nothing to cache
    assert "EP_JIT_CACHE_DIR" not in _env(off, "rollout")


def test_trainer_pods_carry_no_deepep_variables():
    """Megatron keeps its NCCL all-to-all with DeepEP V2 (workloads.derive.moe_backend.choose): no GIN, no
    EP_* variables on the trainer pods, so the seed's two Miles arms run the same trainer."""
    trainer = _env(derive(load("p5en-prod")), "trainer")
    assert not [k for k in trainer if k.startswith(("NCCL_GIN", "NCCL_SYM_GIN", "EP_", "SGLANG_DEEPEP"))]


def test_engines_across_nodes_name_deepep_v2s_sm_count():
    """With SGLANG_DEEPEP_V2_NUM_SMS at SGLang's default 0 (sglang 0.5.19 environ.py:1109), DeepEP sizes the
    SMs from get_rdma_gbs(), which asks ibstat and gets 0 on EFA (sgl-deep-ep 0.1.2 deep_ep/utils/envs.py:
    246-268), then divides by it once an engine spans nodes (deep_ep/buffers/elastic.py:809). Every engine
    across nodes names the count; one within a node (direct mode, NVLink only) leaves DeepEP's own."""
    hybrid = _env(derive(load("p5en-prod")), "rollout")  # engines of 2 nodes
    assert int(hybrid["SGLANG_DEEPEP_V2_NUM_SMS"]) > 0
    direct = derive(variant("p5en-prod", {"workloads": {"run": {"rollout": {"nodesPerEngine": 1}}}}))
    assert "SGLANG_DEEPEP_V2_NUM_SMS" not in _env(direct, "rollout")


def test_an_engine_with_more_ranks_than_deepep_v2s_qps_is_refused():
    """DeepEP's hybrid mode takes num_sms x 16 + 1 QPs, capped by the 129 it allocates on EFA (sgl-deep-ep
    0.1.2 deep_ep/buffers/elastic.py:328-332: 65 only with fast RDMA atomics, which deep_ep/utils/envs.py:
    223-242 finds only on an MT4131 NIC; :836-853); fewer QPs than ranks hangs. The refusal names the most
    whole nodes the field may take, derived: 129 // 8 GPUs = 16 nodes, and says the bound is stock 0.1.2's (the
    image's DeepEP clamps its QPs; review of #34 F5)."""
    assert AUTO_HYBRID_QPS == 129 and hybrid_qps(HYBRID_NUM_SMS) == 129
    with pytest.raises(StackConfigError, match=r"workloads.run.rollout.nodesPerEngine: 32 nodes per engine are "
                                               r"256 DeepEP V2 ranks, more than the 129 QPs stock sgl-deep-ep 0.1.2's "
                                               r"hybrid mode uses at 24 SMs \(.*the image's DeepEP clamps its QPs, which "
                                               r"changes this bound, not measured\); allowed: at most 16 nodes per engine "
                                               r"\(128 GPUs\)$"):
        variant("p5en-prod", {"workloads": {"run": {"rollout": {"nodesPerEngine": 32}}}})
    check_hybrid_ranks(16, 128)  # 128 ranks on 129 QPs
    with pytest.raises(ValueError, match=r"17 nodes per engine are 136 .* at most 16 nodes per engine \(128 GPUs\)"):
        check_hybrid_ranks(17, 136)
    with pytest.raises(ValueError, match=r"at most 32 nodes per engine \(128 GPUs\)"):  # 4-GPU nodes
        check_hybrid_ranks(33, 132)

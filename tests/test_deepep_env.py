"""DeepEP V2's own variables on the GPU pods: its JIT cache on the shared file system, per image, and
no reuse of a communicator that the trainer's process group has not made yet."""

from __future__ import annotations

from conftest import load
from test_workloads import MILES_01, variant

from workloads.derive.model import derive


def _env(m, group: str) -> dict[str, str]:
    return m.worker(group).env


def test_the_deepep_jit_cache_is_on_the_file_system_and_per_image():
    """DeepEP compiles its kernels into $HOME/.deep_ep unless EP_JIT_CACHE_DIR says otherwise
    (deepseek-ai/DeepEP csrc/jit/compiler.hpp, ``Compiler()``): every pod start recompiled them. The key
    hashes code, flags and NVCC version but not header contents, so one directory per image."""
    m = derive(load("p5en-prod"))
    dirs = {_env(m, g)["EP_JIT_CACHE_DIR"] for g in ("trainer", "rollout")}
    assert len(dirs) == 1 and next(iter(dirs)).startswith(f"{m.paths.mount}/")
    other = derive(variant("p5en-prod", {"versions": {"software": {"images": {"miles-deepep-v2": (
        "{imageRepository}:miles-sglang0.5.19-deepepv2-nccl2.31.2-efa1.50.0@sha256:" + "1" * 64)}}}}))
    assert _env(other, "trainer")["EP_JIT_CACHE_DIR"] not in dirs
    off = derive(variant("p5en-prod", MILES_01))  # no DeepEP V2: nothing to cache
    assert "EP_JIT_CACHE_DIR" not in _env(off, "trainer")


def test_trainers_let_deepep_make_its_own_communicator():
    """DeepEP reuses the process group's NCCL communicator by default (EP_REUSE_NCCL_COMM=1), which is
    null until a collective ran on that group (deepseek-ai/DeepEP#726); radixark/Megatron-LM@235952df
    initialises torch.distributed without device_id (megatron/training/initialize.py:336-352) and builds
    the ElasticBuffer at the first dispatch (core/transformer/moe/fused_a2a.py:90-113), the case
    awslabs/awsome-distributed-ai#1265 patched with NVIDIA/Megatron-LM#5153's fix. SGLang's engines are
    left as they are."""
    m = derive(load("p5en-prod"))
    assert _env(m, "trainer")["EP_REUSE_NCCL_COMM"] == "0"
    assert "EP_REUSE_NCCL_COMM" not in _env(m, "rollout")
    assert "EP_REUSE_NCCL_COMM" not in _env(derive(variant("p5en-prod", MILES_01)), "trainer")

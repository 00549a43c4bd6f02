"""A DeepEP V2 rollout engine's token and memory budget, derived together from the engine's shape (GPUs,
DP attention size, nodes) and the GPU's memory, the way sglang 0.5.19 computes and checks each part:

- ``--chunked-prefill-size`` and the decode CUDA-graph batch: SGLang's own GPU-memory table
  (``sglang/srt/arg_groups/memory_hook.py:63-130``), passed explicitly so the figures below hold;
- per rank, DP attention divides the prefill chunk by the DP size (``arg_groups/parallel_hook.py:198-203``);
- ``SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK`` (default 128, ``environ.py:1107``) must hold both the
  per-rank prefill chunk and the per-rank decode graph batch (``arg_groups/moe_hook.py:379-420``), and every
  forward at run time (``layers/moe/token_dispatcher/deepep_v2.py:255-261`` raises beyond it);
- ``--max-running-requests`` = capacity x DP size: each DP rank's request pool is that // DP size
  (``model_executor/pool_configurator.py:682``), so no decode batch outgrows the buffer;
- ``--mem-fraction-static``: SGLang's default reserve (``memory_hook.py:233-268``) holds no DeepEP V2 buffer
  (``reserve_for_deepep_a2a_mb``, :337-349, only for ``deepep``), so the ElasticBuffer's bytes
  (``deepep_v2_buffer_bytes``) come off the static fraction; SGLang's prefill-graph reserve depends on the
  model's attention (MLA) and the all-to-all (``prefill_graph_mib``). The contract stage compares each rendered
  fraction with SGLang's own reserve (contracts/tests/test_sglang_resolve.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

DEEPEP_V2_CAPACITY_ENV = "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK"
DEEPEP_V2_SMS_ENV = "SGLANG_DEEPEP_V2_NUM_SMS"
MIB = 2 ** 20
HYBRID_NUM_SMS = 24
"""The SMs of DeepEP V2's dispatch and combine in an engine across nodes (hybrid mode). SGLang passes
``SGLANG_DEEPEP_V2_NUM_SMS`` (default 0, sglang 0.5.19 environ.py:1109) to ``ElasticBuffer.dispatch``
(layers/moe/token_dispatcher/deepep_v2.py:337); 0 lets DeepEP size it from ``get_rdma_gbs()``, which asks
``ibstat`` and gets 0 on EFA (sgl-deep-ep 0.1.2 deep_ep/utils/envs.py:246-268), and divides by it once there
is more than one scale-out rank (deep_ep/buffers/elastic.py:809; deepseek-ai/DeepEP#734). 24: the lowest
dispatch + reduced combine time measured on p5en (GIN type 5, 8192 tokens; whn09/ep-benchmarks-efa@006b7bf
deepep-v2-efa-official/README.md, tables 5/6 of results/p5en_2n4n_20260825): 4898.3 us at 2 nodes against
5740.8 at 12 SMs and 9668.2 at 6, 11701.0 us at 4 nodes against 11898.5 and 13549.4; at 2 nodes and 128
tokens it also dispatches fastest (147.3 against 169.4 us). Measured on p5en only: other families take the
same count, which keeps them off the division (measure them with ``python -m bench``)."""
AUTO_HYBRID_QPS = 129
"""The QPs DeepEP allocates by default in hybrid mode on EFA: sgl-deep-ep 0.1.2 deep_ep/buffers/elastic.py:
328-332 allocates 65 when ``check_fast_rdma_atomic_support()`` is True, else 129, and that check is True only
when ``ibstat`` names the NIC ``EP_NIC_NAME`` (default ``mlx5_0``) with CA type MT4131 (deep_ep/utils/envs.py:
21, 223-242); EFA has no such NIC, so 129. On that tree a 24-SM dispatch then uses 129 QPs, more than
aws-ofi-nccl's 128-slot GIN request ring (awslabs/awsome-distributed-ai 3.test_cases/pytorch/nemo-rl/
deepep-v2-efa/README.md, trap 2): the image builds amazon-contributing/DeepEP only with its QP clamp, which
uses fewer (workloads/image/Dockerfile ``# contract: deepep-tree``). The rank check below counts stock 0.1.2's
QPs, so its bound is that library's, not the image's: the fork's clamp changes the QP count (at most 17 GIN
contexts on the fork's C++ trees), and what bound its kernels need has not been measured (``python -m bench``
on two nodes)."""


def hybrid_qps(num_sms: int) -> int:
    """The QPs a hybrid-mode dispatch uses for ``num_sms`` SMs on EFA (sgl-deep-ep 0.1.2
    deep_ep/buffers/elastic.py:836-853 ``get_theoretical_num_qps``: one per channel and one for notify,
    capped by the allocation, :929-930 and :1087-1088); fewer than the engine's ranks hangs its first
    dispatch."""
    return min(num_sms * 16 + 1, AUTO_HYBRID_QPS)


def check_hybrid_ranks(nodes: int, ranks: int) -> None:
    """ValueError naming ``workloads.run.rollout.nodesPerEngine`` when an engine has more ranks than the QPs
    ``HYBRID_NUM_SMS`` gives it on stock sgl-deep-ep 0.1.2 (``hybrid_qps``); the allowed count is in whole nodes
    of ``ranks // nodes`` GPUs. The bound is stock 0.1.2's: the image's DeepEP clamps its QPs, which changes it
    (``AUTO_HYBRID_QPS``)."""
    qps = hybrid_qps(HYBRID_NUM_SMS)
    if ranks > qps:
        per_node = ranks // nodes
        most = qps // per_node
        raise ValueError(f"workloads.run.rollout.nodesPerEngine: {nodes} nodes per engine are {ranks} DeepEP V2 "
                         f"ranks, more than the {qps} QPs stock sgl-deep-ep 0.1.2's hybrid mode uses at "
                         f"{HYBRID_NUM_SMS} SMs (fewer QPs than ranks hangs its first dispatch; the image's DeepEP "
                         f"clamps its QPs, which changes this bound, not measured); allowed: at most {most} nodes "
                         f"per engine ({most * per_node} GPUs)")


def memory_defaults(gpu_mib: int, tp: int) -> tuple[int, int]:
    """(chunked prefill tokens, decode CUDA-graph max batch) sglang 0.5.19 picks for this GPU memory and TP
    size (memory_hook.py:63-130)."""
    table = ((20, 2048, 8, 8), (35, 2048, 24, 80), (60, 4096, 32, 160), (90, 8192, 256, 512),
             (160, 8192, 256, 512))
    for below_gib, chunk, small_tp, large_tp in table:
        if gpu_mib < below_gib * 1024:
            return chunk, small_tp if tp < 4 else large_tp
    return 16384, 512


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """sglang 0.5.19 arg_groups/cuda_graph_hook.py:492-509 (generate_prefill_cuda_graph_batch_sizes)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]
    return [s for s in sizes if s <= max_bs]


PREFILL_GRAPH_A2A = ("none", "deepep", "megamoe", "flashinfer")
"""The all-to-alls under which sglang 0.5.19 keeps the breakable prefill CUDA graph (cuda_graph_hook.py:295-299,
"unvalidated a2a backend"); ``deepep_v2`` is not one of them."""


def prefill_graph_mib(chunk: int, mla: bool, a2a: str, pp: int = 1) -> float:
    """What sglang 0.5.19 reserves for the prefill CUDA graph in a pod (memory_hook.py:315-324). On CUDA its
    default backend is breakable (model_executor/cuda_graph_config.py:112-121), which SGLang turns off with
    pipeline parallelism (cuda_graph_hook.py:122-134) and with an all-to-all outside ``PREFILL_GRAPH_A2A``
    (:262-323); the rest of that rule list (DeepSeek-V4, context parallelism, two-batch overlap, multimodal)
    matches no engine rendered here. While the graph is on, an MLA model (configs/model_config.py:925-948,
    DeepSeek-V3's architecture among them) reserves 1.5 GiB, its graph sized at 2048 tokens (memory_hook.py:
    189-192); any other model 8 MiB per captured size up to the prefill chunk (:190, :321)."""
    if pp > 1 or a2a not in PREFILL_GRAPH_A2A:
        return 0.0
    return 1.5 * 1024 if mla else len(prefill_graph_sizes(chunk)) * 8


def sglang_reserve_mib(gpu_mib: int, tp: int, dp: int, chunk: int, max_bs: int, mla: bool, a2a: str,
                       pp: int = 1) -> float:
    """What SGLang 0.5.19 keeps outside ``mem_fraction_static`` when left to pick it (memory_hook.py:245-258,
    reserve_for_graph_mb :292-334) for a DP-attention engine when ``dp`` > 1, with the all-to-all ``a2a``
    (``none`` or ``deepep_v2``: ``deepep``, DeepEP V1, adds 1 and 2 GiB, :326-332 and :337-349, not modelled)."""
    if a2a == "deepep":
        raise ValueError("sglang_reserve_mib models a2a none and deepep_v2, not deepep (memory_hook.py:326-349)")
    reserve = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8 * 1024
    reserve += max_bs * 2 + (max_bs * dp * 3 + (max_bs * dp * 1.5 if max_bs > 300 else 0) if dp > 1 else 0)
    reserve += prefill_graph_mib(chunk, mla, a2a, pp)
    return max(reserve, 10 * 1024) if gpu_mib > 60 * 1024 else reserve


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _token_bytes(hidden_bytes: int, sf_bytes: int, topk: int, with_metadata: bool) -> int:
    """DeepEP@dd758ca deep_ep/include/deep_ep/common/layout.cuh:179-207 (TokenLayout, no mbarrier)."""
    meta = topk * 8 + ((1 + topk) * 4 if with_metadata else 0)
    return sum(_align(b, 32) for b in (hidden_bytes, sf_bytes, meta))


def deepep_v2_buffer_bytes(tokens: int, hidden: int, topk: int, ranks: int, nodes: int,
                           fp8_dispatch: bool = True) -> int:
    """ElasticBuffer's size (DeepEP@dd758ca csrc/elastic/buffer.hpp:586-680 calculate_buffer_size, with
    allow_multiple_reduction): hybrid across nodes (scale-out = nodes, scale-up = the node's NVLink ranks),
    direct within one; SGLang dispatches in FP8 (deepep_v2.py:244-250 ``use_fp8_dispatch=True``)."""
    channels = 8 * 160  # buffer.hpp:57-59 kNumMaxChannels
    out, up = (nodes, ranks // nodes) if nodes > 1 else (1, ranks)
    disp = _token_bytes(hidden * (1 if fp8_dispatch else 2), math.ceil(hidden / 32) * 4 if fp8_dispatch else 0,
                        topk, True)
    comb = _token_bytes(hidden * 2, 0, topk, False)
    if out == 1:
        dispatch = disp * tokens + disp * ranks * tokens
        combine = comb * min(ranks, topk) * tokens
    else:
        dispatch = disp * (up * out * tokens + tokens + out * (tokens + channels))
        combine = comb * (min(up, topk) * out * tokens + min(out, topk) * tokens + out * (tokens + channels))
    return _align(max(dispatch, combine), 2 * MIB)  # symmetric.hpp:16 kNumAlignmentBytes


@dataclass(frozen=True)
class Budget:
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    max_running_requests: int
    capacity: int
    """SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK."""
    mem_fraction_static: float
    buffer_bytes: int

    def sglang_args(self) -> list[str]:
        return ["--sglang-chunked-prefill-size", str(self.chunked_prefill_size),
                "--sglang-cuda-graph-max-bs", str(self.cuda_graph_max_bs),
                "--sglang-max-running-requests", str(self.max_running_requests),
                "--sglang-mem-fraction-static", str(self.mem_fraction_static)]

    def env(self) -> dict[str, str]:
        return {DEEPEP_V2_CAPACITY_ENV: str(self.capacity)}


def deepep_v2_budget(gpu_mib: int, tp: int, dp: int, nodes: int, hidden: int, topk: int, mla: bool,
                     mem_fraction_static: float | None = None) -> Budget:
    """The engine's budget; a given ``mem_fraction_static`` is kept when it leaves room for what either
    all-to-all needs, else ValueError naming ``workloads.run.rollout.memFractionStatic``. ``mla``: the model
    has multi-head latent attention (SGLang's prefill-graph reserve depends on it, ``prefill_graph_mib``)."""
    chunk, max_bs = memory_defaults(gpu_mib, tp)
    capacity = max(chunk // dp, max_bs)
    buffer = deepep_v2_buffer_bytes(capacity, hidden, topk, tp, nodes)
    # One fraction for both all-to-alls a DeepEP V2 profile runs: runs differing only in deepep.version keep
    # the same static memory (workloads.derive.argv.rollout_budget), so it leaves the larger of what each needs
    # outside it. With a2a none SGLang keeps its prefill graph on and reserves it; with deepep_v2 SGLang turns
    # that graph off (cuda_graph_hook.py:295-299) and captures none, so its reserve there is counted without
    # it (was counted in both, 464 MiB at chunk 8192), plus the ElasticBuffer SGLang does not reserve. Safe:
    # memory_hook.py:315-324 reserves the graph only while it is on, and no graph is captured while it is off.
    outside = max(sglang_reserve_mib(gpu_mib, tp, dp, chunk, max_bs, mla, "none"),
                  sglang_reserve_mib(gpu_mib, tp, dp, chunk, max_bs, mla, "deepep_v2") + buffer / MIB)
    most = math.floor((gpu_mib - outside) / gpu_mib * 1000) / 1000
    if mem_fraction_static is not None and mem_fraction_static > most:
        raise ValueError(f"workloads.run.rollout.memFractionStatic: {mem_fraction_static} leaves no room for SGLang's "
                         f"own reserve (with a2a none) or for it and DeepEP V2's {buffer // MIB} MiB buffer (with "
                         f"deepep_v2); allowed: <= {most}")
    return Budget(chunk, max_bs, capacity * dp, capacity, mem_fraction_static or most, buffer)

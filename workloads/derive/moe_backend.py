"""MoE all-to-all / expert runner of the rollout (SGLang) and trainer (Megatron): ``choose()`` decides
from (checkpoint precision, nodes per engine, DeepEP version, GPU model, SGLang version); ``refusal()``
raises ValueError naming the stack field and the single-field changes that work. Each rule cites its
upstream source (wheel version + path:line), checked against the wheels by tests/test_moe_backend.py.
A GPU's compute capability is the instance catalog's (``catalog.gpu``); an unknown GPU model is refused."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import catalog
from software import profiles

Precision = Literal["bf16", "fp8-blockwise"]
DeepEP = Literal["none", "v1", "v2"]

DEEPEP_V2_MIN_SGLANG = (0, 5, 19)
"""First SGLang on PyPI whose ``--moe-a2a-backend`` offers ``deepep_v2``."""
DEEPEP_V2_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Qwen3MoeForCausalLM")
"""sglang 0.5.19 sglang/srt/arg_groups/moe_hook.py:446-450 (validate_deepep_v2_model_architecture)."""

FIELD = {"precision": "workloads.run.model", "engine_nodes": "workloads.run.rollout.nodesPerEngine",
         "deepep": "workloads.run.deepep.version", "gpu_model": "pools[].instanceType",
         "sglang_version": "workloads.run.software", "architecture": "workloads.run.model"}
"""The stack field behind each input, as refusals name it."""
CANDIDATES = {"deepep": ("none", "v1", "v2"), "precision": ("bf16", "fp8-blockwise"), "engine_nodes": (1,),
              "gpu_model": tuple(dict.fromkeys(t.gpu_model for t in catalog.CATALOG.values()
                                               if t.is_gpu and t.hand_checked)),
              "sglang_version": tuple(dict.fromkeys(p.sglang.version for p in profiles().values()))}
"""Values tried, one field at a time, to list a refusal's working alternatives (GPUs: those of the
catalog's hand-checked types)."""
DEEPGEMM_OFF_SM = 120
"""sglang 0.5.17 sglang/srt/layers/deep_gemm_wrapper/configurer.py:21-23: DeepGEMM needs TMEM/tcgen05,
"not available on SM120" (RTX PRO Blackwell), so it is off there as below SM90 (:19)."""
SHOWN: dict[str, Callable[[object], str]] = {
    "deepep": lambda v: "off" if v == "none" else str(v),  # workloads.schema.settings.DeepEPVersion spelling
    "precision": lambda v: f"<a {v} checkpoint>", "gpu_model": lambda v: f"<an {v} instance type>",
    "sglang_version": lambda v: "|".join(n for n, p in profiles().items() if p.sglang.version == v)}


def version(text: str) -> tuple[int, ...]:
    return tuple(map(int, text.split(".")[:3]))


@dataclass(frozen=True)
class Case:
    """``efa``: AWS EFA between nodes (every pool here); ``architecture``: the checkpoint's
    ``architectures[0]`` (None: not checked)."""
    precision: Precision
    engine_nodes: int
    deepep: DeepEP
    gpu_model: str
    sglang_version: str
    efa: bool = True
    architecture: str | None = None
    deepep_mode: str = "normal"
    """Legacy ``--deepep-mode`` (v1 only)."""

    @property
    def sm(self) -> int:
        try:
            return catalog.gpu(self.gpu_model).sm
        except catalog.MissingFact as e:
            raise ValueError(f"{FIELD['gpu_model']}: {e}") from None


@dataclass(frozen=True)
class MoEBackend:
    """SGLang ``--moe-a2a-backend``, ``--moe-runner-backend``, ``--deepep-mode`` (legacy ``deepep`` only),
    ``--deepep-v2-mode`` (``deepep_v2`` only); Megatron ``--moe-token-dispatcher-type`` and
    ``--moe-enable-deepep`` (needs ``flex`` and the legacy ``deep_ep.Buffer``)."""
    moe_a2a_backend: str
    moe_runner_backend: str
    deepep_mode: str | None
    deepep_v2_mode: str | None
    moe_token_dispatcher_type: str
    moe_enable_deepep: bool

    def sglang_args(self, prefix: str = "--") -> list[str]:
        pairs = {"moe-a2a-backend": self.moe_a2a_backend, "moe-runner-backend": self.moe_runner_backend,
                 "deepep-mode": self.deepep_mode, "deepep-v2-mode": self.deepep_v2_mode}
        return [t for k, v in pairs.items() if v for t in (prefix + k, v)]

    def megatron_args(self) -> list[str]:
        return ["--moe-token-dispatcher-type", self.moe_token_dispatcher_type] + (
            ["--moe-enable-deepep"] if self.moe_enable_deepep else [])


@dataclass(frozen=True)
class Rule:
    """``refuses`` gives the reason a case cannot run (else None); ``field`` (a FIELD key) is named."""
    name: str
    field: str
    refuses: Callable[[Case], str | None]


def deep_gemm_on(sm: int) -> bool:
    """SGLang turns DeepGEMM on for this compute capability (sglang 0.5.17
    sglang/srt/layers/deep_gemm_wrapper/configurer.py:19-23: not below SM90, not on SM120)."""
    return sm >= 90 and sm != DEEPGEMM_OFF_SM


def _deepep_below_sm90(c: Case) -> str | None:
    """Any DeepEP on A100 (SM80) or an SM120 GPU. sglang 0.5.17 sglang/srt/layers/deep_gemm_wrapper/
    configurer.py:19-23 turns DeepGEMM off below SM90 and on SM120, so layers/moe/ep_moe/layer.py:112-115
    (fp8) and :138-148 (bf16 with deep_gemm) never pick the new path; the old one raises at :290-293
    (NotImplementedError, bf16 normal), asserts at :297/:302 (deprecated DeepGEMM kernels) and, fp8
    low_latency, at :168-179. DeepEP V2 itself needs SM90 (DeepEP@dd758ca README.md:65)."""
    if c.deepep != "none" and not deep_gemm_on(c.sm):
        return (f"DeepEP needs SGLang's DeepGEMM MoE path, which is off below SM90 and on SM{DEEPGEMM_OFF_SM} "
                f"({c.gpu_model} is SM{c.sm})")


def _fp8_below_sm89(c: Case) -> str | None:
    """Blockwise FP8 on A100 (SM80): sglang 0.5.17 layers/quantization/fp8.py:451-457 uses Marlin
    weight-only FP8 on SM80-88 (fp8_utils.py:2029-2033) for linear layers only; Fp8MoEMethod has a Marlin
    path only for FP4 experts (fp8.py:384-389), so FP8 experts go to DeepGEMM (SM90+, configurer.py:19)
    or Triton, whose float8_e4m3fn kernels need SM89. Inferred: SGLang itself does not refuse it."""
    if c.precision == "fp8-blockwise" and c.sm < 89:
        return f"blockwise FP8 MoE experts need SM89+ ({c.gpu_model} is SM{c.sm}); use a bf16 checkpoint"


def _v2_needs_fp8_blockwise(c: Case) -> str | None:
    """deepep_v2 needs 128x128 blockwise FP8 experts with dynamic activation scaling: sglang 0.5.19
    sglang/srt/layers/moe/fused_moe_triton/layer.py:240-265 (raises for any non-Fp8MoEMethod: bf16).
    From 0.5.21 unquantized experts pass too (0.5.22 layer.py:260-266 returns early for
    UnquantizedFusedMoEMethod)."""
    if c.deepep == "v2" and c.precision != "fp8-blockwise" and version(c.sglang_version) < (0, 5, 21):
        return (f"SGLang {c.sglang_version}'s deepep_v2 requires 128x128 blockwise FP8 experts (bf16 from 0.5.21); "
                f"use an -FP8 checkpoint")


def _v2_needs_sglang_0_5_19(c: Case) -> str | None:
    """deepep_v2 first appears in sglang 0.5.19 sglang/srt/server_args.py:2366-2400 (moe_a2a_backend
    choices), deepep_v2_mode at :2406-2414; 0.5.17's server_args.py:267-278 has no deepep_v2."""
    if c.deepep == "v2" and version(c.sglang_version) < DEEPEP_V2_MIN_SGLANG:
        return f"SGLang {c.sglang_version} has no --moe-a2a-backend deepep_v2 (first in 0.5.19)"


def _v2_architecture(c: Case) -> str | None:
    """deepep_v2 is validated only for DeepseekV3/DeepseekV4/Qwen3Moe: sglang 0.5.19
    sglang/srt/arg_groups/moe_hook.py:426-456 (tuple at :446-450, called at :182-183)."""
    if c.deepep == "v2" and c.architecture is not None and c.architecture not in DEEPEP_V2_ARCHITECTURES:
        return f"SGLang's deepep_v2 accepts only {list(DEEPEP_V2_ARCHITECTURES)}, not {c.architecture}"


def _v1_across_efa_nodes(c: Case) -> str | None:
    """Legacy DeepEP across nodes needs NVSHMEM IBGDA (InfiniBand verbs), which EFA lacks: sgl-deep-ep
    0.1.2 (DeepEP 2.1.0) deep_ep/buffers/legacy.py:105-109 sets NVSHMEM_IB_ENABLE_IBGDA for RDMA ranks;
    DeepEP@dd758ca csrc/kernels/legacy/internode.cu:139-143 calls nvshmemi_ibgda_* directly. V2
    (ElasticBuffer) runs on NCCL GIN (README.md:9), which the aws-ofi-nccl plugin serves on EFA."""
    if c.deepep == "v1" and c.engine_nodes > 1 and c.efa:
        return f"legacy DeepEP across {c.engine_nodes} nodes needs NVSHMEM IBGDA, unavailable on EFA"


def _v1_unquantized_normal_before_0_5_17(c: Case) -> str | None:
    """Legacy deepep with bf16 experts in SGLang before 0.5.17 takes the working path only in
    low_latency mode with the deep_gemm runner (sglang 0.5.16 sglang/srt/layers/moe/ep_moe/layer.py:113-125);
    normal-mode dispatch raises NotImplementedError("Unquantized DeepEP MoE currently supports
    low_latency mode only") at :216-218. 0.5.17 added bf16 normal mode with deep_gemm (layer.py:138-148)."""
    if (c.deepep == "v1" and c.precision == "bf16" and c.deepep_mode != "low_latency"
            and version(c.sglang_version) < (0, 5, 17)):
        return (f"SGLang {c.sglang_version} runs legacy DeepEP with bf16 experts in low_latency mode only "
                f"(normal mode raises NotImplementedError)")


def _v1_low_latency_on_efa(c: Case) -> str | None:
    """Legacy DeepEP's low_latency kernels (also picked by ``auto`` for decode) go through NVSHMEM IBGDA
    even within one node: sgl-deep-ep 0.1.2 deep_ep/buffers/legacy.py:105-109 turns IBGDA on for
    low-latency mode; EFA has no IBGDA."""
    if c.deepep == "v1" and c.efa and c.deepep_mode in ("low_latency", "auto"):
        return f"legacy DeepEP {c.deepep_mode} mode needs NVSHMEM IBGDA, unavailable on EFA"


RULES: tuple[Rule, ...] = (
    Rule("deepep-needs-sm90", "deepep", _deepep_below_sm90),
    Rule("fp8-needs-sm89", "precision", _fp8_below_sm89),
    Rule("deepep-v2-needs-fp8-blockwise", "deepep", _v2_needs_fp8_blockwise),
    Rule("deepep-v2-needs-sglang-0.5.19", "sglang_version", _v2_needs_sglang_0_5_19),
    Rule("deepep-v2-architecture", "deepep", _v2_architecture),
    Rule("deepep-v1-not-across-efa-nodes", "deepep", _v1_across_efa_nodes),
    Rule("deepep-v1-low-latency-needs-ibgda", "deepep", _v1_low_latency_on_efa),
    Rule("deepep-v1-bf16-needs-sglang-0.5.17", "deepep", _v1_unquantized_normal_before_0_5_17),
)
"""In order: the first rule that refuses a case names the field."""


def _refused(c: Case) -> Rule | None:
    return next((r for r in RULES if r.refuses(c)), None)


def alternatives(c: Case) -> list[str]:
    """Single-field changes under which no rule refuses, the refusing rule's field first."""
    first = _refused(c)
    out = []
    for key in sorted(CANDIDATES, key=lambda k: k != (first.field if first else "")):
        for v in CANDIDATES[key]:
            if v != getattr(c, key) and _refused(replace(c, **{key: v})) is None:
                out.append(f"{FIELD[key]}={SHOWN.get(key, str)(v)}")
    return out


def case(precision: Precision, engine_nodes: int, deepep: DeepEP | Literal["off"], gpu_model: str,
         sglang_version: str, *, efa: bool = True, architecture: str | None = None,
         deepep_mode: str = "normal") -> Case:
    c = Case(precision, engine_nodes, "none" if deepep == "off" else deepep, gpu_model, sglang_version, efa,
             architecture, deepep_mode)
    bad = c.precision not in CANDIDATES["precision"] or c.deepep not in CANDIDATES["deepep"] or engine_nodes < 1
    if bad or c.sm < 80:  # c.sm raises for an unknown GPU model
        raise ValueError(f"not a case: {c}")
    return c


def refusal(*args, **kw) -> None:
    """Raise ValueError (one message: field, reason, working alternatives) when upstream cannot run the
    case; takes a Case or choose()'s arguments."""
    c = args[0] if len(args) == 1 and isinstance(args[0], Case) else case(*args, **kw)
    rule = _refused(c)
    if rule is not None:
        alts = alternatives(c)
        raise ValueError(f"{FIELD[rule.field]}: {rule.refuses(c)} [{rule.name}]; working alternatives: "
                         + (", ".join(alts) if alts else "none with a single change"))


def choose(precision: Precision, engine_nodes: int, deepep: DeepEP | Literal["off"], gpu_model: str,
           sglang_version: str, *, deepep_mode: str = "normal", efa: bool = True,
           architecture: str | None = None) -> MoEBackend:
    """The flags for a case ``refusal`` accepts (``deepep_mode``: legacy ``--deepep-mode``).

    - none: SGLang ``none``; runner ``auto``, except for blockwise-FP8 experts on a DeepGEMM GPU from SGLang
      0.5.19, where it is ``deep_gemm``: under ``auto`` sglang 0.5.19 layers/quantization/fp8.py:1111-1133
      (``is_deepgemm_moe_runner_backend_enabled``) picks DeepGEMM only with a DeepEP, Mooncake or NIXL
      all-to-all and Triton otherwise, so an NCCL arm would run another expert GEMM than the deepep_v2 arm
      it is compared with (deepep_v2's only runner is ``deep_gemm``); SGLang's own resolution accepts
      ``deep_gemm`` with ``none`` (contracts/tests/test_sglang_resolve.py). Megatron ``alltoall``.
    - v1: SGLang ``deepep`` + explicit ``deep_gemm`` (bf16 takes the working path only with it: sglang
      0.5.17 ep_moe/layer.py:138-148; fp8 picks it under auto anyway, quantization/fp8.py:1076-1089);
      Megatron ``alltoall`` (NCCL all-to-all, any DeepEP build): Megatron-LM@37f91617 fused_a2a.py:8-14
      imports ``EventOverlap`` from ``deep_ep.utils``, which DeepEP 2.x dropped, so ``flex`` +
      ``--moe-enable-deepep`` stops at "DeepEP is not installed" (token_dispatcher.py:1156) on a 2.x image.
    - v2: SGLang ``deepep_v2`` + ``deep_gemm`` (its only runner: sglang 0.5.19 arg_groups/moe_hook.py:194-208),
      ``direct`` on one node, ``hybrid`` across nodes (0.5.22 moe_hook.py:368-372 refuses direct there).
      Megatron stays on ``alltoall`` (its NCCL all-to-all), by choice, for every pinned Megatron: DeepEP V2
      (sgl-deep-ep 0.1.2 deep_ep/utils/__init__.py:3) no longer exports the EventOverlap that 37f91617
      imports, and radixark/Megatron-LM@235952df, whose flex dispatcher has a ``deepepv2`` backend
      (megatron/core/transformer/moe/token_dispatcher.py:1535-1640), passes each rank's own token count
      (``hidden_states.shape[0]``, :1582 and :1609) as ``num_max_tokens_per_rank`` and rebuilds the buffer
      on that rank-local value (fused_a2a.py:90-113), while DeepEP requires one value on every rank
      (deepseek-ai/DeepEP@dd758ca deep_ep/buffers/elastic.py:35, "all the ranks must hold the same value"). Every run passes
      ``--use-dynamic-batch-size`` (software/models.yaml recipe), so the counts differ and the first MoE
      dispatch hangs (deepseek-ai/DeepEP#604, NVIDIA/Megatron-LM#4816); that Megatron equalises the count
      across the group for HybridEP only (``moe_hybridep_pad_variable_tokens``, token_dispatcher.py:1138-1150).
      So the seed's DeepEP link changes the rollout engines alone.
    """
    c = case(precision, engine_nodes, deepep, gpu_model, sglang_version, efa=efa, architecture=architecture,
             deepep_mode=deepep_mode)
    refusal(c)
    if c.deepep == "v1":
        return MoEBackend("deepep", "deep_gemm", deepep_mode, None, "alltoall", False)
    if c.deepep == "v2":
        return MoEBackend("deepep_v2", "deep_gemm", None, "hybrid" if engine_nodes > 1 else "direct", "alltoall", False)
    same_gemm = (c.precision == "fp8-blockwise" and deep_gemm_on(c.sm)
                 and version(c.sglang_version) >= DEEPEP_V2_MIN_SGLANG)
    return MoEBackend("none", "deep_gemm" if same_gemm else "auto", None, None, "alltoall", False)

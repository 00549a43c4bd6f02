"""workloads.derive.moe_backend against the real releases: SGLang 0.5.17 / 0.5.19 / 0.5.22 and sgl-deep-ep 0.1.2
(the DeepEP SGLang 0.5.19 depends on), each wheel downloaded once (no dependencies, not installed) into
the cache tests/test_workloads_flags.py uses and read statically (zipfile + ast + text). Tests that need a
wheel skip only when it cannot be downloaded. Plus the pure decision table and the refusal messages."""

from __future__ import annotations

import ast
import functools
import itertools
import re
import zipfile

import pytest

from upstream_wheels import wheel_path

from workloads.derive import moe_backend as mb
from workloads.checks.flags import parse_server_args
from workloads.derive.moe_backend import FIELD, RULES, Case, MoEBackend, case, choose

SGLANG = ("0.5.17", "0.5.19")
DEEP_EP = ("sgl-deep-ep", "0.1.2")
GPUS = ("A100", "H100", "H200", "B200", "B300")


@functools.cache
def wheel(dist: str, version: str) -> zipfile.ZipFile:
    path, why = wheel_path(dist, version)
    if path is None:
        pytest.skip(f"{dist}=={version} wheel unavailable (no package registry?): {why}")
    return zipfile.ZipFile(path)


@functools.cache
def text(dist: str, version: str, path: str) -> str:
    return wheel(dist, version).read(path).decode()


def sg(version: str, path: str) -> str:
    return text("sglang", version, f"sglang/srt/{path}")


@functools.cache
def choices(version: str) -> dict[str, list]:
    return parse_server_args(sg(version, "server_args.py")).choices


def line_numbers(source: str, needle: str) -> list[int]:
    return [i for i, line in enumerate(source.splitlines(), 1) if needle in line]


def cases(version: str):
    for p, n, d, g in itertools.product(("bf16", "fp8-blockwise"), (1, 2, 4), ("none", "v1", "v2"), GPUS):
        yield case(p, n, d, g, version)


def outcome(c: Case) -> MoEBackend | ValueError:
    try:
        return choose(c.precision, c.engine_nodes, c.deepep, c.gpu_model, c.sglang_version)
    except ValueError as e:
        return e


# --- the flags choose() returns exist in the release -------------------------------------------------

@pytest.mark.parametrize("version", SGLANG)
def test_every_returned_flag_value_is_a_server_args_choice(version):
    choices_ = choices(version)
    returned = [b for c in cases(version) if isinstance(b := outcome(c), MoEBackend)]
    returned += [choose("bf16", 1, "v1", "H200", version, deepep_mode=m, efa=False) for m in ("normal", "low_latency")]
    assert {b.moe_a2a_backend for b in returned} == (
        {"none", "deepep", "deepep_v2"} if version == "0.5.19" else {"none", "deepep"})
    for b in returned:
        assert b.moe_a2a_backend in choices_["moe_a2a_backend"], b
        assert b.moe_runner_backend in choices_["moe_runner_backend"], b
        assert b.deepep_mode is None or b.deepep_mode in choices_["deepep_mode"], b
        assert b.deepep_v2_mode is None or b.deepep_v2_mode in choices_["deepep_v2_mode"], b


@pytest.mark.parametrize("version", SGLANG)
def test_deepep_v2_exists_exactly_from_the_minimum_version(version):
    has = tuple(map(int, version.split("."))) >= mb.DEEPEP_V2_MIN_SGLANG
    assert ("deepep_v2" in choices(version)["moe_a2a_backend"]) is has
    assert ("deepep_v2_mode" in choices(version)) is has


# --- the upstream facts behind each rule --------------------------------------------------------------

def test_unquantized_legacy_deepep_raises_in_0_5_17_without_deep_gemm():
    src = sg("0.5.17", "layers/moe/ep_moe/layer.py")
    [at] = line_numbers(src, "Unquantized DeepEP MoE currently supports low_latency mode only")
    lines = src.splitlines()
    assert "raise NotImplementedError(" in lines[at - 2] and "self.quant_config is None" in lines[at - 3]
    # the only way around it: bf16 weights + deep_gemm runner + DeepEP take the new path (needs SM90 DeepGEMM)
    assert "get_moe_runner_backend().is_deep_gemm()" in src and "Unquantized DeepEP MoE requires DeepGEMM BF16" in src
    configurer = sg("0.5.17", "layers/deep_gemm_wrapper/configurer.py")
    assert "sm_version < 90" in configurer
    # DeepGEMM is off on SM120 as well (the RTX PRO Blackwell of g7/g7e): mb.DEEPGEMM_OFF_SM
    [at] = line_numbers(configurer, f"if sm_version == {mb.DEEPGEMM_OFF_SM}:")
    assert configurer.splitlines()[at].strip() == "return False" and not mb.deep_gemm_on(mb.DEEPGEMM_OFF_SM)


def test_deepep_v2_requirements_in_0_5_19():
    hook = sg("0.5.19", "arg_groups/moe_hook.py")
    assert 'resolved_runner != "deep_gemm"' in hook and "DeepEP v2 MoE currently supports only" in hook
    fn = next(n for n in ast.walk(ast.parse(hook))
              if isinstance(n, ast.FunctionDef) and n.name == "validate_deepep_v2_model_architecture")
    archs = next(ast.literal_eval(n.value) for n in ast.walk(fn) if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "validated_architectures")
    assert archs == mb.DEEPEP_V2_ARCHITECTURES
    layer = sg("0.5.19", "layers/moe/fused_moe_triton/layer.py")
    fn = next(n for n in ast.parse(layer).body
              if isinstance(n, ast.FunctionDef) and n.name == "_validate_deepep_v2_quant_method")
    body = ast.get_source_segment(layer, fn)
    assert "not isinstance(quant_method, Fp8MoEMethod)" in body and "[128, 128]" in body
    assert 'activation_scheme != "dynamic"' in body and "requires 128x128 blockwise FP8" in body


def test_sglang_0_5_19_ships_the_deep_ep_v2_that_megatron_cannot_import():
    meta = text("sglang", "0.5.19", "sglang-0.5.19.dist-info/METADATA")
    assert f"Requires-Dist: {DEEP_EP[0]}=={DEEP_EP[1]}" in meta.splitlines()
    utils = ast.parse(text(*DEEP_EP, "deep_ep/utils/__init__.py"))
    exported = {a.asname or a.name for n in utils.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "EventOverlap" not in exported  # Megatron's fused_a2a.py: from deep_ep.utils import EventOverlap
    assert choose("fp8-blockwise", 1, "v2", "H200", "0.5.19").moe_enable_deepep is False
    assert "NVSHMEM_IB_ENABLE_IBGDA" in text(*DEEP_EP, "deep_ep/buffers/legacy.py")


CITATIONS = [  # (object whose docstring cites it, dist, version, path in the wheel, needle, cited lines)
    (mb._deepep_below_sm90, "sglang", "0.5.17", "layers/deep_gemm_wrapper/configurer.py", "sm_version < 90", "19"),
    (mb._deepep_below_sm90, "sglang", "0.5.17", "layers/moe/ep_moe/layer.py",
     "deep_gemm_wrapper.ENABLE_JIT_DEEPGEMM and isinstance(", "112-115"),
    (mb._deepep_below_sm90, "sglang", "0.5.17", "layers/moe/ep_moe/layer.py",
     "Unquantized DeepEP MoE currently supports low_latency mode only", "290-293"),
    (mb._deepep_below_sm90, "sglang", "0.5.17", "layers/moe/ep_moe/layer.py",
     "forward_deepgemm_contiguous is deprecated", "297"),
    (mb._deepep_below_sm90, "sglang", "0.5.17", "layers/moe/ep_moe/layer.py",
     "forward_deepgemm_masked is deprecated", "302"),
    (mb._deepep_below_sm90, "sglang", "0.5.17", "layers/moe/ep_moe/layer.py", "mode requires deep_gemm", "168-179"),
    (mb._fp8_below_sm89, "sglang", "0.5.17", "layers/quantization/fp8.py",
     "For GPUs that lack FP8 hardware support", "451-457"),
    (mb._fp8_below_sm89, "sglang", "0.5.17", "layers/quantization/fp8_utils.py", "return 80 <= sm < 89", "2029-2033"),
    (mb._fp8_below_sm89, "sglang", "0.5.17", "layers/quantization/fp8.py",
     "return Mxfp4MarlinMoEMethod(fp8_method", "384-389"),
    (mb._v2_needs_fp8_blockwise, "sglang", "0.5.19", "layers/moe/fused_moe_triton/layer.py",
     "requires 128x128 blockwise FP8", "240-265"),
    (mb._v2_needs_sglang_0_5_19, "sglang", "0.5.19", "server_args.py", '"deepep_v2",', "2366-2400"),
    (mb._v2_needs_sglang_0_5_19, "sglang", "0.5.19", "server_args.py", "deepep_v2_mode: A[", "2406-2414"),
    (mb._v2_needs_sglang_0_5_19, "sglang", "0.5.17", "server_args.py", "MOE_A2A_BACKEND_CHOICES = [", "267-278"),
    (mb._v2_architecture, "sglang", "0.5.19", "arg_groups/moe_hook.py", '"Qwen3MoeForCausalLM",', "446-450"),
    (mb._v2_architecture, "sglang", "0.5.19", "arg_groups/moe_hook.py",
     "validate_deepep_v2_model_architecture(server_args)", "182-183"),
    (mb._v1_across_efa_nodes, *DEEP_EP, "deep_ep/buffers/legacy.py", "NVSHMEM_IB_ENABLE_IBGDA", "105-109"),
    (mb.choose, "sglang", "0.5.17", "layers/moe/ep_moe/layer.py", "get_moe_runner_backend().is_deep_gemm()", "138-148"),
    (mb._v1_unquantized_normal_before_0_5_17, "sglang", "0.5.16", "layers/moe/ep_moe/layer.py",
     "get_deepep_mode().enable_low_latency()", "113-125"),
    (mb._v1_unquantized_normal_before_0_5_17, "sglang", "0.5.16", "layers/moe/ep_moe/layer.py",
     "Unquantized DeepEP MoE currently supports low_latency mode only", "216-218"),
    (mb._v1_low_latency_on_efa, *DEEP_EP, "deep_ep/buffers/legacy.py", "NVSHMEM_IB_ENABLE_IBGDA", "105-109"),
    (mb.choose, "sglang", "0.5.17", "layers/quantization/fp8.py",
     "def is_deepgemm_moe_runner_backend_enabled", "1076-1089"),
    (mb.choose, "sglang", "0.5.19", "arg_groups/moe_hook.py", "DeepEP v2 MoE currently supports only", "194-208"),
    (mb.choose, "sglang", "0.5.19", "layers/quantization/fp8.py",
     "def is_deepgemm_moe_runner_backend_enabled", "1111-1133"),
    (mb.choose, "sglang", "0.5.22", "arg_groups/moe_hook.py", "is NVLink-only and cannot run across", "368-372"),
    (mb.choose, *DEEP_EP, "deep_ep/utils/__init__.py", "from .event import EventHandle", "3"),
]


@pytest.mark.parametrize("obj,dist,version,path,needle,cited", CITATIONS,
                         ids=[f"{c[0].__name__}-{c[2]}-{c[3].split('/')[-1]}:{c[5]}" for c in CITATIONS])
def test_cited_lines_hold_what_the_rule_says(obj, dist, version, path, needle, cited):
    full = f"sglang/srt/{path}" if dist == "sglang" else path
    lo, _, hi = cited.partition("-")
    found = line_numbers(text(dist, version, full), needle)
    assert any(int(lo) <= n <= int(hi or lo) for n in found), (needle, found)
    doc = " ".join(obj.__doc__.split())
    assert f":{cited}" in doc and path.split("/")[-1] in doc and version in doc, (obj.__name__, cited)


# --- pure: the decision table and the refusals ---------------------------------------------------------

OK = {"none": ("none", "auto", None, None, "alltoall", False),
      "none-dg": ("none", "deep_gemm", None, None, "alltoall", False),
      "v1": ("deepep", "deep_gemm", "normal", None, "alltoall", False),
      "v2-1": ("deepep_v2", "deep_gemm", None, "direct", "alltoall", False),
      "v2-n": ("deepep_v2", "deep_gemm", None, "hybrid", "alltoall", False)}
TABLE = [  # precision, engine nodes, deepep, GPU, SGLang -> flags or the refusing rule
    ("bf16", 1, "none", "A100", "0.5.17", OK["none"]),
    ("bf16", 2, "none", "H200", "0.5.17", OK["none"]),
    ("bf16", 1, "v1", "H200", "0.5.17", OK["v1"]),
    ("fp8-blockwise", 1, "v1", "B200", "0.5.19", OK["v1"]),
    ("bf16", 2, "v1", "H100", "0.5.17", "deepep-v1-not-across-efa-nodes"),
    ("fp8-blockwise", 2, "v1", "H200", "0.5.19", "deepep-v1-not-across-efa-nodes"),
    ("bf16", 1, "v1", "A100", "0.5.17", "deepep-needs-sm90"),
    ("bf16", 1, "v2", "A100", "0.5.19", "deepep-needs-sm90"),
    ("fp8-blockwise", 1, "none", "A100", "0.5.17", "fp8-needs-sm89"),
    ("bf16", 1, "v2", "H200", "0.5.19", "deepep-v2-needs-fp8-blockwise"),
    ("bf16", 1, "v2", "H200", "0.5.17", "deepep-v2-needs-fp8-blockwise"),
    ("fp8-blockwise", 1, "v2", "H200", "0.5.17", "deepep-v2-needs-sglang-0.5.19"),
    ("fp8-blockwise", 1, "v2", "H200", "0.5.19", OK["v2-1"]),
    ("fp8-blockwise", 2, "v2", "H100", "0.5.19", OK["v2-n"]),
    ("fp8-blockwise", 4, "v2", "B300", "0.5.22", OK["v2-n"]),
    ("fp8-blockwise", 2, "none", "B200", "0.5.17", OK["none"]),
    ("fp8-blockwise", 2, "none", "H200", "0.5.19", OK["none-dg"]),  # the expert GEMM deepep_v2 runs
    ("bf16", 2, "none", "H200", "0.5.19", OK["none"]),
    ("bf16", 1, "v1", "H200", "0.5.16", "deepep-v1-bf16-needs-sglang-0.5.17"),  # Miles' SGLang line
    ("fp8-blockwise", 1, "v1", "H200", "0.5.16", OK["v1"]),
]


@pytest.mark.parametrize("precision,nodes,deepep,gpu,version,expected", TABLE)
def test_decision_table(precision, nodes, deepep, gpu, version, expected):
    if isinstance(expected, tuple):
        b = choose(precision, nodes, deepep, gpu, version)
        assert (b.moe_a2a_backend, b.moe_runner_backend, b.deepep_mode, b.deepep_v2_mode,
                b.moe_token_dispatcher_type, b.moe_enable_deepep) == expected
        return
    with pytest.raises(ValueError, match=re.escape(f"[{expected}]")):
        choose(precision, nodes, deepep, gpu, version)


def test_every_rule_refuses_something_and_cites_a_source():
    refused = {r.name for v in SGLANG for c in cases(v) if (r := mb._refused(c))}
    refused |= {r.name for r in RULES if r.refuses(Case("fp8-blockwise", 1, "v2", "H200", "0.5.19",
                                                          architecture="LlamaForCausalLM"))}
    refused |= {r.name for r in RULES if r.refuses(Case("bf16", 1, "v1", "H200", "0.5.16"))}
    refused |= {r.name for r in RULES if r.refuses(Case("fp8-blockwise", 1, "v1", "H200", "0.5.17",
                                                          deepep_mode="low_latency"))}
    assert refused == {r.name for r in RULES}
    for r in RULES:
        assert r.field in FIELD and re.search(r"(\d+\.\d+\.\d+|@[0-9a-f]{7,})\s+\S+\.(py|cu|md):\d+", r.refuses.__doc__)


def test_refusals_name_the_field_and_only_working_alternatives():
    for c in (c for v in SGLANG for c in cases(v)):
        if (rule := mb._refused(c)) is None:
            continue
        with pytest.raises(ValueError) as e:
            mb.refusal(c)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"{FIELD[rule.field]}: ") and "working alternatives: " in msg
        alts = mb.alternatives(c)
        assert alts == [] or msg.endswith(", ".join(alts)), msg
        for alt in alts:  # each alternative is one field changed to a value that runs
            key = next(k for k, f in FIELD.items() if alt.startswith(f + "="))
            value = next(v for v in mb.CANDIDATES[key] if alt == f"{FIELD[key]}={mb.SHOWN.get(key, str)(v)}")
            assert mb._refused(Case(**{**c.__dict__, key: value})) is None, (c, alt)


def test_refusal_messages_read_well():
    with pytest.raises(ValueError) as e:
        choose("bf16", 1, "v2", "H200", "0.5.19")
    assert str(e.value).startswith("workloads.run.deepep.version: SGLang 0.5.19's deepep_v2 requires 128x128 "
                                   "blockwise FP8 experts (bf16 from 0.5.21)")
    assert choose("bf16", 1, "v2", "H200", "0.5.22").moe_a2a_backend == "deepep_v2"  # 0.5.22 layer.py:260-266
    assert "workloads.run.deepep.version=off" in str(e.value) and "workloads.run.deepep.version=v1" in str(e.value)
    with pytest.raises(ValueError, match=r"^workloads.run.deepep.version: legacy DeepEP across 2 nodes .*"
                                         r"workloads.run.rollout.nodesPerEngine=1"):
        choose("bf16", 2, "v1", "H200", "0.5.17")
    assert choose("bf16", 2, "v1", "H200", "0.5.17", efa=False).moe_a2a_backend == "deepep"
    with pytest.raises(ValueError, match=r"^pools\[\]\.instanceType: unknown GPU model 'V100'"):
        choose("bf16", 1, "none", "V100", "0.5.17")
    assert choose("bf16", 1, "off", "A100", "0.5.17") == choose("bf16", 1, "none", "A100", "0.5.17")
    assert mb.refusal("fp8-blockwise", 1, "v2", "H200", "0.5.19", architecture="Qwen3MoeForCausalLM") is None
    with pytest.raises(ValueError, match=r"deepep_v2 accepts only .*not Qwen2MoeForCausalLM"):
        mb.refusal("fp8-blockwise", 1, "v2", "H200", "0.5.19", architecture="Qwen2MoeForCausalLM")


def test_args():
    b = choose("fp8-blockwise", 2, "v2", "H200", "0.5.19")
    assert b.sglang_args("--sglang-") == ["--sglang-moe-a2a-backend", "deepep_v2", "--sglang-moe-runner-backend",
                                          "deep_gemm", "--sglang-deepep-v2-mode", "hybrid"]
    assert b.megatron_args() == ["--moe-token-dispatcher-type", "alltoall"]
    assert choose("bf16", 1, "v1", "H100", "0.5.17", deepep_mode="low_latency", efa=False).megatron_args() == [
        "--moe-token-dispatcher-type", "alltoall"]  # the image's DeepEP 2.x breaks Megatron's flex import

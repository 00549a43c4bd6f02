"""The trainer starts from a BF16 checkpoint beside the FP8 one SGLang serves (Miles
docs/advanced/low-precision.md at 49cac7b5, "BF16 train + FP8 inference": ``--hf-checkpoint`` FP8 for
SGLang, ``--ref-load`` BF16 for the trainer); both are staged, and an FP8 reference is refused."""

from __future__ import annotations

import pytest
from conftest import load
from test_workloads import variant

from workloads import render
from workloads.derive.model import derive


def _flag(argv, flag: str) -> str:
    return argv[list(argv).index(flag) + 1]


def test_an_fp8_model_trains_from_its_bf16_release():
    m = derive(load("p5en-prod"))  # Qwen/Qwen3-30B-A3B-FP8
    assert _flag(m.argv, "--hf-checkpoint") == f"{m.paths.mount}/models/Qwen3-30B-A3B-FP8"
    assert _flag(m.argv, "--ref-load") == f"{m.paths.mount}/models/Qwen3-30B-A3B"
    env = {e["name"]: e.get("value") for e in render.services.stage_template(m)["spec"]["containers"][0]["env"]}
    assert (env["MODEL"], env["REF_MODEL"]) == ("Qwen/Qwen3-30B-A3B-FP8", "Qwen/Qwen3-30B-A3B")
    assert env["REF_MODEL_DIR"] == _flag(m.argv, "--ref-load")


def test_a_bf16_model_is_its_own_reference():
    m = derive(load("p4d"))  # Qwen/Qwen3-30B-A3B (BF16)
    assert _flag(m.argv, "--ref-load") == _flag(m.argv, "--hf-checkpoint")


def test_an_fp8_reference_is_refused_with_the_reason():
    with pytest.raises(Exception, match=r"refModel: .*FP8.*BF16.*low-precision"):
        variant("p5en-prod", {"workloads": {"run": {"refModel": "Qwen/Qwen3-30B-A3B-FP8"}}})


def test_the_file_system_budget_counts_both_checkpoints():
    from workloads.derive.checkpoint_budget import budget
    fp8, bf16 = load("p5en-prod"), variant("p5en-prod", {"workloads": {"run": {"model": "Qwen/Qwen3-30B-A3B"}}})
    assert budget(fp8, "fp8-blockwise").hf_bytes == budget(bf16, "bf16").hf_bytes * 3 // 2

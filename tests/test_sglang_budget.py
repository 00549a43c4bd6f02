"""DeepEP V2 rollout engines: the token capacity, prefill chunk, graph batch, request pool and static
memory are rendered together (workloads.derive.sglang_budget, checked by SGLang itself in contracts/); engines
within one node run DeepEP V2 with GIN off (direct mode)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load

from bench.experiment import arm_run, load_experiment
from workloads.checks import gate
from workloads.checks.flags import argv_pairs
from workloads.checks.runs import run_model
from workloads.derive.model import derive
from workloads.derive.sglang_budget import (DEEPEP_V2_CAPACITY_ENV, deepep_v2_budget, deepep_v2_buffer_bytes,
                                            sglang_reserve_mib)


def _engine(stack: str, nodes_per_engine: int | None = None, model: bool = False):
    cfg = load(stack)
    if nodes_per_engine is not None:
        run = cfg.workloads.run.model_copy(update={"rollout": cfg.workloads.run.rollout.model_copy(
            update={"nodes_per_engine": nodes_per_engine})})
        cfg = cfg.model_copy(update={"workloads": cfg.workloads.model_copy(update={"run": run})})
    m = derive(cfg)
    flags = {k: v[0] if v else None for k, v in argv_pairs(list(m.run_argv()[3:]))}
    return (flags, m.worker("rollout").env, m) if model else (flags, m.worker("rollout").env)


def test_the_deepep_v2_capacity_holds_the_per_rank_prefill_chunk_and_the_decode_graph():
    flags, env = _engine("p5en-prod")
    assert flags["--sglang-moe-a2a-backend"] == "deepep_v2"
    capacity, dp = int(env[DEEPEP_V2_CAPACITY_ENV]), int(flags["--sglang-dp-size"])
    assert capacity >= int(flags["--sglang-chunked-prefill-size"]) // dp  # sglang parallel_hook.py:198-203
    assert capacity >= int(flags["--sglang-cuda-graph-max-bs"])
    assert int(flags["--sglang-max-running-requests"]) // dp <= capacity  # pool_configurator.py:682


def test_the_static_memory_fraction_leaves_the_deepep_v2_buffer_out():
    b = deepep_v2_budget(144384, 16, 16, 2, 2048, 8, mla=False)
    assert b.buffer_bytes == deepep_v2_buffer_bytes(b.capacity, 2048, 8, 16, 2) > 0
    assert (1 - b.mem_fraction_static) * 144384 >= sglang_reserve_mib(144384, 16, 16, 8192, 512, False, "deepep_v2") \
        + b.buffer_bytes / 2 ** 20
    assert deepep_v2_budget(144384, 16, 16, 2, 2048, 8, mla=False, mem_fraction_static=b.mem_fraction_static) == b
    try:
        deepep_v2_budget(144384, 16, 16, 2, 2048, 8, mla=False, mem_fraction_static=0.95)
    except ValueError as err:
        assert "workloads.run.rollout.memFractionStatic" in str(err)
    else:
        raise AssertionError("a fraction without room for the buffer was accepted")


def test_engines_within_one_node_run_deepep_v2_with_gin_off():
    from workloads.render.ray import preflight_args
    flags, env, m = _engine("p5en-prod", nodes_per_engine=1, model=True)
    assert flags["--sglang-deepep-v2-mode"] == "direct" and env["EP_DISABLE_GIN"] == "1"
    assert "--gin" not in preflight_args(m, m.worker("rollout"))  # GIN is not what these pods need
    assert "--gin" not in preflight_args(m, m.worker("trainer"))  # the trainer runs no DeepEP (moe_backend.choose)
    hybrid = derive(load("p5en-prod"))
    assert "--gin" in preflight_args(hybrid, hybrid.worker("rollout"))
    flags, env = _engine("p5en-prod")
    assert flags["--sglang-deepep-v2-mode"] == "hybrid" and "EP_DISABLE_GIN" not in env


def _arm_flags(path: str, arm: str) -> dict:
    exp = load_experiment(Path(path))
    m = run_model(gate.read(exp.stack), arm_run(exp, arm))
    return {k: v[0] if v else None for k, v in argv_pairs(list(m.run_argv()[3:]))}


@pytest.mark.parametrize("arm, reserve", [
    # sglang 0.5.19 memory_hook.py:250-256 and reserve_for_graph_mb :292-324 on 141 GiB H200s, chunk 8192, decode
    # graph 512: 512 + 8192 * 1.5 + tp / 8 * 1024 + 512 * 2 [+ 512 * dp * (3 + 1.5) with DP attention] + 1536
    # for DeepSeek's MLA prefill graph, which a2a none keeps on (cuda_graph_hook.py:262-323).
    ("miles-nccl", 512 + 12288 + 2048 + 1024 + 36864 + 1536),
    ("miles-tp", 512 + 12288 + 1024 + 1024 + 1536)])
def test_an_mla_engine_with_the_prefill_graph_on_leaves_sglangs_mla_graph_reserve(arm, reserve):
    """Before: 8 MiB per prefill graph size up to the chunk (464 MiB) was counted for DeepSeek too, whose MLA
    prefill graph SGLang reserves 1.5 GiB for (memory_hook.py:319-324): seed-p5en's NCCL arm rendered 0.63,
    leaving 53422 MiB of the 54272 SGLang keeps, its TP arm 0.887 (16315 of 16384 MiB)."""
    flags = _arm_flags("experiments/seed-p5en.yaml", arm)
    assert flags.get("--sglang-moe-a2a-backend") is None  # a2a none: SGLang keeps the prefill graph on
    assert (1 - float(flags["--sglang-mem-fraction-static"])) * 144384 >= reserve


def test_the_deepep_v2_budget_does_not_count_the_prefill_graph_sglang_turns_off():
    """With a2a deepep_v2 SGLang captures no prefill graph (cuda_graph_hook.py:295-299) and reserves none
    (memory_hook.py:315-324); the one fraction of both all-to-alls leaves the larger of a2a none's reserve
    and deepep_v2's plus the buffer. On p5's H100s (Qwen3-30B-A3B, EP16 over two nodes), 81572 MiB as nvidia-smi
    would show SGLang (EC2's 81920 less the driver's share measured on an H200, ``catalog.DRIVER_SHARE``): none
    keeps 512 + 12288 + 2048 + 1024 + 36864 + 464 = 53200 MiB, deepep_v2 52736 + the 52 MiB buffer, so the
    fraction is floor((81572 - 53200) / 81572) = 0.347; both added, it was 53252 MiB."""
    flags, _ = _engine("p5")
    assert flags["--sglang-moe-a2a-backend"] == "deepep_v2"
    assert flags["--sglang-mem-fraction-static"] == "0.347"

"""DeepEP V2 rollout engines: the token capacity, prefill chunk, graph batch, request pool and static
memory are rendered together (workloads.derive.sglang_budget, checked by SGLang itself in contracts/); engines
within one node run DeepEP V2 with GIN off (direct mode)."""

from __future__ import annotations

from conftest import load

from workloads.checks.flags import argv_pairs
from workloads.derive.model import derive
from workloads.derive.sglang_budget import DEEPEP_V2_CAPACITY_ENV, deepep_v2_budget, deepep_v2_buffer_bytes


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
    b = deepep_v2_budget(144384, 16, 16, 2, 2048, 8)
    assert b.buffer_bytes == deepep_v2_buffer_bytes(b.capacity, 2048, 8, 16, 2) > 0
    assert deepep_v2_budget(144384, 16, 16, 2, 2048, 8, mem_fraction_static=b.mem_fraction_static) == b
    try:
        deepep_v2_budget(144384, 16, 16, 2, 2048, 8, mem_fraction_static=0.95)
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

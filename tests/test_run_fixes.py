"""Run-level defaults that were wrong against the upstream sources (each test fails on the old one)."""

from __future__ import annotations

from conftest import load

from workloads.model import derive
from workloads.stack import ProgramConfig  # noqa: F401  (load() returns it)


def _argv(stack: str = "p5en-prod") -> list[str]:
    return list(derive(load(stack)).argv)


def test_no_reference_model_at_kl_coefficient_zero():
    """Miles builds the reference model (--ref-load) whenever --use-kl-loss is set, even at
    coefficient 0; the default GRPO settings use 0, so the flag is left out."""
    cfg = load("p5en-prod")
    assert cfg.workloads.run.grpo.kl_loss_coef == 0
    assert "--use-kl-loss" not in _argv()


def test_no_nccl_proto_simple_on_gpu_pods():
    """Only aws-ofi-nccl 1.5.0 and older need NCCL_PROTO=Simple (aws-ofi-nccl README)."""
    m = derive(load("p5en-prod"))
    for g in m.workers:
        assert "NCCL_PROTO" not in g.env, g.name
    assert m.worker("trainer").env["NCCL_NET_PLUGIN"] == "ofi"


def test_capacity_block_pool_can_scale_to_zero():
    """EKS scales a Capacity Block group to 0 at the block's end and requires 0 before upgrades."""
    for stack in ("p5en-prod",):
        for p in load(stack).pools:
            if p.capacity.type.value == "CAPACITY_BLOCK":
                assert p.nodes.min == 0 and p.nodes.desired == p.nodes.max


def test_rollout_memory_fraction_is_left_to_sglang_unless_set():
    """Dedicated rollout GPUs: SGLang sizes its static memory itself (0.7 is the colocated value)."""
    assert "--sglang-mem-fraction-static" not in _argv()
    from test_workloads import variant
    argv = list(derive(variant("p5en-prod", {"workloads": {"run": {"rollout": {"memFractionStatic": 0.85}}}})).argv)
    assert argv[argv.index("--sglang-mem-fraction-static") + 1] == "0.85"

"""Run-level defaults that were wrong against the upstream sources (each test fails on the old one)."""

from __future__ import annotations

from conftest import load

from workloads.derive.model import derive
from workloads.schema.stack import ProgramConfig  # noqa: F401  (load() returns it)


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
    """Dedicated rollout GPUs: SGLang sizes its static memory itself (0.7 is the colocated value), except
    with DeepEP V2, whose buffer SGLang does not reserve (workloads.derive.sglang_budget): a fraction is set then,
    and a given one must leave the buffer its room."""
    import pytest
    from test_workloads import variant

    from stackconfig.stack import StackConfigError
    assert "--sglang-mem-fraction-static" not in _argv("p5en-shared")
    argv = list(derive(variant("p5en-shared", {"workloads": {"run": {"rollout": {"memFractionStatic": 0.85}}}})).argv)
    assert argv[argv.index("--sglang-mem-fraction-static") + 1] == "0.85"
    assert "--sglang-mem-fraction-static" in _argv("p5en-prod")  # DeepEP V2
    argv = list(derive(variant("p5en-prod", {"workloads": {"run": {"rollout": {"memFractionStatic": 0.6}}}})).argv)
    assert argv[argv.index("--sglang-mem-fraction-static") + 1] == "0.6"
    with pytest.raises(StackConfigError, match="workloads.run.rollout.memFractionStatic: 0.85 leaves no room"):
        variant("p5en-prod", {"workloads": {"run": {"rollout": {"memFractionStatic": 0.85}}}})


def test_checkpoints_are_retained_and_fit_the_file_system():
    """Without retention a 3,000-rollout run saving every 20 keeps 150 saves of ~427 GB (64 TB) on a
    4,800 GiB file system. With --save-retain-interval R Megatron deletes the previous save unless its
    iteration is a multiple of R; Miles saves at rollout ids i with (i + 1) % interval == 0."""
    from workloads.derive.checkpoint_budget import budget, retain_interval
    from workloads.derive.deepep import expert_precision
    cfg = load("p5en-prod")
    argv = _argv()
    r = int(argv[argv.index("--save-retain-interval") + 1])
    interval, rollouts = cfg.workloads.run.save_interval, cfg.workloads.run.grpo.num_rollout
    assert r == retain_interval(cfg) and r % interval == 0  # Megatron's own constraint
    saved = [i for i in range(rollouts) if (i + 1) % interval == 0]
    assert len(saved) == 150 and not [i for i in saved if i > 0 and i % r == 0]  # none kept forever
    b = budget(cfg, expert_precision(cfg))
    assert round(b.save_bytes / 1e9) == 427 and b.saves_kept == 2 and b.fits
    assert len(saved) * b.save_bytes > b.capacity_bytes  # what keeping every save would need


def test_a_file_system_too_small_for_the_run_is_refused():
    import pytest
    from test_workloads import variant

    from stackconfig.stack import StackConfigError

    from stackconfig.stack import StackConfigError
    with pytest.raises(StackConfigError, match=r"workloads.storage.capacityGib: 4800 GiB .* allowed: >= 9600"):
        variant("p5en-prod", {"workloads": {"run": {"model": "Qwen/Qwen3-235B-A22B"}}})  # 2 x 3.3 TB saves
    with pytest.raises(StackConfigError, match=r"workloads.run.modelParamsB: required for org/other-moe"):
        variant("p5en-prod", {"workloads": {"run": {"model": "org/other-moe", "modelArgs": ["--num-layers", "2"]}}})


def test_spot_pools_offer_several_drop_in_types():
    """EKS recommends several instance types per Spot node group; they go on the node group and the
    launch template names none. A type that is not a drop-in is refused."""
    import pytest
    from conftest import graph_of
    from test_workloads import variant

    from stackconfig.stack import StackConfigError
    cfg = load("p4d")
    rollout = next(p for p in cfg.pools if p.name == "rollout")
    assert rollout.capacity.type.value == "SPOT" and rollout.instance_types == ["p4d.24xlarge", "p4de.24xlarge"]
    graph = graph_of("p4d")
    (ng,) = [n for n in graph.of_type("aws:eks/nodeGroup:NodeGroup") if n.inputs["labels"]["rl.platform/pool"] == "rollout"]
    assert ng.inputs["instanceTypes"] == ["p4d.24xlarge", "p4de.24xlarge"]
    (lt,) = [t for t in graph.of_type("aws:ec2/launchTemplate:LaunchTemplate") if t.name.endswith("-rollout")]
    assert "instanceType" not in lt.inputs and len(lt.inputs["networkInterfaces"]) == 5  # EFA layout kept
    with pytest.raises(StackConfigError, match=r"spotAlternatives: p5.48xlarge is not a drop-in for p4d.24xlarge"):
        variant("p4d", {"pools": [dict(p, spotAlternatives=["p5.48xlarge"]) if p["name"] == "rollout" else p
                                  for p in raw_pools("p4d")]})


def test_reward_pools_are_never_spot():
    """Miles' remote reward call is one POST without retry: a reclaimed reward node fails rollouts."""
    from stackconfig.files import stack_names
    for stack in stack_names():
        assert all(p.capacity.type.value != "SPOT" for p in load(stack).pools if p.role.value == "reward"), stack


def raw_pools(stack: str) -> list[dict]:
    from stackconfig.files import raw_stack
    return raw_stack(stack)["pools"]


def test_a_new_attempt_is_a_new_rayjob_resuming_from_the_same_checkpoints():
    """KubeRay never reruns a finished RayJob; a new name makes Pulumi replace it, and both attempts
    load and save the same directory (Miles 49cac7b5 resumes the rollout counter from it)."""
    from test_workloads import variant

    from workloads import render
    first = derive(variant("p5en-prod", {"workloads": {"run": {"rayJob": True}}}))
    second = derive(variant("p5en-prod", {"workloads": {"run": {"rayJob": True, "attempt": 2}}}))
    a, b = render.rayjob(first), render.rayjob(second)
    assert (a["metadata"]["name"], b["metadata"]["name"]) == ("grpo-1", "grpo-2")
    argv_a, argv_b = list(first.argv), list(second.argv)
    for flag in ("--load", "--save"):
        assert argv_a[argv_a.index(flag) + 1] == argv_b[argv_b.index(flag) + 1]
    assert argv_a[argv_a.index("--load") + 1] == argv_a[argv_a.index("--save") + 1]


def test_pool_claims_sum_every_consumer_of_a_pool():
    from workloads.derive.resources import GPU
    from workloads.checks.schedulability import Placement, check, pool_claims
    m = derive(load("p5en-prod"))
    placements = check(m)
    claims = {c.pool: c for c in pool_claims(m, placements)}
    assert claims["train"].claimed[GPU] == claims["train"].capacity[GPU] == 128 and not claims["train"].over
    # A second whole-node consumer of the training pool (what a TorchX gang next to the RayCluster was).
    extra = Placement("torchx-trainer", "train", True, [], 16, dict(next(p for p in placements
                                                                       if p.pod == "ray-trainer").requests))
    over = {c.pool: c for c in pool_claims(m, placements + [extra])}["train"].over
    assert GPU in over and "vpc.amazonaws.com/efa" in over

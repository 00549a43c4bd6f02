"""The seed's comparison is the one it claims: the arms differ, as rendered (RayJob image, pod env,
argv, engine span), only where the experiment says they do."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from bench.arms import arm_changes, render_arm
from bench.experiment import arm_run, load_experiment
from stackconfig.files import read_stack
from workloads.schema.stack import ProgramConfig
from workloads.checks import gate
from workloads.checks.run_plan import Planner

SEED = Path("experiments/seed-ab.yaml")
SEED_SHAPE = Path("experiments/seed-p5en.yaml")

ALL_TO_ALL_ARGV = {"--sglang-moe-a2a-backend", "--sglang-deepep-mode", "--sglang-deepep-v2-mode"}
"""SGLang's all-to-all (workloads.derive.moe_backend.MoEBackend.sglang_args), nothing else: both arms run the
same expert GEMM (``--sglang-moe-runner-backend``) and the same trainer dispatcher (Megatron stays on
``alltoall`` with DeepEP V2: workloads.derive.moe_backend.choose)."""
ALL_TO_ALL_ENV = re.compile(r"^env\.rollout\.(NCCL_GIN_ENABLE|NCCL_GIN_TYPE|NCCL_SYM_GIN_KERNELS_ENABLE|EP_[A-Z0-9_]+|"
                            r"SGLANG_DEEPEP_[A-Z0-9_]+)$")
"""On the rollout pods only: NCCL GIN (workloads.derive.env.deepep_env), DeepEP's own EP_* variables and
SGLang's DeepEP budget and SM count; the trainer pods run no DeepEP in either arm."""


def _allowed(key: str) -> bool:
    kind, _, rest = key.partition(".")
    if kind == "argv":
        return rest in ALL_TO_ALL_ARGV
    if kind == "env":
        return bool(ALL_TO_ALL_ENV.match(key))
    return False


def stack_of(exp) -> ProgramConfig:
    return gate.read(exp.stack)


@pytest.mark.parametrize("path", [SEED, SEED_SHAPE])
def test_the_two_miles_arms_differ_only_in_the_all_to_all(path):
    """Before: only the v2 arm's pods set NCCL_CUMEM_ENABLE=1; SGLang sets 0 when it is unset
    (sglang 0.5.19 srt/entrypoints/engine.py:1658-1659), so NCCL ran on cuMem (NVLS buffers, symmetric
    windows) in one arm alone (workloads.derive.env.NCCL_ENV)."""
    exp = load_experiment(path)
    diff = arm_changes(exp, "miles-nccl", "miles-deepep-v2", stack_of(exp))
    assert "argv.--sglang-moe-a2a-backend" in diff  # the comparison is real
    assert [k for k in diff if not _allowed(k)] == []


@pytest.mark.parametrize("path", [SEED, SEED_SHAPE])
def test_the_baseline_runs_nccl_over_efa(path):
    """The seed's baseline is "a Slime stack without EFA-accelerated expert parallelism": its NCCL
    still crosses nodes over EFA (aws-ofi-nccl); only the experts' all-to-all is plain NCCL."""
    exp = load_experiment(path)
    base = render_arm(exp, exp.baseline, stack_of(exp))
    assert base["entryPoint"] == "/root/slime/train.py"
    for group in ("trainer", "rollout"):
        assert base[f"env.{group}.NCCL_NET_PLUGIN"] == "ofi" and base[f"env.{group}.FI_PROVIDER"] == "efa"
        assert f"env.{group}.NCCL_NET" not in base
    tcp = [a.name for a in exp.arms if arm_run(exp, a.name).fabric == "sockets"]
    assert all("tcp" in name for name in tcp)  # a TCP arm, if any, says so in its name


def test_the_report_names_what_each_link_changes_as_rendered(tmp_path):
    from bench.__main__ import main
    from bench.simulate import ArmTruth, Truth, simulate
    truth = Truth(arms={a: ArmTruth(tokens_per_s=t, repeat_drift=0.0) for a, t in
                        (("slime", 40000), ("miles-tp", 47000), ("miles-nccl", 45000), ("miles-deepep-v2", 60000))},
                  seed=1)
    simulate(SEED, truth, tmp_path / "d")
    assert main(["report", str(tmp_path / "d"), "--stack", "p5en-shared", "--no-plots"]) == 0
    links = {link["name"]: link["changes"] for link in
             json.loads((tmp_path / "d" / "report.json").read_text())["decomposition"]["links"]}
    assert links["deepep"]["argv.--sglang-moe-a2a-backend"] == [None, "deepep_v2"]
    assert "deepep.version" not in links["deepep"]  # a run-file field, not what runs
    assert links["framework"]["entryPoint"] == ["/root/slime/train.py", "/root/miles/train.py"]
    assert links["expert-parallel"]["argv.--sglang-ep-size"] == ["1", "16"]
    assert links["expert-parallel"]["engineSpanNodes"] == [1, 2]
    # prices from another stack: the arms still render on the experiment's own (p5en-shared)
    assert main(["report", str(tmp_path / "d"), "--stack", "p5en-prod", "--no-plots"]) == 0


@pytest.mark.parametrize("path", [SEED, SEED_SHAPE, Path("experiments/example-ab.yaml")])
def test_every_arm_starts_on_its_experiments_stack(path):
    """Each arm, alone on the idle stack, is one the offline plan starts (a run above its queue's limit
    would wait for ever: workloads.checks.runs.check_run)."""
    exp = load_experiment(path)
    planner = Planner(gate.read(exp.stack))
    for arm in exp.arms:
        (decision,) = planner.plan([arm_run(exp, arm.name)])
        assert decision.action == "starts", (arm.name, decision.why)


def test_bench_refuses_an_experiment_that_never_starts_before_any_attempt(tmp_path, capsys):
    """The seed's shape on p5en-shared: team alpha's queue can never hold 384 GPUs there."""
    from bench.__main__ import main
    doc = yaml.safe_load(SEED_SHAPE.read_text()) | {"stack": "p5en-shared"}
    doc["base"]["team"] = "alpha"
    exp = tmp_path / "seed-shared.yaml"
    exp.write_text(yaml.safe_dump(doc))
    submitted = []
    assert main(["estimate", str(exp)]) == 1
    assert main(["run", str(exp), "--dry-run"]) == 1
    assert main(["run", str(exp), "--out", str(tmp_path / "out"), "--log-bucket", "b"],
                client=lambda: submitted.append("client") or pytest.fail("a cluster was contacted")) == 1
    err = capsys.readouterr()
    assert "more than queue team-alpha's limit of 192" in err.err and "apiVersion" not in err.out
    assert submitted == [] and not (tmp_path / "out").exists()


def test_the_seed_shape_is_16_training_and_32_rollout_p5en_nodes():
    exp = load_experiment(SEED_SHAPE)
    seed = stack_of(exp)
    for arm in exp.arms:
        run = arm_run(exp, arm.name)
        assert run.nodes == {"train": 16, "rollout": 32}
        assert {p.name: p.instance_type for p in seed.pools if p.name in run.nodes} == \
            {"train": "p5en.48xlarge", "rollout": "p5en.48xlarge"}
    readme = Path("docs/getting-started/seed-benchmark.md").read_text()
    assert f"moe-rl bench estimate {SEED_SHAPE}\n" in readme
    from bench.cost import estimate
    est = estimate(exp, seed)
    assert est.usd is None  # the stack's reservations carry no contract price: no dollar figure
    assert f"{est.node_hours:,.1f} node-hours" in " ".join(readme.split())  # the seed benchmark page's figure


@pytest.mark.parametrize("path", [SEED, SEED_SHAPE])
def test_the_simplest_alternative_is_an_arm_of_each_seed_experiment(path):
    """AWS's SGLang-on-EFA A/B (awslabs/awsome-distributed-ai sglang/dsr1-deepep-efa, 2 p5en, TP16/EP16)
    found pure tensor parallelism faster than both all-to-alls: each seed experiment has an arm whose
    engines shard the experts by TP alone (no expert parallelism, so no all-to-all), with the same model,
    image, expert GEMM and GPUs as the Miles arms, in the decomposition chain."""
    exp = load_experiment(path)
    cfg = stack_of(exp)
    nccl = render_arm(exp, "miles-nccl", cfg)
    tp = render_arm(exp, "miles-tp", cfg)
    assert tp["argv.--sglang-ep-size"] == "1" and "argv.--sglang-moe-a2a-backend" not in tp
    assert int(tp["argv.--rollout-num-gpus-per-engine"]) < int(nccl["argv.--rollout-num-gpus-per-engine"])
    for key in ("image.rollout", "argv.--hf-checkpoint", "argv.--sglang-moe-runner-backend", "argv.--rollout-num-gpus",
                "argv.--actor-num-nodes"):
        assert tp[key] == nccl[key], key
    assert [(link.from_, link.to) for link in exp.decomposition] == [
        ("slime", "miles-tp"), ("miles-tp", "miles-nccl"), ("miles-nccl", "miles-deepep-v2")]


def test_the_seed_shape_runs_a_super_sparse_fp8_model_and_seed_ab_keeps_qwen():
    """seed-p5en measures what the seed measured: DeepSeek-V3's architecture (256 routed experts, top-8, FP8 as
    released), its tensor-parallel arm over the whole node (2048 / 8 = 256 columns, whole 128 blocks);
    seed-ab keeps Qwen3-30B-A3B (128 experts) on one node."""
    from software import models
    exp, small = load_experiment(SEED_SHAPE), load_experiment(SEED)
    entry = models.catalog().model(exp.base["model"])
    arch = entry.architecture
    assert entry.fp8_native and arch.dimension("--num-experts") == 256 and arch.dimension("--moe-router-topk") == 8
    assert arch.dimension("--moe-ffn-hidden-size") // 8 % 128 == 0
    assert render_arm(exp, "miles-tp", stack_of(exp))["argv.--rollout-num-gpus-per-engine"] == "8"
    assert small.base["model"] == "Qwen/Qwen3-30B-A3B-FP8"

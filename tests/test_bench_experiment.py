"""Experiment files: arms deep-merged onto the base and validated as run files, the run order, and
`estimate` from the stack's pool prices."""

from pathlib import Path

import pytest
import yaml

from bench.__main__ import main
from bench.cost import estimate
from bench.experiment import (Experiment, arm_run, deep_merge, differences, load_experiment, parse_experiment,
                              schedule)
from stackconfig.errors import BadInput
from stackconfig.files import read_stack
from workloads.schema.stack import ProgramConfig
from workloads.checks import gate

EXAMPLE = Path("experiments/example-ab.yaml")


def raw() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_arms_are_the_base_with_their_overrides():
    exp = load_experiment(EXAMPLE)
    nccl, deepep = arm_run(exp, "nccl", 2), arm_run(exp, "deepep-v1")
    assert nccl.name == "example-ab-nccl-r2" and nccl.grpo.num_rollout == exp.warmup_steps + exp.steps
    assert nccl.deepep.version.value == "off" and deepep.deepep.version.value == "v1"
    assert nccl.model == deepep.model == "Qwen/Qwen3-30B-A3B-FP8" and nccl.nodes == deepep.nodes
    assert differences(exp, "nccl", "deepep-v1") == {"deepep.version": ("off", "v1")}


def test_any_run_file_field_can_vary():
    doc = raw()
    doc["arms"][1]["set"] = {"nodes": {"rollout": 4}, "rollout": {"nodesPerEngine": 2}, "grpo": {"lr": 2e-6}}
    exp = parse_experiment(doc, "x.yaml")
    run = arm_run(exp, "deepep-v1")
    assert run.nodes == {"train": 2, "rollout": 4} and run.rollout.nodes_per_engine == 2
    assert run.grpo.lr == 2e-6 and run.grpo.rollout_batch_size == 32  # merged, not replaced


def test_deep_merge_replaces_lists_and_scalars():
    assert deep_merge({"a": {"b": 1, "c": [1]}, "d": 1}, {"a": {"c": [2]}, "d": 2}) == {"a": {"b": 1, "c": [2]}, "d": 2}


def test_the_schedule_runs_mirrored_blocks():
    exp = load_experiment(EXAMPLE)
    arms = [a.name for a in exp.arms]
    assert [a.folder for a in schedule(exp)] == [f"{a}/r1" for a in arms] + [f"{a}/r2" for a in arms[::-1]] + [
        f"{a}/r3" for a in arms]


def test_fewer_than_three_repeats_or_too_few_measured_steps_are_refused():
    with pytest.raises(ValueError, match="repeats: 2 is not allowed; allowed: greater than or equal to 3"):
        parse_experiment({**raw(), "repeats": 2}, "x.yaml")
    with pytest.raises(ValueError, match="minMeasuredSteps: 40 is more than steps"):
        parse_experiment({**raw(), "minMeasuredSteps": 40}, "x.yaml")
    with pytest.raises(ValueError, match="order: 'alternate' is not allowed; allowed: 'mirrored'"):
        parse_experiment({**raw(), "order": "alternate"}, "x.yaml")


@pytest.mark.parametrize("change, message", [
    (lambda d: d["arms"][1]["set"].update({"deepep": {"version": "v9"}}),
     "arms[deepep-v1].set.deepep.version: 'v9' is not allowed; allowed: "),
    (lambda d: d["arms"][0]["set"].update({"nodez": {}}), "arms[nccl].set.nodez: unknown key"),
    (lambda d: d["base"].update({"team": 7}), "base.team: 7 is not allowed; allowed: a valid string"),
    (lambda d: d["base"].pop("nodes"), "base.nodes: missing; allowed: this key is required"),
    (lambda d: d.update({"baseline": "nope"}), "baseline: 'nope' is not an arm; allowed: nccl, deepep-v1"),
    (lambda d: d.update({"baseline": "deepep-v1-faults"}), "is a fault arm; allowed: an arm without faults"),
    (lambda d: d["decomposition"][0].update({"from": "deepep-v1"}), "the links form one chain"),
    (lambda d: d["arms"][2]["faults"][0].update({"atStep": 999}), "step 999 is after the last step 33; allowed: 1..33"),
    (lambda d: d.update({"steps": 0}), "steps: 0 is not allowed; allowed: greater than or equal to 1"),
])
def test_bad_files_fail_naming_file_and_field(change, message):
    doc = raw()
    change(doc)
    with pytest.raises(BadInput) as err:
        parse_experiment(doc, "bad.yaml")
    assert any(line.startswith("bad.yaml: ") and message in line for line in err.value.lines()), err.value.lines()


def test_every_problem_is_its_own_line_naming_the_field_where_the_file_sets_it():
    """A base problem is every arm's, said once; an arm's override is named under the arm."""
    doc = raw()
    doc["base"]["colour"] = "blue"
    doc["arms"][0]["set"]["nodez"] = {}
    doc["arms"][1]["set"]["deepep"] = {"version": "v9"}
    with pytest.raises(BadInput) as err:
        parse_experiment(doc, "bad.yaml")
    assert err.value.lines() == ["bad.yaml: base.colour: unknown key", "bad.yaml: arms[nccl].set.nodez: unknown key",
                                 "bad.yaml: arms[deepep-v1].set.deepep.version: 'v9' is not allowed; allowed: "
                                 "'v2', 'v1' or 'off'"]
    doc.update(baseline="nope", minMeasuredSteps=40)  # problems across fields, with the arms' own
    with pytest.raises(BadInput) as err:
        parse_experiment(doc, "bad.yaml")
    assert [line.split(": ")[1] for line in err.value.lines()] == [
        "baseline", "minMeasuredSteps", "base.colour", "arms[nccl].set.nodez", "arms[deepep-v1].set.deepep.version"]
    with pytest.raises(ValueError, match="baseline: 'nope' is not an arm"):  # the model alone refuses them too
        Experiment.model_validate(doc)


def test_a_file_that_cannot_be_read_or_parsed_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="nope.yaml: \\(file\\): cannot be read: "):
        load_experiment(tmp_path / "nope.yaml")
    (tmp_path / "x.yaml").write_text("name: [unclosed\n")
    with pytest.raises(BadInput, match="x.yaml: \\(file\\): not valid YAML: "):
        load_experiment(tmp_path / "x.yaml")


def test_seed_ab_validates():
    exp = load_experiment(Path("experiments/seed-ab.yaml"))
    assert [a.name for a in exp.arms] == ["slime", "miles-tp", "miles-nccl", "miles-deepep-v2"]
    runs = {a.name: arm_run(exp, a.name) for a in exp.arms}
    assert {r.model for r in runs.values()} == {"Qwen/Qwen3-30B-A3B-FP8"}
    assert len({(tuple(sorted(r.nodes.items())), r.grpo.rollout_max_response_len) for r in runs.values()}) == 1
    assert differences(exp, "miles-nccl", "miles-deepep-v2").keys() == {"deepep.version"}  # the link isolates DeepEP
    assert differences(exp, "slime", "miles-nccl").keys() == {"software", "rollout.nodesPerEngine"}  # both over EFA
    assert differences(exp, "miles-tp", "miles-nccl").keys() == {  # the simplest alternative: TP alone, 2 GPUs
        "rollout.nodesPerEngine", "rollout.gpusPerEngine", "rollout.expertParallel", "rollout.dpAttention"}


def test_estimate_from_the_stack_prices(capsys):
    exp = load_experiment(EXAMPLE)
    stack = gate.read("p5en-shared")
    est = estimate(exp, stack)
    # start-up, 33 steps and 4 saves (after rollouts 10, 20, 30 and the last) of 427 GB at p5en-shared's
    # provisioned 1,172 MB/s (4,800 GiB x 250 MB/s per TiB): the nodes wait for each save
    save_s = 427e9 / (4800 / 1024 * 250e6)
    hours = (15 * 60 + 33 * 150 + 4 * save_s) / 3600
    assert est.attempts == 9 and est.hours == pytest.approx(9 * hours)
    # p5en-shared's pools are a Capacity Block and an ODCR with no contract price: no cost, never on-demand
    assert est.usd is None
    assert main(["estimate", str(EXAMPLE)]) == 0
    text = capsys.readouterr().out
    assert "total: 9 attempts" in text and "Assumed (experiment file, not measured): 150 s per step" in text
    assert "no contract price (set capacity.hourlyPrice of pool train" in text


def test_estimate_refuses_what_run_refuses_and_shows_the_reserved_pools(capsys):
    """p5en-prod submits through its own RayCluster: `bench run` refuses it, so `estimate` does too."""
    assert main(["estimate", str(EXAMPLE), "--stack", "p5en-prod"]) != 0
    assert "workloads.submit raycluster" in capsys.readouterr().err
    stack = gate.read("p5en-shared")
    est = estimate(load_experiment(EXAMPLE), stack)
    pools = {p.name: p for p in stack.pools}
    assert [r.split(" (")[0] for r in est.reserved] == ["pool rollout", "pool train"]
    assert f"{pools['rollout'].nodes.desired} nodes x {est.hours:.1f} h" in est.reserved[0]
    assert "paid whether used or not" in est.reserved[0]


def test_estimate_refuses_a_pool_the_stack_lacks(capsys, tmp_path):
    doc = raw()
    doc["base"]["nodes"] = {"train": 2, "gpu": 2}
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(doc))
    assert main(["estimate", str(tmp_path / "x.yaml")]) == 1
    assert "nodes.gpu: stack 'p5en-shared' has no pool 'gpu'" in capsys.readouterr().err

"""The offline plan of a set of runs against a stack: gang placement by priority within team caps."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT
from test_workloads import variant

from workloads.runs import NeverFits, RunFile, load_run, main, plan_runs

TEAMS = {"workloads": {"teams": [{"name": "alpha", "gpus": {"train": {"guarantee": 64, "cap": 128},
                                                              "rollout": {"cap": 128}}},
                                 {"name": "beta", "gpus": {"train": {"cap": 64}, "rollout": {"cap": 256}}}]}}


def run(name, team, priority=0, **nodes) -> RunFile:
    return RunFile(name=name, team=team, priority=priority, nodes=nodes)


def test_overlapping_demand_starts_by_priority_and_never_places_a_run_partly():
    cfg = variant("p5en-prod", TEAMS)  # train 16 nodes, rollout 32 nodes, 8 GPUs each
    decisions = {d.run: d for d in plan_runs(cfg, [
        run("a1", "alpha", 1, train=8, rollout=8),
        run("b1", "beta", 5, train=8, rollout=16),
        run("a2", "alpha", 0, train=8, rollout=8),   # train is full after b1 and a1: waits, takes nothing
        run("b2", "beta", 0, rollout=8),             # fits the nodes left
    ])}
    assert decisions["b1"].starts and decisions["a1"].starts and decisions["b2"].starts
    assert not decisions["a2"].starts and "pool train: 8 nodes needed, 0 free" in decisions["a2"].why
    assert [d.run for d in plan_runs(cfg, [run("x", "alpha", 0, train=1), run("y", "beta", 3, train=1)])] == ["y", "x"]


def test_a_team_cap_holds_a_run_back_even_with_free_nodes():
    cfg = variant("p5en-prod", TEAMS)
    decisions = plan_runs(cfg, [run("b1", "beta", 0, train=8), run("b2", "beta", 0, train=1)])
    assert decisions[0].starts and not decisions[1].starts
    assert "team beta would use 72 GPUs, cap 64" in decisions[1].why


@pytest.mark.parametrize("bad, message", [
    (run("big", "alpha", 0, train=17), "run big: pool train: 17 nodes requested, the pool has 16"),
    (run("greedy", "beta", 0, train=9), "run greedy: pool train: nvidia.com/gpu 72 exceeds team beta's cap of 64"),
    (run("lost", "gamma", 0, train=1), "run lost: team 'gamma' is not declared"),
    (run("cpu", "alpha", 0, cpu=1), "run cpu: pool 'cpu' is not a GPU pool"),
])
def test_a_run_that_can_never_fit_is_refused_naming_run_pool_and_resource(bad, message):
    with pytest.raises(NeverFits, match=message):
        plan_runs(variant("p5en-prod", TEAMS), [bad])


def test_the_command_reads_run_files_and_exits_non_zero_when_a_run_can_never_fit(tmp_path, capsys):
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.p5en-prod.yaml").read_text())
    doc["config"]["moe-rl-platform:platform"]["workloads"] = TEAMS["workloads"]
    (tmp_path / "Pulumi.p5en-prod.yaml").write_text(yaml.safe_dump(doc))
    sample = ROOT / "runs" / "grpo-qwen3-30b.yaml"
    assert load_run(sample).team == "alpha"
    assert main(["p5en-prod", str(sample), "--stack-dir", str(tmp_path)]) == 0
    assert "grpo-qwen3-30b" in capsys.readouterr().out
    too_big = tmp_path / "too-big.yaml"
    too_big.write_text("name: too-big\nteam: alpha\nnodes: {train: 20}\n")
    assert main(["p5en-prod", str(too_big), "--stack-dir", str(tmp_path)]) == 1
    assert "run too-big: pool train: 20 nodes requested" in capsys.readouterr().err

"""The offline plan: its figures for every stack checked against the catalog and the config, and
the command's output, JSON, diagram and exit codes."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest
import yaml
from conftest import ROOT, graph_of, load

from analysis import plan as plan_cli
from catalog import CATALOG
from stackconfig.stack import Role
from components.network import pool_ip_demand, prefix_delegation
from analysis.planning import make_plan
from stackconfig.files import PROJECT


def _plan(stack):
    cfg = load(stack)
    placements, note = plan_cli.workload_placements(cfg)
    return cfg, make_plan(cfg, graph_of(stack), placements, note)


def test_pool_figures_follow_catalog_and_config(stack):
    cfg, plan = _plan(stack)
    assert [f.name for f in plan.pools] == [p.name for p in cfg.pools]
    for pool, fig in zip(cfg.pools, plan.pools):
        row = CATALOG[pool.instance_type]
        assert fig.instance_type == pool.instance_type
        assert fig.capacity == pool.capacity.type.value
        assert (fig.nodes_min, fig.nodes_desired, fig.nodes_max) == (pool.nodes.min, pool.nodes.desired,
                                                                   pool.nodes.max)
        assert fig.gpus_desired == row.gpus * pool.nodes.desired
        assert fig.efa_max == row.efa_max
        assert fig.efa_attached == (row.efa_max if pool.efa_enabled else 0)
        assert fig.efa_gbps_per_node == (row.efa_gbps if pool.efa_enabled else 0)
        assert fig.efa_gbps_total == fig.efa_gbps_per_node * pool.nodes.desired
        price = pool.capacity.hourly_price or row.on_demand_hourly_usd
        assert fig.usd_per_hour == pytest.approx(price * pool.nodes.desired)
        assert fig.usd_per_hour_max == pytest.approx(price * pool.nodes.max)
        if row.gpus:
            assert fig.usd_per_gpu_hour == pytest.approx(price / row.gpus)
    t = plan.totals
    assert t.gpus_desired == sum(CATALOG[p.instance_type].gpus * p.nodes.desired for p in cfg.pools)
    assert t.usd_per_hour == pytest.approx(sum(p.hourly_price * p.nodes.desired for p in cfg.pools))


def test_ip_budget_counts_every_pool_at_max_size(stack):
    cfg, plan = _plan(stack)
    delegated = prefix_delegation(cfg)
    assert plan.prefix_delegation == delegated
    budgets = {b.name: b for b in plan.ip_budget}
    assert budgets["nodes"].demand == sum(pool_ip_demand(p, delegated) for p in cfg.pools if p.single_az)
    for spread in ("private-a", "private-b"):
        assert budgets[spread].demand == sum(pool_ip_demand(p, delegated) for p in cfg.pools if not p.single_az)
    assert set(budgets["nodes"].pools) == {p.name for p in cfg.pools if p.single_az}
    assert all(b.fits for b in plan.ip_budget)


def test_every_stack_plans_clean(stack):
    _, plan = _plan(stack)
    assert plan.violations == []
    if plan.placements is not None:
        assert plan.placements and all(p.fits for p in plan.placements)


def test_p5en_prod_figures_stated_by_the_issue():
    _, plan = _plan("p5en-prod")
    gpu = [f for f in plan.pools if f.role in (Role.TRAIN, Role.ROLLOUT)]
    assert {f.instance_type for f in gpu} == {"p5en.48xlarge"}
    assert sum(f.nodes_desired for f in gpu) == 48
    assert sum(f.gpus_desired for f in gpu) == 384
    assert {f.efa_attached for f in gpu} == {16}
    assert {f.efa_gbps_per_node for f in gpu} == {3200}


def test_deploy_path_is_a_chain_of_waits(stack):
    _, plan = _plan(stack)
    s = plan.schedule
    path = s.path
    assert path[0].step.start == 0
    assert path[-1].step.finish == s.critical_seconds
    for before, after in zip(path, path[1:]):
        assert after.step.start == before.step.finish
    assert "aws:eks/cluster:Cluster" in [p.step.type for p in path]
    assert s.critical_seconds < s.serial_seconds


# --- the command ----------------------------------------------------------------------------

def test_the_plan_text_renders_for_every_stack(stack, capsys):
    """The text a user reads, for every stack file (a runs-mode stack prints its teams' queues)."""
    assert plan_cli.main([stack]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"Plan for stack {stack}:") and "Violations: none" in text
    for team in load(stack).workloads.teams:
        q = next(iter(team.gpus.values()))
        assert f"team {team.name}: namespace/queue team-{team.name}" in text
        assert f"{q.guarantee}/{q.deserved}/{q.cap} GPUs" in text


def test_command_text_json_and_diagram(tmp_path, capsys):
    out_json, out_svg = tmp_path / "plan.json", tmp_path / "arch.svg"
    assert plan_cli.main(["p5en-prod", "--json", str(out_json), "--diagram", str(out_svg)]) == 0
    text = capsys.readouterr().out
    cfg = load("p5en-prod")
    for pool in cfg.pools:
        assert f"  {pool.name} " in text
    assert "Violations: none" in text and "Deploy critical path" in text and "IP budget" in text
    data = json.loads(out_json.read_text())
    assert data["ok"] is True and data["stack"] == "p5en-prod"
    assert [p["name"] for p in data["pools"]] == [p.name for p in cfg.pools]
    assert data["deploy"]["criticalPathSeconds"] <= data["deploy"]["serialSeconds"]
    svg = ET.parse(out_svg).getroot()
    assert svg.tag.endswith("svg")
    drawn = " ".join(t.text or "" for t in svg.iter() if t.tag.endswith("text"))
    for pool in cfg.pools:
        assert f"{pool.name}" in drawn
    assert "EFA fabric: 48 nodes" in drawn


def _write_stack(directory, name, mutate):
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.p5en-prod.yaml").read_text())
    mutate(doc["config"][f"{PROJECT}:platform"])
    (directory / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc))


def test_subnet_too_small_exits_non_zero_naming_it(tmp_path, capsys):
    _write_stack(tmp_path, "small", lambda raw: raw.update(network={"vpcCidr": "10.0.0.0/20"}))
    assert plan_cli.main(["small", "--stack-dir", str(tmp_path)]) == plan_cli.EXIT_INVALID
    err = capsys.readouterr().err
    assert "network.vpcCidr" in err and "node and pod IPs" in err and "Traceback" not in err


@dataclass
class _Placement:
    pod: str
    pool: str | None
    fits: bool
    problems: list


def test_unschedulable_pod_is_a_violation(monkeypatch, capsys):
    placements = [_Placement("ray-worker", "train", True, []),
                  _Placement("reward-server", "reward", False, ["requests 9 nvidia.com/gpu, node has 4"])]
    monkeypatch.setattr(plan_cli, "workload_placements", lambda cfg: (placements, ""))
    assert plan_cli.main(["p5en-prod"]) == plan_cli.EXIT_VIOLATIONS
    text = capsys.readouterr().out
    assert "VIOLATION [unschedulable-pod] pod reward-server on pool reward: requests 9 nvidia.com/gpu" in text
    assert "NO: requests 9 nvidia.com/gpu, node has 4" in text


def test_stack_whose_pods_cannot_fit_exits_non_zero_naming_the_pod(tmp_path, capsys):
    pytest.importorskip("workloads.checks.schedulability")
    reward = next(p for p in load("p5en-prod").pools if p.role is Role.REWARD)
    too_many = CATALOG[reward.instance_type].vcpu + 16
    _write_stack(tmp_path, "fat", lambda raw: raw.update(workloads={"reward": {"cpu": too_many}}))
    assert plan_cli.main(["fat", "--stack-dir", str(tmp_path)]) == plan_cli.EXIT_VIOLATIONS
    text = capsys.readouterr().out
    assert f"VIOLATION [unschedulable-pod] pod reward on pool {reward.name}" in text
    assert f"requests {too_many} CPU" in text


def test_program_dropping_an_efa_interface_fails_the_plan(monkeypatch, capsys):
    """A regression in the program (not the config) is caught on the recorded graph."""
    import components.node_pool as node_pool
    real = node_pool.efa_interfaces
    monkeypatch.setattr(node_pool, "efa_interfaces", lambda it, sgs: real(it, sgs)[:-1])
    assert plan_cli.main(["p5en-prod"]) == plan_cli.EXIT_VIOLATIONS
    text = capsys.readouterr().out
    assert "VIOLATION [efa-layout] pool train" in text and "15 of 16 EFA devices attached" in text
    assert "EFA/node" in text and "15/16" in text


def test_command_runs_as_a_module_without_traceback():
    bad = subprocess.run([sys.executable, "-m", "analysis.plan", "no-such-stack"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == plan_cli.EXIT_INVALID
    assert "no stack file" in bad.stderr and "Traceback" not in bad.stderr

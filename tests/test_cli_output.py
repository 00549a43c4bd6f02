"""``-o json|yaml`` where a command's output is data (``workloads.cli.base.output_parent``, printed by
``formatted``): the same facts the text shows, for a script to read, on every data command (issue 38)."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from conftest import load
from test_cli_options import commands, dests
from test_runs import _job, api  # noqa: F401  (api: the fixture of a RunClient on a recording fake API server)
from moe_rl.cli import main as moe_rl
from nodes.__main__ import main as nodes_main, plan_table
from nodes.burn_in import plans
from workloads.cli import base
from workloads.cli.runs import main as runs_main
from workloads.derive.model import derive

PARSE = {"json": json.loads, "yaml": yaml.safe_load}
DATA_COMMANDS = {"analysis.plan", "workloads.cli.runs plan", "workloads.cli.runs list", "workloads.cli.runs show",
                 "workloads.cli.runs profiles", "bench estimate", "nodes plan"}
"""The commands whose output is data (``prog`` less ``python -m``); the others act, stream a log or write files."""


def test_each_data_command_takes_the_shared_output_option():
    found = {" ".join(p.prog.split()[2:]): dests(p) for p, _words, _main in commands()}
    assert DATA_COMMANDS <= set(found), DATA_COMMANDS - set(found)
    shared = dests(base.output_parent())["output"]
    for name in sorted(DATA_COMMANDS):
        option = found[name].get("output")
        assert option is not None, f"{name} has no -o/--output"
        assert (option.option_strings, option.choices, option.default, option.help) == (
            shared.option_strings, shared.choices, shared.default, shared.help), name


@pytest.mark.parametrize("fmt", sorted(PARSE))
def test_runs_list_and_show_print_json_or_yaml(api, fmt):  # noqa: F811
    every = {"items": [_job("r-1", "r", "alpha", "FAILED", "Failed"), _job("r-2", "r", "alpha"),
                       _job("s-1", "s", "beta", "", "Initializing")]}
    routes = {("GET", "/apis/ray.io/v1/rayjobs"): every,
              ("GET", "/apis/ray.io/v1/namespaces/team-alpha/rayjobs"): {"items": every["items"][:2]},
              ("GET", "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-alpha/podgroups/ray-r-2-pg"):
                  {"status": {"phase": "Running"}},
              ("GET", "/api/v1/namespaces/team-alpha/pods"): {"items": [
                  {"metadata": {"name": "r-2-head"}, "status": {"phase": "Running"}}]}}
    _fake, client = api(routes)
    out: list[str] = []
    assert runs_main(["list", "-o", fmt], client=client, out=out.append) == 0
    listed = PARSE[fmt]("\n".join(out))
    assert [(r["team"], r["run"], r["attempt"], r["job_status"], r["deployment_status"]) for r in listed] == [
        ("alpha", "r", 1, "FAILED", "Failed"), ("alpha", "r", 2, "RUNNING", "Running"),
        ("beta", "s", 1, "", "Initializing")]
    assert listed[0]["rayjob"] == "r-1"
    out.clear()
    assert runs_main(["show", "alpha", "r", "--output", fmt], client=client, out=out.append) == 0
    shown = PARSE[fmt]("\n".join(out))
    assert [a["rayjob"] for a in shown["attempts"]] == ["r-1", "r-2"]
    assert (shown["podGroup"], shown["pods"]) == ("Running", {"r-2-head": "Running"})
    out.clear()
    assert runs_main(["show", "alpha", "r"], client=client, out=out.append) == 0  # text stays the default
    assert out[-2:] == ["gang (PodGroup): Running", "  r-2-head: Running"]


@pytest.mark.parametrize("fmt", sorted(PARSE))
def test_nodes_plan_prints_json_or_yaml_the_text_is_made_of(fmt):
    out: list[str] = []
    assert nodes_main(["plan", "p5en-prod", "-o", fmt], out=out.append) == 0
    plan = PARSE[fmt]("\n".join(out))
    cfg = load("p5en-prod")
    b = next(x for x in plans(derive(cfg), cfg) if x.pool.name == "train")
    train = next(p for p in plan["pools"] if p["pool"] == "train")
    assert (plan["stack"], plan["burn_in"], train["instance_type"], train["nodes"], train["dcgm_level"]) == (
        "p5en-prod", True, "p5en.48xlarge", 16, b.dcgm_level)
    assert (train["node_seconds"], train["steps"], train["efa_loopback_floor_mbs"], train["replace_failed"]) == (
        b.node_seconds, b.steps, b.loopback_floor_mbs, b.replace)
    assert train["floors"] == [{"op": f.op, "busbw": f.busbw, "advisory": f.advisory} for f in b.floors] != []
    text: list[str] = []
    assert nodes_main(["plan", "p5en-prod"], out=text.append) == 0
    assert text == plan_table(plan)
    assert f"x {train['nodes']}, DCGM level {b.dcgm_level}, up to {train['node_seconds'] // 60} min per node" in text[1]


def test_the_one_command_passes_the_output_option_through():
    done = CliRunner().invoke(moe_rl, ["nodes", "plan", "p5en-shared", "-o", "yaml"], prog_name="moe-rl",
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert yaml.safe_load(done.output)["stack"] == "p5en-shared"
    bad = CliRunner().invoke(moe_rl, ["runs", "list", "-o", "xml"], prog_name="moe-rl")
    assert bad.exit_code == 2 and "invalid choice: 'xml'" in bad.output

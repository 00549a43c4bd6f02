"""docs/reference/errors.md's table of bad input, run as written: each command, in a folder holding the
stacks and files the page names, exits with the code the table gives, and a line of its stderr holds the
message; every problem is one line naming the file. Also: two teams' runs of one name are planned apart."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT

from moe_rl.cli import main

PAGE = ROOT / "docs" / "reference" / "errors.md"
GRPO = (ROOT / "runs" / "grpo-qwen3-30b.yaml").read_text()
EXAMPLE = (ROOT / "experiments" / "example-ab.yaml").read_text()


def with_(text: str, **fields) -> str:
    doc = yaml.safe_load(text)
    for k, v in fields.items():
        if v is None:
            doc.pop(k)
        else:
            doc[k] = v
    return yaml.safe_dump(doc, sort_keys=False)


def stack_with(network: dict) -> str:
    """The reference stack ``p5en-shared`` with ``network`` as its network settings."""
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.p5en-shared.yaml").read_text())
    doc["config"]["moe-rl-platform:platform"]["network"] = network
    return yaml.safe_dump(doc, sort_keys=False)


FILES = {
    "stacks/Pulumi.p5en-shared.yaml": (ROOT / "stacks" / "Pulumi.p5en-shared.yaml").read_text(),
    "stacks/Pulumi.listed.yaml": "- a\n- b\n",
    "stacks/Pulumi.nokey.yaml": "config:\n  other:platform: {}\n",
    "stacks/Pulumi.unclosed.yaml": "config: [unclosed\n",
    "stacks/Pulumi.services-public.yaml": stack_with({"serviceIpv4Cidr": "8.8.0.0/16"}),
    "stacks/Pulumi.services-in-vpc.yaml": stack_with({"vpcCidr": "172.20.0.0/16"}),
    "stacks/Pulumi.mars.yaml": "config:\n  moe-rl-platform:platform:\n    region: mars-1\n    colour: blue\n",
    "listed.yaml": "- a\n",
    "noname.yaml": with_(GRPO, name=None),
    "colour.yaml": with_(GRPO, colour="blue"),
    "unclosed.yaml": "name: [unclosed\n",
    "gamma.yaml": with_(GRPO, team="gamma"),
    "urgent.yaml": with_(GRPO, priority="urgent"),
    "cpu.yaml": with_(GRPO, nodes={"train": 8, "rollout": 16, "cpu": 1}),
    "grpo.yaml": GRPO,
    "again.yaml": GRPO,
    "beta.yaml": with_(GRPO, team="beta"),
    "arms.yaml": "name: x\nstack: p5en-shared\narms: 3\n",
    "arm.yaml": with_(EXAMPLE, arms=[{"name": "nccl", "set": {"nodez": {}}}, {"name": "b"}],
                      base={**yaml.safe_load(EXAMPLE)["base"], "team": 7}, decomposition=[]),
}


def table() -> list[tuple[str, str, str, int]]:
    """(case, command, message, exit) of each row of the page's table of cases."""
    rows = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`moe-rl "):
            rows.append((cells[0], cells[1].strip("`"), cells[2].strip("`"), int(cells[3])))
    return rows


@pytest.fixture
def folder(tmp_path, monkeypatch):
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(command: str):
    return CliRunner().invoke(main, shlex.split(command)[1:], prog_name="moe-rl", catch_exceptions=False)


def test_the_page_lists_the_cases_the_issue_named():
    cases = {case for case, *_ in table()}
    assert {"stack document not a mapping", "run file without `name:`", "team the stack does not declare",
            "stack settings key missing", "one team's run twice"} <= cases
    assert len(cases) == len(table()) >= 18


@pytest.mark.parametrize("case, command, message, code", table(), ids=[row[0] for row in table()])
def test_each_bad_input_case_exits_with_its_code_and_names_file_and_field(folder, case, command, message, code):
    done = run(command)
    assert done.exit_code == code, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert any(message in line for line in lines), lines
    assert done.stdout == "" and "Traceback" not in done.stderr


def test_every_problem_of_a_run_file_is_its_own_line(folder):
    (folder / "many.yaml").write_text(with_(GRPO, team="gamma", priority="urgent", colour="blue"))
    done = run("moe-rl runs plan p5en-shared many.yaml gamma.yaml noname.yaml")
    assert done.exit_code == 2
    lines = done.stderr.splitlines()
    assert lines == [line for line in lines if re.match(r"runs: (many|gamma|noname)\.yaml: \S", line)]
    assert len(lines) == 3  # one pass: the schema's problem stops many.yaml before its stack names are read
    (folder / "many.yaml").write_text(with_(GRPO, team="gamma", priority="urgent"))
    assert len(run("moe-rl runs plan p5en-shared many.yaml").stderr.splitlines()) == 2


def test_every_problem_of_an_experiment_file_is_its_own_line(folder):
    done = run("moe-rl bench estimate arm.yaml")
    assert done.exit_code == 2
    assert done.stderr.splitlines() == ["bench: arm.yaml: base.team: 7 is not allowed; allowed: a valid string",
                                        "bench: arm.yaml: arms[nccl].set.nodez: unknown key"]


def test_two_teams_runs_of_one_name_are_planned_apart(folder):
    done = run("moe-rl runs plan p5en-shared grpo.yaml beta.yaml -o yaml")
    assert done.exit_code == 0, done.stderr
    decisions = yaml.safe_load(done.stdout)
    assert [(d["run"], d["team"]) for d in decisions] == [("grpo-qwen3-30b", "alpha"), ("grpo-qwen3-30b", "beta")]
    assert all(d["gpus"] == {"train": 64, "rollout": 128} for d in decisions)

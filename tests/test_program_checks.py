"""``program.build`` passes the stack through the gate before registering anything: the region's EKS
add-on registry, the runs declared in the stack, all in the schema's message form."""

from __future__ import annotations

import pytest
from test_workloads import typed

import program
from analysis import mocks
from stackconfig.stack import StackConfigError

SHARED = "p5en-shared"


def refused(cfg) -> tuple[str, list]:
    graph = mocks.Graph()
    with pytest.raises(StackConfigError) as err:
        mocks.run(lambda: program.build(cfg), region=cfg.region, stack=cfg.stack, graph=graph)
    return str(err.value), graph.resources


def test_a_region_without_a_derivable_registry_is_refused_before_anything_is_registered():
    raw = {"region": "cn-north-1", "availabilityZone": "cn-north-1a", "secondaryAvailabilityZone": "cn-north-1b"}
    message, registered = refused(typed("dev", raw))
    assert message.startswith("stack 'dev': invalid configuration\n  region: no EKS add-on image registry for "
                              "'cn-north-1' (its listed registry ") and "allowed: af-south-1, " in message
    assert registered == []


def test_a_declared_run_that_cannot_be_submitted_is_refused_before_anything_is_registered():
    """The schema types declared runs; the gate checks them (it imports the model and the renderers)."""
    bad = {"workloads": {"runs": [{"name": "r", "team": "alpha", "nodes": {"train": 17, "rollout": 1}}]}}
    cfg = typed(SHARED, bad)  # the schema accepts it
    message, registered = refused(cfg)
    assert message.startswith("stack 'p5en-shared': invalid configuration\n  workloads.runs[r]: run r: pool train: "
                              "17 nodes requested, the pool has 16")
    assert registered == []




def test_the_gate_reports_every_problem_of_a_stack_in_one_pass():
    """Two independent mistakes, two lines: a user fixes both at once instead of one per command run."""
    from workloads.checks import gate
    cfg = typed("p5en-prod", {"workloads": {"ray": {"headPool": "nope"}, "run": {"parallel": {"tensor": 3}}}})
    found = gate.problems(cfg)
    assert [p.field for p in found] == ["workloads.ray.headPool", "workloads.run.parallel.tensor"]
    with pytest.raises(StackConfigError) as err:
        gate.checked(cfg)
    assert str(err.value).splitlines()[1:] == [f"  {p}" for p in found]


def test_every_command_loads_a_stack_through_the_gate():
    """No command reads a stack file around the gate: outside the gate, nothing in the program, its
    commands or its tools calls ``read_stack``/``load_stack`` with a schema of its own (the platform's
    own ``StackConfig`` default is for the platform components alone)."""
    import re
    from conftest import ROOT
    pattern = re.compile(r"(read_stack|load_stack)\([^)]*(model=|ProgramConfig)")
    offenders = [str(p.relative_to(ROOT)) for folder in ("workloads", "bench", "nodes", "analysis", "policy", "benchmarks",
                                                         "scripts", "contracts", "program.py", "__main__.py")
                 for p in ([ROOT / folder] if folder.endswith(".py") else (ROOT / folder).rglob("*.py"))
                 if p.name != "gate.py" and pattern.search(p.read_text())]
    assert offenders == []


def test_a_yaml_syntax_error_in_a_stack_file_is_one_line_naming_the_place(tmp_path):
    """Every command reads stack files through ``raw_stack``: a broken file is a StackConfigError (the
    commands' one-line exit), not a yaml traceback."""
    from workloads.checks import gate
    (tmp_path / "Pulumi.broken.yaml").write_text("config:\n  moe-rl-platform:platform:\n    region: [us-east-1\n")
    with pytest.raises(StackConfigError) as err:
        gate.read("broken", tmp_path)
    message = str(err.value)
    assert message.startswith(f"stack 'broken': {tmp_path / 'Pulumi.broken.yaml'}:4:1: not valid YAML: ")
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("body, place, says", [
    ("    region: @us-east-1\n", ":3:13:", "'@'"),
    ("    region: \"\\q\"\n", ":3:15:", "'q'"),
])
def test_a_yaml_error_says_what_pyyaml_says(tmp_path, body, place, says):
    """The stack file is parsed by libyaml's C parser for speed, but a document it refuses is parsed
    again by PyYAML's own: the error names the offending character and PyYAML's line and column."""
    from workloads.checks import gate
    (tmp_path / "Pulumi.broken.yaml").write_text("config:\n  moe-rl-platform:platform:\n" + body)
    with pytest.raises(StackConfigError) as err:
        gate.read("broken", tmp_path)
    assert place in str(err.value) and says in str(err.value), err.value


def test_a_tab_after_a_colon_reads_as_the_pulumi_cli_reads_it():
    from stackconfig.files import load_yaml
    assert load_yaml("region:\tus-east-1\n") == {"region": "us-east-1"}


def test_what_pyyaml_alone_accepts_is_still_accepted():
    """libyaml refuses surrogate escapes; PyYAML reads them, so the document reads as before."""
    from stackconfig.files import load_yaml
    assert load_yaml('name: "\\ud83d\\ude00"\n') == {"name": "\ud83d\ude00"}

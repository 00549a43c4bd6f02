"""Every command turns an invalid or unknown stack, run or experiment file into one line on stderr and
exit 2 (``workloads.cli.base``), and no traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import main as bench_main
from nodes.__main__ import main as nodes_main
from workloads.cli.acceptance import main as acceptance_main
from workloads.cli.runs import main as runs_main

ROOT = Path(__file__).resolve().parent.parent
RUN = str(ROOT / "runs" / "grpo-qwen3-30b.yaml")
EXPERIMENT = str(ROOT / "experiments" / "seed-ab.yaml")


def no_cluster():
    raise AssertionError("an invalid file must be refused before any cluster is contacted")


def one_line(capsys) -> str:
    lines = problem_lines(capsys)
    assert len(lines) == 1, lines
    return lines[0]


def problem_lines(capsys) -> list[str]:
    """stderr's lines: one per problem (stdout empty)."""
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


@pytest.fixture
def bad_files(tmp_path) -> dict[str, Path]:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.broken.yaml").write_text(
        "config:\n  moe-rl-platform:platform:\n    region: us-east-1\n    pools: []\n    colour: blue\n")
    files = {"stacks": stacks, "run_field": tmp_path / "field.yaml", "run_yaml": tmp_path / "yaml.yaml",
             "missing": tmp_path / "missing.yaml", "experiment": tmp_path / "experiment.yaml"}
    files["run_field"].write_text((ROOT / "runs" / "grpo-qwen3-30b.yaml").read_text() + "colour: blue\n")
    files["run_yaml"].write_text("name: [unclosed\n")
    files["experiment"].write_text("name: x\nstack: p5en-shared\narms: 3\n")
    return files


UNKNOWN_STACK = [
    ("runs", lambda: runs_main(["submit", "nope", RUN], client=no_cluster)),
    ("runs", lambda: runs_main(["submit", "nope", RUN, "--dry-run"], client=no_cluster)),
    ("runs", lambda: runs_main(["plan", "nope", RUN], client=no_cluster)),
    ("nodes", lambda: nodes_main(["plan", "nope"], client=no_cluster)),
    ("bench", lambda: bench_main(["estimate", EXPERIMENT, "--stack", "nope"], client=no_cluster)),
    ("acceptance", lambda: acceptance_main(["nope", "train"])),
    ("acceptance", lambda: acceptance_main(["report", "--stack", "nope", "--pool", "train"])),
]


@pytest.mark.parametrize("prog,command", UNKNOWN_STACK, ids=[f"{p}-{i}" for i, (p, _) in enumerate(UNKNOWN_STACK)])
def test_an_unknown_stack_is_one_line_and_exit_2(prog, command, capsys):
    assert command() == 2
    line = one_line(capsys)
    assert line.startswith(f"{prog}: stack 'nope': no stack file ") and "stacks: dev, " in line


def test_an_invalid_stack_file_is_a_line_per_problem_naming_the_file_and_exit_2(bad_files, capsys):
    d = str(bad_files["stacks"])
    for prog, command in (("runs", lambda: runs_main(["plan", "broken", RUN, "--stack-dir", d], client=no_cluster)),
                          ("nodes", lambda: nodes_main(["plan", "broken", "--stack-dir", d])),
                          ("acceptance", lambda: acceptance_main(["broken", "train", "--stack-dir", d]))):
        assert command() == 2
        lines = problem_lines(capsys)
        assert all(line.startswith(f"{prog}: {d}/Pulumi.broken.yaml: ") for line in lines), lines
        assert f"{prog}: {d}/Pulumi.broken.yaml: colour: unknown key" in lines and len(lines) > 1


@pytest.mark.parametrize("which", ["run_field", "run_yaml", "missing"])
@pytest.mark.parametrize("sub", ["submit", "plan"])
def test_a_bad_run_file_is_a_line_per_problem_naming_it_and_exit_2(bad_files, which, sub, capsys):
    assert runs_main([sub, "p5en-shared", str(bad_files[which])], client=no_cluster) == 2
    lines = problem_lines(capsys)
    assert lines and all(line.startswith(f"runs: {bad_files[which]}: ") for line in lines), lines


@pytest.mark.parametrize("which", ["experiment", "missing"])
@pytest.mark.parametrize("sub", [["estimate"], ["run", "--dry-run"]])
def test_a_bad_experiment_file_is_a_line_per_problem_naming_it_and_exit_2(bad_files, which, sub, capsys):
    assert bench_main([sub[0], str(bad_files[which]), *sub[1:]], client=no_cluster) == 2
    lines = problem_lines(capsys)
    assert lines and all(line.startswith(f"bench: {bad_files[which]}: ") for line in lines), lines
    assert len(lines) == {"experiment": 5, "missing": 1}[which]  # base, arms, baseline, steps, estimate


def test_the_command_itself_exits_2_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "workloads.cli.runs", "submit", "nope", RUN],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()] and "Traceback" not in done.stderr
    assert done.stderr.startswith("runs: stack 'nope': no stack file ")


def schema_paths(message: str) -> list[str]:
    """The dotted stack-field paths ``message`` names (``versions.software.images``): words joined by dots
    whose first word is a top-level key of the stack schema."""
    from workloads.schema.stack import ProgramConfig
    top = "|".join(ProgramConfig.model_json_schema(by_alias=True)["properties"])
    return re.findall(rf"\b(?:{top})(?:\.[A-Za-z]\w*)+", message)


def resolves(path: str) -> bool:
    """Whether ``path`` (camelCase keys, as the stack file writes them) is a field of the stack schema."""
    from workloads.schema.stack import ProgramConfig
    schema = ProgramConfig.model_json_schema(by_alias=True)
    node = schema
    for key in path.split("."):
        while "$ref" in node or "anyOf" in node:
            node = (schema["$defs"][node["$ref"].rsplit("/", 1)[1]] if "$ref" in node
                    else next(n for n in node["anyOf"] if n.get("type") != "null"))
        if key not in node.get("properties", {}):
            return False
        node = node["properties"][key]
    return True


@pytest.mark.parametrize("command", [["submit", "p5en-shared", RUN], ["submit", "p5en-shared", RUN, "--resume"]])
def test_submit_without_the_repository_names_the_flag_the_output_and_a_real_field(command, capsys):
    assert runs_main(command, client=no_cluster) == 1
    line = one_line(capsys)
    assert '--repository "$(pulumi stack output imageRepository --stack p5en-shared)"' in line, line
    named = schema_paths(line)
    assert named and all(resolves(p) for p in named), (named, line)

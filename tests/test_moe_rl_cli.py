"""``moe-rl``: one command whose subcommands are the existing commands' own parsers and mains (the
``python -m`` paths stay), with help under its own name, ``--stacks DIR``, ``-o json|yaml`` on data,
shell completion, and the exit codes its help documents."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT

from moe_rl.cli import SUBCOMMANDS, forwarded, main


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, list(args), prog_name="moe-rl", env=env, catch_exceptions=False)


@pytest.fixture
def elsewhere(tmp_path):
    """A stack folder outside the repository, holding one stack under a name the repository has not."""
    shutil.copy(ROOT / "stacks" / "Pulumi.p5en-shared.yaml", tmp_path / "Pulumi.elsewhere.yaml")
    return tmp_path


def test_help_lists_every_subcommand_and_the_exit_codes():
    done = invoke("--help")
    assert done.exit_code == 0
    listed = {line.split()[0] for line in done.output.split("Commands:")[1].splitlines() if line[:3] == "  " + line[2:3]
              and line[2:3].strip()}
    assert listed == set(SUBCOMMANDS) == {"plan", "runs", "bench", "nodes", "acceptance", "fsx-status", "fsx-drain", "torchx", "profiles"}
    assert "0 done; 1 a refusal on the merits" in " ".join(done.output.split())
    assert "2 bad input" in " ".join(done.output.split())


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_subcommand_has_help_under_its_own_name(name):
    done = invoke(name, "--help")
    assert done.exit_code == 0, done.output
    assert done.output.startswith(f"usage: moe-rl {name} "), done.output[:80]
    from analysis.plan import parser
    assert parser().prog == "python -m analysis.plan"  # the alias keeps its own name


def test_subcommands_of_subcommands_have_their_help():
    assert invoke("runs", "plan", "--help").output.startswith("usage: moe-rl runs plan ")
    assert invoke("acceptance", "report", "--help").output.startswith("usage: moe-rl acceptance report ")


def test_stacks_names_the_folder_the_subcommands_read(elsewhere):
    done = invoke("--stacks", str(elsewhere), "nodes", "plan", "elsewhere")
    assert done.exit_code == 0, done.output
    assert invoke("nodes", "plan", "elsewhere").exit_code == 2  # not in ./stacks
    assert forwarded(SUBCOMMANDS["runs"], ["list"], elsewhere) == ["list"]  # no stack read: nothing added
    assert forwarded(SUBCOMMANDS["runs"], ["plan", "s", "r.yaml"], elsewhere)[-2:] == ["--stack-dir", str(elsewhere)]
    assert forwarded(SUBCOMMANDS["plan"], ["s", "--stack-dir", "x"], elsewhere) == ["s", "--stack-dir", "x"]


def test_a_missing_stack_folder_is_bad_input_naming_what_to_do(tmp_path):
    done = invoke("--stacks", str(tmp_path / "none"), "nodes", "plan", "p5en-prod")
    assert done.exit_code == 2
    assert f"no folder {tmp_path / 'none'} to read Pulumi.p5en-prod.yaml from" in done.output
    assert "moe-rl --stacks DIR" in done.output


def test_bad_arguments_exit_2():
    assert invoke("nosuch").exit_code == 2
    assert invoke("runs", "nosuch").exit_code == 2
    assert invoke("plan").exit_code == 2


@pytest.mark.parametrize("fmt, parse", [("json", json.loads), ("yaml", yaml.safe_load)])
def test_data_subcommands_print_json_or_yaml(fmt, parse):
    profiles = parse(invoke("profiles", "-o", fmt).output)
    assert profiles["miles-0.1"]["sglang"]["version"] == "0.5.16"
    runs = sorted(str(p) for p in (ROOT / "runs").glob("*.yaml"))
    done = invoke("runs", "plan", "p5en-shared", *runs, "-o", fmt)
    assert done.exit_code == 0, done.output
    assert {d["run"] for d in parse(done.output)} == {yaml.safe_load(open(r))["name"] for r in runs}
    est = parse(invoke("bench", "estimate", str(ROOT / "experiments" / "example-ab.yaml"), "-o", fmt).output)
    assert (est["experiment"], est["stack"], est["attempts"], len(est["schedule"])) == ("example-ab", "p5en-shared", 9, 9)
    assert est["schedule"][0] == {"attempt": "nccl/r1", "nodes": {"train": 2, "rollout": 2}}


def completions(words: str) -> list[tuple[str, str]]:
    """(type, value) of each completion click's bash script is given for ``words``."""
    done = invoke(env={"_MOE_RL_COMPLETE": "bash_complete", "COMP_WORDS": words,
                       "COMP_CWORD": str(len(words.split(" ")) - 1)})
    return [tuple(line.split(",", 1)) for line in done.output.splitlines()]


def complete(words: str) -> list[str]:
    return [value for _type, value in completions(words)]


def test_shell_completion_offers_subcommands_options_and_stacks(elsewhere):
    assert complete("moe-rl ru") == ["runs"]
    assert complete("moe-rl runs pl") == ["plan"]
    assert "--stack-dir" in complete("moe-rl runs plan --st")
    assert complete(f"moe-rl --stacks {elsewhere} nodes plan ") == ["elsewhere"]
    assert "p5en-prod" in complete("moe-rl plan p5en-")


def test_shell_completion_leaves_file_arguments_to_the_shell():
    """A run or experiment file, an output file: click's ``file`` type, so the shell completes the path."""
    assert completions("moe-rl runs plan p5en-shared runs/gr") == [("file", "runs/gr")]
    assert completions("moe-rl bench estimate exp") == [("file", "exp")]
    assert completions("moe-rl plan p5en-shared --json ") == [("file", "")]
    assert completions("moe-rl runs ") == [("plain", w) for w in ("plan", "submit", "list", "show", "follow",
                                                                   "cancel", "profiles")]


def test_the_bash_script_completes_from_the_installed_command():
    """What ``eval "$(_MOE_RL_COMPLETE=bash_source moe-rl)"`` puts in the shell: a function that asks the
    command back through the same variable."""
    script = invoke(env={"_MOE_RL_COMPLETE": "bash_source"}).output
    assert "complete -o nosort -F _moe_rl_completion moe-rl" in script
    assert "_MOE_RL_COMPLETE=bash_complete $1" in script and "compopt -o default" in script


def test_fsx_status_without_an_answer_is_a_refusal_not_bad_input(capsys):
    """FSx that cannot be asked is exit 1, as a cluster that cannot be used is for the other commands."""
    import boto3
    from botocore.stub import Stubber
    from components import fsx_status
    client = boto3.client("fsx", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_client_error("describe_data_repository_associations", "AccessDenied", "not allowed")
    with stub:
        assert fsx_status.main(["fs-0123456789abcdef0", "--region", "us-east-1"], client=client) == 1
    assert "AccessDenied" in capsys.readouterr().err

"""The getting-started pages work as written.

Every bash block of those pages says whether it runs offline (``bash offline``, ``bash offline slow``)
or needs AWS (``bash aws``); each ``bash offline`` block, plain ``python -m`` lines, runs here in process
(``slow`` ones, and every offline block in bash, in the doc-block stage of ``.ci/run``:
``scripts/run_doc_blocks.py``); README's set-up is what CI runs; and the team-run page's kubeconfig
command names the shared stack's cluster, region and a member of the team it then uses.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import re
import runpy
import shlex
import sys
import warnings

import pytest

from conftest import ROOT, load

_spec = importlib.util.spec_from_file_location("run_doc_blocks", ROOT / "scripts" / "run_doc_blocks.py")
doc_blocks = sys.modules.setdefault("run_doc_blocks", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(doc_blocks)

GETTING_STARTED = ROOT / "docs" / "getting-started"
PAGES = ["plan.md", "first-deploy.md", "team-run.md", "seed-benchmark.md"]
MARKS = {("offline",), ("offline", "slow"), ("aws",)}
PYTHON = {"python", ".venv/bin/python"}
MOE_RL = {"moe-rl", ".venv/bin/moe-rl"}


def page_blocks() -> list:
    return [b for page in sorted(GETTING_STARTED.glob("*.md")) for b in doc_blocks.blocks(page)]


def commands(block) -> list[list[str]]:
    """Each command line of ``block`` as ``[module, *args]`` (``moe-rl ...`` is ``moe_rl.cli ...``): comments
    dropped, continuations joined, globs expanded as bash expands them; ValueError for a line that is not
    ``moe-rl ...`` or ``python -m <module> ...``."""
    found = []
    for line in block.text.replace("\\\n", " ").split("\n"):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] in MOE_RL:
            words = ["python", "-m", "moe_rl.cli", *words[1:]]
        if len(words) < 3 or words[0] not in PYTHON or words[1] != "-m":
            raise ValueError(f"{block.where()}: {line.strip()!r} is not a `moe-rl` or `python -m` line; "
                             f"allowed: such lines only, or the mark `bash offline slow`")
        found.append([w for word in words[2:] for w in (sorted(glob.glob(word)) or [word]
                                                         if glob.has_magic(word) else [word])])
    return found


def run_module(argv: list[str]) -> tuple[int, str]:
    """(exit code, output) of ``python -m argv[0] argv[1:]`` in this process."""
    out, saved = io.StringIO(), sys.argv
    sys.argv = [argv[0], *argv[1:]]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)  # imported before, by design
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = saved
    return code, out.getvalue()


IN_PROCESS = [b for page in doc_blocks.pages() for b in doc_blocks.blocks(page) if b.offline and not b.slow]
"""Every document's cheap offline blocks, the getting-started pages' and the others'."""


def test_the_getting_started_pages_exist_and_each_has_an_offline_block_or_says_why_not():
    assert {p.name for p in GETTING_STARTED.glob("*.md")} >= set(PAGES)
    offline = {b.page.name for b in page_blocks() if b.offline}
    assert offline >= {"plan.md", "team-run.md", "seed-benchmark.md"}  # first-deploy: every step needs AWS


def test_every_bash_block_of_the_getting_started_pages_says_whether_it_runs_offline():
    unmarked = [b.where() for b in page_blocks() if b.language == "bash" and b.marks not in MARKS]
    assert unmarked == []


def test_the_block_reader_sees_marks_indented_fences_and_lines():
    text = "x\n   ```bash offline\n   python -m a.b c  # note\n   ```\n```\nplain\n```\n```bash aws\nkubectl x\n```\n"
    found = doc_blocks.blocks(ROOT / "page.md", text)
    assert [(b.line, b.language, b.marks, b.offline) for b in found] == [
        (2, "bash", ("offline",), True), (5, "", (), False), (8, "bash", ("aws",), False)]
    assert commands(found[0]) == [["a.b", "c"]]
    with pytest.raises(ValueError, match="is not a `moe-rl` or `python -m` line"):
        commands(found[2])
    moe_rl = doc_blocks.blocks(ROOT / "page.md", "```bash offline\nmoe-rl runs plan s r.yaml\n```\n")[0]
    assert commands(moe_rl) == [["moe_rl.cli", "runs", "plan", "s", "r.yaml"]]


def test_a_failing_command_is_seen():
    code, output = run_module(["workloads.cli.runs", "plan", "no-such-stack", "runs/grpo-qwen3-30b.yaml"])
    assert code == 2 and "no-such-stack" in output


@pytest.mark.parametrize("block", IN_PROCESS, ids=[b.where() for b in IN_PROCESS])
def test_each_offline_block_runs(block, monkeypatch):
    monkeypatch.chdir(ROOT)
    for argv in commands(block):
        code, output = run_module(argv)
        assert code == 0, f"{block.where()}: python -m {' '.join(argv)} exited {code}:\n{output[-3000:]}"
        assert output.strip(), f"{block.where()}: python -m {' '.join(argv)} printed nothing"


def test_the_slow_blocks_name_modules_that_exist():
    from moe_rl.cli import SUBCOMMANDS
    slow = [b for b in page_blocks() if b.offline and b.slow]
    named = {m for b in slow for m in re.findall(r"python -m ([\w.]+)", b.text)}
    subcommands = {m for b in slow for m in re.findall(r"moe-rl (?:--stacks \S+ )?([\w-]+)", b.text)}
    assert named | subcommands and all(importlib.util.find_spec(m) for m in named), named
    assert subcommands <= set(SUBCOMMANDS), subcommands


def setup_commands() -> list[str]:
    """README's two set-up commands, read as ``scripts/check_fresh_clone.sh`` reads them."""
    lines = (ROOT / "README.md").read_text().split("\n")
    start, end = lines.index("## Set-up"), next(i for i, line in enumerate(lines) if line.startswith("## Plan offline"))
    return [lines[i + 1] for i in range(start, end) if re.match(r"# [12]\.", lines[i])]


def test_readmes_set_up_is_what_ci_runs():
    first, second = setup_commands()
    ci = {line.replace(" --quiet", "").strip() for line in (ROOT / ".ci" / "run").read_text().split("\n")}
    *venv, plan = [part.strip() for part in first.split("&&")]
    assert venv == ["python3 -m venv .venv", ".venv/bin/pip install -r requirements.txt -e ."] and set(venv) <= ci
    assert plan == ".venv/bin/moe-rl plan p5en-prod"
    assert second == ".venv/bin/python -m pytest" and second in ci
    assert ".venv/bin/python scripts/run_doc_blocks.py" in ci


def test_the_tests_the_main_suite_leaves_out_run_in_their_own_stages():
    """The README's command deselects ``contract`` and ``controlplane`` tests (pyproject's addopts); ``.ci/run``
    calls the contract and control-plane stages, which select exactly them (a later ``-m`` replaces the
    addopts' one)."""
    import tomllib
    addopts = shlex.split(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"])
    assert addopts[addopts.index("-m") + 1] == "not contract and not controlplane"
    ci = (ROOT / ".ci" / "run").read_text().split("\n")
    assert "bash contracts/run" in ci and "bash controlplane/run" in ci
    assert "-m controlplane tests/controlplane" in (ROOT / "controlplane" / "run").read_text()


@pytest.mark.parametrize("stage_fails", [False, True], ids=["passes", "fails"])
def test_the_contract_stage_runs_the_contract_tests_and_stops_when_they_fail(tmp_path, stage_fails):
    """``contracts/run`` as written, its environment's python and pip stubbed: it runs ``-m contract
    tests`` first, then the contract tests, and a failure of the first ends the stage non-zero."""
    import shutil
    import subprocess
    (tmp_path / "contracts").mkdir()
    for name in ("run", "sglang-wheels.txt"):
        shutil.copy(ROOT / "contracts" / name, tmp_path / "contracts" / name)
    stubs = tmp_path / ".venv-contracts" / "bin"
    stubs.mkdir(parents=True)
    log = tmp_path / "calls"
    for tool in ("python", "pip"):
        fails = '[[ "$*" == *"contract tests" ]] && exit 1\n' if stage_fails and tool == "python" else ""
        (stubs / tool).write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >> {log}\n{fails}exit 0\n')
        (stubs / tool).chmod(0o755)
    wheels = (ROOT / "contracts" / "sglang-wheels.txt").read_text().splitlines()
    for version in (v for line in wheels if not line.startswith("#") for v in line.split()):
        (tmp_path / ".venv-contracts" / "sglang" / version / "sglang").mkdir(parents=True)
    done = subprocess.run(["bash", str(tmp_path / "contracts" / "run")], capture_output=True, text=True)
    pytests = [line for line in log.read_text().splitlines() if line.startswith("python -m pytest")]
    assert pytests[0].endswith(" -m contract tests")
    if stage_fails:
        assert done.returncode != 0 and len(pytests) == 1
    else:
        assert done.returncode == 0, done.stderr
        assert len(pytests) == 2 and "contracts/tests" in pytests[1]


def test_the_team_run_kubeconfig_is_the_shared_stacks_cluster_and_a_members_role():
    cfg = load("p5en-shared")
    block = next(b for b in doc_blocks.blocks(GETTING_STARTED / "team-run.md") if "update-kubeconfig" in b.text)
    words = shlex.split(block.text.replace("\\\n", " ").split("\n")[0])
    option = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}
    assert (option["--name"], option["--region"]) == (cfg.cluster_name, cfg.region)
    teams = [t.name for t in cfg.workloads.teams if option["--role-arn"] in t.members]
    assert teams and f"-n team-{teams[0]}" in block.text


def test_team_run_submits_with_the_repository():
    text = (GETTING_STARTED / "team-run.md").read_text()
    submits = [line for line in text.split("\n") if "moe-rl runs submit" in line and "--dry-run" not in line]
    assert submits and all("--repository" in line for line in submits)

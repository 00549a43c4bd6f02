"""The options the commands share are defined once (``workloads.cli.base``) and do what they say on every
command that has them: ``--stack-dir`` is where the stack is read from, ``--context`` is the kubeconfig
context the cluster client is made for. The commands are the reference's list (``scripts/gen_reference.py``),
each (sub)command found by walking its parser, so a new one is covered without being named here."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import ROOT
from test_first_deploy import pinned_stack_dir
from workloads.cli import base

spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)

RUN = str(ROOT / "runs" / "grpo-qwen3-30b.yaml")
EXPERIMENT = str(ROOT / "experiments" / "seed-ab.yaml")
STACK = "p5en-shared"
POSITIONALS = {"stack": STACK, "runs": RUN, "run": RUN, "team": "alpha", "pool": "train", "nodes": "n1",
               "experiment": EXPERIMENT}
"""A value for each positional argument a command may take (a stack, a run file, an experiment file ...)."""


def commands() -> Iterator[tuple[argparse.ArgumentParser, list[str], Callable[..., int]]]:
    """Every command and subcommand: its parser, the words that select it and the ``main`` that runs it."""
    def walk(p: argparse.ArgumentParser, main: Callable[..., int]):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        if not subs:
            yield p, p.prog.split()[3:], main  # "python -m <module> [<subcommand>]"
        for a in subs:
            for sub in a.choices.values():
                yield from walk(sub, main)
    for factory in gen._commands():  # noqa: SLF001
        yield from walk(factory(), sys.modules[factory.__module__].main)


def dests(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in p._actions}  # noqa: SLF001


def having(dest: str) -> list:
    found = [c for c in commands() if dest in dests(c[0])]
    assert found, f"no command takes {dest}"
    return found


def argv(p: argparse.ArgumentParser, words: list[str], fill: dict[str, list[str]], tmp: Path) -> list[str]:
    """``words``, a value for each positional, and ``fill``'s options that the command has; a collected
    benchmark directory (``bench report``) is a copy of the example's in ``tmp``."""
    out = list(words)
    for a in p._actions:  # noqa: SLF001
        if not a.option_strings and a.dest == "dir":
            out.append(str(shutil.copytree(ROOT / "examples" / "bench-report", tmp / "collected")))
        elif not a.option_strings and a.dest in POSITIONALS:
            out.append(POSITIONALS[a.dest])
        elif a.option_strings and a.dest in fill:
            out += [a.option_strings[0], *fill[a.dest]]
    return out


def test_each_shared_option_is_the_parent_s():
    shared = {a.dest: a.help for parent in (base.stack_dir_parent(), base.cluster_parent(), base.image_parent())
              for a in parent._actions}  # noqa: SLF001
    for p, words, _ in commands():
        options = dests(p)
        if "stack" in options:
            assert "stack_dir" in options, p.prog
        for dest, text in shared.items():
            if dest in options and dest != "context":  # --context may say when it is used (acceptance: --apply)
                assert options[dest].help == text, (p.prog, dest)
        if "context" in options:
            assert options["context"].help.startswith("kubeconfig context"), p.prog


@pytest.mark.parametrize("p,words,main", having("stack_dir"), ids=lambda c: getattr(c, "prog", ""))
def test_stack_dir_is_where_the_stack_is_read(p, words, main, tmp_path, capsys):
    empty = tmp_path / "stacks"
    empty.mkdir()
    fill = {"stack_dir": [str(empty)], "stack": [STACK], "pool": ["train"], "repository": ["r"], "dry_run": []}
    assert main(argv(p, words, fill, tmp_path)) == 2
    assert f"no stack file {empty / f'Pulumi.{STACK}.yaml'}" in capsys.readouterr().err


@pytest.mark.parametrize("p,words,main", having("context"), ids=lambda c: getattr(c, "prog", ""))
def test_context_is_the_cluster_the_command_reaches(p, words, main, tmp_path, monkeypatch, capsys):
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: here\n"
                      "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                      "users: [{name: u, user: {token: t}}]\n"
                      "contexts: [{name: here, context: {cluster: c, user: u}}]\n")
    monkeypatch.setenv("KUBECONFIG", str(config))
    fill = {"context": ["elsewhere"], "repository": ["123456789012.dkr.ecr.us-east-1.amazonaws.com/x"], "apply": [],
            "out": [str(tmp_path / "out")], "log_bucket": ["b"],
            "stack_dir": [str(pinned_stack_dir(tmp_path, STACK))]}  # digests a submission would take
    assert main(argv(p, words, fill, tmp_path)) == 1
    assert f"no context 'elsewhere' in {config}" in capsys.readouterr().err

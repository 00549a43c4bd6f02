"""The reference stacks render what their golden snapshots hold (``tests/snapshots/<stack>/``, written by
``python scripts/gen_snapshots.py``): a change to a launch template, node group, IAM policy document, Ray
object or admission policy shows as a diff of those files, reviewed with the change."""

from __future__ import annotations

import difflib
import importlib.util

import pytest
from conftest import ROOT, graph_of, load

_spec = importlib.util.spec_from_file_location("gen_snapshots", ROOT / "scripts" / "gen_snapshots.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


@pytest.mark.parametrize("stack", gen.STACKS)
def test_the_stack_renders_its_snapshots(stack):
    folder = gen.FOLDER / stack
    files = gen.snapshot(stack, load(stack), graph_of(stack))
    assert sorted(p.name for p in folder.glob("*.yaml")) == sorted(files), f"regenerate: {gen.COMMAND}"
    for name, text in files.items():
        kept = (folder / name).read_text()
        diff = "".join(difflib.unified_diff(kept.splitlines(True), text.splitlines(True),
                                            f"tests/snapshots/{stack}/{name}", "rendered now", n=2))
        assert not diff, f"{diff[:4000]}\nreview the change, then regenerate: {gen.COMMAND}"


def test_the_snapshots_hold_every_kind_they_are_for():
    rendered = {stack: gen.snapshot(stack, load(stack), graph_of(stack)) for stack in gen.STACKS}
    for stack, files in rendered.items():
        assert set(files) == {"launch-templates.yaml", "node-groups.yaml", "iam-policies.yaml", "ray.yaml",
                              "admission.yaml"}
        assert all(text.strip() not in ("{}", "") for text in files.values()), stack
        assert "Content-Type: application/node.eks.aws" in files["launch-templates.yaml"]  # user data decoded
        assert "Statement:" in files["iam-policies.yaml"]  # documents parsed, not JSON text
    assert "RayCluster " in rendered["p5en-prod"]["ray.yaml"]
    assert "RayJob of runs/grpo-qwen3-30b.yaml:" in rendered["p5en-shared"]["ray.yaml"]

"""What the seed experiment files say about their arms, against the arms as rendered: SGLang's static memory
fraction is each engine shape's own (``workloads.derive.sglang_budget``), not one budget for all, and the
"expert-parallel" link turns on DP attention with expert parallelism."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.experiment import arm_run, load_experiment
from workloads.checks import gate
from workloads.checks.runs import run_model
from workloads.derive.argv import entry_and_flags

ROOT = Path(__file__).resolve().parents[1]
FRACTIONS = re.compile(r"as rendered\s+#?\s*([\d.]+) for TP(\d+) against ([\d.]+) for the Miles EP16 engines")


def _flags(path: Path, arm: str) -> list[str]:
    exp = load_experiment(path)
    return entry_and_flags(run_model(gate.read(exp.stack), arm_run(exp, arm)).run_argv())[1]


def _value(flags: list[str], name: str) -> str:
    return flags[flags.index(name) + 1]


@pytest.mark.parametrize("name", ["seed-p5en.yaml", "seed-ab.yaml"])
def test_the_memory_fractions_the_file_states_are_the_rendered_ones(name):
    path = ROOT / "experiments" / name
    text = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    assert "memory budget" not in text
    tp, nccl = _flags(path, "miles-tp"), _flags(path, "miles-nccl")
    stated = FRACTIONS.search(text)
    assert stated, f"{name}: no 'as rendered <tp> for TP<n> against <ep> for the Miles EP16 engines'"
    assert stated.groups() == (_value(tp, "--sglang-mem-fraction-static"), _value(tp, "--rollout-num-gpus-per-engine"),
                               _value(nccl, "--sglang-mem-fraction-static"))
    assert "--sglang-mem-fraction-static" not in _flags(path, "slime")  # "the slime arm keeps SGLang's default"
    assert "--sglang-enable-dp-attention" in nccl and "--sglang-enable-dp-attention" not in tp
    assert "and with it DP attention (--sglang-enable-dp-attention, dp-size 16" in text
    assert _value(nccl, "--sglang-dp-size") == "16"

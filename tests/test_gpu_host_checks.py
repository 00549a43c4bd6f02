"""scripts/gpu_host_checks.py ``engines``: what it runs on one host, what it leaves out, and that it never says
ok when no engine ran (the seed-p5en Miles arms' engines span two nodes: no one host runs them)."""

from __future__ import annotations

import functools
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

from bench.experiment import arm_run, load_experiment
from workloads.checks import gate
from workloads.checks.runs import run_config
from workloads.derive.deepep import moe_backend, moe_case, resolve_deepep
from workloads.derive.env import DIRECT_MODE_ENV
from workloads.derive.moe_backend import choose

ROOT = Path(__file__).resolve().parents[1]
NS = runpy.run_path(str(ROOT / "scripts" / "gpu_host_checks.py"))
ENGINE_SIZE = {"--rollout-num-gpus-per-engine", "--sglang-ep-size", "--sglang-dp-size", "--sglang-mem-fraction-static",
               "--sglang-deepep-v2-mode"}
"""What an engine's size changes in the rendered argv: its GPUs, its EP and DP sizes, the memory fraction sized for
them (``workloads.derive.sglang_budget``) and DeepEP V2's mode (direct on one node, hybrid across nodes)."""


def _engine(name: str, gpus: int, per_node: int = 8) -> dict:
    return {"name": name, "gpus_per_engine": gpus, "gpus_per_node": per_node, "model_path": "/m", "env": {},
            "argv": []}


def test_no_engine_that_fits_is_a_failure_naming_each_engine_left_out(tmp_path, capsys):
    path = tmp_path / "engines.json"
    path.write_text(json.dumps([_engine("seed-p5en miles-nccl", 16), _engine("big", 8)]))
    served = []
    assert NS["check_engines"](path, here=1, serve=served.append) == 1
    out = capsys.readouterr().out
    assert served == []
    assert "not run: seed-p5en miles-nccl: 16 GPUs over 2 nodes of 8" in out
    assert "not run: big: 8 GPUs, this host has 1" in out and "no engine ran" in out


def test_an_engine_across_nodes_is_left_out_on_any_one_host_and_the_others_run(tmp_path):
    path = tmp_path / "engines.json"
    path.write_text(json.dumps([_engine("across", 16), _engine("one-node", 8), _engine("two", 2)]))
    served = []
    assert NS["check_engines"](path, here=16, serve=lambda e: served.append(e["name"]) or True) == 0
    assert served == ["one-node", "two"]
    assert NS["check_engines"](path, here=16, serve=lambda e: e["name"] != "two") == 1


def test_only_one_host_variants_running_is_not_ok_and_the_summary_counts_them_apart(tmp_path, capsys):
    """Review of #34 F8: a one-host variant runs DeepEP V2 direct without GIN, not the shipped arm's hybrid path
    over EFA; when the variants were all that ran, the script says so and exits ONLY_VARIANTS (3), not 0."""
    variant = {**_engine("seed-ab miles-deepep-v2 (one-host variant, not shipped)", 8),
               "variant_of": "seed-ab miles-deepep-v2"}
    path = tmp_path / "engines.json"
    path.write_text(json.dumps([_engine("seed-ab miles-deepep-v2", 16), variant]))
    assert NS["ONLY_VARIANTS"] == 3
    assert NS["check_engines"](path, here=8, serve=lambda e: True) == 3
    out = capsys.readouterr().out
    assert "0 of 1 shipped engines and 1 of 1 one-host variants fit 8 GPUs" in out
    assert "0 of 0 shipped engines answered, 1 of 1 one-host variants answered" in out
    assert "stands in for seed-ab miles-deepep-v2, not run" in out and "no shipped engine ran" in out
    assert NS["check_engines"](path, here=8, serve=lambda e: False) == 1  # a failure is a failure first
    path.write_text(json.dumps([_engine("seed-ab miles-tp", 2), variant]))
    assert NS["check_engines"](path, here=8, serve=lambda e: True) == 0
    assert "1 of 1 shipped engines answered, 1 of 1 one-host variants answered" in capsys.readouterr().out


@functools.cache
def listed() -> tuple[dict, ...]:
    """FILE as the script's docstring says to write it: ``PYTHONPATH=. python contracts/tests/sglang_engines.py``."""
    done = subprocess.run([sys.executable, str(ROOT / "contracts" / "tests" / "sglang_engines.py")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return tuple(json.loads(done.stdout))


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_every_deepep_arm_has_an_expert_parallel_engine_that_one_host_of_8_gpus_starts():
    """For each experiment arm whose engines use DeepEP (seed-ab's and seed-p5en's miles-deepep-v2 span two nodes,
    example-ab's deepep-v1 arms one), the file holds an engine the script starts on one 8-GPU host: the arm's own
    or its one-node variant, with EP over all its GPUs and the all-to-all flags the platform's rules give the arm
    at one node (``moe_backend.choose``: DeepEP V2 in direct mode, with ``EP_DISABLE_GIN``)."""
    fit, _ = NS["fitting"](list(listed()), 8)
    checked = []
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        exp = load_experiment(path)
        stack = gate.read(exp.stack)
        for arm in exp.arms:
            cfg = run_config(stack, arm_run(exp, arm.name))
            if not moe_backend(cfg).moe_a2a_backend.startswith("deepep"):
                continue
            name = f"{path.name} arm {arm.name} on {exp.stack}"
            ours = [e for e in fit if name in (e["name"], e.get("variant_of"))
                    and int(_flag(e["argv"], "--sglang-ep-size")) == e["gpus_per_engine"] > 1]
            assert ours, f"{name}: no expert-parallel engine of this arm fits one host of 8 GPUs"
            deepep = resolve_deepep(cfg)
            c = moe_case(cfg, deepep.version)
            one_node = choose(c.precision, 1, c.deepep, c.gpu_model, c.sglang_version, deepep_mode=deepep.sglang_mode,
                              efa=c.efa)
            flags = one_node.sglang_args("--sglang-")
            for e in ours:
                assert {k: _flag(e["argv"], k) for k in flags[::2]} == dict(zip(flags[::2], flags[1::2])), e["name"]
                assert one_node.deepep_v2_mode != "direct" or DIRECT_MODE_ENV.items() <= e["env"].items(), e["name"]
            checked.append(f"{exp.name}/{arm.name}")
    assert {"seed-ab/miles-deepep-v2", "seed-p5en/miles-deepep-v2", "example-ab/deepep-v1"} <= set(checked), checked


def test_a_one_host_variant_is_its_arm_at_one_node_and_differs_only_in_the_engines_size():
    by_name = {e["name"]: e for e in listed()}
    variants = [e for e in listed() if "variant_of" in e]
    assert {v["variant_of"] for v in variants} >= {"seed-ab.yaml arm miles-nccl on p5en-shared",
                                                   "seed-ab.yaml arm miles-deepep-v2 on p5en-shared"}
    for v in variants:
        arm = by_name[v["variant_of"]]
        assert "variant_of" not in arm and "not shipped" in v["name"]
        assert arm["gpus_per_engine"] > arm["gpus_per_node"] == v["gpus_per_engine"] == v["gpus_per_node"]
        a, b = arm["argv"], v["argv"]
        assert len(a) == len(b) and {a[i - 1] for i in range(len(a)) if a[i] != b[i]} <= ENGINE_SIZE, v["name"]


def test_the_contracts_readme_gpu_section_gives_engines_exit_codes_as_the_script_has_them():
    """review34c F6: the section users read for ``scripts/gpu_host_checks.py`` names exit 3 (``ONLY_VARIANTS``) with
    the script's value, and says that exit 0 leaves the shipped expert-parallel arms unchecked on one host."""
    text = (ROOT / "contracts" / "README.md").read_text()
    section = text[text.index("## GPU-only checks"):]
    section = " ".join(section[:section.index("\n## ", 1)].split())
    assert f"{NS['ONLY_VARIANTS']} (`ONLY_VARIANTS`)" in section
    assert "exits 0 while every shipped expert-parallel arm was skipped" in section

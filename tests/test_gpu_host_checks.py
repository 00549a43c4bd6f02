"""scripts/gpu_host_checks.py ``engines``: what it runs on one host, what it leaves out, and that it never says
ok when no engine ran (the seed-p5en Miles arms' engines span two nodes: no one host runs them)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NS = runpy.run_path(str(ROOT / "scripts" / "gpu_host_checks.py"))


def _engine(name: str, gpus: int, per_node: int = 8) -> dict:
    return {"name": name, "gpus_per_engine": gpus, "gpus_per_node": per_node, "model_path": "/m", "env": {},
            "argv": []}


def test_no_engine_that_fits_is_a_failure_naming_each_engine_left_out(tmp_path, capsys):
    path = tmp_path / "engines.json"
    path.write_text(json.dumps([_engine("seed-p5en miles-nccl", 16), _engine("big", 8)]))
    served = []
    assert NS["check_engines"](path, here=1, serve=served.append) is False
    out = capsys.readouterr().out
    assert served == []
    assert "not run: seed-p5en miles-nccl: 16 GPUs over 2 nodes of 8" in out
    assert "not run: big: 8 GPUs, this host has 1" in out and "no engine ran" in out


def test_an_engine_across_nodes_is_left_out_on_any_one_host_and_the_others_run(tmp_path):
    path = tmp_path / "engines.json"
    path.write_text(json.dumps([_engine("across", 16), _engine("one-node", 8), _engine("two", 2)]))
    served = []
    assert NS["check_engines"](path, here=16, serve=lambda e: served.append(e["name"]) or True) is True
    assert served == ["one-node", "two"]
    assert NS["check_engines"](path, here=16, serve=lambda e: e["name"] != "two") is False

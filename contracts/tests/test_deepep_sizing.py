"""Issue 34 A4 with DeepEP's own sizing code (sgl-deep-ep 0.1.2, the DeepEP SGLang 0.5.19 depends on; run by
``contracts/deepep_sizing.py``) on every rendered DeepEP V2 engine across nodes: left to itself (SM count 0)
DeepEP divides by the RDMA rate ``ibstat`` gives, 0 where there is no ibstat answer, as on EFA; the SM
count the rollout pods set gives at least one QP per rank of the engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_engines import ROOT, engines
from wheels import unpack, wheel

from workloads.derive.sglang_budget import DEEPEP_V2_SMS_ENV, hybrid_qps

SIZING = ROOT / "contracts" / "deepep_sizing.py"
HYBRID = {e.name: e for e in engines() if "hybrid" in e.spec["argv"]}


@pytest.fixture(scope="module")
def sized(tmp_path_factory) -> dict[str, dict]:
    tree = unpack(wheel("sgl-deep-ep", "0.1.2"), tmp_path_factory.mktemp("deepep"), only=("deep_ep/",))
    specs = []
    for e in HYBRID.values():
        model = json.loads((Path(e.spec["model_path"]) / "config.json").read_text())
        specs.append({"ranks": e.spec["gpus_per_engine"], "nodes": e.spec["gpus_per_engine"] // e.spec["gpus_per_node"],
                      "num_sms": int(e.spec["env"].get(DEEPEP_V2_SMS_ENV, 0)),
                      "experts": model.get("num_experts") or model["n_routed_experts"],
                      "topk": model["num_experts_per_tok"]})
    done = subprocess.run([sys.executable, str(SIZING), str(tree)], input=json.dumps(specs), capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return dict(zip(HYBRID, json.loads(done.stdout.strip().splitlines()[-1])))


def test_there_are_engines_across_nodes():
    assert len(HYBRID) >= 3, sorted(HYBRID)  # p5en-prod's own run and the seed arms at least


@pytest.mark.parametrize("name", sorted(HYBRID))
def test_deepeps_sizing_on_the_engine(name, sized):
    e, got = HYBRID[name], sized[name]
    ranks, sms = e.spec["gpus_per_engine"], int(e.spec["env"].get(DEEPEP_V2_SMS_ENV, 0))
    assert sms > 0, f"{name}: no {DEEPEP_V2_SMS_ENV}"
    assert got["auto_sms_error"].startswith("ZeroDivisionError"), got  # what the set count avoids
    assert got["qps"] >= ranks, got  # one QP per rank at least, with DeepEP's own formula
    assert hybrid_qps(sms) <= got["qps"]  # the stack's check counts the smaller automatic allocation

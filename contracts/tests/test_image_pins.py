"""Issue 24 A7: the Miles recipe's pin check (workloads/image/Dockerfile ``# contract: pins``) run with each
profile's build arguments against the real METADATA of the profile's SGLang wheel (PyPI ``sglang==<the
profile's SGLang line>``): every pinned version inside SGLang's Requires-Dist, or named in the profile's
``image.pinDeviations`` with its reason, and no stale deviation."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT
from wheels import installed, run_in, unpack, wheel

from software import profiles
from software.recipe import arg_defaults, snippets
from software.report import build_args

RECIPE = ROOT / "workloads" / "image" / "Dockerfile"
PROFILES = [p for p in profiles().values() if p.image.recipe == "workloads/image/Dockerfile"]


def pinned(code: str) -> dict[str, str]:
    """The snippet's own ``PINNED`` table (distribution: build argument)."""
    node = next(n for n in ast.parse(code).body if isinstance(n, ast.Assign) and n.targets[0].id == "PINNED")
    return ast.literal_eval(node.value)


def run_pins(p, tmp_path: Path) -> subprocess.CompletedProcess:
    code = snippets(RECIPE)["pins"].code
    args = arg_defaults(RECIPE) | build_args(p)
    site = unpack(wheel("sglang", p.sglang.version), tmp_path / "site-packages", only=(f"sglang-{p.sglang.version}.dist-info/",))
    for dist, arg in pinned(code).items():
        installed(site, dist, args[arg])
    return run_in(site, code, args)


@pytest.mark.parametrize("p", PROFILES, ids=lambda p: p.name)
def test_every_pin_is_inside_the_sglang_wheels_requires_dist_or_a_stated_deviation(p, tmp_path):
    done = run_pins(p, tmp_path)
    assert done.returncode == 0, f"{p.name} against sglang {p.sglang.version}:\n{done.stderr}"
    for dist in p.image.pin_deviations:  # a deviation that no longer deviates is stale
        assert any(line.startswith(f"{dist} ") and "allowed: PIN_DEVIATIONS" in line
                   for line in done.stdout.splitlines()), (p.name, dist, done.stdout)


def test_the_pin_check_refuses_flashinfer_below_what_sglang_0_5_19_asserts(tmp_path):
    """SGLang 0.5.19 asserts flashinfer_python >= 0.6.18 at engine start (engine.py:1699-1712)."""
    p = next(p for p in PROFILES if p.sglang.version == "0.5.19")
    low = p.model_copy(update={"image": p.image.model_copy(update={"args": {**p.image.args,
                                                                            "FLASHINFER_PIN_VERSION": "0.6.15.post1"}})})
    done = run_pins(low, tmp_path)
    assert done.returncode != 0 and "flashinfer-python 0.6.15.post1 is outside sglang 0.5.19" in done.stderr, done.stderr

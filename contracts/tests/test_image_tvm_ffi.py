"""The Miles recipe's apache-tvm-ffi check (workloads/image/Dockerfile ``# contract: tvm-ffi``, miles
docker/Dockerfile:278-292) run against the real apache-tvm-ffi wheels: the version every Miles profile
pins has ``make_kwargs_wrapper(map_dataclass_to_tuple=...)``, and the check refuses one without it."""

from __future__ import annotations

import pytest
from conftest import ROOT
from wheels import run_in, unpack, wheel

from software import profiles
from software.recipe import arg_defaults, snippets
from software.report import build_args

RECIPE = ROOT / "workloads" / "image" / "Dockerfile"
PINS = sorted({(arg_defaults(RECIPE) | build_args(p))["APACHE_TVM_FFI_VERSION"]
               for p in profiles().values() if p.image.recipe == "workloads/image/Dockerfile"})
OLDER = "0.1.9"
"""What QwenLM/FlashQLA c18a486 setup.py:30 pulls in before the recipe puts the pin back. The wheels'
only Requires-Dist is typing-extensions>=4.5."""


@pytest.mark.parametrize("version", PINS)
def test_the_pinned_apache_tvm_ffi_has_what_cutlass_dsl_calls(version, tmp_path):
    site = unpack(wheel("apache-tvm-ffi", version), tmp_path / "site-packages")
    done = run_in(site, snippets(RECIPE)["tvm-ffi"].code, {}, deps=("typing_extensions",))
    assert done.returncode == 0, done.stderr


def test_the_check_refuses_the_older_build_flashqla_drags_in(tmp_path):
    site = unpack(wheel("apache-tvm-ffi", OLDER), tmp_path / "site-packages")
    done = run_in(site, snippets(RECIPE)["tvm-ffi"].code, {}, deps=("typing_extensions",))
    assert done.returncode != 0 and "too old for nvidia-cutlass-dsl" in done.stderr, done.stderr

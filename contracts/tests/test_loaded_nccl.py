"""Issue 34 A3 on the real wheels: this environment's torch (2.14.1, built with nvidia-nccl-cu13 2.30.7) running
the DeepEP V2 profile's NCCL (nvidia-nccl-cu13 2.31.2), unpacked ahead of torch's own as the image's
``NCCL_CU13_OVERRIDE`` leaves it (torch maps the first ``nvidia/nccl/lib`` on ``sys.path``). ``torch.cuda.nccl
.version()`` gives torch's compile-time figure; ``workloads/image/loaded_nccl.py`` asks the mapped library
(``ncclGetVersion``), which the preflight, fabric_bench and both image recipes now read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT
from wheels import unpack, wheel

from software import profile
from workloads.pod import preflight as P

LOADED = ROOT / "workloads" / "image" / "loaded_nccl.py"
V2 = profile("miles-deepep-v2")


@pytest.fixture(scope="module")
def overlay(tmp_path_factory) -> str:
    """A folder holding the profile's nvidia-nccl wheel, put ahead of this environment's site-packages."""
    return str(unpack(wheel("nvidia-nccl-cu13", V2.nccl), tmp_path_factory.mktemp("nccl") / "site-packages"))


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env})


def test_torch_names_its_build_while_the_library_it_maps_is_the_profiles(overlay):
    done = python(f"import runpy, torch; print(torch.cuda.nccl.version()); "
                  f"print(runpy.run_path({str(LOADED)!r})['version']())", {"PYTHONPATH": overlay})
    assert done.returncode == 0, done.stderr
    compiled, loaded = done.stdout.split("\n")[:2]
    assert loaded == V2.nccl == "2.31.2"
    assert compiled == "(2, 30, 7)"  # torch 2.14.1's build (its Requires-Dist nvidia-nccl-cu13==2.30.7)
    # The old check read torch's figure and refused the profile's own image; the library's passes.
    assert P.check_nccl(V2.nccl, compiled.strip("()").replace(", ", ".")) is not None
    assert P.check_nccl(V2.nccl, loaded) is None


def test_the_preflight_reads_it_in_a_child_with_torch(overlay, monkeypatch):
    monkeypatch.setattr(P, "LOADED_NCCL", str(LOADED))
    monkeypatch.setenv("PYTHONPATH", overlay)
    assert P.loaded_nccl() == V2.nccl


def test_two_mapped_nccl_libraries_are_refused(overlay):
    """A second libnccl (here preloaded beside torch's own) leaves no single answer: named, exit non-zero."""
    preload = os.path.join(overlay, "nvidia", "nccl", "lib", "libnccl.so.2")
    done = subprocess.run([sys.executable, str(LOADED)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": preload})
    assert done.returncode != 0 and "2 NCCL libraries mapped" in done.stderr, done.stderr

"""Issue 24 A1: the Miles recipe's NCCL lookup (workloads/image/Dockerfile, every ``# contract: nccl-root*``
snippet) run against the real nvidia-nccl wheel of each profile on that recipe, unpacked as pip installs
it. nvidia-nccl-cu13 (2.28.9, 2.31.2) ships ``nvidia/nccl/{include,lib}`` with no ``__init__.py``: a
namespace package, whose ``__file__`` is None."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT
from wheels import run_in, unpack, wheel

from software import profiles
from software.recipe import snippets

RECIPE = ROOT / "workloads" / "image" / "Dockerfile"
PROFILES = [p for p in profiles().values() if p.image.recipe == "workloads/image/Dockerfile"]


def nccl_dist(p) -> str:
    return f"nvidia-nccl-cu{p.cuda.split('.')[0]}"


def test_the_recipe_marks_its_nccl_lookups_and_none_reads_a_namespace_packages_file():
    found = [n for n in snippets(RECIPE) if n.startswith("nccl-root")]
    assert found, "no `# contract: nccl-root` snippet in the recipe"
    assert "nvidia.nccl.__file__" not in RECIPE.read_text() and ".nccl.__file__" not in RECIPE.read_text()


@pytest.mark.parametrize("p", PROFILES, ids=lambda p: f"{p.name}-nccl{p.nccl}")
def test_the_nccl_lookup_finds_the_wheel_torch_loads(p, tmp_path):
    site = unpack(wheel(nccl_dist(p), p.nccl), tmp_path / "site-packages")
    assert not (site / "nvidia" / "nccl" / "__init__.py").exists()  # the layout the bug is about
    for name, s in snippets(RECIPE).items():
        if not name.startswith("nccl-root"):
            continue
        done = run_in(site, s.code, {})
        assert done.returncode == 0, f"{name} ({s.instruction}) against {nccl_dist(p)}=={p.nccl}:\n{done.stderr}"
        root = Path(done.stdout.strip())
        assert root == site / "nvidia" / "nccl" and (root / "lib" / "libnccl.so.2").is_file(), (name, done.stdout)


def test_the_nccl_lookup_fails_loudly_without_the_wheel(tmp_path):
    (tmp_path / "site-packages").mkdir()
    for name, s in snippets(RECIPE).items():
        if name.startswith("nccl-root"):
            done = run_in(tmp_path / "site-packages", s.code, {})
            assert done.returncode != 0 and "nvidia-nccl" in done.stderr, (name, done.stderr)

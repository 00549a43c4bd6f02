"""Issue 24 A11: the Slime recipe's Ray check (workloads/image/slime.Dockerfile ``# contract: ray``) run
against the real METADATA of the ray wheel at the profile's version: Ray's version, and every requirement
of its ``default`` extra (dashboard, metrics agent) present at a version Ray's own METADATA accepts."""

from __future__ import annotations

from conftest import ROOT
from packaging.requirements import Requirement
from packaging.version import Version
from wheels import installed, metadata, run_in, unpack, wheel

from software import profile
from software.recipe import snippets

RECIPE = ROOT / "workloads" / "image" / "slime.Dockerfile"
P = profile("slime-0.2.4")


def ray_site(tmp_path):
    site = unpack(wheel("ray", P.ray), tmp_path / "site-packages", only=(f"ray-{P.ray}.dist-info/",))
    extra = [Requirement(line.split(":", 1)[1].strip()) for line in metadata(wheel("ray", P.ray)).splitlines()
             if line.startswith("Requires-Dist:") and 'extra == "default"' in line]
    return site, [r for r in extra if r.marker.evaluate({"extra": "default"})]


def accepted(r: Requirement) -> str:
    """A version ``r`` accepts: one of its own bounds, or a plain one."""
    bounds = [s.version for s in r.specifier if s.operator in (">=", "==")]
    return next(v for v in [*bounds, "2.12.0", "1.0"] if r.specifier.contains(Version(v)))


def test_ray_with_its_default_extra_passes(tmp_path):
    site, extra = ray_site(tmp_path)
    for r in extra:
        installed(site, r.name, accepted(r))
    done = run_in(site, snippets(RECIPE)["ray"].code, {"RAY_VERSION": P.ray})
    assert done.returncode == 0, done.stderr


def test_ray_without_its_dashboard_or_at_another_version_fails_the_build(tmp_path):
    site, extra = ray_site(tmp_path)
    done = run_in(site, snippets(RECIPE)["ray"].code, {"RAY_VERSION": "2.9.3"})
    assert done.returncode != 0 and f"ray {P.ray} installed, RAY_VERSION=2.9.3" in done.stderr, done.stderr
    assert all(f"{r.name}" in done.stderr for r in extra) and "aiohttp_cors" in done.stderr, done.stderr

"""Issue 24 A4 and A8: each Miles profile names the wheels release built for its own torch (two torches never
share one release), and the NCCL of a profile is its built image's record, not an assertion of ours."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import ROOT

from software import DATA, load, profile, profiles
from software.recipe import arg_defaults, base_args, declared
from software.report import build_args, build_command, typed_args
from workloads.cli.runs import main

MILES_RECIPE = ROOT / "workloads" / "image" / "Dockerfile"
SLIME_RECIPE = ROOT / "workloads" / "image" / "slime.Dockerfile"


def effective_args(p) -> dict[str, str]:
    """What the build of ``p`` runs with: the recipe's ARG defaults under the profile's build arguments."""
    return arg_defaults(ROOT / p.image.recipe) | build_args(p)


def test_no_wheels_release_serves_two_torches():
    """A4: the rolling cu130-x86_64 release's extensions match one torch; each profile's build takes the
    release its profile names (none: the build context's wheels), and states that release's torch."""
    by_release: dict[tuple[str, str], set[str]] = {}
    for p in profiles().values():
        if p.image.recipe != "workloads/image/Dockerfile":
            continue
        args = effective_args(p)
        assert args["WHEELS_TORCH"] == p.torch, p.name
        if args["WHEELS_TAG_X86"]:
            by_release.setdefault((args["WHEELS_REPO"], args["WHEELS_TAG_X86"]), set()).add(p.torch)
    assert by_release and all(len(t) == 1 for t in by_release.values()), by_release


def test_a_catalog_giving_one_release_to_two_torches_is_refused(tmp_path):
    rows = yaml.safe_load(DATA.read_text())
    rows["miles-deepep-v2"]["wheels"]["release"] = rows["miles-0.1"]["wheels"]["release"]
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump(rows))
    with pytest.raises(ValueError, match=r"profiles.yaml: miles-deepep-v2.wheels.release: cu130-x86_64 is "
                                         r"miles-0.1's, built for torch 2.11.0; miles-deepep-v2 runs torch 2.13.0"):
        load(tmp_path / "profiles.yaml", tmp_path / "built")
    rows["miles-deepep-v2"]["wheels"]["torch"] = "2.11.0"
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump(rows))
    with pytest.raises(ValueError, match=r"miles-deepep-v2: wheels: release cu130-x86_64 is built for torch 2.11.0, "
                                         r"the image's torch is 2.13.0"):
        load(tmp_path / "profiles.yaml", tmp_path / "built")


def test_the_slime_recipe_records_the_nccl_it_loads_instead_of_asserting_a_figure():
    """A8: SGLang's image recipe replaces torch's NCCL, so no recipe is told which NCCL to expect."""
    for recipe in (SLIME_RECIPE, MILES_RECIPE):
        assert not re.search(r"^ARG EXPECT_NCCL", recipe.read_text(), re.M), recipe
    assert "torch_nccl" in SLIME_RECIPE.read_text() and "/etc/rl-platform-image-versions" in SLIME_RECIPE.read_text()
    assert "EXPECT_NCCL" not in build_args(profile("slime-0.2.4"))


def versions_file(nccl: str, base: str = "slimerl/slime:nightly-dev-20260329a") -> str:
    return f"base_image={base}\ntorch=2.9.1+cu129\ntorch_nccl={nccl}\nray=2.53.0\n"


def test_the_built_images_record_is_the_profiles_nccl(tmp_path):
    assert not profile("slime-0.2.4").nccl_from_image
    built = tmp_path / "built"
    built.mkdir()
    (built / "slime-0.2.4.versions").write_text(versions_file("2.28.3"))
    slime = load(DATA, built)["slime-0.2.4"]
    assert slime.nccl == "2.28.3" and slime.nccl_from_image
    (built / "slime-0.2.4.versions").write_text(versions_file("2.26.2"))
    with pytest.raises(ValueError, match=r"built/slime-0.2.4.versions: torch_nccl: 2.26.2; allowed: the NCCL the "
                                         r"image loads, 2.27.5 or newer"):
        load(DATA, built)
    (built / "slime-0.2.4.versions").write_text(versions_file("2.28.3", base="lmsysorg/sglang:v0.5.16"))
    with pytest.raises(ValueError, match=r"base_image: lmsysorg/sglang:v0.5.16; the profile builds from slimerl/slime"):
        load(DATA, built)


def test_record_image_keeps_a_matching_record_and_refuses_another_images(tmp_path, monkeypatch):
    import software.report as report
    monkeypatch.setattr(report, "BUILT", tmp_path / "built")
    monkeypatch.setattr(report.record_image, "__defaults__", (tmp_path / "built",))
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text(versions_file("2.28.3"))
    bad.write_text(versions_file("2.28.3", base="lmsysorg/sglang:v0.5.16"))
    out: list[str] = []
    assert main(["profiles", "slime-0.2.4", "--record-image", str(bad)], out=out.append) != 0
    assert not (tmp_path / "built" / "slime-0.2.4.versions").exists()
    assert main(["profiles", "slime-0.2.4", "--record-image", str(good)], out=out.append) == 0
    assert out == ["slime-0.2.4: recorded slime-0.2.4.versions; nccl 2.28.3 (the built image)"]
    assert (tmp_path / "built" / "slime-0.2.4.versions").read_text() == good.read_text()
    profiles.cache_clear()


def test_the_build_arguments_are_the_profiles_typed_fields():
    """Issue 27: a version, commit or branch a profile types is the build argument, not a copy of it in
    ``image.args`` (before, ``ray`` and ``RAY_VERSION`` could disagree): changing the field changes the build."""
    for p in profiles().values():
        recipe = ROOT / p.image.recipe
        args = build_args(p)
        for name, value in typed_args(p).items():
            if value is not None and name in declared(recipe):
                assert args[name] == value, (p.name, name)
        assert args[base_args(recipe)[p.image.base.rpartition(":")[0]]] == p.image.base.rpartition(":")[2], p.name
        assert f"--build-arg RAY_VERSION={p.ray}" in build_command(p)
    v2 = profile("miles-deepep-v2")
    moved = v2.model_copy(update={"ray": "2.54.0", "nccl": "2.31.3",
                                  "megatron": v2.megatron.model_copy(update={"ref": "miles-main-x"})})
    got = build_args(moved)
    assert (got["RAY_VERSION"], got["NCCL_CU13_OVERRIDE"], got["MEGATRON_BRANCH"]) == ("2.54.0", "2.31.3", "miles-main-x")
    assert got["DEEPEP_V2"] == "1" and build_args(profile("miles-0.1"))["DEEPEP_V2"] == "0"
    m01 = profile("miles-0.1")
    assert build_args(m01)["MILES_COMMIT"] == m01.framework_source.commit
    assert build_args(m01)["SGLANG_COMMIT"] == m01.sglang.commit and "SGLANG_COMMIT" not in build_args(v2)
    slime = profile("slime-0.2.4")
    assert build_args(slime)["SLIME_COMMIT"] == slime.framework_source.commit
    assert build_args(slime)["EXPECT_SGLANG"] == slime.sglang.version and "MEGATRON_BRANCH" not in build_args(slime)


def test_image_args_repeating_a_typed_field_are_refused_naming_it():
    p = profile("miles-0.1")
    twice = p.model_copy(update={"image": p.image.model_copy(update={"args": {**p.image.args, "RAY_VERSION": "2.53.0"}})})
    with pytest.raises(ValueError, match=r"miles-0.1: image.args.RAY_VERSION: given by a typed field of the profile"):
        build_args(twice)
    other = p.model_copy(update={"image": p.image.model_copy(update={"base": "nvcr.io/nvidia/pytorch:25.01"})})
    with pytest.raises(ValueError, match=r"image.base: nvcr.io/nvidia/pytorch:25.01; the recipe workloads/image/"
                                         r"Dockerfile builds from lmsysorg/sglang"):
        build_args(other)

"""Images pinned by digest: ``workloads.images.requireDigest: true`` refuses, as a config error
naming the field, every image reference the workloads run without ``@sha256:<digest>``; with
digests the whole graph carries them; the default (version tags) keeps working for a profile whose
pins are all in the catalog, and a profile resolved at build time runs only by digest."""

from __future__ import annotations

import pytest
from conftest import load
from test_workloads import MILES_01, merge, variant, variant_graph
from test_workloads_security import pod_specs, registered_objects, with_end_time

from analysis import mocks
from stackconfig.stack import StackConfigError
from workloads.derive.images import images, pinned_by_digest

DIGEST = "sha256:" + "0123456789abcdef" * 4
MILES = f"registry.example/miles-efa:v0.1.0-efa1.49@{DIGEST}"
REWARD = f"registry.example/reward@{DIGEST}"
BUSYBOX = f"public.ecr.aws/docker/library/busybox:1.37.0@{DIGEST}"
REQUIRE = {"workloads": {"images": {"requireDigest": True}}}


def pinned(override: dict) -> dict:
    return merge(override, REQUIRE)


def miles(image: str) -> dict:
    return {"versions": {"software": {"images": {"miles-0.1": image}}}}


def refused(override: dict, stack: str = "p5en-prod") -> str:
    with pytest.raises(StackConfigError) as err:
        variant(stack, merge(MILES_01, override))
    first, second = str(err.value).splitlines()[:2]
    assert first == f"stack {stack!r}: invalid configuration"
    return second


def test_tags_are_the_default_without_teams_and_still_work():
    cfg = variant("p5en-prod", MILES_01)
    assert cfg.workloads.images.require_digest is None and not cfg.workloads.digests_required
    assert not any(pinned_by_digest(i) for i in images(cfg).values())


def test_digests_are_the_default_with_teams():
    """A stack with teams refuses images by tag unless it turns requireDigest off; the shared stack
    pins every image it runs, the team-directories Job's included."""
    teams = {"workloads": {"teams": [{"name": "alpha", "gpus": {"train": {"cap": 8}}}]}}
    line = refused(teams)
    assert line.startswith("  versions.software.images.miles-0.1: ") and "(the default with teams)" in line, line
    off = variant("p5en-prod", merge(MILES_01, {"workloads": {**teams["workloads"], "images": {"requireDigest": False}}}))
    assert not off.workloads.digests_required
    shared = load("p5en-shared")
    assert shared.workloads.digests_required and shared.workloads.images.require_digest is None
    refs = images(shared)
    assert "workloads.images.checkpointTrigger" in refs and all(map(pinned_by_digest, refs.values()))


def test_a_profile_resolved_at_build_time_runs_only_by_digest():
    """miles-deepep-v2 takes MILES_COMMIT, SGLANG_COMMIT and DEEPEP_COMMIT at build time: its tag alone
    does not say what was built, so the stack refuses it without a digest."""
    with pytest.raises(StackConfigError) as err:
        variant("p5en-prod", {"versions": {"software": {"images": {"miles-deepep-v2": "registry.example/m:v2"}}}})
    line = str(err.value).splitlines()[1]
    assert line.startswith("  versions.software.images.miles-deepep-v2: software miles-deepep-v2 resolves "
                           "MILES_COMMIT, SGLANG_COMMIT, DEEPEP_COMMIT at build time"), line
    assert pinned_by_digest(images(load("p5en-prod"))["versions.software.images.miles-deepep-v2"])


def test_require_digest_refuses_a_tag_naming_the_field():
    line = refused(REQUIRE)
    assert line.startswith("  versions.software.images.miles-0.1: '{imageRepository}:miles-49cac7b5-efa1.50.0' "
                           "is not pinned by digest"), line
    assert "requireDigest" in line and "@sha256:" in line


def test_require_digest_names_each_image_field():
    line = refused(pinned(merge(miles(MILES), {"versions": {"software": {"rewardImage": "registry.example/reward:1"}}})))
    assert line.startswith("  versions.software.rewardImage: "), line
    line = refused(pinned(with_end_time(extra=miles(MILES))))
    assert line.startswith("  workloads.images.checkpointTrigger: "), line


def test_a_malformed_digest_is_refused_even_without_the_option():
    line = refused(miles("radixark/miles@sha256:abc"))
    assert line.startswith("  versions.software.images.miles-0.1: ") and "malformed digest" in line, line


def test_with_digests_every_registered_container_is_pinned():
    override = merge(MILES_01, pinned(with_end_time(extra=merge(miles(MILES), {
        "versions": {"software": {"rewardImage": REWARD}},
        "workloads": {"images": {"checkpointTrigger": BUSYBOX}, "run": {"rayJob": True}}}))))
    cfg = variant("p5en-prod", override)
    assert cfg.workloads.images.require_digest and set(images(cfg).values()) == {MILES, REWARD, BUSYBOX}
    pulled = {c["image"] for obj in registered_objects(variant_graph("p5en-prod", override))
              for _, pod in pod_specs(obj) for c in pod["containers"]}
    cached = f"{mocks.ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/rl-p5en-prod/ecr-public/docker/library/busybox:1.37.0@{DIGEST}"
    assert pulled == {MILES, REWARD, cached}  # ECR Public's image through the stack's cache of it

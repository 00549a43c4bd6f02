"""The deploy page's steps run as written or stop with one line saying what to set and where it comes
from (issue 32 item 5): the image steps copy and first-pull every image of the stack's inventory,
and a build missing a commit given at build time stops before it starts, naming it and its source."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import ROOT, load

from software import profile
from software.report import build_command
from stackconfig.images import STACK_REGISTRY, STACK_REPOSITORY, placeholder_digest

PAGE = ROOT / "docs" / "getting-started" / "first-deploy.md"


def step(number: int) -> str:
    text = PAGE.read_text()
    start = text.index(f"# {number}. ")
    return text[start:text.index(f"# {number + 1}. ", start)]


def test_a_build_missing_a_commit_stops_in_one_line_naming_it_and_its_source(tmp_path):
    """``${VAR:?...}`` expands before docker runs: nothing is built, and the line says where the
    commit comes from."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(f"#!/bin/sh\ntouch {tmp_path / 'ran'}\n")
    (fake / "docker").chmod(0o755)
    p = profile("miles-deepep-v2")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_COMMIT")}
    env |= {"PATH": f"{fake}:{env['PATH']}", "REPO": "r.example/x"}
    done = subprocess.run(["bash", "-c", build_command(p)], env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and not (tmp_path / "ran").exists()
    (line,) = done.stderr.strip().splitlines()
    assert "MILES_COMMIT" in line and p.framework_source.repo in line and p.framework_source.ref in line, line
    env |= {"MILES_COMMIT": "a" * 40}
    line = subprocess.run(["bash", "-c", build_command(p)], env=env, capture_output=True, text=True).stderr.strip()
    assert "SGLANG_COMMIT" in line and p.sglang.branch in line, line
    env |= {"SGLANG_COMMIT": "b" * 40}
    line = subprocess.run(["bash", "-c", build_command(p)], env=env, capture_output=True, text=True).stderr.strip()
    assert "DEEPEP_COMMIT" in line and p.image.args["DEEPEP_REPO"] in line, line
    env |= {"DEEPEP_COMMIT": "c" * 40}
    assert subprocess.run(["bash", "-c", build_command(p)], env=env, capture_output=True).returncode == 0
    assert (tmp_path / "ran").exists()


def test_step_2_logs_in_names_each_build_time_commit_and_runs_the_image_steps():
    text = step(2)
    assert 'aws ecr get-login-password --region "$REGION" | docker login' in text
    for arg in profile("miles-deepep-v2").image.required_args:
        assert arg in text, arg
    assert "moe-rl plan p5en-prod --image-steps | bash" in text
    assert "workloads/image/wheels/" in text  # the torch-2.13 wheel set the build needs


@pytest.mark.parametrize("stack", ["p5en-prod", "p5en-shared"])
def test_the_image_steps_copy_and_first_pull_every_image_of_the_inventory(stack):
    """Every image of the stack's inventory is pushed (the workload images, by the build), copied
    (a registry ECR cannot cache) or pulled once through its cache; a placeholder first needs its pin."""
    import program
    from test_first_deploy import pinned_profiles
    from test_workloads import variant
    for cfg in (load(stack), variant(stack, pinned_profiles(stack))):
        steps = program.image_steps(cfg)
        built = {f"{STACK_REPOSITORY}:{profile(name).image.tag}" for name in cfg.versions.software.images} | {
            f"{STACK_REPOSITORY}:{p.image.tag}" for p in map(profile, [cfg.workloads.run.software])}
        for pull in program.stack_pulls(cfg, program.derive(cfg)):
            image = pull.image
            if image.split("@")[0] in built or placeholder_digest(image):
                continue
            if image.startswith(STACK_REGISTRY):
                assert f'docker pull "${{REPO%/*}}{image[len(STACK_REGISTRY):]}"' in steps, image
            elif image.startswith(STACK_REPOSITORY):
                tag = image[len(STACK_REPOSITORY) + 1:].split("@")[0]
                assert any(s.startswith("crane copy nvcr.io/") and s.endswith(f'"$REPO:{tag}"') for s in steps), image

"""Software profiles: the catalog, one source for each image's tag and build arguments, and runs on
each profile that plan and dry-run to a RayJob whose image, argv and environment are the profile's;
a run that asks a profile for what its versions cannot do is refused naming the field."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import ROOT
from test_workloads import FP8_V2, MILES_01, merge, software_with, variant

from software import profile, profiles, version_tuple
from software.report import build_args, build_command
from stackconfig.stack import StackConfigError
from stackconfig.images import STACK_REPOSITORY
from stackconfig.versions import SoftwareStack, workload_image
from workloads.checks.flags import argv_pairs, argv_problems
from workloads.checks.runs import load_run
from workloads.cli.runs import main
from workloads.deploy.submit import run_objects
from workloads.schema.run import RunFile

SHARED = "p5en-shared"
RUNS = {"slime-0.2.4": "baseline-slime-qwen3-30b.yaml", "miles-0.1": "grpo-qwen3-30b.yaml",
        "miles-deepep-v2": "deepep-v2-qwen3-30b-fp8.yaml"}


def job_of(name: str) -> tuple[dict, list[str], dict]:
    """(head container, argv, rollout env) of the dry-run RayJob of the profile's run file."""
    job = run_objects(variant(SHARED, {}), load_run(ROOT / "runs" / RUNS[name])).rayjob
    spec = job["spec"]["rayClusterSpec"]
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]
    rollout = next(g for g in spec["workerGroupSpecs"] if g["groupName"] == "rollout")
    renv = {e["name"]: e.get("value") for e in rollout["template"]["spec"]["containers"][0]["env"]}
    return head, json.loads(env["MILES_ARGV"]), renv


def test_each_profiles_run_file_dry_runs_to_its_image_argv_and_environment():
    for name in RUNS:
        p = profile(name)
        head, argv, env = job_of(name)
        assert head["image"].startswith(f"{STACK_REPOSITORY}:{p.image.tag}"), (name, head["image"])
        assert argv[0] == f"/root/{p.framework.value}/train.py", name
        assert argv_problems(p, argv[1:]) == [], name
        flags = dict(argv_pairs(argv[1:]))
        assert ("--save-trigger-sentinel" in flags) == p.checkpoint_on_stop, name
        assert ("--train-backend" in flags) == (p.framework.value == "miles"), name
        assert "RDMAV_FORK_SAFE" not in env and "FI_EFA_USE_DEVICE_RDMA" not in env
    _, v2, env = job_of("miles-deepep-v2")
    flags = dict(argv_pairs(v2[1:]))
    assert flags["--sglang-moe-a2a-backend"] == ["deepep_v2"] and flags["--sglang-deepep-v2-mode"] == ["hybrid"]
    assert flags["--moe-token-dispatcher-type"] == ["alltoall"] and env["NCCL_GIN_TYPE"] == "5"
    _, slime, env = job_of("slime-0.2.4")
    assert "--sglang-moe-a2a-backend" not in dict(argv_pairs(slime[1:])) and "NCCL_GIN_TYPE" not in env


def test_the_plan_of_every_run_file_succeeds():
    out: list[str] = []
    assert main(["plan", SHARED, *map(str, sorted((ROOT / "runs").glob("*.yaml")))], out=out.append) == 0
    assert {f.stem for f in (ROOT / "runs").glob("*.yaml")} >= {r.removesuffix(".yaml") for r in RUNS.values()}


def test_slime_drops_unknown_megatron_flags_so_the_generator_refuses_them():
    """Slime parses Megatron's flags with ignore_unknown_args=True: a Miles-only or misspelt flag would
    be dropped without a word; the stack refuses it naming the field."""
    slime = {"workloads": {"run": {"software": "slime-0.2.4", "rollout": {"nodesPerEngine": 1}, "model": "Qwen/Qwen3-30B-A3B",
                                   "deepep": {"version": "off"}}}}
    for flag in ("--save-trigger-sentinel", "--moe-router-topk-typo", "--use-miles-router"):
        with pytest.raises(StackConfigError, match=rf"workloads.run.extraArgs: software slime-0.2.4 does not accept: "
                                                   rf"{flag}: not a flag of slime"):
            variant("p5en-prod", merge(slime, {"workloads": {"run": {"extraArgs": [flag]}}}))
    with pytest.raises(StackConfigError, match=r"--sglang-moe-a2a-backend deepep_v2: allowed: none, deepep"):
        variant("p5en-prod", merge(slime, {"workloads": {"run": {"extraArgs": ["--sglang-moe-a2a-backend", "deepep_v2"]}}}))
    assert variant("p5en-prod", merge(slime, {"workloads": {"run": {"extraArgs": ["--use-slime-router"]}}}))


def test_requests_a_profile_cannot_run_are_refused_before_anything_is_created():
    # 16.9: engines across nodes need NCCL >= 2.30.7; miles-0.1 loads torch 2.11's 2.28.9.
    with pytest.raises(StackConfigError, match=r"workloads.run.rollout.nodesPerEngine: 2 nodes per engine need NCCL "
                                               r">= 2.30.7 .*software miles-0.1 loads NCCL 2.28.9; allowed: 1, or "
                                               rf"software: {software_with(lambda p: version_tuple(p.nccl) >= (2, 30, 7))}$"):
        variant("p5en-prod", merge(MILES_01, {"workloads": {"run": {"rollout": {"nodesPerEngine": 2}}}}))
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.version: v1 is not available with software "
                                               rf"slime-0.2.4 .*allowed: off, or software: {software_with(lambda p: 'v1' in p.a2a)}$"):
        variant("p5en-prod", {"workloads": {"run": {"software": "slime-0.2.4", "deepep": {"version": "v1"}}}})
    with pytest.raises(StackConfigError, match=r"workloads.run.extraArgs: --sglang-enable-deterministic-inference is "
                                               r"refused by SGLang 0.5.19 with --moe-a2a-backend deepep_v2"):
        variant("p5en-prod", merge(FP8_V2, {"workloads": {"run": {"extraArgs": ["--sglang-enable-deterministic-inference"]}}}))
    with pytest.raises(StackConfigError, match=r"workloads.run.software: 'miles-2' is not a software profile; "
                                               rf"allowed: {software_with()}$"):
        variant("p5en-prod", {"workloads": {"run": {"software": "miles-2"}}})
    with pytest.raises(ValueError, match=r"software\n.*'miles-2' is not a software profile"):
        RunFile(name="r", team="a", nodes={"train": 1}, software="miles-2")


def test_one_source_for_each_images_tag_and_build_arguments():
    """16.8: the tag the recipe's build pushes is the tag the stack pulls, and every build argument a
    profile sets or requires is an ARG of its recipe; the README takes the repository from the stack
    output and the tag from the profile."""
    for p in profiles().values():
        recipe = (ROOT / p.image.recipe).read_text()
        declared = set(re.findall(r"^ARG (\w+)", recipe, re.M))
        assert set(build_args(p)) | set(p.image.required_args) <= declared, p.name
        assert workload_image(SoftwareStack(), p) == f"{STACK_REPOSITORY}:{p.image.tag}"
        assert f'-t "$REPO:{p.image.tag}"' in build_command(p) and f"-f {p.image.recipe}" in build_command(p)
        for f in (p.framework_source.flags, p.megatron.flags, p.sglang.flags):
            assert (ROOT / "workloads" / "schemas" / f).is_file(), (p.name, f)
    readme = (ROOT / "workloads" / "image" / "README.md").read_text()
    assert 'REPO=$(pulumi stack output imageRepository)' in readme and "profiles miles-0.1 --build" in readme
    assert not re.search(r"^TAG=", readme, re.M)  # no tag typed by hand


def test_profiles_command_lists_the_pins():
    out: list[str] = []
    assert main(["profiles"], out=out.append) == 0
    text = "\n".join(out)
    for p in profiles().values():
        assert f"{p.name}: {p.summary}" in text and p.image.tag in text and f"nccl {p.nccl}" in text
    assert "bd217a63f113d74488170914e4d39e68c12e8cf0" in text and "MILES_COMMIT at build time" in text


def test_every_profiles_flag_lists_are_read_from_its_pins():
    """The lists a profile's argv is checked against come from the sources it pins (a new profile's too)."""
    for p in profiles().values():
        for source in (p.framework_source, p.megatron):
            origin = json.loads((ROOT / "workloads" / "schemas" / source.flags).read_text())["origin"]
            assert origin["repository"] == source.repo, (p.name, source.flags)
            assert source.commit in (None, origin["commit"]), (p.name, source.flags)
        sglang = json.loads((ROOT / "workloads" / "schemas" / p.sglang.flags).read_text())["origin"]
        assert sglang["version"] == p.sglang.version and re.fullmatch(r"[0-9a-f]{64}", sglang["sha256"]), p.name


def test_vendored_flag_lists_record_their_origin():
    for rel, key in (("slime/bd217a63f113-flags.json", "commit"), ("megatron/3714d81d418c-flags.json", "commit"),
                     ("megatron/235952df607b-flags.json", "commit")):
        d = json.loads((ROOT / "workloads" / "schemas" / rel).read_text())
        assert re.fullmatch(r"[0-9a-f]{40}", d["origin"][key]) and d["generated_by"] == "scripts/extract_flags.py", rel
    for v in ("0.5.9", "0.5.16", "0.5.19"):
        d = json.loads((ROOT / "workloads" / "schemas" / "sglang" / f"{v}-flags.json").read_text())
        assert d["origin"]["version"] == v and re.fullmatch(r"[0-9a-f]{64}", d["origin"]["sha256"])
    v19 = json.loads((ROOT / "workloads" / "schemas" / "sglang" / "0.5.19-flags.json").read_text())
    assert "deepep_v2" in v19["choices"]["moe_a2a_backend"] and v19["flags"]["--deepep-v2-mode"] == "deepep_v2_mode"
    v9 = json.loads((ROOT / "workloads" / "schemas" / "sglang" / "0.5.9-flags.json").read_text())
    assert "deepep_v2" not in v9["choices"]["moe_a2a_backend"]
    slime = json.loads((ROOT / "workloads" / "schemas" / "slime" / "bd217a63f113-flags.json").read_text())
    assert "--save-trigger-sentinel" not in slime["miles_flags"] and "--use-slime-router" in slime["miles_flags"]
    assert slime["megatron"]["pinned"]["commit"] == profile("slime-0.2.4").megatron.commit


def test_the_stack_plan_prints_each_pools_profile_a2a_backend_and_gin_mode():
    from analysis.plan import run_lines
    from conftest import load
    lines = run_lines(load("p5en-prod"))
    assert ("    pool rollout: profile miles-deepep-v2, a2a deepep_v2, GIN GPU-initiated (GIN type 5), NCCL 2.31.2 "
            "over EFA (aws-ofi-nccl)") in lines
    assert any(line.startswith("    pool train: profile miles-deepep-v2, a2a alltoall, GIN none") for line in lines)
    old = run_lines(variant("p5en-prod", MILES_01))
    assert any(line.startswith("    pool rollout: profile miles-0.1, a2a none, GIN none") for line in old)


def test_a_slime_pod_does_not_wait_on_stop_for_a_save_slime_cannot_make():
    """Slime has no --save-trigger-sentinel: its pods' preStop hook is Ray's plain stop, so a preempted
    attempt frees its nodes at once and resumes from its last periodic save; Miles' pods wait for the save."""
    def hooks(file: str) -> set[str]:
        job = run_objects(variant(SHARED, {}), load_run(ROOT / "runs" / file)).rayjob
        spec = job["spec"]["rayClusterSpec"]
        templates = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
        return {" ".join(t["spec"]["containers"][0].get("lifecycle", {}).get("preStop", {}).get("exec", {})
                         .get("command", [])) for t in templates}
    assert all("save-on-stop" not in h for h in hooks(RUNS["slime-0.2.4"]))
    assert any("save-on-stop" in h for h in hooks(RUNS["miles-0.1"]))

"""Every flag of the generated Miles argv exists in the pinned releases: Miles' own flags and the
Megatron flags its examples use (workloads/schemas/miles), and each ``--sglang-*`` flag in SGLang's
ServerArgs, read statically from the pinned SGLang wheel (downloaded once into a cache)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from conftest import STACKS, load
from test_workloads import SCHEMAS, variant
from upstream_wheels import wheel_path

from software import profile
from test_workloads import MILES_01, merge
from workloads.derive.argv import MILES_LAUNCHER, entry_and_flags, miles_argv
from workloads.checks.flags import MilesFlags, argv_pairs, miles_flags, miles_flags_file, sglang_flags_from_wheel

MILES_01_PROFILE = profile("miles-0.1")
MILES_FLAGS = miles_flags_file(SCHEMAS, MILES_01_PROFILE.framework_source.commit)
VARIANTS = [
    ("p5en-prod", MILES_01),
    ("p5en-prod", merge(MILES_01, {"workloads": {"run": {"model": "Qwen/Qwen3-30B-A3B-FP8", "deepep": {"version": "v1"}}}})),
    ("p5en-prod", merge(MILES_01, {"workloads": {"run": {"entryPoint": "train_async.py"}}})),
    ("p5en-prod", merge(MILES_01, {"workloads": {"storage": {"capacityGib": 9600}, "run": {
        "model": "Qwen/Qwen3-235B-A22B", "extraArgs": ["--sglang-cuda-graph-max-bs", "256", "--save-hf", "/mnt/fsx/hf"]}}})),
    ("p4d", {"workloads": {"run": {"deepep": {"version": "off"}, "rollout": {"dpAttention": False}}}}),
]
"""Runs on the miles-0.1 profile: its Miles, Megatron and SGLang (0.5.16) lists."""


@functools.cache
def miles() -> MilesFlags:
    return miles_flags(MILES_FLAGS)


@functools.cache
def sglang():
    wheel, why = wheel_path("sglang", MILES_01_PROFILE.sglang.version)
    if wheel is None:
        pytest.skip(f"sglang=={MILES_01_PROFILE.sglang.version} wheel unavailable (no package registry?): {why}")
    return sglang_flags_from_wheel(wheel)


def argvs() -> list[tuple[str, list[str]]]:
    out = [(s, miles_argv(load(s))) for s in STACKS if load(s).workloads.run.software == MILES_01_PROFILE.name]
    out += [(f"{s}+{o}", miles_argv(variant(s, o))) for s, o in VARIANTS]
    return out


def miles_problems(argv: list[str]) -> list[str]:
    """Flags Miles v0.1.0's parser (Miles + Megatron on the megatron backend) would not accept."""
    m = miles()
    problems = []
    for flag, values in argv_pairs(entry_and_flags(argv)[1]):
        if flag.startswith(m.sglang_prefix) and flag not in m.miles_defined_sglang:
            continue  # checked against SGLang itself
        if flag in m.fsdp_only and flag not in m.miles and flag not in m.megatron_examples:
            problems.append(f"{flag}: an FSDP-backend flag")
        elif flag not in m.miles and flag not in m.megatron_examples:
            problems.append(f"{flag}: neither a Miles flag nor a Megatron flag Miles' examples use")
    return problems


def sglang_problems(argv: list[str]) -> list[str]:
    m, s = miles(), sglang()
    problems = []
    for flag, values in argv_pairs(argv):
        if not flag.startswith(m.sglang_prefix) or flag in m.miles_defined_sglang:
            continue
        server_flag = "--" + flag[len(m.sglang_prefix):]
        dest = s.flags.get(server_flag)
        if dest is None:
            problems.append(f"{flag}: SGLang {MILES_01_PROFILE.sglang.version} has no {server_flag}")
        elif dest in m.sglang_skipped:
            problems.append(f"{flag}: Miles sets {dest} itself and does not register {flag}")
        elif dest in s.choices and not set(values) <= {str(c) for c in s.choices[dest]}:
            problems.append(f"{flag} {values}: not in {s.choices[dest]}")
    return problems


def test_entry_points_are_miles_entry_points():
    import json
    entry_points = json.loads(MILES_FLAGS.read_text())["entry_points"]
    for name, argv in argvs():
        assert Path(entry_and_flags(argv)[0]).name in entry_points, name


def test_miles_and_megatron_flags_exist_in_the_pinned_release():
    for name, argv in argvs():
        assert miles_problems(argv) == [], name


def test_miles_flag_values_respect_their_declared_type_and_choices():
    import json
    declared = json.loads(MILES_FLAGS.read_text())["miles_flags"]
    casts = {"int": int, "float": float, "str": str}
    for name, argv in argvs():
        for flag, values in argv_pairs(entry_and_flags(argv)[1]):
            d = declared.get(flag)
            if d is None:
                continue
            if d["action"] in ("store_true", "store_false"):
                assert values == [], (name, flag, values)
                continue
            if d["nargs"] is None:
                assert len(values) == 1, (name, flag, values)
            if d["type"] in casts:
                [casts[d["type"]](v) for v in values]
            if d["choices"]:
                assert set(values) <= set(d["choices"]), (name, flag, values)


def test_sglang_flags_exist_in_the_pinned_sglang_server_args():
    for name, argv in argvs():
        assert sglang_problems(argv) == [], name
    generated = {f for _, argv in argvs() for f, _ in argv_pairs(argv) if f.startswith("--sglang-")}
    assert {"--sglang-moe-a2a-backend", "--sglang-deepep-mode", "--sglang-ep-size",
            "--sglang-enable-dp-attention", "--sglang-dp-size"} <= generated


def test_sglang_flags_are_ones_miles_examples_pass():
    """The same flags run on Miles' release image (its SGLang fork): Miles' own examples pass them."""
    import json
    used = set(json.loads(MILES_FLAGS.read_text())["sglang_passthrough"]["flags_used_in_miles_examples"])
    generated = {f for _, argv in argvs() for f, _ in argv_pairs(argv) if f.startswith("--sglang-")}
    assert generated <= used


def test_the_checks_catch_flags_that_do_not_exist():
    bad = ["python3", MILES_LAUNCHER, "/root/miles/train.py", "--actor-num-nodes", "2", "--no-such-miles-flag",
           "--sglang-enable-ep-moe", "--sglang-moe-a2a-backend", "deepep2", "--sglang-port", "1"]
    assert [p.split(":")[0] for p in miles_problems(bad)] == ["--no-such-miles-flag"]
    found = sglang_problems(bad)
    assert [p.split(" ")[0].rstrip(":") for p in found] == [
        "--sglang-enable-ep-moe", "--sglang-moe-a2a-backend", "--sglang-port"], found
    assert "has no --enable-ep-moe" in found[0] and "not in" in found[1] and "Miles sets port" in found[2]

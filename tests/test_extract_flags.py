"""The change path of a software profile fails loudly: ``scripts/extract_flags.py sglang`` reads both
layouts of SGLang's flags (``ServerArgs`` in ``server_args.py``; from 0.5.23 its namespace classes under
``sglang/srt/arg_groups/fields/``) and refuses a flag list it cannot trust (too few flags for any release
the profiles know, or a flag the platform passes that every known release has, unless named as removed),
every profile's vendored list passes the same check, and every profile's SGLang release has its wheel in
the contract stage's list (``contracts/sglang-wheels.txt``)."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

import software
from upstream_wheels import wheel_path
from workloads.checks.flags import SCHEMAS, SERVER_ARGS, parse_server_args

_spec = importlib.util.spec_from_file_location("extract_flags", ROOT / "scripts" / "extract_flags.py")
extract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(extract)
WHEELS = ROOT / "contracts" / "sglang-wheels.txt"


def fake_wheel(tmp_path: Path, version: str, flags: dict[str, str]) -> Path:
    """A wheel whose ``ServerArgs.add_cli_args`` registers exactly ``flags`` (flag -> dest)."""
    calls = "".join(f"        parser.add_argument({f!r}, dest={d!r})\n" for f, d in flags.items())
    source = f"class ServerArgs:\n    @staticmethod\n    def add_cli_args(parser):\n{calls or '        pass'}\n"
    wheel = tmp_path / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(SERVER_ARGS, source)
    return wheel


def vendored(version: str) -> dict[str, str]:
    return json.loads((SCHEMAS / "sglang" / f"{version}-flags.json").read_text())["flags"]


def test_a_release_read_as_nine_flags_is_refused_and_nothing_written(tmp_path):
    """Before the parser followed SGLang 0.5.23's fields to ``arg_groups/fields/``, it read 9 flags of it."""
    nine = dict(list(vendored("0.5.19").items())[:9])
    out = tmp_path / "0.5.23-flags.json"
    with pytest.raises(SystemExit) as refused:
        extract.main(["sglang", "--wheel", str(fake_wheel(tmp_path, "0.5.23", nine)), "--out", str(out)])
    assert "SGLang 0.5.23: 9 flags read, fewer than 170 (50% of 0.5.9's 341)" in str(refused.value)
    assert not out.exists()


NAMESPACED = {  # the shape of SGLang 0.5.23's declarations (server_args.py:522, arg_groups/fields/*.py), in brief
    SERVER_ARGS: "from sglang.srt.arg_groups.fields.memory import Memory\n"
                 "from sglang.srt.arg_groups.choices import POLICIES\n"
                 "class ServerArgs:\n"
                 "    @staticmethod\n"
                 "    def add_cli_args(parser):\n"
                 "        add_cli_args_from_dataclass(parser, ServerArgs)\n"
                 "        parser.add_argument('--config', type=str)\n"
                 "_INPUT_NAMESPACES = [Memory]\n",
    "sglang/srt/arg_groups/choices.py": "POLICIES = ['lru', 'lfu']\n",
    "sglang/srt/arg_groups/fields/memory.py":
        "from sglang.srt.arg_groups.choices import POLICIES\n"
        "class Memory(msgspec.Struct):\n"
        "    _NS_PATH = 'memory'\n"
        "    mem_fraction_static: A[Optional[float], 'The fraction of the memory for static allocation.'] = None\n"
        "    radix_eviction_policy: A[str, Arg(help='policy', choices=POLICIES)] = 'lru'\n"
        "    tp_size: A[int, Arg(help='tp', cli_name='--tensor-parallel-size', aliases=['--tp-size'])] = 1\n"
        "    _explicitly_set: A[bool, Arg(no_cli=True)] = False\n"
        "    ranks: A[int, Derived(doc='set at run time')] = 0\n",
}


def test_a_release_that_declares_its_fields_on_namespace_classes_is_read_whole():
    """Shown failing before the parser followed ``_INPUT_NAMESPACES``: it read ``--config`` alone."""
    parsed = parse_server_args(NAMESPACED[SERVER_ARGS], NAMESPACED.get)
    assert parsed.flags == {"--mem-fraction-static": "mem_fraction_static", "--radix-eviction-policy":
                            "radix_eviction_policy", "--tensor-parallel-size": "tp_size", "--tp-size": "tp_size",
                            "--config": "config"}
    assert parsed.choices == {"radix_eviction_policy": ["lru", "lfu"]}
    with pytest.raises(ValueError, match="_INPUT_NAMESPACES: the release's other files are needed"):
        parse_server_args(NAMESPACED[SERVER_ARGS])
    with pytest.raises(ValueError, match="_INPUT_NAMESPACES: Memory is not a class of a module the wheel holds"):
        parse_server_args(NAMESPACED[SERVER_ARGS], {SERVER_ARGS: NAMESPACED[SERVER_ARGS]}.get)


def test_sglang_0_5_23_is_read_from_its_wheel_and_its_removed_flag_must_be_named(tmp_path):
    """The release itself: 547 flags (0.5.19: 516). It removed ``--cuda-graph-max-bs`` (for
    ``--cuda-graph-max-bs-decode``/``-prefill``, arg_groups/fields/exec_.py:629), which the platform passes:
    refused until the maintainer names it removed, and then recorded."""
    wheel, why = wheel_path("sglang", "0.5.23")
    if wheel is None:
        pytest.skip(f"sglang==0.5.23 wheel unavailable (no package registry?): {why}")
    out = tmp_path / "0.5.23-flags.json"
    with pytest.raises(SystemExit) as refused:
        extract.main(["sglang", "--wheel", str(wheel), "--out", str(out)])
    assert str(refused.value) == (
        "refused, nothing written: SGLang 0.5.23: no --cuda-graph-max-bs, which the platform passes and 0.5.9, "
        "0.5.16, 0.5.19 all have; read the release's server_args and sglang/srt/arg_groups/fields/ before trusting "
        "this (a flag the release removed: --removed NAME)")
    with pytest.raises(SystemExit, match="--removed --mem-fraction-static, but the release has it"):
        extract.main(["sglang", "--wheel", str(wheel), "--removed", "cuda-graph-max-bs", "--removed",
                      "mem-fraction-static", "--out", str(out)])
    assert not out.exists()
    extract.main(["sglang", "--wheel", str(wheel), "--removed", "cuda-graph-max-bs", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert len(doc["flags"]) == 547 and doc["origin"]["removed"] == ["--cuda-graph-max-bs"]
    assert {"--mem-fraction-static", "--cuda-graph-max-bs-decode", "--tp-size", "--ep-size"} <= doc["flags"].keys()
    assert "sglang/srt/arg_groups/fields/memory.py" in doc["origin"]["also_read"]


def test_a_release_without_a_flag_the_platform_passes_is_refused(tmp_path):
    flags = vendored("0.5.19")
    out = tmp_path / "flags.json"
    extract.main(["sglang", "--wheel", str(fake_wheel(tmp_path, "0.5.99", flags)), "--out", str(out)])
    assert json.loads(out.read_text())["flags"] == flags  # the whole list round-trips through the parser
    del flags["--mem-fraction-static"]
    out.unlink()
    with pytest.raises(SystemExit, match=r"SGLang 0.5.99: no --mem-fraction-static, which the platform passes and "
                                         r"0.5.9, 0.5.16, 0.5.19 all have"):
        extract.main(["sglang", "--wheel", str(fake_wheel(tmp_path, "0.5.99", flags)), "--out", str(out)])
    assert not out.exists()


def test_the_flags_in_use_are_the_platforms_sglang_flags():
    """Derived from the stacks' and run files' command lines, not listed: what the DeepEP V2 run sizes
    (the engine's budget) and what every rollout engine is given."""
    used = extract.sglang_flags_in_use()
    assert {"--mem-fraction-static", "--ep-size", "--chunked-prefill-size", "--moe-a2a-backend"} <= used
    assert all(f.startswith("--") and not f.startswith("--sglang-") for f in used)


def test_every_profiles_vendored_sglang_list_passes_the_extractors_check():
    """A list written by hand (or by an older extractor) is held to what the extractor would refuse."""
    used = extract.sglang_flags_in_use()
    for p in software.profiles().values():
        flags = json.loads((SCHEMAS / p.sglang.flags).read_text())["flags"]
        known = extract.known_sglang(but=p.sglang.version)
        assert known and extract.sglang_trust_problems(p.sglang.version, flags, known, used) == [], p.name


def listed_wheels(path: Path = WHEELS) -> set[str]:
    return {v for line in path.read_text().splitlines() if not line.startswith("#") for v in line.split()}


def unlisted(profiles: dict[str, software.Profile], wheels: set[str]) -> list[str]:
    return sorted(f"{p.name}: sglang {p.sglang.version}" for p in profiles.values() if p.sglang.version not in wheels)


def test_every_profiles_sglang_has_its_wheel_in_the_contract_stage(tmp_path):
    assert unlisted(software.profiles(), listed_wheels()) == []
    # a profile on a release the list lacks (docs/changing.md's walk-through) is named
    rows = yaml.safe_load(software.DATA.read_text())
    new = {**rows["miles-deepep-v2"], "sglang": {**rows["miles-deepep-v2"]["sglang"], "version": "0.5.23"}}
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump({**rows, "miles-sglang-0.5.23": new}))
    extended = software.load(tmp_path / "profiles.yaml")
    assert unlisted(extended, listed_wheels()) == ["miles-sglang-0.5.23: sglang 0.5.23"]


def test_the_catalog_has_no_p6e_gb200_row_as_docs_changing_says():
    """docs/changing.md says the documented path cannot add p6e-gb200: its rows are absent from the
    generated catalog. When a regeneration brings them, this fails and the page is to be revisited."""
    rows = json.loads((ROOT / "catalog" / "data" / "ec2-instance-types.json").read_text())["instance_types"]
    assert not [t for t in rows if t.startswith("p6e-gb200")]
    assert "p6e-gb200" in (ROOT / "docs" / "changing.md").read_text()

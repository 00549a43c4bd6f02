"""The change path of a software profile fails loudly: ``scripts/extract_flags.py sglang`` refuses a
flag list it cannot trust (too few flags for any release the profiles know, or a flag the platform
passes that every known release has), every profile's vendored list passes the same check, and every
profile's SGLang release has its wheel in the contract stage's list (``contracts/sglang-wheels.txt``)."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

import software
from workloads.checks.flags import SCHEMAS, SERVER_ARGS

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
    """SGLang 0.5.23 declares its fields outside ``server_args.py``: the parser read 9 flags of it."""
    nine = dict(list(vendored("0.5.19").items())[:9])
    out = tmp_path / "0.5.23-flags.json"
    with pytest.raises(SystemExit) as refused:
        extract.main(["sglang", "--wheel", str(fake_wheel(tmp_path, "0.5.23", nine)), "--out", str(out)])
    assert "SGLang 0.5.23: 9 flags read, fewer than 170 (50% of 0.5.9's 341)" in str(refused.value)
    assert not out.exists()


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

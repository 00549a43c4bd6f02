"""The flag lists vendored by ``scripts/extract_flags.py`` (Miles at radixark/miles 49cac7b52, the
resume fix of PR #2682; Megatron-LM at the radixark/Megatron-LM commit Miles v0.1.0 pins) load, say
where they came from, and hold every flag the generated Miles argv passes.

The extractor's reproduction of the v0.1.0 file and of these files from the upstream repositories
is checked by hand when a pin changes (``scripts/extract_flags.py``): tests read nothing outside
the repository."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from conftest import ROOT

from workloads.derive.argv import entry_and_flags
from workloads.checks.flags import argv_pairs, miles_flags
from workloads.derive.model import derive

SCHEMAS = ROOT / "workloads" / "schemas"
MILES_COMMIT = "49cac7b52507fe6953952c3e1d1ad05a01b144a4"
MEGATRON_COMMIT = "37f91617b95c1ef4f01fc66210e502572ad97fda"
MILES_FILE = SCHEMAS / "miles" / f"{MILES_COMMIT[:12]}-flags.json"
MILES_V010_FILE = SCHEMAS / "miles" / "v0.1.0-flags.json"
MEGATRON_FILE = SCHEMAS / "megatron" / f"{MEGATRON_COMMIT[:12]}-flags.json"
HEX40 = re.compile(r"^[0-9a-f]{40}$")


@functools.cache
def doc(path: Path) -> dict:
    return json.loads(path.read_text())


def miles_names() -> set[str]:
    d = doc(MILES_FILE)
    return set(d["miles_flags"]) | set(d["boolean_optional_negations"])


@functools.cache
def argv() -> tuple[str, ...]:
    """A miles-0.1 run's argv (the profile these files are the lists of)."""
    from test_workloads import MILES_01, variant
    a = derive(variant("p5en-prod", MILES_01)).argv
    assert a is not None
    return a


def test_vendored_files_load_with_their_origin():
    for path, repository, commit in ((MILES_FILE, "radixark/miles", MILES_COMMIT),
                                     (MEGATRON_FILE, "radixark/Megatron-LM", MEGATRON_COMMIT)):
        d = doc(path)
        o = d["origin"]
        assert o["repository"] == repository and o["commit"] == commit and HEX40.match(o["commit"]), path
        assert o["tag"] is None and o["paths"], path
        assert d["generated_by"] == "scripts/extract_flags.py"
    assert "megatron/training/arguments.py" in doc(MEGATRON_FILE)["origin"]["paths"]
    assert "miles/utils/arguments.py" in doc(MILES_FILE)["origin"]["paths"]


def test_miles_file_has_the_structure_of_the_v010_file():
    new, old = doc(MILES_FILE), doc(MILES_V010_FILE)
    assert set(new) == set(old)
    for key in ("origin", "sglang_passthrough", "megatron", "fsdp_backend_flags"):
        assert set(new[key]) == set(old[key]), key
    assert all(set(v) == {"type", "default", "choices", "nargs", "action"} for v in new["miles_flags"].values())
    m = miles_flags(MILES_FILE)  # the loader the flag checks use
    assert "--actor-num-nodes" in m.miles and m.sglang_prefix == "--sglang-"
    assert {"port", "model_path"} <= m.sglang_skipped
    assert m.megatron_examples <= set(doc(MEGATRON_FILE)["flags"])


def test_megatron_file_entries():
    flags = doc(MEGATRON_FILE)["flags"]
    assert len(flags) > 500
    for flag, d in flags.items():
        assert flag.startswith("--") and set(d) == {"type", "default", "choices", "nargs", "action", "dest"}, flag
        assert d["dest"], flag


def test_every_flag_the_argv_passes_is_a_miles_or_megatron_flag():
    entry, flags = entry_and_flags(argv())
    assert Path(entry).name in doc(MILES_FILE)["entry_points"]
    megatron = set(doc(MEGATRON_FILE)["flags"])
    missing = [f for f, _ in argv_pairs(flags)
               if not f.startswith(("--sglang-", "--router-")) and f not in miles_names() and f not in megatron]
    assert missing == []


def test_argv_values_fit_the_declared_actions_and_choices():
    miles, megatron = doc(MILES_FILE)["miles_flags"], doc(MEGATRON_FILE)["flags"]
    for flag, values in argv_pairs(entry_and_flags(argv())[1]):
        d = miles.get(flag) or megatron.get(flag)
        if d is None:
            continue
        if d["action"] in ("store_true", "store_false"):
            assert values == [], (flag, values)
        elif d["nargs"] is None:
            assert len(values) == 1, (flag, values)
        if d["choices"]:
            assert set(values) <= {str(c) for c in d["choices"]}, (flag, values, d["choices"])


def test_megatron_checkpoint_and_moe_flags():
    flags = doc(MEGATRON_FILE)["flags"]
    retain = flags["--save-retain-interval"]
    assert retain["type"] == "int" and retain["default"] is None and retain["dest"] == "save_retain_interval"
    assert flags["--save-interval"]["dest"] == "save_interval" == flags["--persistent-save-interval"]["dest"]
    assert "--save-retain-interval" not in miles_names()  # a Megatron flag: the megatron backend only
    assert {"alltoall", "flex"} <= set(flags["--moe-token-dispatcher-type"]["choices"])
    assert flags["--moe-enable-deepep"]["action"] == "store_true"


# ---- the extractor itself, where the upstream git mirrors exist (not in a fresh clone)

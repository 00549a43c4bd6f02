"""Regenerate ``tests/data/dcgm/``: DCGM's own schema of ``dcgmi diag -j`` and its error categories, as data.

The burn-in reads DCGM's diagnostic document (``nodes.dcgm``); its tests build those documents from
DCGM's schema file, not from a shape invented here. For each pinned DCGM tag this copies
``testing/python3/dcgm_diag_schema.json`` byte for byte, extracts the ``dcgmErrorCategory_enum``
values (``DCGM_FR_EC_*``) of ``dcgmlib/dcgm_errors.h``, and each error code's number (``dcgmError_t``,
same header), severity (``dcgmErrorSeverity_enum``) and category as ``dcgmErrorMeta`` in
``dcgmlib/src/dcgm_errors.c`` declares them (``error_table-<tag>.json``), and records in ``ORIGIN.json`` the repository,
tag, commit, path and git blob id of each file read. Run it against a clone of NVIDIA/DCGM::

    python scripts/vendor_dcgm.py --dcgm /path/to/DCGM   # a git directory holding the tags below
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "dcgm"
REPOSITORY = "NVIDIA/DCGM"
TAGS = ("v3.3.9", "v4.5.2")
"""The last DCGM 3 release and the burn-in's pinned DCGM (``stackconfig.versions``: 4.5.2)."""
SCHEMA = "testing/python3/dcgm_diag_schema.json"
ERRORS = "dcgmlib/dcgm_errors.h"
META = "dcgmlib/src/dcgm_errors.c"
CATEGORY = re.compile(r"^\s*(DCGM_FR_EC_[A-Z_]+)\s*=\s*(\d+)\s*,", re.M)
CODE = re.compile(r"^\s*(DCGM_FR_[A-Z0-9_]+)\s*=\s*(\d+)\s*,", re.M)
SEVERITY = re.compile(r"^\s*(DCGM_ERROR_[A-Z]+)\s*=\s*(\d+)\s*,", re.M)
ENTRY = re.compile(r"DCGM_ERROR_TABLE_ENTRY\((DCGM_FR_[A-Z0-9_]+),\s*(DCGM_ERROR_[A-Z]+),\s*(DCGM_FR_EC_[A-Z_]+)\)")


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def origin(repo: Path, tag: str, path: str) -> dict:
    return {"repository": REPOSITORY, "tag": tag, "commit": git(repo, "rev-parse", f"{tag}^{{commit}}").decode().strip(),
            "path": path, "blob": git(repo, "rev-parse", f"{tag}:{path}").decode().strip()}


def categories(header: str) -> dict[str, int]:
    """``DCGM_FR_EC_*`` name -> value, as the enum in ``dcgm_errors.h`` declares them."""
    found = {name: int(value) for name, value in CATEGORY.findall(header)}
    if not found:
        raise SystemExit(f"{ERRORS}: no DCGM_FR_EC_ values found")
    return found


def error_table(header: str, source: str) -> dict[str, dict]:
    """Each ``dcgmErrorMeta`` entry: the code's name -> its number, severity and category (names and values)."""
    codes = {n: int(v) for n, v in CODE.findall(header) if not n.startswith("DCGM_FR_EC_")}
    severities, cats = {n: int(v) for n, v in SEVERITY.findall(header)}, categories(header)
    table = {code: {"code": codes[code], "severity": sev, "severityValue": severities[sev], "category": cat,
                    "categoryValue": cats[cat]} for code, sev, cat in ENTRY.findall(source) if code in codes}
    if not table:
        raise SystemExit(f"{META}: no DCGM_ERROR_TABLE_ENTRY found")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dcgm", type=Path, required=True, help="git directory of NVIDIA/DCGM with the tags")
    repo = parser.parse_args().dcgm
    OUT.mkdir(parents=True, exist_ok=True)
    origins = {}
    for tag in TAGS:
        schema, cats = f"dcgm_diag_schema-{tag}.json", f"error_categories-{tag}.json"
        (OUT / schema).write_bytes(git(repo, "show", f"{tag}:{SCHEMA}"))
        (OUT / cats).write_text(json.dumps(categories(git(repo, "show", f"{tag}:{ERRORS}").decode()), indent=1) + "\n")
        origins[schema] = origin(repo, tag, SCHEMA)
        origins[cats] = {**origin(repo, tag, ERRORS), "extracted": "dcgmErrorCategory_enum values"}
        table = f"error_table-{tag}.json"
        header, source = (git(repo, "show", f"{tag}:{path}").decode() for path in (ERRORS, META))
        (OUT / table).write_text(json.dumps(error_table(header, source), indent=1) + "\n")
        origins[table] = {**origin(repo, tag, META), "header": origin(repo, tag, ERRORS),
                          "extracted": "dcgmErrorMeta: code, severity and category of each error"}
    (OUT / "ORIGIN.json").write_text(json.dumps({"generated_by": "scripts/vendor_dcgm.py", "files": origins},
                                                indent=1, sort_keys=True) + "\n")
    print(f"wrote {', '.join(sorted(origins))} and ORIGIN.json in {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

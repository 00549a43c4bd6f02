"""``dcgmi diag -j`` documents for the burn-in's tests, built from DCGM's own schema (``tests/data/dcgm``).

Every key is looked up in DCGM's ``testing/python3/dcgm_diag_schema.json`` of the version (a key the
schema does not have raises), and every document is validated against that schema, so a test
document has DCGM's shape, not one invented here. The schema gives the keys; the values follow what
``dcgmi`` writes: statuses "Pass", "Skip", "Fail" (``Diag::HelperDisplayDiagResult``, DCGM v4.5.2 and
v3.3.9 ``dcgmi/Diag.cpp``), each error's code, category and severity as DCGM's own error table gives them (``dcgmErrorMeta``),
in DCGM 4 one result per entity plus a ``test_summary`` (``HelperJsonBuildOutput``), in DCGM 3 one
result per GPU with ``gpu_id`` (``HelperJsonAddResult``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

DATA = Path(__file__).resolve().parent / "data" / "dcgm"
VERSIONS = ("v4.5.2", "v3.3.9")
Result = tuple[str, list[str]]
"""(status, DCGM error codes of its warnings, e.g. ``DCGM_FR_VOLATILE_DBE_DETECTED``) of one GPU's result."""


@cache
def schema(version: str) -> dict:
    return json.loads((DATA / f"dcgm_diag_schema-{version}.json").read_text())


@cache
def categories(version: str) -> dict[str, int]:
    return json.loads((DATA / f"error_categories-{version}.json").read_text())


@cache
def error_table(version: str) -> dict[str, dict]:
    """Each DCGM error code's number, severity and category (``dcgmErrorMeta``, ``dcgmlib/src/dcgm_errors.c``)."""
    return json.loads((DATA / f"error_table-{version}.json").read_text())


def validate(doc: dict, version: str) -> None:
    """``doc`` against DCGM's schema of ``version``, by the draft it declares (v3.3.9: draft-04; v4.5.2's
    bare ``schema#`` means the latest)."""
    declared = schema(version)["$schema"]
    cls = jsonschema.Draft4Validator if "draft-04" in declared else jsonschema.Draft202012Validator
    cls(schema(version)).validate(doc)


def _node(node: dict, name: str) -> tuple[str, dict]:
    """The property ``name`` of a schema node (through an array's items), with its own node."""
    while "properties" not in node and "items" in node:
        items = node["items"]
        node = items[0] if isinstance(items, list) else items
    if name not in node.get("properties", {}):
        raise KeyError(f"DCGM's schema has no property {name!r} here (it has {sorted(node.get('properties', {}))})")
    return name, node["properties"][name]


class Keys:
    """The schema's property names, reached by path: ``keys("tests", "results", "warnings")``."""

    def __init__(self, version: str):
        self.root = schema(version)
        self.top = next(iter(self.root["required"]))  # "DCGM Diagnostic" (4.x), "DCGM GPU Diagnostic" (3.x)

    def __call__(self, *path: str) -> str:
        node = self.root["properties"][self.top]
        name = ""
        for name in path:
            name, node = _node(node, name)
        return name

    def has(self, *path: str) -> bool:
        try:
            self(*path)
            return True
        except KeyError:
            return False


def _warnings(k: Keys, version: str, codes: list[str]) -> list[dict]:
    """Each error as dcgmi writes it: its message, code, category and severity (v4.5.2 ``Diag.cpp``
    ``HelperJsonAddResult``; v3.3.9 the same four keys), the last three from DCGM's own error table."""
    w, table = ("test_categories", "tests", "results", "warnings"), error_table(version)
    return [{k(*w, "warning"): code, k(*w, "error_id"): table[code]["code"],
             k(*w, "error_category"): table[code]["categoryValue"],
             k(*w, "error_severity"): table[code]["severityValue"]} for code in codes]


def _result(k: Keys, version: str, gpu: int, status: str, cats: list[str]) -> dict:
    r = ("test_categories", "tests", "results")
    out: dict[str, Any] = {k(*r, "status"): status}
    if k.has(*r, "entity_id"):  # DCGM 4: one result per entity
        out.update({k(*r, "entity_group"): "GPU", k(*r, "entity_group_id"): 1, k(*r, "entity_id"): gpu})
    else:  # DCGM 3: per GPU, its index as a string
        out[k(*r, "gpu_id")] = str(gpu)
    if cats:
        out[k(*r, "warnings")] = _warnings(k, version, cats)
    return out


def _summary(k: Keys, version: str, results: list[Result]) -> dict:
    """A DCGM 4 test's overall result: its status with every error of the test (``includeAllErrors``)."""
    statuses = {s for s, _ in results}
    status = "Fail" if "Fail" in statuses else "Pass" if "Pass" in statuses else "Skip"
    t = ("test_categories", "tests", "test_summary")
    summary: dict[str, Any] = {k(*t, "status"): status}
    cats = [c for _, cs in results for c in cs]
    if cats:
        # the schema names the summary's status only; dcgmi writes its warnings as a result's (same function)
        summary[k("test_categories", "tests", "results", "warnings")] = _warnings(k, version, cats)
    return summary


def _test(k: Keys, version: str, name: str, results: list[Result]) -> dict:
    t = ("test_categories", "tests")
    test = {k(*t, "name"): name, k(*t, "results"): [_result(k, version, i, s, c) for i, (s, c) in enumerate(results)]}
    if k.has(*t, "test_summary"):  # DCGM 4 adds each test's overall result
        test[k(*t, "test_summary")] = _summary(k, version, results)
    return test


def diagnostic(version: str, tests: dict[str, list[Result]], category: str = "Hardware") -> dict:
    """A ``dcgmi diag -j`` document of ``version`` with ``tests`` (name -> each GPU's result), validated
    against DCGM's schema of that version."""
    k = Keys(version)
    c = ("test_categories",)
    doc: dict[str, Any] = {k.top: {k(*c): [{k(*c, "category"): category,
                                              k(*c, "tests"): [_test(k, version, n, r) for n, r in tests.items()]}]}}
    root = schema(version)["properties"]
    if "metadata" in root:
        doc["metadata"] = {"version": version.lstrip("v")}
    else:  # DCGM 3 keeps the version and GPU facts at the top
        doc.update({"version": version.lstrip("v"), "Driver Version Detected": "550.0", "GPU Device IDs": ["2330"],
                    "GPU Device Serials": {"0": "x"}})
    validate(doc, version)
    return doc


def runtime_error(version: str, message: str) -> dict:
    """What ``dcgmi diag -j`` prints when the diagnostic cannot run (``Diag::HelperDisplayFailureMessage``:
    ``runtime_error`` under the diagnostic's key), validated against DCGM's schema."""
    k = Keys(version)
    doc = {k.top: {k("runtime_error"): message}}
    validate(doc, version)
    return doc


def category(version: str, name: str) -> int:
    """A ``DCGM_FR_EC_*`` value of ``version``'s ``dcgm_errors.h``."""
    return categories(version)[name]

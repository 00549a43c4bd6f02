"""The burn-in reads ``dcgmi diag -j`` as DCGM writes it: documents built from DCGM's own schema of
v4.5.2 (pinned) and v3.3.9 (``tests/dcgm_docs.py``), run through the agent on a faked node."""

from __future__ import annotations

import json

import pytest
from dcgm_docs import VERSIONS, categories, diagnostic, error_table, runtime_error
from test_nodes_agent import node_env, train_plan  # noqa: F401 - fixtures

from nodes import dcgm, marks

MEMORY = {"v4.5.2": "memory", "v3.3.9": "GPU Memory"}
PCIE = {"v4.5.2": "pcie", "v3.3.9": "PCIe"}
"""The level-2 tests as each version names them (``nodes.dcgm.REQUIRED``)."""


def _write(results, doc, rc=0):
    (results / "dcgm.rc").write_text(f"{rc}\n")
    (results / "dcgm.json").write_text(json.dumps(doc))


def _level2(version, memory, pcie=(("Pass", []),)):
    return diagnostic(version, {MEMORY[version]: list(memory), PCIE[version]: list(pcie)})


def _verdict(node):
    labels, notes = node["metadata"]["labels"], node["metadata"]["annotations"]
    return labels[marks.RESULT_LABEL], labels.get(marks.FAULT_LABEL), notes.get(marks.REASON_ANNOTATION, "")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_dcgm_failure_with_a_hardware_category_is_hardware(node_env, train_plan, version):
    _write(node_env["results"], _level2(version, [("Pass", []), ("Fail", ["DCGM_FR_VOLATILE_DBE_DETECTED"])]), rc=226)
    result, fault, reason = _verdict(node_env["run"](train_plan).node)
    assert (result, fault) == ("failed", "hardware")
    assert f"DCGM: dcgmi diag -r 2 failed (exit 226): {MEMORY[version]}" in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_a_dcgm_failure_with_a_software_category_is_software(node_env, train_plan, version):
    _write(node_env["results"], _level2(version, [("Fail", ["DCGM_FR_DENYLISTED_DRIVER"])]), rc=226)
    assert _verdict(node_env["run"](train_plan).node)[:2] == ("failed", "software")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("code", ["DCGM_FR_UNCONTAINED_ERROR", "DCGM_FR_SXID_ERROR", "DCGM_FR_FIELD_THRESHOLD_TS"])
def test_a_failure_dcgm_says_to_isolate_is_hardware_whatever_its_category(node_env, train_plan, version, code):
    """Xid 95 and a fatal NVSwitch SXID are filed under SOFTWARE_XID, a field threshold under PERF_THRESHOLD,
    all with severity ISOLATE (v4.5.2 dcgmlib/src/dcgm_errors.c:105,133,62)."""
    _write(node_env["results"], _level2(version, [("Pass", []), ("Fail", [code])]), rc=226)
    assert _verdict(node_env["run"](train_plan).node)[:2] == ("failed", "hardware")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("code", ["DCGM_FR_NVML_LIB_BAD", "DCGM_FR_MEMORY_BANDWIDTH", "DCGM_FR_XID_ERROR",
                                  "DCGM_FR_EUD_TEST_FAILED"])
def test_an_image_library_or_a_shortfall_to_triage_is_not_hardware(node_env, train_plan, version, code):
    _write(node_env["results"], _level2(version, [("Fail", [code])]), rc=226)
    assert _verdict(node_env["run"](train_plan).node)[:2] == ("failed", "software")


@pytest.mark.parametrize("version", VERSIONS)
def test_outside_the_hardware_categories_only_these_errors_are_the_nodes_hardware(version):
    """Every code of DCGM's table, as dcgmi writes it, through the judgement: the codes outside the hardware
    categories that it calls hardware are exactly DCGM's ISOLATE ones that name the GPU."""
    table = error_table(version)
    assert {e["severityValue"] for e in table.values() if e["severity"] == "DCGM_ERROR_ISOLATE"} == {dcgm.ISOLATE}
    called = {code for code, e in table.items() if not e["category"].startswith("DCGM_FR_EC_HARDWARE_")
              and dcgm.hardware_error({"error_id": e["code"], "error_category": e["categoryValue"],
                                       "error_severity": e["severityValue"]})}
    assert called == {"DCGM_FR_FIELD_VIOLATION_DBL", "DCGM_FR_FIELD_THRESHOLD_DBL", "DCGM_FR_FIELD_THRESHOLD_TS",
                      "DCGM_FR_FIELD_THRESHOLD_TS_DBL", "DCGM_FR_UNCONTAINED_ERROR", "DCGM_FR_SXID_ERROR"}
    kept = {e["severity"] for e in table.values() if e["category"].startswith("DCGM_FR_EC_HARDWARE_")
            and not dcgm.hardware_error({"error_category": e["categoryValue"], "error_severity": e["severityValue"]})}
    assert kept == {"DCGM_ERROR_RESET", "DCGM_ERROR_CONFIG", "DCGM_ERROR_MONITOR"}
    assert {e["severityValue"] for e in table.values() if e["severity"] == "DCGM_ERROR_RESET"} == {dcgm.RESET}
    assert {e["severityValue"] for e in table.values() if e["severity"] == "DCGM_ERROR_TRIAGE"} == {dcgm.TRIAGE}
    assert {n: v for n, v in categories(version).items() if v in dcgm.ISOLATE_ELSEWHERE} == {
        "DCGM_FR_EC_SOFTWARE_LIBRARY": 4, "DCGM_FR_EC_SOFTWARE_EUD": 7, "DCGM_FR_EC_SOFTWARE_OTHER": 8}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("code", ["DCGM_FR_PENDING_PAGE_RETIREMENTS", "DCGM_FR_PENDING_ROW_REMAP",
                                  "DCGM_FR_ECC_DISABLED", "DCGM_FR_PCIE_WIDTH", "DCGM_FR_ENFORCED_POWER_LIMIT",
                                  "DCGM_FR_THERMAL_VIOLATIONS"])
def test_a_hardware_category_dcgm_rates_reset_config_or_monitor_is_not_replaced(node_env, train_plan, version, code):
    """Under a hardware category with severity RESET ("Drain and reset GPU"), CONFIG or MONITOR (v4.5.2
    dcgmlib/src/dcgm_errors.c): a reboot or a person, never a Capacity Block node."""
    _write(node_env["results"], _level2(version, [("Fail", [code])]), rc=226)
    result, fault, reason = _verdict(node_env["run"](train_plan).node)
    assert (result, fault) == ("failed", "software")
    reset = error_table(version)[code]["severity"] == "DCGM_ERROR_RESET"
    assert (dcgm.RESET_HINT in reason) == reset, reason


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("code", ["DCGM_FR_NVLINK_DOWN", "DCGM_FR_LOW_BANDWIDTH", "DCGM_FR_CORRUPT_INFOROM"])
def test_a_failure_to_triage_in_a_hardware_category_is_hardware(node_env, train_plan, version, code):
    _write(node_env["results"], _level2(version, [("Pass", []), ("Fail", [code])]), rc=226)
    assert _verdict(node_env["run"](train_plan).node)[:2] == ("failed", "hardware")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_skipped_required_test_is_not_a_pass(node_env, train_plan, version):
    """DCGM skips ``memory`` when ECC is off (its own sample in testing/TestDiagManagerStrings.h): the
    node is not proven, so the burn-in fails, as software (nothing says the hardware is bad)."""
    _write(node_env["results"], _level2(version, [("Pass", []), ("Skip", [])]))
    result, fault, reason = _verdict(node_env["run"](train_plan).node)
    assert (result, fault) == ("failed", "software")
    assert f"DCGM: required test {MEMORY[version]} skipped" in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_a_required_test_missing_from_the_document_is_not_a_pass(node_env, train_plan, version):
    _write(node_env["results"], diagnostic(version, {MEMORY[version]: [("Pass", [])]}))
    result, _, reason = _verdict(node_env["run"](train_plan).node)
    assert result == "failed" and f"DCGM: required test {PCIE[version]} did not run" in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_a_passing_document_passes(node_env, train_plan, version):
    _write(node_env["results"], _level2(version, [("Pass", []), ("Pass", [])]))
    result, _, reason = _verdict(node_env["run"](train_plan).node)
    assert result == "passed", reason


def test_a_diagnostic_that_could_not_run_says_why(node_env, train_plan):
    _write(node_env["results"], runtime_error("v4.5.2", "Couldn't connect to the host engine"), rc=1)
    result, fault, reason = _verdict(node_env["run"](train_plan).node)
    assert (result, fault) == ("failed", "software")
    assert "Couldn't connect to the host engine" in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_the_hardware_categories_are_dcgms(version):
    named = {v for k, v in categories(version).items() if k.startswith("DCGM_FR_EC_HARDWARE_")}
    assert set(dcgm.HARDWARE_CATEGORIES) == named

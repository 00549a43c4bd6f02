"""The burn-in reads ``dcgmi diag -j`` as DCGM writes it: documents built from DCGM's own schema of
v4.5.2 (pinned) and v3.3.9 (``tests/dcgm_docs.py``), run through the agent on a faked node."""

from __future__ import annotations

import json

import pytest
from dcgm_docs import VERSIONS, categories, category, diagnostic, runtime_error
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
    hw = category(version, "DCGM_FR_EC_HARDWARE_MEMORY")
    _write(node_env["results"], _level2(version, [("Pass", []), ("Fail", [hw])]), rc=226)
    result, fault, reason = _verdict(node_env["run"](train_plan).node)
    assert (result, fault) == ("failed", "hardware")
    assert f"DCGM: dcgmi diag -r 2 failed (exit 226): {MEMORY[version]}" in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_a_dcgm_failure_with_a_software_category_is_software(node_env, train_plan, version):
    sw = category(version, "DCGM_FR_EC_SOFTWARE_CONFIG")
    _write(node_env["results"], _level2(version, [("Fail", [sw])]), rc=226)
    assert _verdict(node_env["run"](train_plan).node)[:2] == ("failed", "software")


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

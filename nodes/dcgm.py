"""What ``dcgmi diag -r <level> -j`` reports, read with DCGM's own keys (standard library only: it ships to
the node beside ``agent.py``).

The document (DCGM v4.5.2 ``dcgmi/Diag.cpp`` ``HelperJsonBuildOutput``/``HelperJsonAddResult``, keys in
``nvvs/include/NvvsJsonStrings.h``; schema ``testing/python3/dcgm_diag_schema.json``, kept with its origin
in ``tests/data/dcgm``): under ``DCGM Diagnostic`` (DCGM 3: ``DCGM GPU Diagnostic``, v3.3.9), a list of
``test_categories``, each with ``tests``; a test has a ``name`` (the plugin's test name in DCGM 4, e.g.
``memory``; a display name in DCGM 3, e.g. ``GPU Memory``), one entry in ``results`` per entity (DCGM 3: per
GPU) and, in DCGM 4, a ``test_summary``; each result or summary has a ``status`` ("Pass", "Skip" or "Fail":
``Diag::HelperDisplayDiagResult``, a warning shown as "Fail") and ``warnings``, each with an integer
``error_category`` (``dcgmErrorCategory_enum``, ``dcgmlib/dcgm_errors.h``). When the diagnostic cannot run,
the document holds only ``runtime_error`` (``Diag::HelperDisplayFailureMessage``).

Judged here: a test failed when any of its results (or its summary) is "Fail"; it is the node's hardware
when such a failed entry carries an error DCGM itself says takes the GPU out of work: severity ISOLATE
("Cannot perform workload. GPU should be isolated", ``dcgmErrorSeverity_enum``) outside the software
categories that name something off the GPU (``ISOLATE_ELSEWHERE``), or TRIAGE ("This error should be
triaged") in a hardware category. DCGM's other severities are not a replacement, whatever the category:
RESET ("Drain and reset GPU": pending page retirements and row remaps, GPU recovery) is cleared by a
reboot, which the burn-in re-tests (``RESET_HINT``); CONFIG ("This error can be configured": ECC off, an
enforced power limit, the PCIe link width) and MONITOR ("Can perform workload, but needs to be monitored":
clock events, thermal violations) fail the node as software, for a person. An error without a severity
(a DCGM that does not write one) is judged by its category. A test the level runs and the burn-in
requires (``REQUIRED``) that is skipped or absent is not a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

DIAGNOSTIC_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
"""``NVVS_NAME``: DCGM v4.5.2, then DCGM v3.3.9 (``nvvs/include/NvvsJsonStrings.h``)."""
HARDWARE_CATEGORIES = frozenset(range(9, 16))
"""``DCGM_FR_EC_HARDWARE_THERMAL`` (9) .. ``DCGM_FR_EC_HARDWARE_OTHER`` (15), the same in DCGM v4.5.2 and
v3.3.9 ``dcgmlib/dcgm_errors.h`` (held to the vendored enum by ``tests/test_nodes_dcgm.py``). A plugin's Fail
also covers "could not complete because of a setup or execution error" (DCGM docs, Diagnostic Plugins,
"Interpreting results"): a category alone does not make a failure the node's hardware; DCGM's severity
decides (``hardware_error``)."""
ISOLATE = 2
"""``DCGM_ERROR_ISOLATE`` (v4.5.2 and v3.3.9 ``dcgmlib/dcgm_errors.h``). DCGM files some GPU faults that
cannot be contained under a category that is not "hardware", with this severity (v4.5.2
``dcgmlib/src/dcgm_errors.c`` ``dcgmErrorMeta``): ``DCGM_FR_UNCONTAINED_ERROR`` (Xid 95) and
``DCGM_FR_SXID_ERROR`` (a fatal NVSwitch SXID) under SOFTWARE_XID, the field thresholds under
PERF_THRESHOLD and PERF_VIOLATION: the node's hardware.
A TRIAGE performance shortfall (``DCGM_FR_MEMORY_BANDWIDTH``, ``DCGM_FR_STRESS_LEVEL``) is not: the node is
quarantined for a person, as DCGM asks."""
TRIAGE = 4
"""``DCGM_ERROR_TRIAGE``: in a hardware category (NVLinks down, PCIe bandwidth or generation, an InfoROM
corrupt, a power target missed) the GPU's own links or board; elsewhere (a memory bandwidth or stress
shortfall, an Xid, CUDA) not shown to be the hardware."""
RESET = 6
"""``DCGM_ERROR_RESET`` (v4.5.2 and v3.3.9 ``dcgmlib/dcgm_errors.h``): the GPU needs a reset, which a reboot
of the node gives."""
RESET_HINT = "DCGM asks for a GPU reset: reboot the node and re-test it (moe-rl nodes retest NODE)"
ISOLATE_ELSEWHERE = frozenset({4, 7, 8})
"""SOFTWARE_LIBRARY (``DCGM_FR_NVML_LIB_BAD``: the image's libnvidia-ml) and SOFTWARE_OTHER
(``DCGM_FR_IMEX_UNHEALTHY``: the host's IMEX daemon): ISOLATE there is not the GPU's fault. SOFTWARE_EUD
(``DCGM_FR_EUD_TEST_FAILED``, message "in place"): the EUD plugin is not in DCGM's open source, so a
setup failure of it (the container runs without capabilities) cannot be told from a finding; the burn-in
does not require eud, and a replacement on it would be a guess: quarantined for a person instead."""
REQUIRED = {2: ("memory", "pcie"),
            3: ("memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth"),
            4: ("memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth",
                "memtest", "pulse_test")}
"""The tests each level runs on a GPU that the burn-in holds the node to (DCGM v4.5.2
``nvvs/src/NvidiaValidationSuite.cpp`` ``FillTestVectors``: medium adds ``memory`` and ``pcie``, long adds
``diagnostic``, ``memory_bandwidth``, ``targeted_stress``, ``targeted_power``, xlong adds ``memtest`` and
``pulse_test``; names from ``nvvs/include/PluginStrings.h``). Level 1 runs only the software checks.
Left out: ``eud``/``cpu_eud`` (run only as root, which the container never is: ``nodes.render.DCGM_USER``), ``nvbandwidth`` and
``nccl_tests`` (they need binaries beside DCGM; the burn-in measures NCCL itself)."""
DCGM3_NAMES = {"memory": "GPU Memory", "pcie": "PCIe", "diagnostic": "Diagnostic", "targeted_stress": "Targeted Stress",
               "targeted_power": "Targeted Power", "memory_bandwidth": "Memory Bandwidth", "memtest": "Memtest",
               "pulse_test": "Pulse Test"}
"""The same tests as DCGM 3 names them in its JSON (v3.3.9 ``dcgmi/Diag.cpp`` ``DISPLAY_*``, ``HelperGetTestName``)."""


@dataclass
class Diagnosis:
    """What one ``dcgmi diag -j`` document says, as the burn-in judges it."""

    failed: list[str] = field(default_factory=list)
    hardware: list[str] = field(default_factory=list)
    """Failed tests whose failure carries a hardware error category."""
    skipped: list[str] = field(default_factory=list)
    """Required tests that were skipped or did not run."""
    missing: list[str] = field(default_factory=list)
    runtime_error: str = ""
    reset: list[str] = field(default_factory=list)
    """Failed tests with an error DCGM clears with a GPU reset (``RESET``), none of them hardware."""

    @property
    def problems(self) -> list[str]:
        return ([f"DCGM: {self.runtime_error}"] if self.runtime_error else []) + \
            [f"DCGM: {t}: {RESET_HINT}" for t in self.reset] + \
            [f"DCGM: required test {t} skipped" for t in self.skipped] + \
            [f"DCGM: required test {t} did not run" for t in self.missing]


def _status(entry: Any) -> str:
    return str(entry.get("status", "")).lower() if isinstance(entry, dict) else ""


def _tests(diagnostic: dict) -> Iterator[dict]:
    for group in diagnostic.get("test_categories") or []:
        yield from (t for t in (group or {}).get("tests") or [] if isinstance(t, dict))


def _entries(test: dict) -> list[dict]:
    """Each result of the test, and its summary (DCGM 4)."""
    return [r for r in [*(test.get("results") or []), test.get("test_summary")] if isinstance(r, dict)]


def hardware_error(warning: Any) -> bool:
    """One of DCGM's errors (``warnings[]``) is the node's hardware, by DCGM's severity for it (by its category
    when it has none)."""
    if not isinstance(warning, dict):
        return False
    category, severity = warning.get("error_category"), warning.get("error_severity")
    if severity is None:
        return category in HARDWARE_CATEGORIES
    return ((severity == ISOLATE and category not in ISOLATE_ELSEWHERE)
            or (severity == TRIAGE and category in HARDWARE_CATEGORIES))


def _hardware(entry: dict) -> bool:
    return any(hardware_error(w) for w in entry.get("warnings") or [])


def _reset(entry: dict) -> bool:
    return any(isinstance(w, dict) and w.get("error_severity") == RESET for w in entry.get("warnings") or [])


def diagnostic_of(doc: Any) -> dict:
    """The diagnostic's own object, under DCGM 4's or DCGM 3's key; empty when neither is there."""
    if not isinstance(doc, dict):
        return {}
    return next((doc[k] for k in DIAGNOSTIC_KEYS if isinstance(doc.get(k), dict)), {})


def _required(level: int, names: set[str]) -> list[str]:
    """The required tests of ``level`` as this document names them (DCGM 3's names when it uses them)."""
    dcgm3 = not names & set(REQUIRED[4]) and bool(names & set(DCGM3_NAMES.values()))
    return [DCGM3_NAMES[t] if dcgm3 else t for t in REQUIRED.get(level, ())]


def diagnose(doc: Any, level: int) -> Diagnosis:
    """The failed, hardware, skipped and missing tests of ``doc`` at ``level``."""
    diag = diagnostic_of(doc)
    found = Diagnosis(runtime_error=str(diag.get("runtime_error") or ""))
    by_name = {str(t.get("name", "?")): t for t in _tests(diag)}
    for name, test in by_name.items():
        failed = [e for e in _entries(test) if _status(e) == "fail"]
        found.failed += [name] if failed else []
        found.hardware += [name] if any(_hardware(e) for e in failed) else []
        found.reset += [name] if name not in found.hardware and any(_reset(e) for e in failed) else []
    if found.runtime_error:
        return found
    for name in _required(level, set(by_name)):
        statuses = {_status(e) for e in _entries(by_name.get(name, {}))}
        if name not in by_name:
            found.missing.append(name)
        elif "fail" not in statuses and ("skip" in statuses or "pass" not in statuses):
            found.skipped.append(name)  # skipped on some GPU or all: those GPUs are not proven
    return found

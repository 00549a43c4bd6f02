"""The coverage benchmark's machinery (bench.coverage, bench.noise): an arm's true throughput is what its
noise delivers, one experiment is read as `bench report` reads it, the figures count what they say. The
benchmark itself (thousands of experiments) is `python -m bench.coverage`, its figures in BENCHMARKS.md."""

import random

import pytest

from bench import coverage
from bench.noise import Steps, calibration
from bench.simulate import ArmTruth


@pytest.mark.parametrize("arm", [ArmTruth(1.0), ArmTruth(1.0, stall_share=0.05), ArmTruth(1.0, tail_df=2.0),
                                 ArmTruth(1.0, response_len_cv=0.3)], ids=["steady", "stalls", "tails", "lengths"])
def test_an_arms_tokens_per_s_is_its_long_run_throughput_whatever_its_noise(arm):
    """Steps drawn with another seed than the calibration's deliver, Σtokens/Σtime, what tokens_per_s says."""
    steps, base = Steps(random.Random(11), arm, 0.8), calibration(arm, 0.8)
    tokens = seconds = 0.0
    for _ in range(40_000):
        length = steps.response_len()
        tokens += length
        seconds += length / (base * steps.rate())
    assert tokens / seconds == pytest.approx(1.0, rel=0.01)


def test_stalls_cost_throughput_the_calibration_gives_back():
    assert calibration(ArmTruth(1.0, stall_share=0.05)) > 1.04 * calibration(ArmTruth(1.0))


def test_one_experiment_is_the_reports_ratio_and_the_old_headlines():
    got = coverage.one(("one-arm stalls", 3, coverage.TRUE_RATIO))
    assert got["condition"] == "one-arm stalls" and got["ratio"] == coverage.TRUE_RATIO
    assert got["ci95"][0] < got["ci95"][1] and got["claim_refused"] is None
    assert set(got["old"]) == {"ci95", "beyond_noise"}


def test_the_summary_counts_coverage_claims_and_false_alarms():
    def result(ratio, lo, hi, beyond=False, refused=None):
        return {"condition": "steady", "ratio": ratio, "ci95": [lo, hi], "beyond_noise": beyond,
                "claim_refused": refused, "old": {"ci95": [lo, hi], "beyond_noise": beyond}}
    results = [result(1.1, 1.0, 1.2), result(1.1, 1.15, 1.3), result(1.1, 1.05, 1.15, refused="nodes"),
               result(1.0, 1.01, 1.1, beyond=True), result(1.0, 0.9, 1.1), result(1.0, 0.9, 1.1, refused="nodes")]
    m = coverage.summarise("steady", results, 3, 1, 0.0)
    assert (m["coverage"], m["claimed"], m["coverage_claimed"]) == (pytest.approx(2 / 3), pytest.approx(2 / 3), 0.5)
    assert m["false_alarms"] == pytest.approx(1 / 3) and m["refused_equal"] == pytest.approx(1 / 3)
    assert "refuses the claim in 33.3%" in coverage.verdict(m) and "TARGET MISSED" in coverage.verdict(m)
    every = m | {"claimed": 1.0, "coverage_claimed": 0.95, "false_alarms": 0.01}
    assert coverage.verdict(every).startswith("meets both targets (coverage 95.0% of 3 claimed intervals")

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


@pytest.mark.parametrize("task", [("steady", 2, 1.0), ("all at once", 3, coverage.TRUE_RATIO),
                                  ("all at once", 4, 1.0)], ids=["steady", "all-claimed", "all-refused"])
def test_an_experiment_drawn_is_what_the_report_gives_on_the_simulated_artifacts(task):
    """The benchmark's fast path (the simulator's draws through the report's arithmetic) is bit for bit the
    report on the artifacts the simulator writes: slow node, late start, stalls, tails and drift included."""
    got = coverage.one(task)
    assert got == coverage.drawn(task) and (got["condition"], got["ratio"]) == task[::2]
    assert got["ci95"][0] < got["ci95"][1] and set(got["old"]) == {"ci95", "beyond_noise"}


def test_the_benchmark_stops_when_the_fast_path_and_the_report_differ(monkeypatch):
    class Pool:
        map = staticmethod(lambda f, tasks: [f(t) for t in tasks])
    results = [coverage.drawn(("steady", 1 + i, r)) for i, r in enumerate([coverage.TRUE_RATIO, 1.0] * 5)]
    monkeypatch.setattr(coverage, "one", lambda task: {**coverage.drawn(task), "ci95": [0.0, 9.0]})
    with pytest.raises(RuntimeError, match="write_report gives"):
        coverage._check(Pool(), "steady", 1, results)


def test_wilson_bounds_a_share_by_its_sampling_error():
    assert coverage.wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert coverage.wilson(0, 10)[1] == pytest.approx(0.2775, abs=1e-4)
    assert coverage.wilson(930, 1000)[0] < 0.93 < coverage.wilson(9500, 10000)[0]


def test_the_summary_counts_coverage_claims_and_false_alarms():
    def result(ratio, lo, hi, beyond=False, refused=None):
        return {"condition": "steady", "ratio": ratio, "ci95": [lo, hi], "beyond_noise": beyond,
                "claim_refused": refused, "old": {"ci95": [lo, hi], "beyond_noise": beyond}}
    results = [result(1.1, 1.0, 1.2), result(1.1, 1.15, 1.3), result(1.1, 1.05, 1.15, refused="nodes"),
               result(1.0, 1.01, 1.1, beyond=True), result(1.0, 0.9, 1.1), result(1.0, 0.9, 1.1, refused="nodes")]
    m = coverage.summarise("steady", results, 3, 1, 0.0)
    assert (m["coverage"], m["claimed"], m["coverage_claimed"]) == (pytest.approx(2 / 3), pytest.approx(2 / 3), 0.5)
    assert m["false_alarms"] == pytest.approx(1 / 3) and m["false_alarms_claimed"] == 0.5
    assert m["refused_equal"] == pytest.approx(1 / 3) and (m["claimed_n"], m["claimed_equal_n"]) == (2, 2)
    assert "refuses the claim in 33.3%" in coverage.verdict(m) and "TARGET MISSED" in coverage.verdict(m)  # FA >= 9.5%
    many = m | {"claimed": 1.0, "experiments": 4000, "claimed_n": 4000, "claimed_equal_n": 4000,
                "coverage_claimed": 0.95, "coverage_claimed_95": coverage.wilson(3800, 4000),
                "false_alarms_claimed": 0.03, "false_alarms_claimed_95": coverage.wilson(120, 4000)}
    assert coverage.verdict(many).startswith("meets both targets (coverage 95.0% of 4000 claimed intervals")
    near = many | {"coverage_claimed_95": coverage.wilson(3730, 4000)}  # 93.25%: within its sampling error
    assert coverage.verdict(near).startswith("NOT SHOWN")
    under = many | {"false_alarms_claimed_95": coverage.wilson(260, 4000)}  # 6.5%
    assert coverage.verdict(under).startswith("TARGET MISSED")


def test_the_section_has_a_row_per_condition_and_seed_with_every_column():
    results = [coverage.drawn(("steady", 1 + i, r)) for i, r in enumerate([coverage.TRUE_RATIO, 1.0] * 3)]
    where = {"python": "3", "processes": 1, "cpus": 1, "min_experiments": 3, "min_claimed": 0}
    runs = [coverage.summarise("steady", results, 3, seed, 0.0) | where for seed in (9, 1)]
    lines = coverage.section(runs, "cmd").splitlines()
    table = [line for line in lines if line.startswith("| ")]
    assert {line.count("|") for line in table} == {13} and [t.split(" | ")[2] for t in table[1:]] == ["1", "9"]
    assert sum(line.startswith("- steady, seed ") for line in lines) == 2

"""The ratio's interval: the repeat is the unit, paired by block (bench.stats)."""

import math
from statistics import fmean, stdev

import pytest

from bench.stats import MIN_PAIRED_REPEATS, ArmSample, TooFewRepeats, ratio, t975


def test_the_interval_on_a_tiny_case():
    """Three blocks; each repeat's figure is its throughput, the interval Student's t on the log-ratios."""
    arm = ArmSample({1: 110.0, 2: 121.0, 3: 100.0})
    base = ArmSample({1: 100.0, 2: 110.0, 3: 100.0})
    logs = [math.log(110 / 100), math.log(121 / 110), math.log(100 / 100)]
    half = 4.303 * stdev(logs) / math.sqrt(3)  # Student t 0.975 quantile, 2 degrees of freedom
    r = ratio(arm, base)
    assert r.value == pytest.approx(math.exp(fmean(logs)))
    assert (r.low, r.high) == pytest.approx((math.exp(fmean(logs) - half), math.exp(fmean(logs) + half)))
    assert r.pairs == [(1, pytest.approx(1.1)), (2, pytest.approx(1.1)), (3, pytest.approx(1.0))]
    assert not r.beyond_noise  # the interval holds 1


def test_the_variance_between_repeats_enters_the_interval():
    """Repeats that differ: the interval must be as wide as the repeats say (a step bootstrap inside
    attempts gave a narrow interval here and called the gain real)."""
    r = ratio(ArmSample({1: 96.0, 2: 112.0, 3: 104.0}), ArmSample({1: 100.0, 2: 100.0, 3: 100.0}))
    assert r.low < 0.96 and r.high > 1.12 and not r.beyond_noise


def test_a_refused_ratio_keeps_its_interval_and_is_never_beyond_the_noise():
    arm, base = ArmSample({1: 130.0, 2: 131.0, 3: 129.0}), ArmSample({1: 100.0, 2: 100.0, 3: 100.0})
    assert ratio(arm, base).beyond_noise
    refused = ratio(arm, base, "block 2 on other nodes")
    assert not refused.beyond_noise and refused.low > 1.2 and refused.to_json()["claim_refused"] == "block 2 on other nodes"


def test_fewer_than_three_paired_repeats_give_no_ratio():
    two = ArmSample({1: 1.0, 2: 1.1})
    with pytest.raises(TooFewRepeats, match=f"2 paired repeats .*needs at least {MIN_PAIRED_REPEATS}"):
        ratio(two, two)
    unpaired = ArmSample({1: 1.0, 2: 1.0, 4: 1.0})
    with pytest.raises(TooFewRepeats, match="2 paired repeats"):
        ratio(unpaired, ArmSample({1: 1.0, 2: 1.0, 3: 1.0}))


def test_t_quantiles():
    assert t975(1) == 12.706 and t975(30) == 2.042
    assert 1.96 < t975(200) < t975(31) < t975(30)

"""The ratio's interval: the repeat is the unit, paired by block (bench.stats)."""

import math
from statistics import fmean, stdev

import pytest

from bench.stats import MIN_PAIRED_REPEATS, TooFewRepeats, arm_sample, ratio, t975


def test_the_interval_on_a_tiny_case():
    """Three blocks; each repeat's figure is its median step, the interval Student's t on the log-ratios."""
    arm = arm_sample({1: [108.0, 110.0, 112.0], 2: [121.0], 3: [99.0, 100.0, 101.0]})
    base = arm_sample({1: [100.0], 2: [110.0, 111.0, 109.0], 3: [100.0]})
    logs = [math.log(110 / 100), math.log(121 / 110), math.log(100 / 100)]
    half = 4.303 * stdev(logs) / math.sqrt(3)  # Student t 0.975 quantile, 2 degrees of freedom
    r = ratio(arm, base)
    assert r.value == pytest.approx(math.exp(fmean(logs)))
    assert (r.low, r.high) == pytest.approx((math.exp(fmean(logs) - half), math.exp(fmean(logs) + half)))
    assert r.pairs == [(1, pytest.approx(1.1)), (2, pytest.approx(1.1)), (3, pytest.approx(1.0))]
    assert not r.beyond_noise  # the interval holds 1


def test_the_variance_between_repeats_enters_the_interval():
    """Steady steps inside each attempt, repeats that differ: the interval must be as wide as the repeats say
    (a step bootstrap inside attempts gave a narrow interval here and called the gain real)."""
    steady = lambda x: [x * (1 + 0.001 * k) for k in range(-5, 6)]  # noqa: E731
    arm = arm_sample({1: steady(96.0), 2: steady(112.0), 3: steady(104.0)})
    base = arm_sample({1: steady(100.0), 2: steady(100.0), 3: steady(100.0)})
    r = ratio(arm, base)
    assert r.low < 0.96 and r.high > 1.12 and not r.beyond_noise


def test_fewer_than_three_paired_repeats_give_no_ratio():
    two = arm_sample({1: [1.0], 2: [1.1]})
    with pytest.raises(TooFewRepeats, match=f"2 paired repeats .*needs at least {MIN_PAIRED_REPEATS}"):
        ratio(two, two)
    unpaired = arm_sample({1: [1.0], 2: [1.0], 4: [1.0]})
    with pytest.raises(TooFewRepeats, match="2 paired repeats"):
        ratio(unpaired, arm_sample({1: [1.0], 2: [1.0], 3: [1.0]}))


def test_t_quantiles():
    assert t975(1) == 12.706 and t975(30) == 2.042
    assert 1.96 < t975(200) < t975(31) < t975(30)

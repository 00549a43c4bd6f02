"""Robust summaries, and the ratio of two arms with an interval whose unit is the repeat.

Guarantees: medians and quartiles by linear interpolation (numpy's default); a ratio compares the two
arms' repeats pair by pair, the pair being one block of the experiment's schedule (repeat ``r`` of
every arm, run next to each other, in alternating direction: A B C C B A, ``experiment.schedule``),
so what drifts from block to block cancels within a pair and linear drift across two blocks cancels
too. Each repeat enters as one number, its rollout throughput (Σtokens/Σtime over its measured steps,
``per_attempt.throughput``): the spread of the paired log-ratios holds the step noise and the drift
between repeats alike, so no step is resampled (steps are autocorrelated; resampling them one by one
leaves the variance between repeats out and gives intervals that are too narrow: BENCHMARKS.md,
"Coverage of the ratio's interval"). The interval is Student's t on the paired log-ratios (n - 1
degrees of freedom), exponentiated; fewer than ``MIN_PAIRED_REPEATS`` pairs give no interval and
raise. A ratio given a reason to refuse (``refused``: a pair the report cannot trust, such as two
attempts of one block on different nodes) still carries its interval but is never "beyond the noise".
Deterministic: the same artifacts always give the same interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, median, stdev

CONFIDENCE = 0.95
MIN_PAIRED_REPEATS = 3
"""Below 3 pairs the t interval has 1 degree of freedom (a quantile of 12.7) and the noise between
repeats is one difference: no ratio is given."""
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
"""Student's t 0.975 quantiles for 1..30 degrees of freedom (any statistics table, three decimals)."""
_Z975 = 1.959964


class TooFewRepeats(ValueError):
    """A ratio asked of fewer paired repeats than ``MIN_PAIRED_REPEATS``."""


def t975(df: int) -> float:
    """Student's t 0.975 quantile: the table to 30 degrees of freedom, then the Cornish-Fisher
    expansion in 1/df (error under 1e-4 beyond 30)."""
    if df < 1:
        raise ValueError("t975: df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    median: float
    q1: float
    q3: float
    n: int

    def to_json(self) -> dict:
        return {"median": round(self.median, 4), "iqr": [round(self.q1, 4), round(self.q3, 4)], "n": self.n}


def summary(values: list[float]) -> Summary:
    return Summary(quantile(values, 0.5), quantile(values, 0.25), quantile(values, 0.75), len(values))


def repeat_noise(values: list[float]) -> float | None:
    """Largest relative gap between the repeats of one arm, over their median; None with fewer than two."""
    if len(values) < 2:
        return None
    centre = median(values)
    return (max(values) - min(values)) / centre if centre else None


@dataclass(frozen=True)
class ArmSample:
    """One arm's figure per repeat: block number -> the repeat's rollout throughput (Σtokens/Σtime)."""

    by_repeat: dict[int, float]

    @property
    def noise(self) -> float | None:
        return repeat_noise(list(self.by_repeat.values()))


@dataclass(frozen=True)
class Ratio:
    value: float
    """exp(mean paired log-ratio): the geometric mean of the per-block ratios."""
    low: float
    high: float
    pairs: list[tuple[int, float]]
    """(block, ratio of the two repeats' throughputs), in block order."""
    noise: float | None
    """The larger repeat noise of the two arms."""
    refused: str | None = None
    """Why no claim is made on this ratio (None: the claim stands on its interval and the noise)."""

    @property
    def beyond_noise(self) -> bool:
        """Not refused, the interval excludes 1 and the difference is larger than the noise between repeats."""
        return (self.refused is None and (self.low > 1 or self.high < 1)
                and (self.noise is None or abs(self.value - 1) > self.noise))

    def to_json(self) -> dict:
        return {"value": round(self.value, 4), "ci95": [round(self.low, 4), round(self.high, 4)],
                "method": f"paired by block, Student t on {len(self.pairs)} log-ratios of repeat throughputs "
                          f"(each repeat's Σtokens/Σtime over its measured steps)",
                "per_block": {str(b): round(r, 4) for b, r in self.pairs},
                "repeat_noise": None if self.noise is None else round(self.noise, 4),
                "beyond_noise": self.beyond_noise, "claim_refused": self.refused}


def paired_interval(log_ratios: list[float]) -> tuple[float, float, float]:
    """(point, low, high) of exp(mean) from paired log-ratios, Student's t at ``CONFIDENCE``."""
    n = len(log_ratios)
    if n < MIN_PAIRED_REPEATS:
        raise TooFewRepeats(f"{n} paired repeats; a ratio needs at least {MIN_PAIRED_REPEATS}")
    centre = fmean(log_ratios)
    half = t975(n - 1) * stdev(log_ratios) / math.sqrt(n)
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def ratio(arm: ArmSample, base: ArmSample, refused: str | None = None) -> Ratio:
    """``arm`` over ``base``, paired by block (the repeat number both attempts share)."""
    a, b = arm.by_repeat, base.by_repeat
    blocks = sorted(set(a) & set(b))
    if len(blocks) < MIN_PAIRED_REPEATS:
        raise TooFewRepeats(f"{len(blocks)} paired repeats (blocks {', '.join(map(str, blocks)) or 'none'}); a ratio "
                            f"needs at least {MIN_PAIRED_REPEATS}: set repeats >= {MIN_PAIRED_REPEATS}")
    logs = [math.log(a[k] / b[k]) for k in blocks]
    value, low, high = paired_interval(logs)
    noises = [n for n in (arm.noise, base.noise) if n is not None]
    return Ratio(value, low, high, [(k, a[k] / b[k]) for k in blocks], max(noises) if noises else None, refused)

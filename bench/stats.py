"""Robust summaries and the ratio of two arms with a bootstrap confidence interval.

Guarantees: medians and quartiles by linear interpolation (numpy's default); the bootstrap resamples
the steps of each attempt separately (so every resample keeps each repeat's weight) with a fixed
seed, so the same artifacts always give the same interval; the noise between repeats is the largest
relative gap between the medians of two repeats of one arm.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

import numpy as np

BOOTSTRAP_SAMPLES = 1000
CONFIDENCE = 0.95
SEED = 20261201


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


def repeat_noise(groups: list[list[float]]) -> float | None:
    """Largest relative gap between repeat medians of one arm; None with fewer than two repeats."""
    meds = [median(g) for g in groups if g]
    if len(meds) < 2:
        return None
    centre = median(meds)
    return (max(meds) - min(meds)) / centre if centre else None


def boot_medians(groups: list[list[float]], samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED) -> np.ndarray:
    """Medians of ``samples`` resamples, each attempt's steps resampled (with replacement) within the
    attempt, so every resample keeps each repeat's number of steps."""
    rng = np.random.default_rng(seed)
    parts = [np.asarray(g, dtype=float)[rng.integers(0, len(g), size=(samples, len(g)))] for g in groups if g]
    return np.median(np.concatenate(parts, axis=1), axis=1)


@dataclass(frozen=True)
class Ratio:
    value: float
    low: float
    high: float
    noise: float | None
    """The larger repeat noise of the two arms; None when either arm has one repeat."""

    @property
    def beyond_noise(self) -> bool | None:
        """The interval excludes 1 and the difference is larger than the noise between repeats."""
        if self.noise is None:
            return None
        return (self.low > 1 or self.high < 1) and abs(self.value - 1) > self.noise

    def to_json(self) -> dict:
        return {"value": round(self.value, 4), "ci95": [round(self.low, 4), round(self.high, 4)],
                "repeat_noise": None if self.noise is None else round(self.noise, 4),
                "beyond_noise": self.beyond_noise}


@dataclass(frozen=True)
class ArmSample:
    """One arm's per-step values grouped by attempt, with its bootstrap medians (computed once)."""

    groups: list[list[float]]
    boots: np.ndarray
    point: float
    noise: float | None


def arm_sample(groups: list[list[float]], seed: int = SEED) -> ArmSample:
    """``seed`` differs per arm, so two arms' resamples are independent."""
    return ArmSample(groups, boot_medians(groups, seed=seed), quantile([v for g in groups for v in g], 0.5),
                     repeat_noise(groups))


def ratio(arm: ArmSample, base: ArmSample) -> Ratio:
    """Median of ``arm`` over median of ``base``, with a percentile interval from paired resamples
    (the two arms are resampled independently)."""
    low, high = np.quantile(arm.boots / base.boots, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    noise = max(arm.noise, base.noise) if arm.noise is not None and base.noise is not None else None
    return Ratio(arm.point / base.point, float(low), float(high), noise)

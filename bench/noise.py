"""The simulator's noise (``bench.simulate``): how fast each simulated step and attempt runs, hostile on
request, and the long-run throughput that noise leaves an arm.

A step's rate is the arm's calibrated rate times the attempt's factor times the step's multiplier:

- **step**: ``1 + e``, ``e`` an AR(1) series (``autocorrelation``, 0: independent steps) whose shocks
  are normal with relative standard deviation ``noise``, or Student's t with ``tail_df`` degrees of
  freedom and scale ``noise`` (heavy tails); with probability ``stall_share`` the step stalls, its rate
  divided by a factor drawn uniformly from ``stall_slowdown``; never below ``FLOOR``;
- **attempt**: normal drift of the whole attempt (``repeat_drift``), a linear drift along the schedule
  (``drift_per_attempt`` per slot), and, with probability ``slow_node_share``, a node that runs at
  ``slow_node`` of the others' speed (``bench.simulate`` names that node in the attempt's Nodes).

Each attempt draws from its own stream (``attempt_noise``: the experiment's seed and the attempt's slot in
the schedule), so its figures do not depend on anything else the simulator draws and ``bench.coverage``
can draw them without writing the attempt.

``calibration`` makes an arm's ``tokens_per_s`` its long-run throughput, Σtokens/Σtime over
``CALIBRATION_STEPS`` steps of its own noise on a normal node, as the report measures it: stalls and
tails lower what a fixed base rate delivers, so the base rate is raised until the arm delivers its
``tokens_per_s``. Drift and the slow node are the cluster's, not the arm's, and stay out of it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields, replace
from functools import cache

FLOOR = 0.05
"""The slowest a step runs, as a share of the arm's rate."""
CALIBRATION_STEPS = 100_000
REFERENCE_LEN = 3000.0
CALIBRATION_SEED = 20261205


@dataclass(frozen=True)
class StepNoise:
    """What shapes an arm's steps: the fields of ``bench.simulate.ArmTruth`` this module reads."""

    noise: float
    tail_df: float | None
    stall_share: float
    stall_slowdown: tuple[float, float]
    response_len: float
    response_len_cv: float

    @classmethod
    def of(cls, arm) -> "StepNoise":
        return cls(*(getattr(arm, f.name) for f in fields(cls)))


def shock(rng: random.Random, arm: StepNoise) -> float:
    """One step's shock: normal, or Student's t with ``tail_df`` degrees of freedom, scaled by ``noise``."""
    z = rng.gauss(0.0, 1.0)
    if arm.tail_df is None:
        return arm.noise * z
    return arm.noise * z / math.sqrt(rng.gammavariate(arm.tail_df / 2, 2.0) / arm.tail_df)


@dataclass
class Steps:
    """One attempt's step multipliers, in order."""

    rng: random.Random
    arm: StepNoise
    autocorrelation: float = 0.0
    level: float = 0.0

    def rate(self) -> float:
        """The next step's multiplier of the arm's rate."""
        phi = self.autocorrelation
        self.level = phi * self.level + math.sqrt(1 - phi * phi) * shock(self.rng, self.arm)
        multiplier = max(FLOOR, 1.0 + self.level)
        if self.arm.stall_share and self.rng.random() < self.arm.stall_share:
            multiplier /= self.rng.uniform(*self.arm.stall_slowdown)
        return max(FLOOR, multiplier)

    def response_len(self) -> float:
        """The next step's mean response length (its tokens are this times the samples)."""
        return max(50.0, self.rng.gauss(self.arm.response_len, self.arm.response_len * self.arm.response_len_cv))


def calibration(arm, autocorrelation: float = 0.0) -> float:
    """The base rate, per unit of ``tokens_per_s``, at which the arm's long-run throughput (Σtokens/Σtime
    over ``CALIBRATION_STEPS`` steps of its noise, on a normal node) is its ``tokens_per_s``."""
    # Σtokens/Σtime does not change when every length scales: one calibration per shape of the noise
    return _calibration(replace(StepNoise.of(arm), response_len=REFERENCE_LEN), autocorrelation)


@cache
def _calibration(arm: StepNoise, autocorrelation: float) -> float:
    steps = Steps(random.Random(CALIBRATION_SEED), arm, autocorrelation)
    tokens = seconds = 0.0
    for _ in range(CALIBRATION_STEPS):
        length = steps.response_len()
        tokens += length
        seconds += length / steps.rate()
    return seconds / tokens


@dataclass
class AttemptNoise:
    """One attempt's draws: on the slow node or not, the first step its log shows, its rate (tokens/s) and
    its steps' multipliers."""

    slow: bool
    first: int
    rate: float
    steps: Steps


def attempt_noise(truth, arm, slot: int) -> AttemptNoise:
    """The draws of the attempt at ``slot`` of the schedule, for ``arm`` (a ``bench.simulate.ArmTruth``) under
    ``truth`` (a ``bench.simulate.Truth``)."""
    rng = random.Random(f"{truth.seed}/{slot}")
    slow = rng.random() < arm.slow_node_share
    rate = (arm.tokens_per_s * calibration(arm, truth.autocorrelation) * rng.gauss(1.0, arm.repeat_drift)
            * (1 + truth.drift_per_attempt * slot) * (truth.slow_node if slow else 1.0))
    first = rng.randint(0, truth.late_start) if truth.late_start else 0
    return AttemptNoise(slow, first, rate, Steps(rng, StepNoise.of(arm), truth.autocorrelation))

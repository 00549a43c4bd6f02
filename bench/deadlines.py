"""How long each wait of ``bench run`` may last, derived from the experiment, and the clock it reads.

The experiment states what one attempt takes (``estimate``: ``startupMinutes``, ``stepSeconds``); every
wait is ``SLACK`` times that:

- **first step**: from a submission (or a resubmission after a fault) to the first step in the driver
  log: gang scheduling, image pull, model load, engine start (``startupMinutes``). Pods that can never
  schedule (pinned to a node that is gone, a pool without capacity) end here;
- **next step**: from one logged step to the next (``stepSeconds``); also the longest an FIS
  experiment may take to act (a fault planned at a step that lands steps later is not that fault);
- **attempt**: the attempt with its resumes: start-up plus every planned step, and per fault a
  start-up and the steps since the last checkpoint (``saveInterval``) again.

Guarantees: ``Watch.check`` raises ``Overdue`` naming the wait, its deadline and where the deadline
comes from; the runner then leaves the cluster as found and records the attempt INCOMPLETE with that
reason. Tests replace ``CLOCK`` (a fake clock whose ``sleep`` advances it).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from dataclasses import dataclass, field

from .experiment import Experiment, arm_run

SLACK = 3.0
"""A wait may last this many times what the experiment's ``estimate`` says it takes."""


class Overdue(TimeoutError):
    """A wait of ``bench run`` ran past its deadline; the message says which, and why that long."""


class Clock:
    """Wall-clock seconds and sleeping, as ``bench run`` reads and spends them, and the time of day it records."""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)

    @staticmethod
    def now() -> datetime:
        return datetime.now(timezone.utc)


CLOCK = Clock()


@dataclass(frozen=True)
class Deadlines:
    first_step_s: float
    step_s: float
    attempt_s: float
    basis: str
    """Where the seconds come from, for the INCOMPLETE reason."""


def deadlines(exp: Experiment, arm: str) -> Deadlines:
    est, faults = exp.estimate, exp.arm(arm).faults
    startup, step = est.startup_minutes * 60, est.step_seconds
    redo = startup + arm_run(exp, arm).save_interval * step
    attempt = startup + exp.total_steps * step + len(faults) * redo
    return Deadlines(SLACK * startup, SLACK * step, SLACK * attempt,
                     f"{SLACK:g} x the experiment's estimate: startupMinutes {est.startup_minutes:g}, stepSeconds "
                     f"{step:g}, {exp.total_steps} steps, {len(faults)} faults")


@dataclass
class Watch:
    """The deadlines of one attempt, read on ``clock``."""

    limits: Deadlines
    what: str
    clock: Clock = CLOCK
    started: float = field(default=0.0)
    since: float = field(default=0.0)
    last_step: int | None = None

    def __post_init__(self) -> None:
        self.started = self.since = self.clock.monotonic()

    def submitted(self) -> None:
        """A (re)submission: the first-step deadline starts again."""
        self.since, self.last_step = self.clock.monotonic(), None

    def stepped(self, last: int | None) -> None:
        """The last step the log shows now; a new one restarts the next-step deadline."""
        if last is not None and last != self.last_step:
            self.since, self.last_step = self.clock.monotonic(), last

    def check(self) -> None:
        now = self.clock.monotonic()
        if now - self.started > self.limits.attempt_s:
            self._overdue(f"not finished {now - self.started:.0f} s after its submission (deadline "
                          f"{self.limits.attempt_s:.0f} s)")
        if self.last_step is None and now - self.since > self.limits.first_step_s:
            self._overdue(f"no step logged {now - self.since:.0f} s after its submission (deadline "
                          f"{self.limits.first_step_s:.0f} s): its pods may never schedule")
        if self.last_step is not None and now - self.since > self.limits.step_s:
            self._overdue(f"no step after step {self.last_step} for {now - self.since:.0f} s (deadline "
                          f"{self.limits.step_s:.0f} s)")

    def _overdue(self, text: str) -> None:
        raise Overdue(f"{self.what}: {text}; deadlines are {self.limits.basis}")

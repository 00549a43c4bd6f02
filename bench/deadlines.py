"""How long each wait of ``bench run`` may last, derived from the experiment and its stack, and the clock it reads.

The experiment states what one attempt takes (``estimate``: ``startupMinutes``, ``stepSeconds``); the stack
what one checkpoint save takes (``bench.storage.save_time``: the arm's save bytes, from
``workloads.derive.checkpoint_budget``, at the file system's provisioned throughput,
``workloads.storage.throughputPerTib`` x its TiB). Every wait is ``SLACK`` times what those say:

- **first step**: from a submission (or a resubmission after a fault) to the first step in the driver
  log: gang scheduling, image pull, model load, engine start (``startupMinutes``); a submission that may
  resume from a save (an attempt number above 1: a resume after a fault, or ``--only``) also reads one
  save back. Pods that can never schedule (pinned to a node that is gone, a pool without capacity) end here;
- **next step**: from one logged step to the next (``stepSeconds``); after a step at which Miles saves
  (``save_steps``), ``stepSeconds`` plus one save: the save is synchronous (Megatron without
  ``--async-save``, which ``workloads`` never renders) and sits between the step's training and the next
  step's rollout (radixark/miles train.py's loop: rollout, train, ``save``, weight update, as read at
  005270cb; the pinned 49cac7b5's train.py:121-125 is the save ``bench.storage`` cites), so it falls between
  two ``perf`` lines, and the last step's save between its line and the job's end. Without it the seed-p5en
  attempts (9,394 GB a save, about 30 min on p5en-seed's file system) would end INCOMPLETE at step 20;
- **FIS**: the longest an FIS experiment may take to act is the next-step deadline without a save
  (a fault planned at a step that lands steps later is not that fault);
- **attempt**: the attempt with its resumes: start-up, one save read back, every planned step and save,
  and per fault a start-up, a save read back, the steps since the last save (``saveInterval``) and one
  save (a pod stopped with a grace period saves first) again.

Guarantees: ``Watch.check`` raises ``Overdue`` naming the wait, its deadline and where the deadline
comes from; the runner then leaves the cluster as found and records the attempt INCOMPLETE with that
reason. ``bench estimate`` prints each arm's deadlines (``Deadlines.describe``). Tests replace
``CLOCK`` (a fake clock whose ``sleep`` advances it).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from .experiment import Experiment, arm_run

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

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


def save_steps(exp: Experiment, arm: str) -> frozenset[int]:
    """The 0-based rollout ids after which Miles saves: (id + 1) a multiple of ``--save-interval``
    (``saveInterval``, rendered by ``workloads.derive.argv``), and the last rollout whatever the interval
    (radixark/miles 49cac7b5 miles/utils/misc.py:147-151, as ``workloads.derive.checkpoint_budget`` cites).
    ``should_run_periodic_action`` also saves at an epoch's end ((id + 1) a multiple of the rollouts per epoch,
    the prompts over ``rolloutBatchSize``); the repo does not know a data set's prompt count, so that save is not
    counted: dapo-math-17k's about 17,000 prompts make about 66 rollouts an epoch at seed-p5en's 256, more than its
    45 steps (the other experiments' batches are smaller)."""
    interval, total = arm_run(exp, arm).save_interval, exp.total_steps
    return frozenset({i for i in range(total) if (i + 1) % interval == 0} | ({total - 1} if total else set()))


@dataclass(frozen=True)
class Deadlines:
    first_step_s: float
    """From a submission to its first step, when it resumes from no save."""
    step_s: float
    """From one step to the next when no save lies between them; also the wait for an FIS experiment."""
    attempt_s: float
    basis: str
    """Where the seconds come from, for the INCOMPLETE reason."""
    save_s: float = 0.0
    """``SLACK`` x one save at the file system's throughput (0: unknown, see ``basis``)."""
    saves_after: frozenset[int] = frozenset()
    """The steps (rollout ids) after which a save is written (``save_steps``)."""

    def next_step_s(self, last: int) -> float:
        """The wait after step ``last``: ``step_s``, plus ``save_s`` where a save follows it."""
        return self.step_s + (self.save_s if last in self.saves_after else 0.0)

    def first_s(self, loads: bool) -> float:
        """The wait for a submission's first step; ``loads``: it may read a save back first."""
        return self.first_step_s + (self.save_s if loads else 0.0)

    def describe(self) -> list[str]:
        after = ", ".join(str(i) for i in sorted(self.saves_after))
        return [f"first step {self.first_step_s / 60:,.0f} min ({self.first_s(True) / 60:,.0f} min when it resumes "
                f"from a save), next step {self.step_s:,.0f} s, after a step that saves (the log's steps {after}) "
                f"{self.next_step_s(min(self.saves_after, default=-1)) / 60:,.0f} min, attempt "
                f"{self.attempt_s / 3600:,.1f} h", f"({self.basis})"]


def one_save_s(exp: Experiment, arm: str, cfg: "ProgramConfig") -> float:
    """Seconds one save of ``arm`` takes on ``cfg``'s file system (``storage.save_time``; 0 when unknown)."""
    from .storage import save_time
    save = save_time(exp, cfg, arm)
    return save.seconds if save is not None else 0.0


def deadlines(exp: Experiment, arm: str, cfg: "ProgramConfig") -> Deadlines:
    """The deadlines of ``arm``'s attempts on ``cfg``'s stack (its file system sets the save time)."""
    from .storage import save_time

    est, faults = exp.estimate, exp.arm(arm).faults
    startup, step = est.startup_minutes * 60, est.step_seconds
    save, save_s = save_time(exp, cfg, arm), one_save_s(exp, arm, cfg)
    saves = save_steps(exp, arm)
    redo = startup + save_s + arm_run(exp, arm).save_interval * step + save_s
    attempt = startup + save_s + exp.total_steps * step + len(saves) * save_s + len(faults) * redo
    where = save.describe() if save is not None else "save time unknown: the model's parameter count is not known"
    return Deadlines(SLACK * startup, SLACK * step, SLACK * attempt,
                     f"{SLACK:g} x the experiment's estimate and save time: startupMinutes {est.startup_minutes:g}, "
                     f"stepSeconds {step:g}, {exp.total_steps} steps, {len(saves)} saves, {len(faults)} faults; "
                     f"{where}", SLACK * save_s, saves)


@dataclass
class Watch:
    """The deadlines of one attempt, read on ``clock``."""

    limits: Deadlines
    what: str
    clock: Clock = CLOCK
    started: float = field(default=0.0)
    since: float = field(default=0.0)
    last_step: int | None = None
    loads: bool = False
    """Whether the current submission may read a save back before its first step."""

    def __post_init__(self) -> None:
        self.started = self.since = self.clock.monotonic()

    def submitted(self, loads: bool = False) -> None:
        """A (re)submission: the first-step deadline starts again; ``loads``: it may resume from a save."""
        self.since, self.last_step, self.loads = self.clock.monotonic(), None, loads

    def stepped(self, last: int | None) -> None:
        """The last step the log shows now; a new one restarts the next-step deadline."""
        if last is not None and last != self.last_step:
            self.since, self.last_step = self.clock.monotonic(), last

    def check(self) -> None:
        now = self.clock.monotonic()
        if now - self.started > self.limits.attempt_s:
            self._overdue(f"not finished {now - self.started:.0f} s after its submission (deadline "
                          f"{self.limits.attempt_s:.0f} s)")
        first = self.limits.first_s(self.loads)
        if self.last_step is None and now - self.since > first:
            self._overdue(f"no step logged {now - self.since:.0f} s after its submission (deadline "
                          f"{first:.0f} s{', with a save read back' if self.loads else ''}): its pods may never "
                          f"schedule")
        if self.last_step is not None and now - self.since > self.limits.next_step_s(self.last_step):
            saves = self.last_step in self.limits.saves_after
            self._overdue(f"no step after step {self.last_step} for {now - self.since:.0f} s (deadline "
                          f"{self.limits.next_step_s(self.last_step):.0f} s{', with its save' if saves else ''})")

    def _overdue(self, text: str) -> None:
        raise Overdue(f"{self.what}: {text}; deadlines are {self.limits.basis}")

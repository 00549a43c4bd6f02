"""An experiment's attempts against the shared file system: what each attempt writes, what it leaves, and
whether the next one still has the room it needs.

- **Where saves go.** Miles' ``--save`` is the run's directory ``<mount>/checkpoints/<run>``
  (``workloads.derive.paths``); Megatron writes each save there as ``iter_<7 digits>/`` with its tracker
  ``latest_checkpointed_iteration.txt`` (radixark/Megatron-LM@235952df megatron/training/checkpointing.py:216-220,
  349-352), and Miles its data-source state under ``rollout/`` (radixark/miles 49cac7b5
  ``miles/rollout/data_source.py:135``). Every attempt is its own run (``<experiment>-<arm>-r<n>``), so its own
  directory.
- **What an attempt leaves.** Miles saves at the last rollout whatever the interval (``miles/utils/misc.py:147-148``,
  ``train.py:121-125``) and the retain interval keeps the latest save (``workloads.derive.checkpoint_budget``):
  a finished attempt would leave a whole save (9,394 GB for DeepSeek-R1-0528). ``bench run`` has the launcher
  remove it once the attempt has finished (``runner.bench_env``, ``miles_launcher.clear_saves``): a benchmark
  attempt's save has no later use, so finished attempts do not add up and each needs only its own peak
  (saves kept, the model and its BF16 copy, the data: ``checkpoint_budget``), which ``run_objects`` refuses
  when the file system cannot hold it.
- **An INCOMPLETE attempt** (past a deadline, a fault not aimed) keeps its saves: running it again with
  ``--only`` resumes from them. They take up to ``saves_kept`` saves; ``bench run`` goes on to the next attempt
  only while its peak fits beside the saves of every INCOMPLETE attempt so far (``Room.incomplete_held``), else it
  stops there and names the attempts not run (``runner``).
- **How long a save takes** (``save_time``): one save's bytes (``CheckpointBudget.save_bytes``) at the file
  system's provisioned throughput, ``workloads.storage.throughputPerTib`` MB/s (10^6 B/s) per TiB of
  ``capacityGib`` (FSx for Lustre's ``PerUnitStorageThroughput``, set by ``components.fsx``; AWS FSx for
  Lustre User Guide, "Managing throughput capacity"). That is the most the file system serves all its
  clients together, so a save shared with other runs' I/O takes longer; ``bench.deadlines`` allows
  ``SLACK`` times it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from workloads.checks.runs import run_config
from workloads.derive.checkpoint_budget import GB, GIB, budget
from workloads.derive.deepep import expert_precision

from .experiment import Experiment, arm_run, schedule

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


MB = 1000 ** 2
"""FSx's MB/s per TiB of storage: 10^6 bytes (the smaller reading, so the longer save)."""
TIB = 1024 ** 4


@dataclass(frozen=True)
class SaveTime:
    save: int
    """Bytes of one save (``CheckpointBudget.save_bytes``)."""
    capacity_gib: int
    per_tib: int
    """``workloads.storage.throughputPerTib``, MB/s per TiB."""

    @property
    def rate(self) -> float:
        """Bytes a second the file system is provisioned for: its TiB x ``per_tib`` MB/s."""
        return self.capacity_gib * GIB / TIB * self.per_tib * MB

    @property
    def seconds(self) -> float:
        return self.save / self.rate

    def describe(self) -> str:
        return (f"a save of {self.save / GB:,.0f} GB at {self.rate / MB:,.0f} MB/s (capacityGib {self.capacity_gib:,} = "
                f"{self.capacity_gib * GIB / TIB:,.2f} TiB x throughputPerTib {self.per_tib} MB/s) takes "
                f"{self.seconds / 60:,.1f} min")


def save_time(exp: Experiment, cfg: "ProgramConfig", arm: str) -> SaveTime | None:
    """One save of ``arm``'s attempts on ``cfg``'s file system; None when its parameter count is unknown."""
    seen = run_config(cfg, arm_run(exp, arm))
    b = budget(seen, expert_precision(seen))
    if b is None:
        return None
    storage = cfg.workloads.storage
    return SaveTime(b.save_bytes, storage.capacity_gib, storage.throughput_per_tib)


@dataclass(frozen=True)
class Room:
    usable: int
    """Bytes of the file system the runs may use (``CheckpointBudget.usable_bytes``)."""
    peak: int
    """The largest attempt's peak: its saves kept, its model and BF16 copy, its data."""
    kept: int
    """Saves on the file system at an attempt's peak (``CheckpointBudget.saves_kept``)."""
    save: int
    """One save of the largest attempt."""
    capacity_gib: int

    @property
    def left(self) -> int:
        """What an INCOMPLETE attempt may leave: its saves kept."""
        return self.kept * self.save

    @property
    def incomplete_held(self) -> int:
        """How many INCOMPLETE attempts' saves the file system holds beside the next attempt's peak."""
        return max(0, (self.usable - self.peak) // self.left) if self.left else 1 << 30

    def describe(self) -> str:
        head = (f"File system (workloads.storage.capacityGib {self.capacity_gib:,} GiB, {self.usable / GB:,.0f} GB "
                f"usable): an attempt's peak is {self.peak / GB:,.0f} GB; each finished attempt's saves are "
                f"removed at its end (bench run), so the attempts do not add up.")
        tail = (f"An INCOMPLETE attempt keeps its saves (up to {self.left / GB:,.0f} GB, {self.kept} x "
                f"{self.save / GB:,.0f} GB) for --only: (usable {self.usable / GB:,.0f} - peak {self.peak / GB:,.0f}) "
                f"/ {self.left / GB:,.0f} GB = {self.incomplete_held}")
        if self.incomplete_held:
            return f"{head}\n{tail}, so the experiment goes on after up to {self.incomplete_held} of them."
        return (f"{head}\n{tail}, so bench run stops after an INCOMPLETE attempt (run it again with --only, then the "
                f"attempts not run).")


def room(exp: Experiment, cfg: "ProgramConfig") -> Room | None:
    """The experiment's attempts on ``cfg``'s file system; None when a model's parameter count is unknown."""
    budgets = []
    for attempt in schedule(exp):
        seen = run_config(cfg, attempt.run)
        b = budget(seen, expert_precision(seen))
        if b is None:
            return None
        budgets.append(b)
    big = max(budgets, key=lambda b: b.need_bytes)
    return Room(usable=big.usable_bytes, peak=big.need_bytes, kept=big.saves_kept, save=big.save_bytes,
                capacity_gib=cfg.workloads.storage.capacity_gib)

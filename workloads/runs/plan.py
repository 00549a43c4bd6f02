"""The offline plan of a set of runs against a stack: which start, which wait and why, which are
preempted, and what each claims per queue and pool.

It places runs the way Volcano does with the gang, priority, proportion (queue capability) and
preemption settings the stack installs, with whole runs as the unit (a run's pods form one gang:
all placed or none):

- runs already running (``running``) hold their nodes first;
- then pending runs by priority value, highest first, file order within a value; one starts when
  every pool it needs has the nodes free and its team's cap allows them;
- otherwise it may take nodes from lower-priority runs of its own team (Volcano ``preempt``), or
  from runs of reclaimable teams using more than their guarantee while its own team is within its
  guarantee (``reclaim``); only when the victims free enough nodes, lowest priority and latest
  first. A victim is asked for a checkpoint through the save sentinel and has ``checkpointMinutes``
  (the pods' termination grace period) to write it before its pods stop;
- otherwise it waits, holding nothing. Nodes are not all a run needs: its checkpoint budget
  (saves kept, its staged model and data; ``checkpoint_budget``) must fit in what the shared
  file system has left after the runs placed before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from ..settings import RunFile
from ..checkpoint_budget import GB, GIB, USABLE_FRACTION, budget
from ..layout import expert_precision
from .config import check_run, run_config, run_pools

if TYPE_CHECKING:  # pragma: no cover
    from ..stack import ProgramConfig


@dataclass
class Decision:
    run: str
    team: str
    priority: str
    action: str
    """``running`` (was running, keeps its nodes), ``starts``, ``waits`` or ``preempted``."""
    why: str
    gpus: dict[str, int] = field(default_factory=dict)
    """Pool -> GPUs the run claims."""

    @property
    def placed(self) -> bool:
        return self.action in ("running", "starts")


@dataclass
class _Cluster:
    free: dict[str, int]
    disk_free: int
    """Bytes of the shared file system not yet budgeted to a run (``checkpoint_budget``)."""
    used: dict[tuple[str, str], int] = field(default_factory=dict)
    """(team, pool) -> GPUs in use."""
    placed: list[RunFile] = field(default_factory=list)

    def take(self, run: RunFile, gpus: dict[str, int], disk: int) -> None:
        self.disk_free -= disk
        for pool, n in run.nodes.items():
            self.free[pool] -= n
            self.used[(run.team, pool)] = self.used.get((run.team, pool), 0) + gpus[pool]
        self.placed.append(run)

    def release(self, run: RunFile, gpus: dict[str, int], disk: int) -> None:
        self.disk_free += disk
        for pool, n in run.nodes.items():
            self.free[pool] += n
            self.used[(run.team, pool)] -= gpus[pool]
        self.placed.remove(run)


class Planner:
    """Queue state of one stack; ``plan`` decides a list of runs."""

    def __init__(self, cfg: "ProgramConfig"):
        self.cfg = cfg
        self.pools = {p.name: p for p in run_pools(cfg)}
        self.teams = {t.name: t for t in cfg.workloads.teams}
        self.values = cfg.workloads.priority_classes
        self.grace = cfg.workloads.capacity_block_end.checkpoint_minutes
        self.usable = int(cfg.workloads.storage.capacity_gib * GIB * USABLE_FRACTION)
        """Bytes of the file system the runs may use (a run alone always fits: ``run_config`` checks it)."""
        self.disk: dict[str, int] = {}
        """Run -> bytes it budgets on the file system (saves kept, its staged model and data)."""

    def _budget(self, run: RunFile) -> int:
        """Checks the run on its own nodes (``run_config``) and returns its file system budget."""
        seen = run_config(self.cfg, run)
        b = budget(seen, expert_precision(seen))
        return 0 if b is None else b.need_bytes

    def gpus(self, run: RunFile) -> dict[str, int]:
        return {pool: n * self.pools[pool].instance.gpus for pool, n in run.nodes.items()}

    def _blockers(self, c: _Cluster, run: RunFile) -> list[str]:
        gpus = self.gpus(run)
        short = [f"pool {p}: {n} nodes needed, {c.free[p]} free" for p, n in run.nodes.items() if n > c.free[p]]
        caps = self.teams[run.team].gpus
        capped = [f"pool {p}: team {run.team} would use {c.used.get((run.team, p), 0) + g} GPUs, cap {caps[p].cap}"
                  for p, g in gpus.items() if c.used.get((run.team, p), 0) + g > caps[p].cap]
        disk = self.disk[run.name]
        full = [f"file system: {disk / GB:,.0f} GB needed, {c.disk_free / GB:,.0f} GB not yet budgeted"] \
            if disk > c.disk_free else []
        return short + capped + full

    def _over_guarantee(self, c: _Cluster, team: str) -> bool:
        return any(c.used.get((team, p), 0) > q.guarantee for p, q in self.teams[team].gpus.items())

    def _may_evict(self, c: _Cluster, run: RunFile, victim: RunFile) -> str | None:
        """How ``run`` may take ``victim``'s nodes (Volcano action), or None."""
        if victim.team == run.team:
            return "preempt" if self.values[victim.priority] < self.values[run.priority] else None
        team = self.teams[victim.team]
        within = all(c.used.get((run.team, p), 0) + g <= self.teams[run.team].gpus[p].guarantee
                     for p, g in self.gpus(run).items())
        return "reclaim" if team.reclaimable and within and self._over_guarantee(c, victim.team) else None

    def _victims(self, c: _Cluster, run: RunFile) -> list[tuple[RunFile, str]] | None:
        """Lowest-priority, latest runs on the run's pools whose nodes let it start, or None."""
        order = sorted(reversed(c.placed), key=lambda v: self.values[v.priority])
        chosen: list[tuple[RunFile, str]] = []
        for victim in order:
            how = self._may_evict(c, run, victim)
            if how is None or not set(victim.nodes) & set(run.nodes):
                continue
            chosen.append((victim, how))
            c.release(victim, self.gpus(victim), self.disk[victim.name])
            if not self._blockers(c, run):
                return chosen
        for victim, _ in chosen:  # not enough: put them back, evict nobody
            c.take(victim, self.gpus(victim), self.disk[victim.name])
        return None

    def plan(self, runs: Sequence[RunFile], running: frozenset[str] = frozenset()) -> list[Decision]:
        """Decisions for ``runs`` (NeverFits first, for a run that can never be placed)."""
        for run in runs:
            check_run(self.cfg, run)
            self.disk[run.name] = self._budget(run)
        c = _Cluster(free={p: pool.nodes.desired for p, pool in self.pools.items()}, disk_free=self.usable)
        out: dict[str, Decision] = {}
        for run in (r for r in runs if r.name in running):
            c.take(run, self.gpus(run), self.disk[run.name])
            out[run.name] = Decision(run.name, run.team, run.priority, "running", "holds its nodes", self.gpus(run))
        pending = sorted((r for r in runs if r.name not in running), key=lambda r: -self.values[r.priority])
        for run in pending:
            blockers = self._blockers(c, run)
            victims = self._victims(c, run) if blockers else []
            if victims is None:
                out[run.name] = Decision(run.name, run.team, run.priority, "waits",
                                         "whole gang or nothing: " + "; ".join(blockers), self.gpus(run))
                continue
            for victim, how in victims:
                out[victim.name] = Decision(
                    victim.name, victim.team, victim.priority, "preempted",
                    f"{how} by {run.name} ({run.priority}): asked to checkpoint, stops within {self.grace} min",
                    self.gpus(victim))
            c.take(run, self.gpus(run), self.disk[run.name])
            why = "starts" + (f" after {', '.join(v.name for v, _ in victims)} checkpoint and stop" if victims else "")
            out[run.name] = Decision(run.name, run.team, run.priority, "starts", why, self.gpus(run))
        return [out[r.name] for r in runs]


def plan_runs(cfg: "ProgramConfig", runs: Sequence[RunFile], running: frozenset[str] = frozenset()) -> list[Decision]:
    return Planner(cfg).plan(runs, running)

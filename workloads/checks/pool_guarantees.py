"""The per-pool guarantees a plan leaves unmet: what ``runs plan`` reports after its decisions.

A team's ``guarantee`` is per GPU pool (``workloads.teams[].gpus.<pool>``). A guarantee is unmet when, after
the plan, a run of the team waits although what it asks of a pool fits within the team's guarantee there
(what the team holds on that pool plus the run's GPUs on it), and the pool has not the nodes free: other
teams hold what was guaranteed to it. Volcano's queues see per-pool guarantees only through per-pool
resource dimensions (docs/design/scheduling.md, "Per-pool guarantees"); where they count GPU sums, a team
within its summed guarantee cannot reclaim a pool that another team holds above its own share there, and
this report names that case rather than leaving it to be found on the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workloads.schema.run import RunFile

if TYPE_CHECKING:  # pragma: no cover
    from workloads.checks.run_plan import Decision, Planner


@dataclass(frozen=True)
class Unmet:
    """One team's guarantee on one pool that a waiting run of the team does not get."""

    team: str
    pool: str
    guarantee: int
    held: int
    """GPUs of the pool the team's running and starting runs hold."""
    run: str
    asks: int
    """GPUs of the pool the waiting run asks for."""
    others: dict[str, int]
    """Team -> GPUs of the pool it holds, for every other team holding some."""

    def line(self) -> str:
        holders = ", ".join(f"team {t} {g}" for t, g in sorted(self.others.items())) or "no other team"
        return (f"guarantee unmet: team {self.team} pool {self.pool}: {self.held} of its {self.guarantee} "
                f"guaranteed GPUs held and run {self.run} waits for {self.asks} more within it; {holders} "
                f"GPUs on the pool")


def _held(planner: "Planner", placed: Sequence[RunFile], team: str, pool: str) -> int:
    return sum(planner.gpus(r).get(pool, 0) for r in placed if r.team == team)


def unmet_guarantees(planner: "Planner", runs: Sequence[RunFile], decisions: Sequence["Decision"]) -> list[Unmet]:
    """Each (team, pool, waiting run) whose ask fits the team's guarantee on a pool without free nodes for
    it, in run order; ``decisions`` are ``planner.plan(runs)``'s, in the same order."""
    placed = [r for r, d in zip(runs, decisions) if d.placed]
    free = {p: pool.nodes.desired - sum(r.nodes.get(p, 0) for r in placed) for p, pool in planner.pools.items()}
    out = []
    for run, d in zip(runs, decisions):
        if d.action != "waits":
            continue
        quotas = planner.teams[run.team].gpus
        for pool, n in run.nodes.items():
            guarantee = quotas[pool].guarantee if pool in quotas else 0
            held, asks = _held(planner, placed, run.team, pool), planner.gpus(run)[pool]
            if held + asks > guarantee or n <= free[pool]:
                continue
            others = {t: g for t in planner.teams if t != run.team and (g := _held(planner, placed, t, pool))}
            out.append(Unmet(run.team, pool, guarantee, held, run.name, asks, others))
    return out

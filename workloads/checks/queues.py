"""The team queues as Volcano's ``capacity`` plugin (v1.15.1) sees them, one dimension per GPU pool (the Queue
counts ``rl.platform/gpu-<pool>``, ``render.teams.team_queue``): what ``run_plan`` schedules against, and the
limits above which ``runs.check_run`` says a run can never start.

The plugin judges each dimension on its own (docs/design/scheduling.md, "Per-pool guarantees"): a queue's
``realCapability`` is the cluster's resource less every queue's guarantee, plus its own, within its capability,
per dimension (plugins/capacity/capacity.go:1081-1088, ``api.ExceededPart`` and ``MinDimensionResource``); its
deserved is capped by it and raised to the guarantee per dimension (:1136-1141); its share is the largest
allocated/deserved over the dimensions its deserved names (``updateQueueAttrShare``, :1800-1827)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stackconfig.stack import Pool

from workloads.checks.teams import pool_gpus
from workloads.schema.teams import TeamSettings

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


@dataclass(frozen=True)
class PoolShare:
    """One GPU pool's dimension of a team queue, in GPUs."""

    guarantee: int
    deserved: int
    """The rendered deserved, within the limit and at least the guarantee (capacity.go:1136-1141)."""
    capability: int
    """The team's cap on the pool (the Queue's capability there)."""
    limit: int
    """What the plugin holds the queue to on the pool: its capability, or the pool's GPUs less every other
    queue's guarantee there when that is less (``realCapability``, capacity.go:1081-1088)."""


@dataclass(frozen=True)
class QueueShare:
    """A team queue as the capacity plugin sees it: a ``PoolShare`` per GPU pool the team has a quota on."""

    pools: Mapping[str, PoolShare]
    priority: int
    reclaimable: bool

    def share(self, used: Mapping[str, int]) -> float:
        """The largest allocated/deserved over the pools with a deserved; a queue without one counts as 1
        (capacity.go:1800-1827)."""
        shares = [used.get(p, 0) / s.deserved for p, s in self.pools.items() if s.deserved]
        return max(shares) if shares else 1.0

    @property
    def deserves(self) -> bool:
        return any(s.deserved for s in self.pools.values())

    def over_limit(self, used: Mapping[str, int]) -> list[str]:
        """The pools where ``used`` passes the queue's limit (``used`` naming only pools the team has a quota on:
        ``check_run`` refuses others)."""
        return [p for p, n in used.items() if n > self.pools[p].limit]

    def above_deserved(self, used: Mapping[str, int], asks: Mapping[str, int]) -> list[str]:
        """The pools of ``asks`` where ``used`` plus the ask passes the deserved: the reclaimer's check is per pod,
        on each dimension it requests (PreemptiveFn, capacity.go:648-677, ``LessEqualPartlyWithDimensionZeroFiltered``:
        a trainer's only dimension the deserved names is its pool's)."""
        return [p for p, n in asks.items() if used.get(p, 0) + n > self.pools[p].deserved]

    def under_guarantee(self, used: Mapping[str, int], pool: str, gpus: int) -> list[str]:
        """The pools where the queue, holding ``used`` less a pod of ``gpus`` GPUs on ``pool``, holds less than its
        guarantee: the reclaim keeps such a pod (``checkGuaranteeConstraint``, capacity.go:1840-1851, read at :516
        and in the gang path at :630: ``guarantee.LessEqual(allocated - pod, Zero)`` compares every dimension of
        the guarantee, a dimension the rest lacks counting as zero, api/resource_info.go:439-472). A pool other
        than ``pool`` is in it while the queue holds less than its guarantee there now: then no pod of the queue,
        on any pool, may be reclaimed."""
        left = {p: used.get(p, 0) - (gpus if p == pool else 0) for p in self.pools}
        return [p for p, s in self.pools.items() if left[p] < s.guarantee]

    def above_deserved_on(self, used: Mapping[str, int], pool: str) -> bool:
        """Whether a pod on ``pool`` passes the reclaim's deserved test: the queue holds more than its deserved
        there (``checkDeservedExceedance``, capacity.go:1876-1893), or has no deserved there (an immediate
        victim, :1855-1871)."""
        share = self.pools.get(pool)
        return share is None or not share.deserved or used.get(pool, 0) > share.deserved

    def may_lose(self, used: Mapping[str, int], pool: str, gpus: int) -> bool:
        """Whether a pod of ``gpus`` GPUs on ``pool`` may be reclaimed from this queue holding ``used``: the queue
        keeps its guarantee on every pool without it (``under_guarantee`` is empty) and passes the deserved test
        there (``above_deserved_on``)."""
        return not self.under_guarantee(used, pool, gpus) and self.above_deserved_on(used, pool)

def gpu_pools(cfg: "ProgramConfig") -> list[Pool]:
    """The stack's GPU pools."""
    return [p for p in cfg.pools if p.instance.is_gpu]


def queue_shares(teams: Sequence[TeamSettings], pools: Sequence[Pool]) -> dict[str, QueueShare]:
    """Each team's QueueShare on ``pools`` at their desired size."""
    sizes = {p.name: pool_gpus(p) for p in pools}
    guaranteed = {p: sum(t.gpus[p].guarantee for t in teams if p in t.gpus) for p in sizes}
    out = {}
    for t in teams:
        shares = {}
        for p, q in t.gpus.items():
            limit = min(q.cap, max(sizes[p] - guaranteed[p], 0) + q.guarantee)
            shares[p] = PoolShare(q.guarantee, max(min(q.deserved, limit), q.guarantee), q.cap, limit)
        out[t.name] = QueueShare(shares, t.priority, t.reclaimable)
    return out

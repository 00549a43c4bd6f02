"""The team queues as Volcano's ``capacity`` plugin (v1.15.1) sees them, in GPUs summed over each team's
pools (the Queue counts ``nvidia.com/gpu``, not pools): what ``run_plan`` schedules against, and the
limit above which ``runs.check_run`` says a run can never start."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workloads.checks.teams import pool_gpus
from workloads.schema.teams import TeamSettings

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


@dataclass(frozen=True)
class QueueShare:
    """A team queue as the capacity plugin sees it."""

    guarantee: int
    deserved: int
    """The rendered deserved, within the limit and at least the guarantee (capacity.go:1136-1141)."""
    capability: int
    """The Queue's capability (the sum of the team's caps)."""
    limit: int
    """What the plugin holds the queue to: its capability, or the cluster's GPUs less every other
    queue's guarantee when that is less (``realCapability``, capacity.go:1081-1088)."""
    priority: int
    reclaimable: bool

    def share(self, used: int) -> float:
        """Allocated / deserved; a queue without a deserved counts as 1 (capacity.go:1800-1827)."""
        return used / self.deserved if self.deserved else 1.0


def cluster_gpus(cfg: "ProgramConfig") -> int:
    """The GPUs of every pool at its desired size."""
    return sum(pool_gpus(p) for p in cfg.pools)


def queue_shares(teams: Sequence[TeamSettings], cluster_gpus: int) -> dict[str, QueueShare]:
    """Each team's QueueShare on a cluster of ``cluster_gpus`` GPUs (every GPU node at desired size)."""
    guarantees = {t.name: sum(q.guarantee for q in t.gpus.values()) for t in teams}
    out = {}
    for t in teams:
        cap = sum(q.cap for q in t.gpus.values())
        limit = min(cap, max(cluster_gpus - sum(guarantees.values()), 0) + guarantees[t.name])
        deserved = max(min(sum(q.deserved for q in t.gpus.values()), limit), guarantees[t.name])
        out[t.name] = QueueShare(guarantees[t.name], deserved, cap, limit, t.priority, t.reclaimable)
    return out

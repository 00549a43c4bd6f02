"""When to ask a run for a checkpoint before a Capacity Block under its GPU pools ends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from stackconfig.stack import CapacityType

from workloads.derive.layout import gpu_pools
from workloads.schema.services import CAPACITY_BLOCK_DRAIN_MINUTES

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

@dataclass(frozen=True)
class CapacityBlockEnd:
    """When to ask Miles for a checkpoint before a Capacity Block under a GPU pool ends."""

    pools: tuple[str, ...]
    """GPU pools whose block ends at ``end`` (the earliest end among them)."""
    end: datetime
    trigger: datetime
    """``end`` minus the lead, in UTC, on a whole minute (a cron schedule has no seconds)."""
    drain: datetime
    """When EKS starts scaling the block's node group to zero (40 minutes before ``end``)."""


def capacity_block_end(cfg: "ProgramConfig") -> CapacityBlockEnd | None:
    """The earliest Capacity Block end of the training and rollout pools, or None when no GPU pool
    is a Capacity Block with ``capacity.endTime`` or no run can be running (a GPU pool at zero)."""
    ends = [(p.capacity.end_time.astimezone(timezone.utc), p.name) for p in gpu_pools(cfg)
            if p.capacity.type is CapacityType.CAPACITY_BLOCK and p.capacity.end_time is not None]
    if not ends or any(p.nodes.desired < 1 for p in gpu_pools(cfg)):
        return None
    end = min(e for e, _ in ends)
    pools = tuple(n for e, n in ends if e == end)
    lead = timedelta(minutes=cfg.workloads.capacity_block_end.lead_minutes)
    try:
        trigger = (end - lead).replace(second=0, microsecond=0)
        drain = end - timedelta(minutes=CAPACITY_BLOCK_DRAIN_MINUTES)
        trigger.timestamp()
    except (OverflowError, ValueError):
        raise ValueError(f"pools[{pools[0]}].capacity.endTime: {end.isoformat()} minus the checkpoint lead is "
                         f"outside the calendar; allowed: the block's real end time") from None
    return CapacityBlockEnd(pools=pools, end=end, trigger=trigger, drain=drain)

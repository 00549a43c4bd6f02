"""The stack's ``burnIn:`` block: how new GPU nodes are proven before they take work (``nodes/``).

Typed like every other section (camelCase, unknown keys rejected). Pool names under ``dcgmLevels``
are checked against the stack's GPU pools where the burn-in is planned (``nodes.burn_in.plans``),
before any resource is registered.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import SchemaModel


class BreakerSettings(SchemaModel):
    """The per-pool circuit breaker of replacement (``nodes.breaker``). It counts only what it guards:
    hardware failures and the replacements made for them, over a sliding window (NVIDIA NVSentinel's
    fault-quarantine breaker counts the nodes it cordoned within ``circuitBreaker.duration``,
    docs/configuration/fault-quarantine.md). Once tripped, no node of the pool is replaced until
    ``moe-rl nodes reset-breaker POOL``, which then holds until a new failure: EKS node auto-repair stops
    above ``NodeRepairConfig.maxUnhealthyNodeThresholdCount``/``Percentage`` (EKS API reference,
    NodeRepairConfig), and NVSentinel's breaker, once tripped, "requires manual human intervention to
    reset" (docs.nvidia.com/nvsentinel, components/circuit-breaker)."""

    max_failed_nodes: int = Field(2, ge=0)
    """Trips when more of the pool's nodes than this failed for a hardware reason within ``windowMinutes``
    (software failures are never replaced and never count): several at once point at the batch, the
    fabric or the configuration, not at each node."""
    max_failed_percent: float | None = Field(None, gt=0, le=100)
    """Also trips when more than this percentage of the pool's nodes did (off by default: on a small pool
    one node is already a large share)."""
    max_replacements_per_hour: int = Field(2, ge=1)
    """Trips instead of making another replacement when this many were requested in the last hour."""
    window_minutes: int = Field(120, ge=1)
    """The window hardware failures are counted over: an allowance, not a measurement; two hours holds
    the burn-ins of the nodes of one scale-up (``moe-rl nodes plan`` prints a node's burn-in time)."""


class MeasuredFloor(SchemaModel):
    """An EFA loopback floor measured on an instance type, with where the figure comes from."""

    mbs: float = Field(gt=0)
    """MB/s (10^6 B/s, fi_pingpong's unit) of ``fi_pingpong -p efa -e rdm -S 4194304 -I 100`` between two
    EFA devices of one node, as the burn-in runs it (``nodes.efa``): below it the node fails (software)."""
    source: str = Field(min_length=1)
    """Where the figure comes from: the run (date, node, image, libfabric version) or the publication."""


class BurnInSettings(SchemaModel):
    enabled: bool = True
    """Taint every GPU pool at registration and run the burn-in on each new node."""
    dcgm_level: int = Field(2, ge=1, le=4)
    """``dcgmi diag -r`` level for every GPU pool: 1 quick (seconds), 2 medium (about 2 min), 3 long
    (about 15 min), 4 extended (NVIDIA DCGM docs, dcgmi diag, ``--run``)."""
    dcgm_levels: dict[str, Annotated[int, Field(ge=1, le=4)]] = {}
    """Per GPU pool name, a level other than ``dcgmLevel`` (1..4)."""
    replace_failed: bool = False
    """Have the replacement controller mark the instance of a node that failed for a hardware reason
    unhealthy in its Auto Scaling group (``autoscaling:SetInstanceHealth``), so the node group replaces
    it from its Capacity Block or ODCR; within ``breaker``."""
    breaker: BreakerSettings = BreakerSettings()
    pair_wait_minutes: int = Field(10, ge=0, le=60)
    """How long a new node that passed its own checks waits for another new node of its pool to run a
    two-node all-reduce and an EFA ping-pong with (``nodes.pairs``: security group and placement faults show
    only between nodes); a node with none in that time passes with a warning. 0: no check with a neighbour.
    An allowance, not a measurement: the nodes of one scale-up register within minutes of each other."""
    efa_loopback_floors: dict[str, MeasuredFloor] = {}
    """Per EC2 instance type of a GPU pool, a measured EFA loopback floor with its source. Without one, the
    floor is derived (half a device's line rate, ``catalog.EFA_LOOPBACK_FLOOR_SHARE``), no public
    fi_pingpong figure backs it, and a rate below it only warns."""

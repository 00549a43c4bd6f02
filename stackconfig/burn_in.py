"""The stack's ``burnIn:`` block: how new GPU nodes are proven before they take work (``nodes/``).

Typed like every other section (camelCase, unknown keys rejected). Pool names under ``dcgmLevels``
are checked against the stack's GPU pools where the burn-in is planned (``nodes.burn_in.plans``),
before any resource is registered.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import SchemaModel


class BurnInSettings(SchemaModel):
    enabled: bool = True
    """Taint every GPU pool at registration and run the burn-in on each new node."""
    dcgm_level: int = Field(2, ge=1, le=4)
    """``dcgmi diag -r`` level for every GPU pool: 1 quick (seconds), 2 medium (about 2 min), 3 long
    (about 15 min), 4 extended (NVIDIA DCGM docs, dcgmi diag, ``--run``)."""
    dcgm_levels: dict[str, Annotated[int, Field(ge=1, le=4)]] = {}
    """Per GPU pool name, a level other than ``dcgmLevel`` (1..4)."""
    replace_failed: bool = False
    """Mark the instance of a node that fails unhealthy in its Auto Scaling group
    (``autoscaling:SetInstanceHealth``), so the node group replaces it from its Capacity Block or ODCR."""

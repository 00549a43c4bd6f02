"""Every image reference the workloads run, by the stack field that sets it, and whether it is pinned."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stackconfig.versions import workload_image

from workloads.derive.block_end import capacity_block_end
from workloads.derive.layout import reward_enabled
from workloads.derive.profile import image_field, run_profile
from workloads.schema.services import IMAGE_DIGEST

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

def images(cfg: "ProgramConfig") -> dict[str, str]:
    """Every image reference the workloads run, by the config field that sets it."""
    soft, w, p = cfg.versions.software, cfg.workloads, run_profile(cfg)
    out = {image_field(p): workload_image(soft, p)}
    if soft.reward_image and reward_enabled(cfg):
        out["versions.software.rewardImage"] = soft.reward_image
    if capacity_block_end(cfg) is not None or w.teams:  # the trigger CronJob, the team-directories Job
        out["workloads.images.checkpointTrigger"] = w.images.checkpoint_trigger
    return out


def pinned_by_digest(image: str) -> bool:
    return IMAGE_DIGEST.search(image) is not None

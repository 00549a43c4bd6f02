"""Every image reference the workloads run, by the stack field that sets it, and whether it is
pinned; where each image of a stack is set (``image_origins``: field and file, for the checks' messages)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel
from pydantic.alias_generators import to_snake

from stackconfig.files import ROOT, STACKS_DIR
from stackconfig.images import EKS_REGISTRY, Origin, localized
from stackconfig.versions import CHART_IMAGES, dcgm_image, workload_image

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


def stack_file(cfg: "ProgramConfig") -> str:
    return str(STACKS_DIR / f"Pulumi.{cfg.stack}.yaml")


def _set_in_file(cfg: "ProgramConfig", field: str) -> tuple[bool, type]:
    """Whether the stack file sets ``field`` (camelCase, dotted; after a mapping field the rest of
    the path is one key), and the model class that holds it."""
    node, holder, parts = cfg, type(cfg), field.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, BaseModel):
            return ".".join(parts[i:]) in node, holder
        holder, name = type(node), to_snake(part)
        if name not in node.model_fields_set:
            return False, holder
        node = getattr(node, name)
    return True, holder


def setting_file(cfg: "ProgramConfig", field: str) -> str:
    """The file that sets ``field``: the stack file, or the module of its default."""
    explicit, holder = _set_in_file(cfg, field)
    if explicit:
        return stack_file(cfg)
    return Path(sys.modules[holder.__module__].__file__).relative_to(ROOT).as_posix()


def image_refs(cfg: "ProgramConfig", eks_registry: str = EKS_REGISTRY) -> dict[str, str]:
    """Field -> image reference as written, of every image a stack can pull: the workloads'
    (``images``), DCGM's and every chart pin's (the EFA device plugin's in ``eks_registry``, the host
    of the region's)."""
    charts = cfg.versions.charts
    return {**images(cfg), "versions.software.dcgm": dcgm_image(cfg.versions.software),
            **{f"versions.charts.images.{name}": charts.image(name).replace(EKS_REGISTRY, eks_registry, 1)
               for name in CHART_IMAGES}}


def image_origins(cfg: "ProgramConfig", eks_registry: str = EKS_REGISTRY) -> dict[str, Origin]:
    """Localized image -> the field and file that name it (``image_refs``)."""
    return {localized(ref): Origin(field, setting_file(cfg, field), stack_file(cfg))
            for field, ref in image_refs(cfg, eks_registry).items()}

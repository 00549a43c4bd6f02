"""What submitting a run creates: its model, its network tiers and its RayJob, from the stack and
(at submit) the tier sizes the cluster's HyperNodes show; what is sent, once judged (``sendable``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stackconfig.images import principals, problems, pulls, with_repository
from workloads.derive.images import image_origins, stack_file
from workloads.derive.model import WorkloadModel
from workloads.render.runs import run_rayjob
from workloads.schema.run import RunFile
from workloads.checks.runs import NeverFits, run_model, run_pools
from workloads.derive.topology import TierChoice, run_tiers, unplaceable

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


@dataclass(frozen=True)
class RunObjects:
    run: RunFile
    model: WorkloadModel
    gang: TierChoice
    trainer: TierChoice
    rayjob: dict


def run_objects(cfg: "ProgramConfig", run: RunFile, tier_nodes: Mapping[int, int] | None = None,
                train_tier_nodes: Mapping[int, int] | None = None) -> RunObjects:
    """The run's objects; tier sizes from the cluster when given, else from ``workloads.network``."""
    model = run_model(cfg, run)
    tiers = cfg.workloads.network.tier_nodes if tier_nodes is None else tier_nodes
    gang, trainer = run_tiers(run, run_pools(cfg)[0].name, tiers, train_tier_nodes)
    if (why := unplaceable(run, (gang, trainer), tiers)) is not None:
        raise NeverFits(why)
    rayjob = run_rayjob(model, run, gang.tier if gang.constrained else None,
                        trainer.tier if trainer.constrained else None)
    return RunObjects(run, model, gang, trainer, rayjob)


def sendable(cfg: "ProgramConfig", obj: dict, repository: str) -> dict:
    """``obj`` as ``runs submit`` and ``bench run`` send it (images pulled through the stack's
    registry, its URL filled in: ``stackconfig.images.with_repository``); ValueError, before anything
    reaches the cluster, naming each image a node could not pull as named (a placeholder digest, a
    registry outside the stack's: ``stackconfig.images.problems``) and each principal in the
    documentation's example account, with the field and file that set it."""
    sent = with_repository(obj, repository, cfg.stack)  # first: the flag a submission cannot go without
    found = problems(list(pulls(obj)), image_origins(cfg), stack_file=stack_file(cfg))
    found += [f"{path}: {arn} is in the documentation's example account" for path, arn in principals(obj)]
    if found:
        raise ValueError(f"stack {cfg.stack!r}: cannot send {obj['kind']} {obj['metadata']['name']}: " + "; ".join(found))
    return sent

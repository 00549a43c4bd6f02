"""The program behind every stack: the platform components plus the workloads, one graph."""

from __future__ import annotations

import pulumi
from components import Platform
from stackconfig.stack import Role, StackConfig, StackConfigError
from workloads.stack import ProgramConfig


def as_program_config(cfg: StackConfig) -> ProgramConfig:
    if isinstance(cfg, ProgramConfig):
        return cfg
    return ProgramConfig.model_validate(cfg.model_dump())


def check_schedulable(cfg: ProgramConfig) -> None:
    """Fail, naming pod, pool and resource, when any workload pod would stay Pending."""
    from workloads.schedulability import check, unschedulable
    problems = unschedulable(check(cfg))
    if problems:
        raise StackConfigError(f"stack {cfg.stack!r}: workloads do not fit their pools\n"
                               + "\n".join(f"  {p}" for p in problems))


def build(cfg: StackConfig) -> Platform:
    from workloads.component import Workloads
    from workloads.layout import is_spot
    cfg = as_program_config(cfg)
    check_schedulable(cfg)  # before any resource is registered
    platform = Platform(cfg)
    for key, value in platform.outputs().items():
        pulumi.export(key, value)
    workloads = Workloads(cfg, platform)
    pulumi.export("rayCluster", {"namespace": cfg.checkpoints.namespace, "name": "miles",
                                 "dashboard": f"kubectl -n {cfg.checkpoints.namespace} port-forward "
                                              f"svc/miles-head-svc 8265:8265"})
    pulumi.export("checkpointFileSystem", workloads.storage.id)
    if is_spot(cfg.pool(Role.ROLLOUT)):
        pulumi.log.warn("the rollout pool is Spot: Miles v0.1.0 orders its GPU placement group by node IP "
                        "and gives the first GPUs to the actor, so training actors may land on Spot nodes; "
                        "--use-fault-tolerance only restarts rollout engines")
    return platform

"""The program behind every stack: the platform components plus the workloads, one graph."""

from __future__ import annotations

import pulumi

from components import Platform
from nodes.burn_in import plans as burn_in_plans
from nodes.component import BurnIn
from stackconfig.stack import StackConfig, StackConfigError
from workloads.component import Workloads
from workloads.model import WorkloadModel, derive
from workloads.runs.submit import run_objects
from workloads.schedulability import check, unschedulable
from workloads.stack import ProgramConfig


def as_program_config(cfg: StackConfig) -> ProgramConfig:
    if isinstance(cfg, ProgramConfig):
        return cfg
    return ProgramConfig.model_validate(cfg.model_dump())


def check_schedulable(model: WorkloadModel) -> None:
    """Fail, naming pod, pool and resource, when any workload pod would stay Pending."""
    problems = unschedulable(check(model))
    if problems:
        raise StackConfigError(f"stack {model.stack!r}: workloads do not fit their pools\n"
                               + "\n".join(f"  {p}" for p in problems))


def build(cfg: StackConfig) -> Platform:
    """Validate, derive the workload model once, prove it schedules, then register everything."""
    cfg = as_program_config(cfg)
    model = derive(cfg)
    check_schedulable(model)  # before any resource is registered
    burn_in = burn_in_plans(model, cfg)
    platform = Platform(cfg, gpu_setups=model.gpu_setups)
    for key, value in platform.outputs().items():
        pulumi.export(key, value)
    runs = [run_objects(cfg, run) for run in cfg.workloads.runs]  # runs declared in the stack
    workloads = Workloads(model, platform, runs)
    BurnIn(model, burn_in, platform)
    if model.raycluster:
        pulumi.export("rayCluster", {"namespace": cfg.checkpoints.namespace, "name": "miles",
                                     "dashboard": f"kubectl -n {cfg.checkpoints.namespace} port-forward "
                                                  f"svc/miles-head-svc 8265:8265"})
    pulumi.export("submission", model.settings.submit.value)
    pulumi.export("checkpointFileSystem", workloads.storage.id)
    return platform

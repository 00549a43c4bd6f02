"""The program behind every stack: the platform components plus the workloads, one graph.

``build`` refuses a stack before registering anything: the schema (``ProgramConfig``) has checked
each field and the workloads against the pools; here come the checks that need the program's
other parts: the stack's region has an EKS add-on registry (the EFA device plugin's image), each
run declared in the stack is placeable and valid as a run file would be, and every workload pod
fits its pool.
"""

from __future__ import annotations

import pulumi

from components import Platform
from components.device_plugins import eks_addon_registry
from nodes.burn_in import plans as burn_in_plans
from nodes.component import BurnIn
from stackconfig.stack import StackConfig, StackConfigError
from workloads.component import Workloads
from workloads.model import WorkloadModel, derive
from workloads.runs.config import check_declared_runs
from workloads.runs.submit import run_objects
from workloads.render.teams import namespace_of
from workloads.schedulability import check, unschedulable
from workloads.stack import ProgramConfig


def as_program_config(cfg: StackConfig) -> ProgramConfig:
    if isinstance(cfg, ProgramConfig):
        return cfg
    return ProgramConfig.model_validate(cfg.model_dump())


def check_program(cfg: ProgramConfig) -> None:
    """StackConfigError in ``load_stack``'s form ("stack 'x': invalid configuration" and one line
    "<field>: <problem>; allowed: ...") for a region without an EKS add-on registry or a declared
    run that could not be submitted."""
    try:
        eks_addon_registry(cfg.region)
        check_declared_runs(cfg)
    except ValueError as err:
        raise StackConfigError(f"stack {cfg.stack!r}: invalid configuration\n  {err}") from None


def check_schedulable(model: WorkloadModel) -> None:
    """Fail, naming pod, pool and resource, when any workload pod would stay Pending."""
    problems = unschedulable(check(model))
    if problems:
        raise StackConfigError(f"stack {model.stack!r}: workloads do not fit their pools\n"
                               + "\n".join(f"  {p}" for p in problems))


def build(cfg: StackConfig) -> Platform:
    """Validate, derive the workload model once, prove it schedules, then register everything."""
    cfg = as_program_config(cfg)
    check_program(cfg)  # before any resource is registered
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
    if model.settings.fault_injection:  # the bench's fault engine, after the team namespaces it binds in
        from components.faults import FaultEngine
        engine = FaultEngine(cfg.cluster_name, platform.cluster.eks.arn,
                             [(t.name, namespace_of(t.name)) for t in model.settings.teams],
                             depends_on=[workloads], opts=pulumi.ResourceOptions(parent=platform))
        pulumi.export("benchFaults", engine.outputs())
    pulumi.export("submission", model.settings.submit.value)
    pulumi.export("checkpointFileSystem", workloads.storage.id)
    return platform

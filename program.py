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
from components.registry import placeholder_digest
from components.reservations import Lookup, lookup, reservation_problems
from nodes.burn_in import plans as burn_in_plans
from nodes.component import BurnIn
from stackconfig.deploy import DeployPhase
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


def placeholder_images(cfg: ProgramConfig, model: WorkloadModel | None = None) -> list[str]:
    """One line per image reference of the stack whose digest is a placeholder
    (``components.registry.placeholder_digest``), naming the pools that pull it, or the software
    profile it stands for when no pool of the default run pulls it."""
    from workloads.render import pod_templates
    model = model or derive(cfg)
    pools: dict[str, list[str]] = {}
    for _, pool, template, _ in pod_templates(model):
        for c in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            if placeholder_digest(c["image"]) and pool.name not in pools.setdefault(c["image"], []):
                pools[c["image"]].append(pool.name)
    profiles = {ref: name for name, ref in cfg.versions.software.images.items()}
    for ref in profiles:
        if placeholder_digest(ref):
            pools.setdefault(ref, [])
    return [f"{'pools ' + ', '.join(names) if names else 'profile ' + profiles[ref]}: image {ref} has a "
            f"placeholder digest; allowed: the digest your push printed (README, Deploy; versions.software.images)"
            for ref, names in pools.items()]


def check_deploy(cfg: ProgramConfig, model: WorkloadModel, find: Lookup = lookup) -> None:
    """What only a real deploy can refuse, before any resource is registered: a placeholder image
    digest (nothing could pull it: the pods would sit in ImagePullBackOff) and a reservation AWS
    does not know or holds in another zone or for another instance type (``components.reservations``)."""
    problems = placeholder_images(cfg, model) + reservation_problems(cfg, find)
    if problems:
        raise StackConfigError(f"stack {cfg.stack!r}: cannot deploy\n" + "\n".join(f"  {p}" for p in problems))


def check_schedulable(model: WorkloadModel) -> None:
    """Fail, naming pod, pool and resource, when any workload pod would stay Pending."""
    problems = unschedulable(check(model))
    if problems:
        raise StackConfigError(f"stack {model.stack!r}: workloads do not fit their pools\n"
                               + "\n".join(f"  {p}" for p in problems))


def build(cfg: StackConfig, deploy: bool = False, find: Lookup = lookup) -> Platform:
    """Validate, derive the workload model once, prove it schedules, then register everything.

    ``deploy``: a real ``pulumi preview``/``up`` (``__main__``), not the offline plan or tests:
    also ``check_deploy`` (AWS lookups through ``find``), except in the bootstrap phase, which
    pulls no image and builds no node group."""
    cfg = as_program_config(cfg)
    check_program(cfg)  # before any resource is registered
    model = derive(cfg)
    check_schedulable(model)  # before any resource is registered
    if deploy and cfg.deploy.phase is DeployPhase.FULL:
        check_deploy(cfg, model, find)  # before any resource is registered
    burn_in = burn_in_plans(model, cfg)
    platform = Platform(cfg, gpu_setups=model.node_setups)
    for key, value in platform.outputs().items():
        pulumi.export(key, value)
    if cfg.deploy.phase is DeployPhase.BOOTSTRAP:  # the repository and the Backup opt-in only
        return platform
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

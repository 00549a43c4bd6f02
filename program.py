"""The program behind every stack: the platform components plus the workloads, one graph.

``build`` refuses a stack before registering anything: it passes the stack through the one gate
every command uses (``workloads.checks.gate``: types, every cross-field check, declared runs, every
pod fits its pool), and for a real deploy also what only AWS can answer (``check_deploy``).
"""

from __future__ import annotations

import pulumi

from components import Platform
from components.registry import placeholder_digest
from components.reservations import Lookup, lookup, reservation_problems
from nodes.burn_in import plans as burn_in_plans
from nodes.component import BurnIn
from stackconfig.deploy import DeployPhase
from stackconfig.stack import StackConfig, StackConfigError
from workloads.deploy.component import Workloads
from workloads.derive.model import WorkloadModel, derive
from workloads.deploy.submit import run_objects
from workloads.render.teams import namespace_of
from workloads.checks import gate
from workloads.schema.stack import ProgramConfig


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
            f"placeholder digest; allowed: the digest your push printed (docs/getting-started/first-deploy.md, Deploy; versions.software.images)"
            for ref, names in pools.items()]


def check_deploy(cfg: ProgramConfig, model: WorkloadModel, find: Lookup = lookup) -> None:
    """What only a real deploy can refuse, before any resource is registered: a placeholder image
    digest (nothing could pull it: the pods would sit in ImagePullBackOff) and a reservation AWS
    does not know or holds in another zone or for another instance type (``components.reservations``)."""
    problems = placeholder_images(cfg, model) + reservation_problems(cfg, find)
    if problems:
        raise StackConfigError(f"stack {cfg.stack!r}: cannot deploy\n" + "\n".join(f"  {p}" for p in problems))


def build(cfg: StackConfig, deploy: bool = False, find: Lookup = lookup) -> Platform:
    """Validate, derive the workload model once, prove it schedules, then register everything.

    ``deploy``: a real ``pulumi preview``/``up`` (``__main__``), not the offline plan or tests:
    also ``check_deploy`` (AWS lookups through ``find``), except in the bootstrap phase, which
    pulls no image and builds no node group."""
    cfg = gate.checked(cfg)  # before any resource is registered
    model = derive(cfg)
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

"""The program behind every stack: the platform components plus the workloads, one graph.

``build`` refuses a stack before registering anything: it passes the stack through the one gate
every command uses (``workloads.checks.gate``: types, every cross-field check, declared runs, every
pod fits its pool), and for a real deploy also what only AWS can answer (``check_deploy``).
"""

from __future__ import annotations

import pulumi

from components import Platform
from components.cluster import control_plane_problems
from components.device_plugins import efa_plugin_values, gpu_taints, nvidia_plugin_values
from components.registry import eks_addon_registry
from components.reservations import Lookup, lookup, reservation_problems
from nodes.burn_in import plans as burn_in_plans
from nodes.component import BurnIn
from nodes.pool_resources import advertiser_objects
from nodes.render import burn_in_objects
from stackconfig.chart_images import rendered
from stackconfig.deploy import DeployPhase
from stackconfig.images import Pull, copy_command, localized, principals, problems, pulls, warm_command
from stackconfig.stack import StackConfig, StackConfigError
from workloads.deploy.component import Workloads
from workloads.derive.images import image_origins, image_refs, stack_file
from workloads.derive.model import WorkloadModel, derive
from workloads.deploy.submit import run_objects
from workloads.render import custom_resources, fsx_csi_values, k8s_objects, kuberay_values, volcano_values
from workloads.render.teams import namespace_of
from workloads.checks import gate
from workloads.schema.stack import ProgramConfig


def stack_objects(cfg: ProgramConfig, model: WorkloadModel) -> list[dict]:
    """Every Kubernetes object of the stack that can name an image, rendered as the program registers
    it (``tests/test_image_inventory.py`` holds the recorded graphs to exactly these)."""
    return [*k8s_objects(model), *custom_resources(model), *(run_objects(cfg, r).rayjob for r in cfg.workloads.runs),
            *burn_in_objects(model, burn_in_plans(model, cfg)), *advertiser_objects(model)]


def chart_values(cfg: ProgramConfig, model: WorkloadModel) -> dict[str, tuple[str, dict]]:
    """Helm release -> (its ``versions.charts`` field, the values the program gives it)."""
    taints, charts = gpu_taints(cfg.pools), cfg.versions.charts
    return {"kuberay-operator": ("kuberay_operator", kuberay_values(model)),
            "volcano": ("volcano", volcano_values(model)),
            "aws-fsx-csi-driver": ("fsx_csi_driver", fsx_csi_values(model)),
            "nvidia-device-plugin": ("nvidia_device_plugin",
                                     nvidia_plugin_values(taints, localized(charts.image("nvidia-device-plugin")))),
            "aws-efa-k8s-device-plugin": ("efa_device_plugin", efa_plugin_values(taints, charts, cfg.region))}


def stack_pulls(cfg: ProgramConfig, model: WorkloadModel) -> list[Pull]:
    """The image inventory: every image an object of the stack's graph pulls, its charts' included
    (as their templates render them from the values the program gives)."""
    found = [p for obj in stack_objects(cfg, model) for p in pulls(obj)]
    for release, (chart, values) in chart_values(cfg, model).items():
        found += [Pull(localized(image), f"helm release {release}", pin) for pin, image in rendered(chart, values).items()]
    return found


def image_steps(cfg: ProgramConfig) -> list[str]:
    """The shell lines that put the stack's images where its nodes pull them, ``$REPO`` being the
    stack's ``imageRepository`` output: a copy of each image ECR cannot cache
    (``stackconfig.images.copy_command``) and a first pull through each cache (``warm_command``)."""
    copies = [c for ref in image_refs(cfg, eks_addon_registry(cfg.region)).values() if (c := copy_command(ref))]
    warms = [w for p in stack_pulls(cfg, derive(cfg)) if (w := warm_command(p.image))]
    return list(dict.fromkeys(copies + warms))


def deploy_problems(cfg: ProgramConfig, model: WorkloadModel | None = None) -> list[str]:
    """What a deploy refuses that needs no AWS call, one line each naming file, field and what to put
    there: an image of the inventory a node could not pull as named (``stackconfig.images.problems``)
    and a principal in the documentation's example account."""
    model, eks = model or derive(cfg), eks_addon_registry(cfg.region)
    found = problems(stack_pulls(cfg, model), image_origins(cfg, eks), cfg.registries.credentials, stack_file(cfg), [eks])
    found += [f"{stack_file(cfg)}: {path}: {arn} is in the documentation's example account; allowed: the ARN in "
              f"your own account" for path, arn in principals(cfg.model_dump(by_alias=True, exclude={"stack"}))]
    return found


def check_deploy(cfg: ProgramConfig, model: WorkloadModel, find: Lookup = lookup) -> None:
    """What only a real deploy can refuse, before any resource is registered: ``deploy_problems``
    (nothing could pull the image, or the principal is not yours), a reservation AWS does not know,
    holds elsewhere, for another instance type, in a state or at a size that launches nothing
    (``components.reservations``), and a control plane EKS upgraded past the stack's version
    (``components.cluster.control_plane_problems``)."""
    found = deploy_problems(cfg, model) + reservation_problems(cfg, find) + control_plane_problems(cfg)
    if found:
        raise StackConfigError(f"stack {cfg.stack!r}: cannot deploy\n" + "\n".join(f"  {p}" for p in found))


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
    BurnIn(model, burn_in, platform, run_namespaces=[workloads.namespace, *(t[0] for t in workloads.teams.values())])
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

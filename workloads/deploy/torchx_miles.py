"""TorchX component: submit a stack's Miles GRPO run as one gang-scheduled Volcano Job.

The Job brings up its own Ray cluster with the same groups as the stack's RayCluster (head on the
head pool, one trainer pod per training node, one rollout pod per rollout node, buffer and
preprocessing pods), each pod with the same resources, environment and placement, then the head
submits the same Miles argv as the stack's RayJob (``workloads.derive.argv.miles_argv``).

Command line (Volcano and the ``miles`` queue are installed by the stack):

    torchx run --scheduler kubernetes --workspace "" \\
        --scheduler_args namespace=rl,queue=miles,reserved_millicpu=0,reserved_memmb=0 \\
        workloads/deploy/torchx_miles.py:miles_grpo --stack p5en-prod

``reserved_millicpu=0,reserved_memmb=0`` keep requests equal to limits as in the RayCluster
(TorchX otherwise requests 100m CPU and 1024 MB less than the limits). The same submission, with one
line instead of a traceback when no cluster answers:

    python -m workloads.cli.torchx p5en-prod --repository <imageRepository output> [--dry-run]
"""


import json
import shlex
from torchx import specs
from torchx.specs.overlays import JOIN, set_overlay

from workloads.derive import layout as L
from workloads.derive.argv import driver
from stackconfig.images import with_repository
from stackconfig.labels import HEAD_SLOT_RESOURCE, pool_gpu_resource

from workloads.derive.model import WorkloadModel
from workloads.render.common import (FSX_CLAIM, RAY_PODS, SHM_VOLUME, container_resources, env_list, placement,
                            pod_security_context, scripts_volume, security_context, shm_volume)
from workloads.render.ray import BOOT_VOLUME, SCRIPTS_MOUNT, entrypoint_resources, gpu_placement, preflight_container
from workloads.derive.resources import EFA, HUGEPAGES, MI

HEAD_ROLE = "head"
DRIVER_ARG0 = "miles-driver"
RAY_PORT = 6379


def _start_flags(g: L.Group, head: bool = False) -> list[str]:
    flags = [f"--num-cpus={0 if head else g.cpu}", f"--num-gpus={g.gpus}",
             f"--object-store-memory={g.object_store_bytes}"]
    if g.ray_resources:
        flags.append(f"--resources={shlex.quote(json.dumps(g.ray_resources))}")
    return flags


def head_script(m: WorkloadModel) -> str:
    """Start the head, wait for every GPU of the run, submit the run (argv in the runtime env)."""
    head = m.head
    gpus = sum(g.gpus * g.replicas for g in m.workers)
    entrypoint, env = driver(m.run_argv(), dict(m.runtime_env))
    runtime = json.dumps({"env_vars": env}, sort_keys=True)
    wait = ("import ray; ray.init(address='auto', logging_level='ERROR'); "
            "print(int(ray.cluster_resources().get('GPU', 0)))")
    return "\n".join([
        "set -euo pipefail",
        f"ray start --head --port={RAY_PORT} --dashboard-host=0.0.0.0 {' '.join(_start_flags(head, True))}",
        f'until [ "$(python3 -c {shlex.quote(wait)})" -ge {gpus} ]; do sleep 10; done',
        "ray job submit --address=http://127.0.0.1:8265"
        f" --runtime-env-json={shlex.quote(runtime)}"
        f" --entrypoint-resources={shlex.quote(json.dumps(entrypoint_resources()))} -- {entrypoint}",
    ])


def worker_script(g: L.Group) -> str:
    """Join the head (its host from the env var Volcano sets, named by ``$1``) and block."""
    return "\n".join([
        "set -euo pipefail",
        'HEAD="${!1%%,*}"',
        f'until ray health-check --address="$HEAD:{RAY_PORT}" >/dev/null 2>&1; do sleep 5; done',
        f'exec ray start --address="$HEAD:{RAY_PORT}" {" ".join(_start_flags(g))} --block',
    ])


def resource(g: L.Group) -> specs.Resource:
    """The group's pod resources as TorchX states them: GPUs, and as devices its pool's own GPU resource (as
    ``render.common.container_resources``), EFA devices and huge pages, the head's head slot."""
    devices = {}
    if g.head_slots:
        devices[HEAD_SLOT_RESOURCE] = g.head_slots
    if g.gpus:
        devices[pool_gpu_resource(g.pool.name)] = g.gpus
    if g.efa:
        devices[EFA] = g.efa
    if g.hugepages_mi:
        devices[HUGEPAGES] = g.hugepages_mi * MI
    return specs.Resource(cpu=g.cpu, gpu=g.gpus, memMB=g.memory_g * 1000, devices=devices)


def image_of(m: WorkloadModel, repository: str) -> str:
    return with_repository(m.image, repository, m.stack)


def _role(m: WorkloadModel, g: L.Group, args: list[str], name: str, image: str) -> specs.Role:
    # RAY_NODE_TYPE_NAME: Ray labels the node ray.io/node-group with it (as under KubeRay), which the
    # placement launcher selects on (workloads.pod.miles_launcher).
    role = specs.Role(name=name, image=image, entrypoint="bash", args=args, num_replicas=g.replicas,
                      resource=resource(g), env={**g.env, "RAY_NODE_TYPE_NAME": g.name},
                      mounts=[specs.VolumeMount(src=FSX_CLAIM, dst_path=m.paths.mount)])
    where = gpu_placement(m, g) if g.gpus else placement(g.pool)
    spec = {**where, "serviceAccountName": m.service_account,
            "securityContext": pod_security_context(), JOIN("volumes", on="name"): [shm_volume(g)],
            # One container per pod; its name varies per replica, its image does not.
            JOIN("containers", on="image"): [{"image": image, "securityContext": security_context(g)}]}
    if g.gpus:  # the same preflight as the RayCluster's GPU pods, before Ray starts
        main = {"image": image, "resources": container_resources(g), "env": env_list(g.env),
                "securityContext": security_context(g), "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]}
        spec["initContainers"] = [preflight_container(m, g, main)]
        spec[JOIN("volumes", on="name")] += [scripts_volume(), BOOT_VOLUME]
        spec[JOIN("containers", on="image")][0][JOIN("volumeMounts", on="name")] = [SCRIPTS_MOUNT]  # the launcher
    # The stack's Ray NetworkPolicy selects these labels: the pods of one TorchX run talk to each
    # other (and to the reward service) like the RayCluster's.
    set_overlay(role, "kubernetes", "V1Pod", {"metadata": {"labels": dict(RAY_PODS)}, "spec": spec})
    return role


def appdef(m: WorkloadModel, repository: str = "") -> specs.AppDef:
    """The AppDef of the model's run: head first (its host is every worker's rank-0 address).
    ``repository`` fills in the stack's ECR repository where the image is the stack's default."""
    head = m.head
    image = image_of(m, repository)
    roles = [_role(m, head, ["-c", head_script(m), DRIVER_ARG0], HEAD_ROLE, image)]
    for g in m.workers:
        if g.replicas:
            roles.append(_role(m, g, ["-c", worker_script(g), g.name, specs.macros.rank0_env], g.name, image))
    return specs.AppDef(name=m.settings.run.name, roles=roles)


def stack_model(stack: str, stack_dir: str) -> WorkloadModel:
    """The stack's workload model; ValueError when its RayCluster holds the GPU nodes."""
    from pathlib import Path

    from workloads.derive.model import derive
    from workloads.checks import gate
    model = derive(gate.read(stack, Path(stack_dir)))
    if model.raycluster:
        raise ValueError(f"stack {stack!r}: workloads.submit is raycluster, so its RayCluster holds every GPU node "
                         f"and a TorchX job would stay Pending; set workloads.submit: torchx and pulumi up first")
    return model


def miles_grpo(stack: str = "p5en-prod", stack_dir: str = "stacks", repository: str = "") -> specs.AppDef:
    """Miles GRPO run of a stack, as its stack file declares it (same argv as a RayJob would run).

    Args:
        stack: stack name; its file is <stack_dir>/Pulumi.<stack>.yaml, with workloads.submit: torchx
        stack_dir: folder of the stack files
        repository: the stack's ECR repository (`pulumi stack output imageRepository`), when the stack
            runs the default image there
    """
    return appdef(stack_model(stack, stack_dir), repository)

"""The Volcano Job that runs fabric_bench (and DeepEP's tests) on every node of a pool."""

from __future__ import annotations

import shlex
from typing import Any

from stackconfig.stack import Pool, Role

from workloads.derive import layout as L
from workloads.derive.model import WorkloadModel
from workloads.render.common import (
    FSX_VOLUME,
    SHM_VOLUME,
    VOLCANO_QUEUE,
    container_resources,
    env_list,
    fsx_volume,
    meta,
    pod_security_context,
    ray_labels,
    scripts_volume,
    security_context,
    shm_volume,
)
from workloads.render.ray import BOOT_VOLUME, gpu_placement, preflight_container
from workloads.schema.run import DeepEPVersion

from workloads.acceptance.parsers import (DEEPEP_TAG)


# --- the Job -----------------------------------------------------------------------------------------

TASK = "node"
SCRIPTS_MOUNT = "/opt/scripts"
FABRIC_BENCH_KEY = "fabric_bench.py"
"""Key of ``workloads/pod/fabric_bench.py`` in the scripts ConfigMap (mounted at /opt/scripts)."""
RDZV_PORT = 29500
DEEPEP_DIR = "/opt/deepep"
"""DeepEP's checkout, tests included, in the image of a profile with DeepEP V2 (workloads/image/Dockerfile
with DEEPEP_V2=1 clones DEEPEP_REPO at DEEPEP_COMMIT there, builds it there and checks that
tests/elastic/test_ep.py exists)."""
DEEPEP_PORTS = {"intranode": 8361, "internode": 8362}
COMPONENT = "fabric-acceptance"
TTL_SECONDS = 86400
"""The finished Job (and its pods' logs) stays a day."""


def job_name(pool_name: str) -> str:
    return f"fabric-{pool_name}"


def gpu_group(m: WorkloadModel, pool_name: str) -> L.Group:
    """The Ray worker group of GPU pool ``pool_name`` (its pods take whole nodes)."""
    names = [p.name for p in m.gpu_pools]
    if pool_name not in names:
        raise ValueError(f"pool {pool_name!r} is not a GPU pool of stack {m.stack}; GPU pools: {', '.join(names)}")
    g = next(w for w in m.workers if w.pool.name == pool_name and w.gpus)
    if g.pool.nodes.desired < 1:
        raise ValueError(f"pool {pool_name!r} of stack {m.stack} has no desired nodes: nothing to accept")
    return g


def uses_deepep_v2(m: WorkloadModel, pool: Pool) -> bool:
    """DeepEP V2 runs in SGLang (``deepep_v2``) on the rollout pool only: the trainer keeps Megatron's NCCL
    all-to-all (``workloads.derive.moe_backend.choose``)."""
    return m.deepep.version is DeepEPVersion.V2 and pool.role is Role.ROLLOUT


def deepep_span(m: WorkloadModel, g: L.Group) -> int:
    """Nodes one all-to-all spans on the pool: an engine's nodes (rollout), the expert-parallel group's
    nodes (training)."""
    if g.pool.role is Role.ROLLOUT:
        return m.settings.run.rollout.nodes_per_engine
    par = m.settings.run.parallel
    return max(1, -(-par.expert * par.expert_tensor // g.gpus))


def job_script(m: WorkloadModel, pool_name: str) -> str:
    g = gpu_group(m, pool_name)
    name, n, gpus = job_name(pool_name), g.pool.nodes.desired, g.gpus
    hosts_var, out = f"VC_{TASK.upper()}_HOSTS", f"{m.paths.mount}/acceptance/{name}"
    bench = [f"{SCRIPTS_MOUNT}/{FABRIC_BENCH_KEY}", "--out", f"{out}/fabric.json", "--print-json"]
    lines = [
        "set -euo pipefail",
        f'HOSTS="${{{hosts_var}:?set by the Volcano svc plugin}}"',
        'MASTER="${HOSTS%%,*}"',
        'INDEX="${VC_TASK_INDEX:?set by the Volcano env plugin}"',
        'until getent hosts "$MASTER" >/dev/null; do sleep 2; done',
        'IS_HOST=0; [ "$INDEX" = 0 ] && IS_HOST=1',
        f"mkdir -p {shlex.quote(out)}",
        f"torchrun --nnodes={n} --nproc-per-node={gpus} --rdzv-backend=c10d --rdzv-endpoint=\"$MASTER:{RDZV_PORT}\" "
        f"--rdzv-id={name} --rdzv-conf=\"is_host=$IS_HOST,join_timeout=1800,read_timeout=1800\" --max-restarts=0 "
        + " ".join(shlex.quote(a) for a in bench),
    ]
    if uses_deepep_v2(m, g.pool):
        tag = DEEPEP_TAG.replace("{phase}", "$1").replace("{node}", "${NODE_NAME:-$HOSTNAME}")
        lines += [
            "run_ep() {  # phase, nodes, node rank, master address, port",
            (f'  (cd {DEEPEP_DIR} && MASTER_ADDR="$4" MASTER_PORT="$5" WORLD_SIZE="$2" RANK="$3" '
             f"python3 tests/elastic/test_ep.py --num-processes {gpus} --test-first-only) 2>&1 "
             f'| sed -u "s/^/{tag}/"'),
            "}",
            f"run_ep intranode 1 0 127.0.0.1 {DEEPEP_PORTS['intranode']}",
        ]
        span = deepep_span(m, g)
        if span > 1 and n >= span:
            lines += [
                f"FIRST=$(( INDEX / {span} * {span} ))",
                'EP_MASTER="$(echo "$HOSTS" | cut -d, -f$(( FIRST + 1 )))"',
                f"run_ep internode {span} $(( INDEX % {span} )) \"$EP_MASTER\" {DEEPEP_PORTS['internode']}",
            ]
    return "\n".join(lines)


def acceptance_template(m: WorkloadModel, pool_name: str) -> dict:
    """One pod per node, sized and placed like the pool's Ray worker, running ``job_script``."""
    g = gpu_group(m, pool_name)
    env = {**g.env, **m.runtime_env, "PYTHONUNBUFFERED": "1"}
    c: dict[str, Any] = {
        "name": "fabric", "image": m.image, "imagePullPolicy": "IfNotPresent",
        "command": ["bash", "-c", job_script(m, pool_name)],
        "env": env_list(env),
        "resources": container_resources(g),
        "securityContext": security_context(g),
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"},
                         {"name": FSX_VOLUME, "mountPath": m.paths.mount}],
    }
    init = preflight_container(m, g, c)
    c["volumeMounts"].append({"name": "scripts", "mountPath": SCRIPTS_MOUNT, "readOnly": True})
    c["env"].append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    spec = {"restartPolicy": "Never", "serviceAccountName": m.service_account,
            "securityContext": pod_security_context(), "initContainers": [init], "containers": [c],
            "volumes": [shm_volume(g), fsx_volume(), scripts_volume(), BOOT_VOLUME],
            **gpu_placement(m, g)}
    # The Ray pods' labels: the stack's Ray NetworkPolicy admits TCP between them (torch's rendezvous,
    # NCCL's bootstrap); same image and service account as the Ray pods, so the same trust domain.
    return {"metadata": {"labels": ray_labels(COMPONENT)}, "spec": spec}


def acceptance_job(m: WorkloadModel, pool_name: str) -> dict:
    """The pool's fabric acceptance as one gang-scheduled Volcano Job (batch.volcano.sh/v1alpha1): one
    task of one pod per desired node. The svc plugin names the pods ``<job>-node-<i>.<job>`` and sets
    ``VC_NODE_HOSTS``; the env plugin sets ``VC_TASK_INDEX``. A failed or evicted pod ends the Job
    (its pod and log stay until ``ttlSecondsAfterFinished``)."""
    g = gpu_group(m, pool_name)
    n, name = g.pool.nodes.desired, job_name(pool_name)
    md = meta(m, name, COMPONENT)
    md["annotations"] = {"rl.platform/fabric-acceptance": f"stack {m.stack}, pool {pool_name}, "
                                                           f"{g.pool.instance_type} x {n}"}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": md,
        "spec": {
            "schedulerName": "volcano", "queue": VOLCANO_QUEUE, "minAvailable": n, "maxRetry": 1,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "plugins": {"svc": ["--publish-not-ready-addresses=true"], "env": []},
            "policies": [{"event": "PodFailed", "action": "TerminateJob"},
                         {"event": "PodEvicted", "action": "TerminateJob"}],
            "tasks": [{"name": TASK, "replicas": n, "minAvailable": n,
                       "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                       "template": acceptance_template(m, pool_name)}],
        },
    }


def acceptance_command(m: WorkloadModel, pool_name: str) -> str:
    """The one command that starts the pool's acceptance."""
    gpu_group(m, pool_name)
    return f"python -m workloads.cli.acceptance {shlex.quote(m.stack)} {shlex.quote(pool_name)} | kubectl apply -f -"


def report_command(m: WorkloadModel, pool_name: str) -> str:
    """The command that turns the finished Job's logs into the report (JSON on stdout) and its plot."""
    g = gpu_group(m, pool_name)
    name = job_name(pool_name)
    return (f"kubectl logs -n {m.namespace} -l volcano.sh/job-name={name} --tail=-1 "
            f"--max-log-requests={g.pool.nodes.desired + 1} | python -m workloads.cli.acceptance report "
            f"--stack {shlex.quote(m.stack)} --pool {shlex.quote(pool_name)} --svg {name}.svg > {name}.json")


def holds_pool(m: WorkloadModel, pool_name: str) -> str | None:
    """Why the Job would stay Pending now, if the stack's RayCluster takes every node of the pool."""
    g = gpu_group(m, pool_name)
    if m.raycluster and g.replicas >= g.pool.nodes.desired:
        return (f"the RayCluster's {g.name} group holds all {g.pool.nodes.desired} nodes of pool {pool_name}: "
                f"this Job stays Pending until they are free (run it before the run, or scale the group down)")
    return None

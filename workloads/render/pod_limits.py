"""What a team pod may hold of a node and for how long, as CEL of the team pod policy (``render.admission``),
with the numbers derived from the stack's pools and the instance catalog (``derive.layout``), never literals.

- **GPU pools**: a team pod on a GPU pool holds a whole node of it: one of its containers requests at least
  what the run's own pod of that pool requests (``common.container_resources`` of the pool's group: all the
  node's GPUs and EFA devices, the huge pages, the run's CPU and memory). A pod that takes less (no GPU, one
  GPU with every EFA device, 2 vCPU) would keep a GPU node from every team's GPU work while Volcano never
  reclaims it for a team under its guarantee. Requests add up over a pod's containers, so one container
  of the run's shape is a lower bound for the pod; a larger one never fits a node.
- **One pool's GPUs**: a team pod's containers each request their pool's own GPU resource
  (``stackconfig.labels.pool_gpu_resource``) in the count of their ``nvidia.com/gpu``, and no other pool's; a
  pod off the GPU pools requests neither. The team Queues and ResourceQuotas count GPUs by these resources
  only (docs/design/scheduling.md, "Per-pool guarantees"): a pod of ``nvidia.com/gpu`` alone would escape
  both. Equal per container, so equal for the pod however its containers add up (the sum of the containers,
  the largest init container). A node of another pool advertises none of the resource, so the pod is held to
  its pool (Volcano checks every dimension of a pod against the node's idle resources, a missing one as
  zero: actions/allocate/allocate.go:901, api/resource_info.go:438-470, v1.15.1).
- **The head pool**: a run's head is no bigger than the platform's head (``derive.layout.ray_head``): one
  container, no sidecar, every container within the head's CPU and memory; otherwise two heads could fill
  the head pool and hold every team's gang Pending.
- **Head slots**: a team pod on the head pool requests exactly one ``stackconfig.labels.HEAD_SLOT_RESOURCE`` in
  its one container (at most one in an init container, so one for the pod), and a team pod elsewhere none in
  any container or init container. Head-pool nodes
  advertise as many as the heads they hold (``nodes.pool_resources``), and the team's ResourceQuota holds
  them at its ``maxRuns`` (``render.teams.team_resource_quota``), counting a Terminating head until its grace
  ends: a team's heads, lingering ones included, never take more than its ``maxRuns`` of the head pool.
- **Termination**: the grace period is at most the platform's ``capacityBlockEnd.checkpointMinutes``, the one
  ``render.runs`` gives a run's pods. Volcano reclaims and preempts with a plain DELETE, so with the pod's
  own grace (volcano v1.15.1 pkg/scheduler/cache/cache.go:270-316, ``defaultEvictor.Evict``); the kubelet
  runs a preStop hook of any kind (``exec``, ``sleep``) only within that grace and then stops the container
  (kubernetes v1.35.3 pkg/kubelet/kuberuntime/kuberuntime_container.go:762-790, 873-888), so the bound on
  the grace bounds the preStop too.

Kubernetes' CEL quantity library (``quantity``, ``compareTo``; Kubernetes 1.29+) compares the requests. A
container's request of a resource is what the API server stores: a limit stands for an absent request
(``SetDefaults_Pod``), so the check reads the request, else the limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stackconfig.labels import HEAD_SLOT_RESOURCE, pool_gpu_resource
from stackconfig.stack import POOL_LABEL

from workloads.derive.model import WorkloadModel
from workloads.derive.resources import GPU
from workloads.render.common import container_resources


@dataclass(frozen=True)
class PodLimits:
    gpu_shapes: Mapping[str, Mapping[str, str]]
    """GPU pool -> the requests of the run's pod there (resource -> quantity)."""
    head: Mapping[str, str]
    """The platform head's requests (cpu, memory)."""
    grace_seconds: int
    gpu_resources: Mapping[str, str]
    """GPU pool -> its own GPU resource (``stackconfig.labels.pool_gpu_resource``)."""


def pod_limits(m: WorkloadModel) -> PodLimits:
    """The stack's: each GPU group's pod shape, the head's, and the checkpoint grace of ``render.runs``."""
    return PodLimits(gpu_shapes={g.pool.name: container_resources(g)["requests"] for g in m.workers if g.gpus},
                     head=container_resources(m.head)["requests"],
                     grace_seconds=m.settings.capacity_block_end.checkpoint_minutes * 60,
                     gpu_resources={p.name: pool_gpu_resource(p.name) for p in m.pools if p.instance.is_gpu})


def _map(values: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"'{k}': {_literal(v)}" for k, v in sorted(values.items())) + "}"


def _literal(v: object) -> str:
    return _map(v) if isinstance(v, Mapping) else f"'{v}'"


def limit_variables(limits: PodLimits) -> list[dict]:
    """The policy variables the checks below read."""
    return [{"name": "gpuShapes", "expression": _map(limits.gpu_shapes)},
            {"name": "headShape", "expression": _map(limits.head)},
            {"name": "graceSeconds", "expression": str(limits.grace_seconds)},
            {"name": "gpuResources", "expression": _map(limits.gpu_resources)}]


def request(c: str, k: str) -> str:
    """Container ``c``'s request of resource ``k`` (a CEL string expression) as a string quantity: the
    request, else the limit, else '0'. ``dyn``: the API server's type check has no type for a resource
    list (its quantities are int-or-string) and would call ``requests`` undefined."""
    r = f"dyn({c}.resources)"

    def of(m: str) -> str:
        return f"has({c}.resources) && has({r}.{m}) && {k} in {r}.{m}"
    return f"({of('requests')} ? string({r}.requests[{k}]) : ({of('limits')} ? string({r}.limits[{k}]) : '0'))"


def _on(spec: str, pool: str) -> str:
    return f"has({spec}.nodeSelector) && '{POOL_LABEL}' in {spec}.nodeSelector && {pool}"


def whole_node(spec: str) -> str:
    """On a GPU pool (``variables.gpuPools``), a container of the pod spec at ``spec`` requests the pool's
    whole-node shape; a GPU pool without a shape admits nothing."""
    pool = f"{spec}.nodeSelector['{POOL_LABEL}']"
    shape = f"variables.gpuShapes[{pool}]"
    return (f"!({_on(spec, f'{pool} in variables.gpuPools')})"
            f" || {pool} in variables.gpuShapes && {spec}.containers.exists(c, {shape}.all(k,"
            f" quantity({request('c', 'k')}).compareTo(quantity({shape}[k])) >= 0))")


def one_pools_gpus(spec: str) -> str:
    """Every container and init container of the pod spec at ``spec`` requests its pool's GPU resource
    (``variables.gpuResources``) as much as ``nvidia.com/gpu``, off the GPU pools none, and no other pool's
    (ephemeral containers may state no resources)."""
    pool = f"(has({spec}.nodeSelector) && '{POOL_LABEL}' in {spec}.nodeSelector ? {spec}.nodeSelector['{POOL_LABEL}'] : '')"
    own = f"({pool} in variables.gpuResources ? {request('c', f'variables.gpuResources[{pool}]')} : '0')"
    none = f"quantity({request('c', 'variables.gpuResources[p]')}).compareTo(quantity('0')) == 0"
    check = (f"quantity({request('c', repr(GPU))}).compareTo(quantity({own})) == 0"
             f" && variables.gpuResources.all(p, p == {pool} || {none})")
    return f"{spec}.containers.all(c, {check}) && (!has({spec}.initContainers) || {spec}.initContainers.all(c, {check}))"


def head_sized(spec: str) -> str:
    """On the head pool, one container and no sidecar, every container within the platform head's requests."""
    pool = f"{spec}.nodeSelector['{POOL_LABEL}']"
    within = (f"variables.headShape.all(k, quantity({request('c', 'k')})"
              f".compareTo(quantity(variables.headShape[k])) <= 0)")
    return (f"!({_on(spec, f'{pool} == variables.headPool')})"
            f" || (size({spec}.containers) == 1 && {spec}.containers.all(c, {within})"
            f" && (!has({spec}.initContainers) || {spec}.initContainers.all(c, !has(c.restartPolicy) && {within})))")


def one_head_slot(spec: str) -> str:
    """On the head pool, every container (``head_sized``: one) requests exactly one head slot and every init
    container at most one (a run's head stages its data in an init container of the head's resources,
    ``render.runs``); elsewhere no container or init container requests any. A pod requests the larger of its
    containers' sum and its largest init container (``resourcehelper.PodRequests``), so one on the head pool."""
    slot = f"quantity({request('c', repr(HEAD_SLOT_RESOURCE))})"
    on_head_pool = _on(spec, f"{spec}.nodeSelector['{POOL_LABEL}'] == variables.headPool")

    def every(containers: str, check: str) -> str:
        return f"(!has({spec}.{containers}) || {spec}.{containers}.all(c, {slot}.compareTo(quantity('{check[1]}')) {check[0]} 0))"
    return (f"({on_head_pool} ? {every('containers', ('==', 1))} && {every('initContainers', ('<=', 1))}"
            f" : {every('containers', ('==', 0))} && {every('initContainers', ('==', 0))})")


def per_container(spec: str) -> str:
    """No pod-level ``resources`` (PodLevelResources, on by default since Kubernetes 1.34): Volcano sizes a pod
    by them (volcano v1.15.1 pkg/scheduler/api/pod_info.go:241-254), while the rules above and the team quota's
    CPU and memory requirement read containers; a head of the platform's containers could hold a whole node."""
    return f"!has({spec}.resources)"


def grace_bounded(spec: str) -> str:
    return f"!has({spec}.terminationGracePeriodSeconds) || {spec}.terminationGracePeriodSeconds <= variables.graceSeconds"


def pod_limit_rules(spec: str = "object.spec") -> list[tuple[str, str]]:
    """(CEL, message) of the team pod policy, of the pod spec at ``spec`` (a Ray pod template's too:
    ``render.pod_rules``)."""
    return [
        (whole_node(spec),
         "a team's pod on a GPU pool holds a whole node: one container requests at least the run's pod of that "
         "pool (variables.gpuShapes: all the node's GPUs and EFA devices, its huge pages, the run's CPU and "
         "memory); a smaller pod keeps the node from every team's GPU work"),
        (one_pools_gpus(spec),
         "a team's pod requests its GPU pool's own resource (variables.gpuResources) in the count of its "
         f"{GPU} in every container, and no other pool's: the team Queues and quotas count GPUs by pool"),
        (head_sized(spec),
         "a team's pod on the head pool is no bigger than the platform's head (variables.headShape; one "
         "container, no sidecar)"),
        (per_container(spec),
         "a team's pod states its resources per container (no pod-level spec.resources, which Volcano would "
         "size it by past the rules above)"),
        (grace_bounded(spec),
         "a team's pod stops within the platform's checkpoint grace (terminationGracePeriodSeconds at most "
         "variables.graceSeconds, capacityBlockEnd.checkpointMinutes): Volcano reclaims with the pod's own grace"),
        (one_head_slot(spec),
         f"a team's pod on the head pool requests exactly one {HEAD_SLOT_RESOURCE} in its container (at most one "
         "in an init container), and a pod elsewhere none: the team quota counts heads by it, lingering ones included"),
    ]

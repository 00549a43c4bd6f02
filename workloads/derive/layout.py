"""Where every workload runs and how big its pods are, derived from the pools and the catalog.

One place answers "which pool, how many pods, what does each pod ask for" for the Ray groups, the
reward service and the preprocessing Job; the manifests, the Miles argv, the TorchX component and
the schedulability check all read these answers, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stackconfig.stack import CapacityType, Pool, Role

from workloads.derive.resources import GI, POD_HUGEPAGES_MI, allocatable, efa_devices, usable, whole_node

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


RAY_CLUSTER = "miles"
GPU_NODE_RESOURCE = "gpu_node"
"""Custom Ray resource of training nodes: Miles' driver asks for a sliver of it to land on a GPU
node (it needs libcuda) that is never Spot."""


@dataclass(frozen=True)
class Group:
    """One Ray group (or service): a pool, a replica count and one pod's size."""

    name: str
    pool: Pool
    replicas: int
    cpu: int
    """Whole cores (requests = limits)."""
    memory_g: int
    """Decimal gigabytes (requests = limits)."""
    gpus: int = 0
    efa: int = 0
    hugepages_mi: int = 0
    head_slots: int = 0
    """Of ``stackconfig.labels.HEAD_SLOT_RESOURCE`` (requests = limits): 1 for a run's head, else 0."""
    shm_bytes: int = 0
    ray_resources: dict[str, float] = field(default_factory=dict)
    ipc_lock: bool = False
    env: dict[str, str] = field(default_factory=dict)
    """The pod's environment (EFA, NCCL, DeepEP on GPU groups)."""

    @property
    def memory_bytes(self) -> int:
        return self.memory_g * 1000 ** 3

    @property
    def object_store_bytes(self) -> int:
        """Ray's object store lives in /dev/shm: 80 % of it."""
        return int(self.shm_bytes * 0.8)


def gpu_pools(cfg: "ProgramConfig") -> list[Pool]:
    return [p for p in (cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT)) if p is not None]


def head_pool(cfg: "ProgramConfig") -> Pool:
    name = cfg.workloads.ray.head_pool
    if name:
        return next(p for p in cfg.pools if p.name == name)
    return cfg.pool(Role.CPU) or cfg.pool(Role.SYSTEM)


def reward_pool(cfg: "ProgramConfig") -> Pool | None:
    s = cfg.workloads.reward
    if not reward_enabled(cfg):
        return None
    if s.pool:
        return next(p for p in cfg.pools if p.name == s.pool)
    return cfg.pool(Role.REWARD) or cfg.pool(Role.CPU)


def reward_enabled(cfg: "ProgramConfig") -> bool:
    s = cfg.workloads.reward
    return s.enabled if s.enabled is not None else cfg.pool(Role.REWARD) is not None


def is_spot(pool: Pool) -> bool:
    return pool.capacity.type is CapacityType.SPOT


def _gpu_group(cfg: "ProgramConfig", name: str, pool: Pool, resources: dict[str, float]) -> Group:
    alloc = allocatable(pool, cfg.workloads.efa_devices)
    cpu, mem_g = whole_node(alloc)
    efa = efa_devices(pool, cfg.workloads.efa_devices)
    return Group(name=name, pool=pool, replicas=pool.nodes.desired, cpu=cpu, memory_g=mem_g,
                 gpus=pool.instance.gpus, efa=efa, hugepages_mi=POD_HUGEPAGES_MI if efa else 0,
                 shm_bytes=cfg.workloads.ray.gpu_shm_gib * GI, ray_resources=resources, ipc_lock=True)


def _cpu_group(cfg: "ProgramConfig", name: str, pool: Pool, fraction: float,
               resources: dict[str, float]) -> Group:
    cpu, mem_g = whole_node(allocatable(pool, cfg.workloads.efa_devices), fraction)
    mem = mem_g * 1000 ** 3
    return Group(name=name, pool=pool, replicas=pool.nodes.desired, cpu=cpu, memory_g=mem_g,
                 shm_bytes=int(mem * cfg.workloads.ray.cpu_shm_fraction) // GI * GI,
                 ray_resources=resources)


def ray_head(cfg: "ProgramConfig") -> Group:
    r = cfg.workloads.ray
    mem_g = r.head_memory_gib * GI // 1000 ** 3
    return Group(name="head", pool=head_pool(cfg), replicas=1, cpu=r.head_cpu, memory_g=mem_g,
                 shm_bytes=(r.head_memory_gib // 4) * GI, head_slots=1)


def heads_per_node(cfg: "ProgramConfig") -> int:
    """Run heads (``ray_head``) one node of the head pool holds beside its DaemonSets (``resources.usable``)."""
    return heads_on(ray_head(cfg), cfg.workloads.efa_devices)


def heads_on(head: Group, efa_devices: dict[str, int] | None = None) -> int:
    """``heads_per_node`` of the head group ``head``: what a head-pool node advertises of
    ``stackconfig.labels.HEAD_SLOT_RESOURCE`` (``nodes.pool_resources``)."""
    mcpu, memory = usable(allocatable(head.pool, efa_devices))
    return min(mcpu // (head.cpu * 1000), memory // head.memory_bytes)


def ray_workers(cfg: "ProgramConfig") -> list[Group]:
    """Trainer and rollout groups (one pod per node, all of it), then buffer and preprocessing."""
    groups = [
        _gpu_group(cfg, "trainer", cfg.pool(Role.TRAIN), {GPU_NODE_RESOURCE: 1, "train_node": 1}),
        _gpu_group(cfg, "rollout", cfg.pool(Role.ROLLOUT), {"rollout_node": 1}),
    ]
    memory = cfg.pool(Role.MEMORY)
    if memory is not None:
        groups.append(_cpu_group(cfg, "buffer", memory, 1.0, {"buffer_node": 1}))
    cpu = cfg.pool(Role.CPU)
    if cpu is not None:
        groups.append(_cpu_group(cfg, "preprocess", cpu, cfg.workloads.ray.preprocess_node_fraction,
                                 {"preprocess_node": 1}))
    return groups


def worker(cfg: "ProgramConfig", name: str) -> Group:
    return next(g for g in ray_workers(cfg) if g.name == name)


def reward_group(cfg: "ProgramConfig") -> Group | None:
    pool = reward_pool(cfg)
    if pool is None:
        return None
    s = cfg.workloads.reward
    return Group(name="reward", pool=pool, replicas=s.replicas, cpu=s.cpu,
                 memory_g=s.memory_gib * GI // 1000 ** 3, gpus=s.gpus)


def preprocess_job(cfg: "ProgramConfig") -> Group | None:
    s = cfg.workloads.preprocess
    if not s.enabled:
        return None
    return Group(name="stage", pool=cfg.pool(Role.CPU) or head_pool(cfg), replicas=1, cpu=s.cpu,
                 memory_g=s.memory_gib * GI // 1000 ** 3)


def utility_pool(cfg: "ProgramConfig") -> Pool:
    """Where small jobs run (staging, the Capacity Block end trigger): the cpu pool, else the head's."""
    return cfg.pool(Role.CPU) or head_pool(cfg)









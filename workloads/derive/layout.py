"""Where every workload runs and how big its pods are, derived from the pools and the catalog.

One place answers "which pool, how many pods, what does each pod ask for" for the Ray groups, the
reward service and the preprocessing Job; the manifests, the Miles argv, the TorchX component and
the schedulability check all read these answers, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from stackconfig.versions import workload_image
from stackconfig.stack import CapacityType, Pool, Role

from workloads.derive import moe_backend as moe
from workloads.derive.resources import GI, POD_HUGEPAGES_MI, allocatable, efa_devices, whole_node
from workloads.pod.miles_launcher import SAVE_TRIGGER
from workloads.derive.profile import image_field, run_profile
from workloads.schema.settings import CAPACITY_BLOCK_DRAIN_MINUTES, IMAGE_DIGEST, DeepEPVersion, GinBackend

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

GIN_TYPE = {GinBackend.PROXY: "2", GinBackend.GPU: "5"}

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


@dataclass(frozen=True)
class DeepEP:
    version: DeepEPVersion
    gin_backend: GinBackend | None
    sglang_mode: str

    @property
    def enabled(self) -> bool:
        return self.version is not DeepEPVersion.OFF


def gpu_pools(cfg: "ProgramConfig") -> list[Pool]:
    return [p for p in (cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT)) if p is not None]


def expert_precision(cfg: "ProgramConfig") -> str:
    run = cfg.workloads.run
    return run.expert_precision or ("fp8-blockwise" if run.model.upper().endswith("-FP8") else "bf16")


def ref_model(cfg: "ProgramConfig") -> str:
    """The BF16 checkpoint the trainer starts from (``RunBase.ref_model``): given, else the model when it
    is BF16, else the ``*-FP8`` model's BF16 release (its name without the suffix)."""
    run = cfg.workloads.run
    if run.ref_model:
        return run.ref_model
    if expert_precision(cfg) == "bf16":
        return run.model
    if not run.model.upper().endswith("-FP8"):
        raise ValueError(f"workloads.run.refModel: required for {run.model} (FP8 experts): the trainer starts "
                         f"from a BF16 checkpoint (Miles docs/advanced/low-precision.md); allowed: its BF16 "
                         f"release's repo id")
    return run.model[:-4]


def moe_case(cfg: "ProgramConfig", version: DeepEPVersion) -> moe.Case:
    """The rules' view of the run: precision, engine span, DeepEP generation, GPU, SGLang."""
    rollout = cfg.pool(Role.ROLLOUT)
    gpu = min(gpu_pools(cfg), key=lambda p: p.instance.gpu.sm).instance.gpu_model
    return moe.case(expert_precision(cfg), cfg.workloads.run.rollout.nodes_per_engine,
                    "none" if version is DeepEPVersion.OFF else version.value, gpu,
                    run_profile(cfg).sglang.version, efa=bool(rollout.efa_devices),
                    deepep_mode=cfg.workloads.run.deepep.sglang_mode)


def default_deepep(cfg: "ProgramConfig") -> DeepEPVersion:
    """The first of v2, v1 that the run's profile has (``Profile.a2a``) and the rules accept, else off;
    off with ``fabric: sockets`` (DeepEP needs RDMA between GPUs)."""
    if cfg.workloads.run.fabric == "sockets":
        return DeepEPVersion.OFF
    for version in (DeepEPVersion.V2, DeepEPVersion.V1):
        if version.value not in run_profile(cfg).a2a:
            continue
        try:
            moe.refusal(moe_case(cfg, version))
            return version
        except ValueError:
            continue
    return DeepEPVersion.OFF


def resolve_deepep(cfg: "ProgramConfig") -> DeepEP:
    """The DeepEP mode the stack runs: explicit, or the rules' default (``default_deepep``). V2's GIN
    backend ``auto`` is GPU-initiated EFA where every GPU pool is of a GDA family (the catalog's
    ``gin_gda``: the node setup brings gdrdrv, PeerMappingOverride=1 and EFA driver >= 3.3.0), else the
    CPU proxy."""
    s = cfg.workloads.run.deepep
    version = s.version or default_deepep(cfg)
    backend = None
    if version is DeepEPVersion.V2:
        backend = s.gin_backend
        if backend is GinBackend.AUTO:
            gda = all(p.instance.gin_gda for p in gpu_pools(cfg))
            backend = GinBackend.GPU if gda else GinBackend.PROXY
    return DeepEP(version, backend, s.sglang_mode)


def moe_backend(cfg: "ProgramConfig") -> moe.MoEBackend:
    """SGLang's a2a backend and runner and Megatron's dispatcher for the run (``workloads.derive.moe_backend``)."""
    deepep = resolve_deepep(cfg)
    c = moe_case(cfg, deepep.version)
    return moe.choose(c.precision, c.engine_nodes, c.deepep, c.gpu_model, c.sglang_version,
                      deepep_mode=deepep.sglang_mode, efa=c.efa,
                      megatron_v2=run_profile(cfg).megatron_v2_dispatcher)

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
                 shm_bytes=(r.head_memory_gib // 4) * GI)


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


@dataclass(frozen=True)
class Paths:
    mount: str
    model: str
    """The checkpoint SGLang serves (``--hf-checkpoint``)."""
    ref_model: str
    """The BF16 checkpoint the trainer starts from (``--ref-load``; ``ref_model``)."""
    data: str
    checkpoints: str

    @property
    def save_trigger(self) -> str:
        """Miles' ``--save-trigger-sentinel``: when this file exists after a training step, Miles saves
        a checkpoint at once (synchronously) and removes it (train.py / train_async.py, v0.1.0)."""
        return f"{self.checkpoints}/{SAVE_TRIGGER}"


def paths(cfg: "ProgramConfig") -> Paths:
    """Where Miles reads and writes, all on the shared FSx for Lustre file system."""
    w = cfg.workloads
    mount = w.storage.mount_path.rstrip("/")
    return Paths(mount=mount,
                 model=f"{mount}/models/{w.run.model.split('/')[1]}",
                 ref_model=f"{mount}/models/{ref_model(cfg).split('/')[1]}",
                 data=f"{mount}/datasets/{w.run.dataset.split('/')[1]}/{w.run.prompt_file}",
                 checkpoints=f"{mount}/{CHECKPOINT_DIR}/{w.run.name}")


CHECKPOINT_DIR = "checkpoints"
"""Directory on the file system linked to the bucket's ``checkpoints/`` prefix (auto export/import)."""
RUNNING_MARKER = "RUNNING"
"""A submitted run's lease, fresh in its checkpoint directory while Miles runs (``miles_launcher.Lease``)."""


def utility_pool(cfg: "ProgramConfig") -> Pool:
    """Where small jobs run (staging, the Capacity Block end trigger): the cpu pool, else the head's."""
    return cfg.pool(Role.CPU) or head_pool(cfg)


@dataclass(frozen=True)
class CapacityBlockEnd:
    """When to ask Miles for a checkpoint before a Capacity Block under a GPU pool ends."""

    pools: tuple[str, ...]
    """GPU pools whose block ends at ``end`` (the earliest end among them)."""
    end: datetime
    trigger: datetime
    """``end`` minus the lead, in UTC, on a whole minute (a cron schedule has no seconds)."""
    drain: datetime
    """When EKS starts scaling the block's node group to zero (40 minutes before ``end``)."""


def capacity_block_end(cfg: "ProgramConfig") -> CapacityBlockEnd | None:
    """The earliest Capacity Block end of the training and rollout pools, or None when no GPU pool
    is a Capacity Block with ``capacity.endTime`` or no run can be running (a GPU pool at zero)."""
    ends = [(p.capacity.end_time.astimezone(timezone.utc), p.name) for p in gpu_pools(cfg)
            if p.capacity.type is CapacityType.CAPACITY_BLOCK and p.capacity.end_time is not None]
    if not ends or any(p.nodes.desired < 1 for p in gpu_pools(cfg)):
        return None
    end = min(e for e, _ in ends)
    pools = tuple(n for e, n in ends if e == end)
    lead = timedelta(minutes=cfg.workloads.capacity_block_end.lead_minutes)
    try:
        trigger = (end - lead).replace(second=0, microsecond=0)
        drain = end - timedelta(minutes=CAPACITY_BLOCK_DRAIN_MINUTES)
        trigger.timestamp()
    except (OverflowError, ValueError):
        raise ValueError(f"pools[{pools[0]}].capacity.endTime: {end.isoformat()} minus the checkpoint lead is "
                         f"outside the calendar; allowed: the block's real end time") from None
    return CapacityBlockEnd(pools=pools, end=end, trigger=trigger, drain=drain)


def images(cfg: "ProgramConfig") -> dict[str, str]:
    """Every image reference the workloads run, by the config field that sets it."""
    soft, w, p = cfg.versions.software, cfg.workloads, run_profile(cfg)
    out = {image_field(p): workload_image(soft, p)}
    if soft.reward_image and reward_enabled(cfg):
        out["versions.software.rewardImage"] = soft.reward_image
    if capacity_block_end(cfg) is not None or w.teams:  # the trigger CronJob, the team-directories Job
        out["workloads.images.checkpointTrigger"] = w.images.checkpoint_trigger
    return out


def pinned_by_digest(image: str) -> bool:
    return IMAGE_DIGEST.search(image) is not None

"""The workload model: every pod the workloads run, derived once from the stack config.

``derive(cfg)`` answers, in one pass, which pool each group lands on and how big its pods are,
each GPU group's EFA/NCCL/DeepEP environment, the DeepEP mode, the paths on the file system, the
Miles argv, the images and the Capacity Block end (the derivations live in ``layout``, ``argv``
and ``env``). Renderers (``render``), the schedulability proof, the TorchX component and the
program read this model; none of them goes back to the config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from components.gpu_node_setup import GpuNodeSetup, capability_labels, for_pool
from components.network import api_server_cidrs
from software import Profile, profile
from stackconfig.stack import Pool, Role
from stackconfig.versions import Charts, SoftwareStack, workload_image

from workloads.derive import layout as L
from workloads.derive.block_end import CapacityBlockEnd, capacity_block_end
from workloads.derive.deepep import DeepEP, ref_model, resolve_deepep
from workloads.derive.images import images
from workloads.derive.paths import Paths, paths
from workloads.derive import moe_backend as moe
from workloads.derive.argv import miles_argv
from workloads.derive.env import deepep_runtime_env, gpu_env, rollout_env, runtime_env
from workloads.derive.profile import run_profile
from workloads.schema.settings import Submission, WorkloadSettings
from workloads.schema.run import DeepEPVersion, GinBackend

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


@dataclass(frozen=True)
class WorkloadModel:
    stack: str
    cluster_name: str
    namespace: str
    service_account: str
    retain_storage: bool
    settings: WorkloadSettings
    software: SoftwareStack
    profile: Profile
    """The run's software profile: what its image carries (``software/profiles.yaml``)."""
    charts: Charts
    system_pool: Pool
    head_pool: Pool
    utility_pool: Pool
    """Where small jobs run (staging, the Capacity Block end trigger)."""
    pools: tuple[Pool, ...]
    gpu_pools: tuple[Pool, ...]
    head: L.Group
    workers: tuple[L.Group, ...]
    """Trainer and rollout groups (one pod per node), then buffer and preprocessing groups."""
    reward: L.Group | None
    stage: L.Group | None
    deepep: DeepEP
    paths: Paths
    ref_model: str
    """Hugging Face repo id of the trainer's BF16 checkpoint (``layout.ref_model``), staged beside the model."""
    block_end: CapacityBlockEnd | None
    argv: tuple[str, ...] | None
    """The Miles command line; None when no run can start (a GPU pool has no desired nodes)."""
    no_run: str | None
    """Why ``argv`` is None."""
    runtime_env: Mapping[str, str]
    """``env_vars`` of the Ray job (what Miles' launcher passes to every Ray worker)."""
    rollout_spot: bool
    images: Mapping[str, str]
    """Every image reference the workloads run, by the config field that sets it."""
    gpu_setups: Mapping[str, GpuNodeSetup]
    """Per GPU pool: what the run's kernels need on the host (gdrdrv for DeepEP V2); its pods select it."""
    node_setups: Mapping[str, GpuNodeSetup]
    """Per GPU pool: what the stack's nodes install at boot, for every profile the stack admits
    (``node_setups``); a run's ``gpu_setups`` must be among it."""
    burn_in: bool
    """Every GPU node passes the burn-in (``burnIn.enabled``, ``nodes/``) before a run pod lands on it."""
    api_server: tuple[str, ...]
    """The CIDRs a pod reaches the API server at (``components.network.api_server_cidrs``): the platform's
    API-server NetworkPolicies allow HTTPS to these alone."""

    def node_labels(self, pool: Pool) -> dict[str, str]:
        """The labels the pool's nodes carry: the pool's own plus the capabilities their setup proves."""
        return {**pool.node_labels, **capability_labels(self.node_setups.get(pool.name, GpuNodeSetup()))}

    def capabilities(self, pool: Pool) -> dict[str, str]:
        """The capability labels the run's pods on ``pool`` select."""
        return capability_labels(self.gpu_setups.get(pool.name, GpuNodeSetup()))

    @property
    def image(self) -> str:
        """The image of every Ray pod (``stackconfig.versions.workload_image``)."""
        return workload_image(self.software, self.profile)

    def worker(self, name: str) -> L.Group:
        return next(g for g in self.workers if g.name == name)

    @property
    def ray_job(self) -> bool:
        return self.settings.run.ray_job

    @property
    def raycluster(self) -> bool:
        """The stack keeps a long-lived RayCluster (else TorchX jobs bring their own Ray clusters)."""
        return self.settings.submit is Submission.RAYCLUSTER

    @property
    def runs(self) -> bool:
        """Teams submit runs, each with its own Ray cluster (no run of the stack's own)."""
        return self.settings.submit is Submission.RUNS

    def run_argv(self) -> tuple[str, ...]:
        """The argv of the run; ValueError (naming the idle pools) when no run can start."""
        if self.argv is None:
            raise ValueError(self.no_run)
        return self.argv


def _with_env(g: L.Group, deepep: DeepEP, fabric: str, mount: str, image: str, rollout: dict[str, str]) -> L.Group:
    """A GPU group's environment; DeepEP's variables on the rollout pods only (the trainer keeps Megatron's
    NCCL all-to-all: ``workloads.derive.moe_backend.choose``)."""
    if not g.gpus or g.pool.role not in (Role.TRAIN, Role.ROLLOUT):
        return g
    if g.pool.role is Role.TRAIN:
        return replace(g, env=gpu_env(g.pool, g.efa, None, fabric))
    own = deepep_runtime_env(deepep, mount, image) if g.efa else {}
    return replace(g, env={**gpu_env(g.pool, g.efa, deepep, fabric), **own, **rollout})


def _argv(cfg: "ProgramConfig") -> tuple[tuple[str, ...] | None, str | None]:
    try:
        return tuple(miles_argv(cfg)), None
    except ValueError as idle:
        return None, str(idle)


def gpu_setups(cfg: "ProgramConfig", deepep: DeepEP) -> dict[str, GpuNodeSetup]:
    """Per GPU pool, what the run's DeepEP mode needs on the host (``components.gpu_node_setup.for_pool``)."""
    v2 = deepep.version is DeepEPVersion.V2
    gpu = deepep.gin_backend is GinBackend.GPU
    return {p.name: setup for p in L.gpu_pools(cfg) if (setup := for_pool(p, v2, gpu)) != GpuNodeSetup()}


def admitted_profiles(cfg: "ProgramConfig") -> set[str]:
    """The software profiles runs on this stack can use: the stack's own run's, each declared run's and
    each one the stack pins an image for (``versions.software.images``, what team runs pull)."""
    return {cfg.workloads.run.software, *(r.software for r in cfg.workloads.runs), *cfg.versions.software.images}


def _merge(a: GpuNodeSetup, b: GpuNodeSetup) -> GpuNodeSetup:
    return a if a.gpu_initiated or not b.gdrcopy else b


def node_setups(cfg: "ProgramConfig") -> dict[str, GpuNodeSetup]:
    """What each GPU pool's nodes install at boot: the stack's own run's setup, widened for every admitted
    profile that runs DeepEP V2 (``Profile.a2a``) to what a V2 run there may select: GPU-initiated EFA
    on a GDA family with EFA (the default ``ginBackend: auto``), else gdrdrv for the CPU proxy. A pool
    whose GPUs SGLang runs no DeepGEMM on gets nothing for it (below SM90, SM120: workloads.derive.moe_backend)."""
    setups = gpu_setups(cfg, resolve_deepep(cfg))
    if any("v2" in profile(name).a2a for name in admitted_profiles(cfg)):
        for p in L.gpu_pools(cfg):
            if not moe.deep_gemm_on(p.instance.gpu.sm) or not p.efa_enabled:
                continue
            widest = for_pool(p, True, p.instance.gin_gda)
            setups[p.name] = _merge(setups.get(p.name, GpuNodeSetup()), widest)
    return setups


def derive(cfg: "ProgramConfig") -> WorkloadModel:
    deepep = resolve_deepep(cfg)
    argv, no_run = _argv(cfg)
    rollout = rollout_env(cfg)
    return WorkloadModel(
        stack=cfg.stack, cluster_name=cfg.cluster_name, namespace=cfg.checkpoints.namespace,
        service_account=cfg.checkpoints.service_account, retain_storage=cfg.checkpoints.retain_on_destroy,
        settings=cfg.workloads, software=cfg.versions.software, profile=run_profile(cfg), charts=cfg.versions.charts,
        system_pool=cfg.pool(Role.SYSTEM), head_pool=L.head_pool(cfg), utility_pool=L.utility_pool(cfg),
        pools=tuple(cfg.pools), gpu_pools=tuple(L.gpu_pools(cfg)),
        head=L.ray_head(cfg), workers=tuple(_with_env(g, deepep, cfg.workloads.run.fabric, paths(cfg).mount,
                                 workload_image(cfg.versions.software, run_profile(cfg)), rollout)
                                 for g in L.ray_workers(cfg)),
        reward=L.reward_group(cfg), stage=L.preprocess_job(cfg), deepep=deepep, paths=paths(cfg), ref_model=ref_model(cfg),
        block_end=capacity_block_end(cfg), argv=argv, no_run=no_run,
        runtime_env=runtime_env(cfg.pool(Role.TRAIN)), rollout_spot=L.is_spot(cfg.pool(Role.ROLLOUT)),
        images=images(cfg), gpu_setups=gpu_setups(cfg, deepep), node_setups=node_setups(cfg),
        burn_in=cfg.burn_in.enabled, api_server=tuple(api_server_cidrs(cfg)))

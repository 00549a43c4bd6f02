"""Checks that need both halves of a stack: the pools (platform) and the workloads settings.

Each raises ``ValueError("<fieldPath>: <problem>; allowed: ...")`` so ``load_stack`` reports it as
``stack 'x': invalid configuration\\n  workloads.<path>: ...`` like every other config error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from catalog import MissingFact, gda_families
from software import models
from stackconfig.stack import CapacityType, Role

from workloads.derive.argv import engine_gpus, miles_argv, model_dim
from workloads.derive import moe_backend as moe
from workloads.checks.teams import validate_head_room, validate_members, validate_teams
from workloads.derive.checkpoint_budget import GB, budget
from workloads.derive.sglang_budget import check_hybrid_ranks

from workloads.derive.layout import gpu_pools, head_pool, heads_per_node
from workloads.derive.deepep import expert_precision, moe_case, ref_model, resolve_deepep
from workloads.derive.images import images, pinned_by_digest
from workloads.checks.profile import validate_profile
from workloads.derive.profile import image_field, run_profile
from workloads.schema.settings import Submission
from workloads.schema.run import DeepEPVersion, GinBackend
from workloads.schema.teams import team_file_system_quotas

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


DIGEST_FORM = "<name>[:<tag>]@sha256:<64 lowercase hex digits>"


def validate_images(cfg: "ProgramConfig") -> None:
    """A digest, where given, is well-formed; with ``workloads.images.requireDigest`` (default: on
    with teams) every image the workloads run must carry one (a tag can be moved to other content,
    a digest cannot)."""
    require = cfg.workloads.digests_required
    for field, image in images(cfg).items():
        if "@" in image and not pinned_by_digest(image):
            raise ValueError(f"{field}: {image!r} has a malformed digest; allowed: {DIGEST_FORM}")
        if require and not pinned_by_digest(image):
            raise ValueError(f"{field}: {image!r} is not pinned by digest and workloads.images.requireDigest "
                             f"is on (the default with teams); allowed: {DIGEST_FORM}")


def validate_teams_of(cfg: "ProgramConfig") -> None:
    """The teams against the GPU pools and the cluster's admins (``schema.teams``' checks)."""
    validate_teams(cfg.workloads.teams, cfg.pools)
    if cfg.workloads.ray.head_pool in (None, *(p.name for p in cfg.pools)):  # else validate_ray names it
        validate_head_room(cfg.workloads.teams, head_pool(cfg), heads_per_node(cfg))
    validate_members(cfg.workloads.teams, cfg.cluster.admin_role_arns)
    team_file_system_quotas(cfg.workloads.teams, cfg.workloads.storage.capacity_gib)


def validate_pools(cfg: "ProgramConfig") -> None:
    """The pools the workloads name exist and suit their role; the catalog has the facts of every GPU pool's
    family (``catalog.InstanceType.facts``: GIN, burn-in allowance, fabric figures), none defaulted."""
    for p in cfg.pools:
        if p.instance.is_gpu:
            try:
                p.instance.facts
            except MissingFact as e:
                raise ValueError(f"pools[{p.name}].instanceType: {e}") from None
    w = cfg.workloads
    names = {p.name: p for p in cfg.pools}
    allowed_pools = ", ".join(names)

    # Pools named by the workloads exist and suit their role.
    head = w.ray.head_pool
    if head is not None:
        if head not in names:
            raise ValueError(f"workloads.ray.headPool: no pool {head!r}; allowed: {allowed_pools}")
        pool = names[head]
        if pool.instance.is_gpu or pool.capacity.type is CapacityType.SPOT:
            ok = ", ".join(p.name for p in cfg.pools
                           if not p.instance.is_gpu and p.capacity.type is not CapacityType.SPOT)
            raise ValueError(f"workloads.ray.headPool: the Ray head stays off GPU and Spot nodes, "
                             f"{head!r} is {pool.instance_type} {pool.capacity.type}; allowed: {ok}")
    elif cfg.pool(Role.CPU) is not None and cfg.pool(Role.CPU).capacity.type is CapacityType.SPOT:
        raise ValueError("workloads.ray.headPool: the cpu pool is Spot and the Ray head must not be; "
                         "allowed: a non-Spot CPU pool name")
    r = w.reward
    if r.pool is not None and r.pool not in names:
        raise ValueError(f"workloads.reward.pool: no pool {r.pool!r}; allowed: {allowed_pools}")
    if r.enabled and r.pool is None and cfg.pool(Role.REWARD) is None and cfg.pool(Role.CPU) is None:
        raise ValueError("workloads.reward.enabled: no reward or cpu pool to run the service on; "
                         "allowed: false, or add a pool with role reward")
    if r.gpus:
        pool = names.get(r.pool) if r.pool else cfg.pool(Role.REWARD)
        if pool is None or pool.instance.gpus < r.gpus:
            have = f"{pool.name} has {pool.instance.gpus} GPUs" if pool else "there is no reward pool"
            raise ValueError(f"workloads.reward.gpus: {r.gpus} GPUs per replica but {have}; allowed: 0 (CPU "
                             f"service) or up to the reward pool's GPUs per node")
    for pool_name, n in w.efa_devices.items():
        pool = names.get(pool_name)
        if pool is None or not pool.efa_devices:
            efa = ", ".join(p.name for p in cfg.pools if p.efa_devices)
            raise ValueError(f"workloads.efaDevices: {pool_name!r} is not an EFA pool; allowed: {efa}")
        if n > pool.efa_devices:
            raise ValueError(f"workloads.efaDevices.{pool_name}: {n} exceeds the {pool.efa_devices} EFA "
                             f"interfaces of {pool.instance_type}; allowed: 1..{pool.efa_devices}")


FP8_BLOCK = 128
"""The 128x128 blocks of a blockwise-FP8 checkpoint (``expertPrecision: fp8-blockwise``)."""


def validate_engine(cfg: "ProgramConfig") -> None:
    """An engine inside a node takes a divisor of its GPUs; an engine without expert parallelism shards each
    expert over its GPUs, and SGLang refuses at model load a blockwise-FP8 checkpoint whose expert columns
    per GPU are not whole blocks (sglang 0.5.19 model_executor/model_runner_components/moe_ep_setup.py:106-148,
    ``check_quantized_moe_compatibility``, which the contract stage runs on every rendered engine)."""
    node = cfg.pool(Role.ROLLOUT).instance.gpus
    gpus = cfg.workloads.run.rollout.gpus_per_engine
    if gpus is not None and node % gpus:
        raise ValueError(f"workloads.run.rollout.gpusPerEngine: {gpus} does not divide the {node} GPUs of a rollout "
                         f"node; allowed: {_divisors(node)}")
    if cfg.workloads.run.rollout.expert_parallel or expert_precision(cfg) != "fp8-blockwise":
        return
    ffn, engine = model_dim(cfg, "--moe-ffn-hidden-size"), engine_gpus(cfg)
    if ffn % engine or ffn // engine % FP8_BLOCK:
        ok = [str(g) for g in range(1, node + 1) if node % g == 0 and ffn % g == 0 and ffn // g % FP8_BLOCK == 0]
        raise ValueError(f"workloads.run.rollout.gpusPerEngine: without expert parallelism SGLang shards each expert "
                         f"over the engine's GPUs, and {ffn} expert columns over {engine} GPUs are {ffn / engine:g} "
                         f"each, not a multiple of the FP8 block ({FP8_BLOCK}): refused at model load; allowed: "
                         f"{', '.join(ok) or 'none'}, or rollout.expertParallel: true")


def validate_run(cfg: "ProgramConfig") -> None:
    """The checks of the run on the GPU pools as they are sized for it (a submitted run's own view
    of the stack goes through these alone: ``runs.config.run_config``)."""
    w = cfg.workloads
    run = w.run
    ref_model(cfg)  # the trainer's BF16 checkpoint is known (ValueError naming workloads.run.refModel)
    if run.model_args is None and models.catalog().model(run.model) is None:
        raise ValueError(f"workloads.run.modelArgs: required for {run.model} (Megatron architecture flags, "
                         f"see Miles' scripts/models); presets exist for: {', '.join(models.catalog().names())} "
                         f"(software/models.yaml)")

    if w.submit is Submission.RUNS and not w.teams:
        raise ValueError("workloads.submit: runs are submitted to team queues, and no team is declared; "
                         "allowed: at least one entry in workloads.teams, or submit raycluster/torchx")
    if run.ray_job and w.submit is not Submission.RAYCLUSTER:
        raise ValueError("workloads.run.rayJob: a RayJob runs on the stack's RayCluster, and workloads.submit is "
                         "torchx (no RayCluster); allowed: rayJob false, or submit raycluster")

    train, rollout = cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT)
    idle = [p for p in (train, rollout) if p.nodes.desired < 1]
    if idle and run.ray_job:
        raise ValueError(f"workloads.run.rayJob: pool {idle[0].name!r} has 0 desired nodes and a run needs at "
                         f"least one {idle[0].role.value} node; allowed: false while the pool is scaled to zero")
    if idle:
        return  # GPU pools scaled to zero: the Ray groups have no pods and no run is declared

    # Megatron parallelism over the actor world (the training pool).
    par = run.parallel
    gpus = train.instance.gpus
    world = train.nodes.desired * gpus
    if gpus % par.tensor:
        raise ValueError(f"workloads.run.parallel.tensor: {par.tensor} does not divide the {gpus} GPUs of a "
                         f"{train.instance_type} (tensor parallelism stays inside a node); allowed: {_divisors(gpus)}")
    model_parallel = par.tensor * par.pipeline * par.context
    if world % model_parallel:
        raise ValueError(f"workloads.run.parallel: tensor x pipeline x context = {model_parallel} does not "
                         f"divide the actor world of {world} GPUs; allowed: products dividing {world}")
    expert_parallel = par.expert * par.expert_tensor * par.pipeline
    if world % expert_parallel:
        raise ValueError(f"workloads.run.parallel.expert: expert x expertTensor x pipeline = {expert_parallel} "
                         f"does not divide the actor world of {world} GPUs; allowed: products dividing {world}")
    data_parallel = world // model_parallel
    if run.grpo.global_batch_size % data_parallel:
        raise ValueError(f"workloads.run.grpo.globalBatchSize: {run.grpo.global_batch_size} is not a multiple of "
                         f"the data-parallel size {data_parallel} ({world} GPUs / {model_parallel})")

    # SGLang engines over the rollout pool.
    per_engine = run.rollout.nodes_per_engine
    if rollout.nodes.desired % per_engine:
        raise ValueError(f"workloads.run.rollout.nodesPerEngine: {per_engine} does not divide the "
                         f"{rollout.nodes.desired} rollout nodes; allowed: {_divisors(rollout.nodes.desired)}")
    validate_engine(cfg)

    # Checkpoints, model and data fit the file system.
    need = budget(cfg, expert_precision(cfg))
    if need is None:
        raise ValueError(f"workloads.run.modelParamsB: required for {run.model} (total parameters in billions, "
                         f"for the checkpoint budget); known for: {', '.join(models.catalog().names())} (software/models.yaml)")
    if not need.fits:
        raise ValueError(f"workloads.storage.capacityGib: {cfg.workloads.storage.capacity_gib} GiB holds "
                         f"{need.usable_bytes / GB:,.0f} GB usable, the run needs {need.need_bytes / GB:,.0f} GB "
                         f"({need.saves_kept} saves x {need.save_bytes / GB:,.0f} GB + model + data); allowed: "
                         f">= {need.min_capacity_gib()}")

    # DeepEP needs Hopper or newer, RDMA between nodes, and for V2 a recent NCCL / EFA installer.
    deepep = resolve_deepep(cfg)
    moe.refusal(moe_case(cfg, deepep.version))  # upstream rules: workloads/derive/moe_backend.py
    if deepep.version is DeepEPVersion.V2:
        no_rdma = [p for p in gpu_pools(cfg) if not p.efa_devices and p.nodes.desired > 1]
        if no_rdma:
            raise ValueError(f"workloads.run.deepep.version: DeepEP between nodes needs RDMA, pool "
                             f"{no_rdma[0].name!r} has EFA off; allowed: off, or EFA on the pool")
        if per_engine > 1:
            check_hybrid_ranks(per_engine, per_engine * rollout.instance.gpus)
    # What the run's software profile can do: engines across nodes, flags, the image pin.
    validate_profile(cfg, miles_argv(cfg), images(cfg)[image_field(run_profile(cfg))])
    if deepep.version is DeepEPVersion.V2:
        # The profile's NCCL and aws-ofi-nccl have GIN (software.Profile refuses v2 otherwise).
        old = [p for p in gpu_pools(cfg) if not p.instance.gin_gda]
        if run.deepep.gin_backend is GinBackend.GPU and old:
            *rest, last = gda_families()
            raise ValueError(f"workloads.run.deepep.ginBackend: GPU-initiated EFA runs on {', '.join(rest)} and "
                             f"{last} only, pool {old[0].name!r} is {old[0].instance_type}; allowed: proxy, auto")

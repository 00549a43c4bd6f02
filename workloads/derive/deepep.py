"""The MoE side of a run: expert precision, the BF16 reference model, and which DeepEP version and
GIN backend it runs (resolved once from the run, its profile and the pools; ``moe_backend``'s rules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from software import models
from stackconfig.stack import Role

from workloads.derive import moe_backend as moe
from workloads.derive.layout import gpu_pools
from workloads.derive.profile import run_profile
from workloads.schema.run import DeepEPVersion, GinBackend

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

GIN_TYPE = {GinBackend.PROXY: "2", GinBackend.GPU: "5"}


@dataclass(frozen=True)
class DeepEP:
    version: DeepEPVersion
    gin_backend: GinBackend | None
    sglang_mode: str

    @property
    def enabled(self) -> bool:
        return self.version is not DeepEPVersion.OFF


def _fp8_native(model: str) -> models.Model | None:
    """The catalog's entry of ``model`` when it is released in blockwise FP8 only (``fp8Native``)."""
    entry = models.catalog().model(model)
    return entry if entry and entry.fp8_native else None


def expert_precision(cfg: "ProgramConfig") -> str:
    run = cfg.workloads.run
    fp8 = run.model.upper().endswith("-FP8") or _fp8_native(run.model) is not None
    return run.expert_precision or ("fp8-blockwise" if fp8 else "bf16")


def ref_model(cfg: "ProgramConfig") -> str:
    """The BF16 checkpoint the trainer starts from (``RunBase.ref_model``): given, else the model when it
    is BF16, else an FP8-only model's published BF16 checkpoint (``software/models.yaml`` ``bf16Release``),
    else the ``*-FP8`` model's BF16 release (its name without the suffix)."""
    run = cfg.workloads.run
    if run.ref_model:
        return run.ref_model
    if expert_precision(cfg) == "bf16":
        return run.model
    native = _fp8_native(run.model)
    if native and native.bf16_release:
        return native.bf16_release
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
    off with ``fabric: sockets`` (DeepEP needs RDMA between GPUs) and for engines without expert parallelism
    (no all-to-all)."""
    if cfg.workloads.run.fabric == "sockets" or not cfg.workloads.run.rollout.expert_parallel:
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
                      deepep_mode=deepep.sglang_mode, efa=c.efa)

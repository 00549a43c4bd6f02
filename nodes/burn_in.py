"""The burn-in of each GPU pool, derived once from the workload model and the stack's ``burnIn:`` block.

Guarantees: every pool whose nodes register with the burn-in taint (every GPU pool,
``components.gpu_node_setup.registration_taints``) gets a plan, so no such node waits for a burn-in
that does not exist; the checks are the run's own (the preflight with the arguments the pool's Ray
pods use, and that pod's resources), the NCCL floors are the acceptance's (``expected`` and
``floor_of`` of ``workloads.acceptance``), and the time budget is the sum of the steps' allowances
for the pool's DCGM level. A ``burnIn.dcgmLevels`` key that is not a GPU pool is refused here,
before any resource is registered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components.gpu_node_setup import BURN_IN_TAINT
from stackconfig.stack import Pool, StackConfigError
from workloads import layout as L
from workloads.acceptance.compare import floor_of
from workloads.acceptance.expected import EXPECTED, expected
from workloads.fabric_bench import OPS
from workloads.model import WorkloadModel
from workloads.render.ray import preflight_args

DCGM_SECONDS = {1: 120, 2: 420, 3: 1800, 4: 7200}
"""Allowance per ``dcgmi diag`` level: NVIDIA's DCGM docs (dcgmi diag, ``--run``) give level 1
"seconds", 2 "approximately two minutes", 3 "approximately 15 minutes", 4 "extended"; the allowance
is about twice that (4: two hours), plus the host engine's start."""
PREFLIGHT_SECONDS = 420
"""The preflight's own bounds: 60 s per command it runs and 300 s for the one-rank NCCL probe."""
LOOPBACK_SECONDS_PER_DEVICE = 20
"""One ``fi_pingpong`` exchange per EFA device (each is a server once and a client once)."""
BENCH_SECONDS = {"p4d": 420, "p4de": 420, "p5": 300, "p5e": 300, "p5en": 300, "p6-b200": 300, "p6-b300": 300}
"""Intra-node all-reduce and all-to-all, 64 MiB to 4 GiB, 5 warm-up and 20 timed calls per size
(``workloads/fabric_bench.py``), plus the NCCL start: an allowance per family (A100 moves the 4 GiB
sizes at half an H100's NVLink rate), not a measurement."""
BENCH_DEFAULT_SECONDS = 420
BENCH_SIZES = ("64M", "4G")
"""Range of the intra-node bench: the families' figures are peaks at 2-16 GiB payloads (``expected.py``)."""


@dataclass(frozen=True)
class Floor:
    """What one intra-node collective is held to."""

    op: str
    busbw: float
    """GB/s: the acceptance's floor of the family's figure."""
    advisory: bool
    """The figure is derived, not measured: below it warns (as the acceptance report does)."""


@dataclass(frozen=True)
class PoolBurnIn:
    pool: Pool
    group: L.Group
    """The pod the burn-in runs as: the pool's Ray worker pod (same resources, env, preflight), or
    the whole node's GPUs and EFA devices where no Ray group runs on the pool."""
    preflight: tuple[str, ...]
    dcgm_level: int
    floors: tuple[Floor, ...]
    efa_devices: int
    budget_seconds: int
    steps: dict[str, int] = field(default_factory=dict)
    """Allowance per step, seconds (what ``budget_seconds`` adds up); 0: the step does not apply."""
    replace: bool = False
    """A failed node's instance is marked unhealthy (``burnIn.replaceFailed``)."""

    @property
    def name(self) -> str:
        return f"burn-in-{self.pool.name}"

    @property
    def agent_plan(self) -> dict:
        """What the agent on the node is told (JSON in its command line)."""
        return {"pool": self.pool.name, "gpus": self.group.gpus, "efaDevices": self.efa_devices,
                "preflight": list(self.preflight), "budgetSeconds": self.budget_seconds, "steps": dict(self.steps),
                "dcgmLevel": self.dcgm_level, "dcgmSeconds": self.steps["dcgm"], "benchSizes": list(BENCH_SIZES),
                "replace": self.replace,
                "floors": [{"op": f.op, "busbw": f.busbw, "advisory": f.advisory} for f in self.floors],
                "taint": {"key": BURN_IN_TAINT.key, "value": BURN_IN_TAINT.value, "effect": BURN_IN_TAINT.effect}}


def _group(m: WorkloadModel, pool: Pool) -> tuple[L.Group, list[str]]:
    """The pod the burn-in runs as and its preflight arguments."""
    g = next((w for w in m.workers if w.pool.name == pool.name and w.gpus), None)
    if g is not None:
        return g, preflight_args(m, g)
    whole = L.Group(name=f"burn-in-{pool.name}", pool=pool, replicas=1, cpu=4, memory_g=16,
                    gpus=pool.instance.gpus, efa=pool.efa_devices, ipc_lock=bool(pool.efa_devices))
    return whole, ["--gpus", str(whole.gpus), "--efa", str(whole.efa)]


def floors(pool: Pool, g: L.Group) -> tuple[Floor, ...]:
    """The acceptance's figure for one node of the pool's family, for each collective, with NVLink
    SHARP as the pod's env allows it (``NCCL_NVLS_ENABLE``, as ``compare`` reads it)."""
    fam = EXPECTED.get(pool.instance.family)
    if fam is None:
        return ()
    nvls = g.env.get("NCCL_NVLS_ENABLE", "1") != "0"
    out = []
    for op in OPS:
        fig = expected(fam, "node", op, 1, g.gpus, nvls=nvls)
        out.append(Floor(op, floor_of(fig), fig.derived))
    return tuple(out)


def plan(m: WorkloadModel, pool: Pool, level: int, replace: bool = False) -> PoolBurnIn:
    g, args = _group(m, pool)
    steps = {"preflight": PREFLIGHT_SECONDS, "dcgm": DCGM_SECONDS[level],
             "nccl": BENCH_SECONDS.get(pool.instance.family, BENCH_DEFAULT_SECONDS) if g.gpus > 1 else 0,
             "efa": LOOPBACK_SECONDS_PER_DEVICE * pool.efa_devices if pool.efa_devices > 1 else 0}
    return PoolBurnIn(pool=pool, group=g, preflight=tuple(args), dcgm_level=level, floors=floors(pool, g),
                      efa_devices=pool.efa_devices, budget_seconds=sum(steps.values()), steps=steps, replace=replace)


def plans(m: WorkloadModel, cfg) -> list[PoolBurnIn]:
    """One plan per GPU pool of ``cfg`` (a StackConfig) when its burn-in is on; none when off."""
    settings = cfg.burn_in
    gpu = [p for p in cfg.pools if p.instance.is_gpu]
    unknown = sorted(set(settings.dcgm_levels) - {p.name for p in gpu})
    if unknown:
        raise StackConfigError(f"stack {cfg.stack!r}: invalid configuration\n  burnIn.dcgmLevels.{unknown[0]}: not a "
                               f"GPU pool; allowed: {', '.join(p.name for p in gpu) or 'none'}")
    if not settings.enabled:
        return []
    return [plan(m, p, settings.dcgm_levels.get(p.name, settings.dcgm_level), settings.replace_failed) for p in gpu]

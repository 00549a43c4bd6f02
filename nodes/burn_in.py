"""The burn-in of each GPU pool, derived once from the workload model and the stack's ``burnIn:`` block.

Guarantees: every pool whose nodes register with the burn-in taint (every GPU pool,
``components.gpu_node_setup.registration_taints``) gets a plan, so no such node waits for a burn-in
that does not exist; the checks are the run's own (the preflight with the arguments the pool's Ray
pods use, and that pod's resources), the NCCL floors are the acceptance's (``expected`` and
``floor_of`` of ``workloads.acceptance``), the EFA loopback floor is the catalog's
(``InstanceType.efa_loopback_floor_mbs``), and so is the NCCL bench's allowance (``burn_in_nccl_seconds``
of the pool's family: a family the catalog has no entry for is refused, never given a default). Time: the DCGM diagnostic has its own allowance (its
init container's ``timeout``), the image pulls theirs, and the agent's budget (its clock starts when
the agent container starts) is the sum of the allowances of the steps it runs, the check with a
neighbour (``nodes.pairs``: its wait, the two-node all-reduce, a ping-pong per EFA device) included. A
``burnIn.dcgmLevels`` key that is not a GPU pool is refused here, before any resource is registered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components.gpu_node_setup import BURN_IN_TAINT, LABEL_EFA_GDA, LABEL_GDRCOPY, QUARANTINE_TAINT
from stackconfig.burn_in import BreakerSettings, MeasuredFloor
from stackconfig.stack import Pool, StackConfigError
from workloads.derive import layout as L
from workloads.acceptance.compare import floor_of
from workloads.acceptance.expected import expected, family_of
from workloads.pod.fabric_bench import OPS
from workloads.derive.model import WorkloadModel
from workloads.pod.preflight import PASSED_UPTIME_SECONDS
from workloads.render.ray import preflight_args

CAPABILITY_CHECKS = {LABEL_GDRCOPY: ("gdrdrv",), LABEL_EFA_GDA: ("gdrdrv", "gin-gda")}
"""The preflight checks (``workloads.pod.preflight.checks`` names) that prove each capability label the
node setup puts on a node (``components.gpu_node_setup.capability_labels``): the burn-in sets the
label from them, so a node that rebooted keeps no label kubelet wrote at its first registration."""
PULL_SECONDS = 1200
"""Allowance for pulling the DCGM and the workload images onto a new node before the agent starts:
an allowance, not a measurement (the workload image is tens of GB; 20 minutes is 30 GB at 25 MB/s)."""
DCGM_SECONDS = {1: 120, 2: 420, 3: 1800, 4: 7200}
"""Allowance per ``dcgmi diag`` level: NVIDIA's DCGM docs (dcgmi diag, ``--run``) give level 1
"seconds", 2 "approximately two minutes", 3 "approximately 15 minutes", 4 "extended"; the allowance
is about twice that (4: two hours), plus the host engine's start."""
PREFLIGHT_SECONDS = 420
"""The preflight's own bounds: 60 s per command it runs and 300 s for the one-rank NCCL probe."""
LOOPBACK_SECONDS_PER_DEVICE = 20
"""One ``fi_pingpong`` exchange per EFA device (each is a server once and a client once); two per
device: the data check (``-c``) and the bandwidth run (``nodes.agent``)."""
PAIR_BENCH_SECONDS = 300
"""The two-node all-reduce with a neighbour (``nodes.pairs``: 64 MiB to 1 GiB) with the torch rendezvous
and NCCL's start: an allowance, not a measurement."""
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
    """The agent's budget: the allowances of the steps it runs (``AGENT_STEPS``), from its start, and no less
    than ``PASSED_UPTIME_SECONDS`` (the agent holds a pass until the node has been up that long)."""
    steps: dict[str, int] = field(default_factory=dict)
    """Allowance per step, seconds; 0: the step does not apply."""
    replace: bool = False
    """A node failed for a hardware reason is replaced (``burnIn.replaceFailed``, ``nodes.controller``)."""
    breaker: BreakerSettings = BreakerSettings()
    loopback_floor_mbs: float = 0.0
    loopback_floor_source: str = ""
    """Where a measured floor comes from (``burnIn.efaLoopbackFloors``); empty: derived, below it only warns."""
    capabilities: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Capability label -> the preflight checks that prove it, for the labels the pool's pods select."""
    pair_wait_seconds: int = 0
    """How long a node that passed its own checks waits for a neighbour (``nodes.pairs``); 0: no such check."""

    @property
    def node_seconds(self) -> int:
        """From the pod's start to the result: the pulls, the DCGM diagnostic, the agent's budget."""
        return self.steps["pull"] + self.steps["dcgm"] + self.budget_seconds

    @property
    def name(self) -> str:
        return f"burn-in-{self.pool.name}"

    @property
    def agent_plan(self) -> dict:
        """What the agent on the node is told (JSON in its command line)."""
        return {"pool": self.pool.name, "gpus": self.group.gpus, "efaDevices": self.group.efa,
                "preflight": list(self.preflight), "budgetSeconds": self.budget_seconds, "steps": dict(self.steps),
                "dcgmLevel": self.dcgm_level, "dcgmSeconds": self.steps["dcgm"], "benchSizes": list(BENCH_SIZES),
                "nodeSeconds": self.node_seconds, "passedUptimeSeconds": PASSED_UPTIME_SECONDS,
                "loopbackFloorMBs": self.loopback_floor_mbs, "loopbackFloorAdvisory": not self.loopback_floor_source,
                "capabilities": {k: list(v) for k, v in self.capabilities.items()},
                "pairWaitSeconds": self.pair_wait_seconds,
                "pairCheckSeconds": self.steps["neighbours"] - self.pair_wait_seconds,
                "quarantine": {"key": QUARANTINE_TAINT.key, "value": QUARANTINE_TAINT.value,
                               "effect": QUARANTINE_TAINT.effect},
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
    SHARP as the pod's env allows it (``NCCL_NVLS_ENABLE``, as ``compare`` reads it); none where the
    catalog gives the family no figures."""
    if pool.instance.fabric is None:
        return ()  # the catalog says the family has no figures (its origin says why)
    fam = family_of(pool)
    nvls = g.env.get("NCCL_NVLS_ENABLE", "1") != "0"
    out = []
    for op in OPS:
        fig = expected(fam, "node", op, 1, g.gpus, nvls=nvls)
        out.append(Floor(op, floor_of(fig), fig.derived))
    return tuple(out)


AGENT_STEPS = ("preflight", "nccl", "efa", "neighbours")
"""The steps the agent runs itself, on its own clock (it only reads the DCGM container's result)."""


def capabilities(m: WorkloadModel, pool: Pool, args: list[str]) -> dict[str, tuple[str, ...]]:
    """The capability labels the pool's pods select, each with the preflight checks that prove it;
    only where the burn-in's preflight runs those checks (``--gin``)."""
    if "--gin" not in args:
        return {}
    ran = {"gdrdrv", *(("gin-gda",) if args[args.index("--gin") + 1] == "gpu" else ())}
    return {k: CAPABILITY_CHECKS[k] for k in m.capabilities(pool)
            if k in CAPABILITY_CHECKS and set(CAPABILITY_CHECKS[k]) <= ran}


def pair_wait(pool: Pool, wait_minutes: int) -> int:
    """Seconds a node of ``pool`` waits for a neighbour: none for a pool that never has two nodes or no EFA."""
    return wait_minutes * 60 if pool.nodes.max > 1 and pool.efa_devices else 0


def plan(m: WorkloadModel, pool: Pool, level: int, replace: bool = False,
         breaker: BreakerSettings = BreakerSettings(), measured: MeasuredFloor | None = None,
         pair_wait_minutes: int = 0) -> PoolBurnIn:
    g, args = _group(m, pool)
    wait = pair_wait(pool, pair_wait_minutes)
    steps = {"pull": PULL_SECONDS, "dcgm": DCGM_SECONDS[level], "preflight": PREFLIGHT_SECONDS,
             "nccl": pool.instance.burn_in_nccl_seconds if g.gpus > 1 else 0,
             "efa": 2 * LOOPBACK_SECONDS_PER_DEVICE * pool.efa_devices if pool.efa_devices > 1 else 0,
             "neighbours": wait + PAIR_BENCH_SECONDS + LOOPBACK_SECONDS_PER_DEVICE * pool.efa_devices if wait else 0}
    return PoolBurnIn(pool=pool, group=g, preflight=tuple(args), dcgm_level=level, floors=floors(pool, g),
                      efa_devices=pool.efa_devices, steps=steps,
                      budget_seconds=max(sum(steps[s] for s in AGENT_STEPS), PASSED_UPTIME_SECONDS),
                      replace=replace, breaker=breaker,
                      loopback_floor_mbs=measured.mbs if measured else pool.instance.efa_loopback_floor_mbs,
                      loopback_floor_source=measured.source if measured else "",
                      capabilities=capabilities(m, pool, args), pair_wait_seconds=wait)


def plans(m: WorkloadModel, cfg) -> list[PoolBurnIn]:
    """One plan per GPU pool of ``cfg`` (a StackConfig) when its burn-in is on; none when off."""
    settings = cfg.burn_in
    gpu = [p for p in cfg.pools if p.instance.is_gpu]
    _refuse_unknown(cfg, "dcgmLevels", settings.dcgm_levels, [p.name for p in gpu], "a GPU pool")
    _refuse_unknown(cfg, "efaLoopbackFloors", settings.efa_loopback_floors,
                    [p.instance_type for p in gpu if p.efa_devices > 1],
                    "the instance type of a GPU pool with two EFA devices or more")
    if not settings.enabled:
        return []
    return [plan(m, p, settings.dcgm_levels.get(p.name, settings.dcgm_level), settings.replace_failed,
                 settings.breaker, settings.efa_loopback_floors.get(p.instance_type), settings.pair_wait_minutes)
            for p in gpu]


def _refuse_unknown(cfg, field: str, given: dict, allowed: list[str], what: str) -> None:
    """A key of ``burnIn.<field>`` that is not one of ``allowed`` is refused, before any resource."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise StackConfigError(f"stack {cfg.stack!r}: invalid configuration\n  burnIn.{field}.{unknown[0]}: not "
                               f"{what}; allowed: {', '.join(dict.fromkeys(allowed)) or 'none'}")

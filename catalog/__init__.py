"""The instance catalog: every fact about an EC2 instance type that the platform depends on.

One row per type, one place per fact. Launch templates, subnet sizing, device-plugin coverage,
pod resource requests, the NCCL environment, the GIN backend, the burn-in's allowances and floors,
the acceptance's figures, the MoE rules' compute capability and the cost figures of the plan all
derive from these rows.

The rows are generated from public instance data (``data/ec2-instance-types.json``, written by
``scripts/generate_catalog.py`` from Karpenter's DescribeInstanceTypes reference, its VPC limits and
price tables, and amazon-eks-ami's instance info; the file records each source's commit and blob).
``data/gpu-facts.json`` (typed by ``catalog.facts``) holds what was checked by hand, each fact with its
origin: a record per GPU model (``InstanceType.gpu``) and an entry per GPU family (``InstanceType.facts``)
whose types' rows it overrides where it is more precise (EFA card layout, EFA generation and bandwidth,
disks per instance). A fact the files lack is an error naming the file and the field (``MissingFact``),
never a default. Prices are optional: us-east-1 on-demand where the data has one, else none (a stack
sets ``capacity.hourlyPrice``; the plan says when it has none).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, replace
from pathlib import Path

from . import facts as F

DATA_DIR = Path(__file__).resolve().parent / "data"
TYPES_FILE = "ec2-instance-types.json"
FACTS_FILE = "gpu-facts.json"
FACTS_PATH = f"catalog/data/{FACTS_FILE}"
MIB_PER_GIB = 1024
EFA_LOOPBACK_FLOOR_SHARE = 0.5
"""A ping-pong keeps one message in flight, so with S-byte messages over a device of line rate B and
a fixed per-message cost t0 it moves S / (S/B + t0). The burn-in sends 4 MiB (fi_pingpong's largest
size is 6 MiB, libfabric v2.6.0 util/pingpong.c ``PP_MAX_DATA_MSG``): at 100 Gbps S/B is 335 us, so
half the line rate admits a t0 as long as the transfer itself, far beyond a healthy path's, and
catches a device or path running at a fraction of its rate. Not measured on these types (no EFA
here)."""


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_gib: int
    max_pods: int
    """Pods per node with the VPC CNI on network card 0, without prefix delegation."""
    on_demand_hourly_usd: float | None
    arch: str = "amd64"
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_gib: int = 0
    network_cards: int = 1
    efa_max: int = 0
    """DescribeInstanceTypes EfaInfo.MaximumEfaInterfaces: one EFA per network card up to this."""
    card0_takes_efa: bool = True
    efa_generation: int = 0
    efa_gbps: float = 0
    nvme_disks: int = 0
    nvme_disk_gb: int = 0
    nvme_total_gb: int = 0
    hand_checked: bool = False
    """The type's EFA card layout and disks were checked by hand (``gpu-facts.json``: ``families.<f>.types``)."""

    @property
    def has_efa(self) -> bool:
        return self.efa_max > 0

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def efa_device_gbps(self) -> float:
        """Line rate of one EFA device: the type's EFA bandwidth over its EFA devices (p5: 3200/32 = 100)."""
        return self.efa_gbps / self.efa_max if self.efa_max else 0.0

    @property
    def efa_loopback_floor_mbs(self) -> float:
        """MB/s (10^6 B/s, fi_pingpong's unit) an ``fi_pingpong`` between two EFA devices of one node
        must reach (``nodes.agent``): ``EFA_LOOPBACK_FLOOR_SHARE`` of one device's line rate. A
        derivation, not a measurement: see the share."""
        return round(self.efa_device_gbps * 1000 / 8 * EFA_LOOPBACK_FLOOR_SHARE, 1)

    @property
    def efa_layout_known(self) -> bool:
        """Which cards carry EFA is certain: one EFA on the one card, one per card on every card,
        or a hand-checked layout. The public data does not say which card lacks EFA otherwise."""
        return self.hand_checked or self.efa_max in (0, self.network_cards) or self.network_cards == 1


    @property
    def gpu(self) -> F.Gpu:
        """The record of the type's GPU model (``gpu-facts.json``: ``gpus``)."""
        if not self.is_gpu:
            raise MissingFact(f"{self.name} has no GPU")
        return gpu(self.gpu_model)

    @property
    def gpu_memory_seen_mib(self) -> int:
        """One GPU's memory as SGLang reads it (nvidia-smi ``memory.total``: ``Gpu.smi_memory_mib``); where this
        project measured none for the model, EC2's figure less the largest share the driver kept of a measured
        model (``DRIVER_SHARE``), so a budget never counts memory the driver keeps."""
        measured = self.gpu.smi_memory_mib
        return measured or int(self.gpu_memory_gib * MIB_PER_GIB * (1 - DRIVER_SHARE))

    @property
    def facts(self) -> F.Family:
        """The entry of the type's family (``gpu-facts.json``: ``families``); MissingFact when it has none."""
        found = FACTS.families.get(self.family)
        if found is None:
            fields = ", ".join(f for f in F.Family.model_fields if f != "origin")
            raise MissingFact(f"{self.name}: the instance catalog has no facts for family {self.family!r} "
                              f"({FACTS_PATH}: families.{self.family}, with {fields}); add its entry there")
        return found

    @property
    def gin_gda(self) -> bool:
        """GPU-initiated EFA (NCCL GIN type 5) runs on the type's family."""
        return self.facts.gin_gda

    @property
    def burn_in_nccl_seconds(self) -> int:
        """The burn-in's allowance for its intra-node NCCL bench on one node of the type."""
        return self.facts.burn_in_nccl_seconds

    @property
    def fabric(self) -> F.Fabric | None:
        """The family's fabric figures; None where the catalog says it has none (its origin says why)."""
        return self.facts.fabric


class MissingFact(ValueError):
    """The catalog lacks a fact the platform needs: the message names the file and the field to add."""


def gpu(model: str) -> F.Gpu:
    """The record of GPU model ``model``; MissingFact naming the known ones."""
    found = FACTS.gpus.get(model)
    if found is None:
        raise MissingFact(f"unknown GPU model {model!r}: not in {FACTS_PATH} gpus; known: "
                          f"{', '.join(sorted(FACTS.gpus))}")
    return found


def _row(name: str, r: dict) -> InstanceType:
    return InstanceType(
        name=name, vcpu=r["vcpu"], memory_gib=r["memory_mib"] // MIB_PER_GIB, max_pods=r["max_pods"],
        on_demand_hourly_usd=r["on_demand_usd_per_hour_us_east_1"], arch=r["arch"], gpus=r["gpus"] or 0,
        gpu_model=r["gpu_model"] or "", gpu_memory_gib=(r["gpu_memory_mib"] or 0) // MIB_PER_GIB,
        network_cards=r["network_cards"] or 1, efa_max=r["efa_max"] or 0,
        efa_gbps=(r["network_baseline_gbps"] or 0) if r["efa_max"] else 0, nvme_total_gb=r["nvme_total_gb"] or 0)


def _checked(rows: dict[str, InstanceType], facts: F.Facts) -> None:
    """What the two files must agree on: each GPU model has a record, each family its types, and a
    family's figures state NVLink SHARP's absence exactly where its GPU has it."""
    models = sorted({t.gpu_model for t in rows.values() if t.is_gpu} - set(facts.gpus))
    if models:
        raise ValueError(f"{FACTS_FILE}: gpus: no record for {', '.join(models)} (GPU models of {TYPES_FILE})")
    for name, fam in facts.families.items():
        for t in fam.types:
            if t not in rows or rows[t].family != name:
                raise ValueError(f"{FACTS_FILE}: families.{name}.types.{t}: not a {name} type of {TYPES_FILE}")
        if fam.fabric is not None:
            nvls = facts.gpus[rows[fam.fabric.instance_type].gpu_model].nvls
            if nvls != (fam.fabric.node_all_reduce_without_nvls is not None):
                raise ValueError(f"{FACTS_FILE}: families.{name}.fabric.node_all_reduce_without_nvls: "
                                 f"{'required' if nvls else 'must be null'}: the GPU "
                                 f"{'has' if nvls else 'has no'} NVLink SHARP")


def load(data_dir: Path = DATA_DIR) -> tuple[dict[str, InstanceType], F.Facts]:
    """The rows of ``data_dir``'s two files, the hand-checked types' facts applied, and those facts;
    ValueError naming the file and the field that is missing or wrong."""
    rows = json.loads((data_dir / TYPES_FILE).read_text())["instance_types"]
    catalog = {name: _row(name, r) for name, r in rows.items()}
    facts = F.read(data_dir / FACTS_FILE)
    _checked(catalog, facts)
    for fam in facts.families.values():
        for name, given in fam.types.items():
            catalog[name] = replace(catalog[name], hand_checked=True, **given.given())
    return catalog, facts


CATALOG, FACTS = load()
DRIVER_SHARE = max((1 - FACTS.gpus[t.gpu_model].smi_memory_mib / (t.gpu_memory_gib * MIB_PER_GIB)
                    for t in CATALOG.values() if t.is_gpu and FACTS.gpus[t.gpu_model].smi_memory_mib), default=0.0)
"""The largest share of a GPU's EC2 memory figure its driver keeps, of the models measured (H200: 613 of
144384 MiB)."""
EFA_TYPES: tuple[str, ...] = tuple(n for n, t in CATALOG.items() if t.has_efa)
GPU_TYPES: tuple[str, ...] = tuple(n for n, t in CATALOG.items() if t.is_gpu)


def gda_families() -> list[str]:
    """The families GPU-initiated EFA runs on (``Family.gin_gda``)."""
    return sorted(name for name, fam in FACTS.families.items() if fam.gin_gda)


def not_in_catalog(name: str) -> str:
    """The message for a type the catalog lacks, with the nearest names."""
    near = difflib.get_close_matches(name, CATALOG, n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return f"{name!r} is not in the instance catalog ({len(CATALOG)} current-generation types){hint}"


def instance(name: str) -> InstanceType:
    """The catalog row for ``name``; KeyError names the nearest types."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(not_in_catalog(name)) from None

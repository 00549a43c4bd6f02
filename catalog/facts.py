"""The hand-checked facts of GPUs and GPU families (``data/gpu-facts.json``), typed.

Guarantees, at load: every field of a GPU record and of a family entry is given (a missing, unknown or
mistyped one is refused with its path in the file, ``families.p5en.burn_in_nccl_seconds``); every record
names the origin of each of its facts beside them (``origin``); a fabric figure is either a measurement the
file holds (its source resolved to the cited address) or derived from the family's EFA rate, never both;
NVLink SHARP's absence from a figure is stated exactly where the GPU has NVLink SHARP. What the generated
rows must agree with (every GPU model has a record, every family's types exist) is checked by
``catalog.load``.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

COMPUTE_CAPABILITY = r"^\d+\.\d$"


class _Facts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _cited(origin: dict[str, str], fields: set[str], where: str) -> None:
    missing = sorted(fields - set(origin))
    if missing:
        raise ValueError(f"origin: no citation for {', '.join(missing)} ({where})")


class Gpu(_Facts):
    """One GPU model, as the generated rows name it (``gpu_model``)."""

    compute_capability: str = Field(pattern=COMPUTE_CAPABILITY)
    """major.minor, as NVIDIA's CUDA GPU list writes it."""
    nvls: bool
    """NVLink SHARP (NCCL's NVLS algorithms, ``NCCL_NVLS_ENABLE``): third-generation NVSwitch, Hopper and newer."""
    nvlink_gbs: float = Field(ge=0)
    """NVLink unidirectional bandwidth per GPU, GB/s; 0: the GPUs of an instance talk over PCIe only."""
    smi_memory_mib: int | None = Field(default=None, gt=0)
    """nvidia-smi's ``memory.total`` of one GPU, MiB, where this project measured it: what SGLang sizes its
    memory from (sglang 0.5.19 srt/utils/common.py:653-678), less than EC2's figure by what the driver keeps."""
    origin: dict[str, str]

    @property
    def sm(self) -> int:
        """The compute capability as one number, major x 10 + minor (SGLang's ``get_device_sm``: 9.0 is 90)."""
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)

    @model_validator(mode="after")
    def _origin(self) -> "Gpu":
        _cited(self.origin, {"compute_capability", "nvls", "nvlink_gbs"}
               | ({"smi_memory_mib"} if self.smi_memory_mib else set()), "gpu")
        return self


class Measurement(_Facts):
    """A public (or this project's) measurement of one collective's bus bandwidth."""

    busbw: float = Field(gt=0)
    """GB/s (1e9 B/s), nccl-tests' busbw."""
    at_bytes: int | None
    """Payload it was measured at; null: large, not stated."""
    source: str
    """``<address>: <what it says>``: in the file, a name in ``sources`` and ``says``, joined at load."""


class FigureSpec(_Facts):
    """What a family is held to for one collective: a measurement the file holds (``measurement``, by
    name, resolved at load), or its EFA rate x the acceptance's efficiency (``efa_rate``); ``derivation``
    says why a measurement of other hardware applies (then the figure only warns)."""

    measurement: Measurement | None = None
    efa_rate: bool = False
    derivation: str | None = None

    @model_validator(mode="after")
    def _one(self) -> "FigureSpec":
        if (self.measurement is None) == (not self.efa_rate):
            raise ValueError("give exactly one of measurement, efa_rate")
        if self.efa_rate and self.derivation:
            raise ValueError("derivation: an efa_rate figure states its own")
        return self


class Fabric(_Facts):
    """The figures the acceptance and the burn-in hold a family's pools to."""

    instance_type: str
    """The type the figures are for (its GPUs and EFA rate)."""
    node_all_reduce: FigureSpec
    """One node, all its GPUs (NVLink/NVSwitch), NCCL free to use NVLink SHARP."""
    node_all_reduce_without_nvls: FigureSpec | None
    """The same with ``NCCL_NVLS_ENABLE=0``; null exactly where the GPU has no NVLink SHARP."""
    pair_all_reduce: FigureSpec
    """Two nodes, all their GPUs, NCCL's own algorithm choice."""
    world_all_reduce: FigureSpec
    """Three or more nodes (network-bound)."""


class TypeFacts(_Facts):
    """Where a type's generated row is less precise: only the fields given replace the row's."""

    efa_generation: int | None = None
    efa_gbps: float | None = None
    nvme_disks: int | None = None
    nvme_disk_gb: int | None = None
    card0_takes_efa: bool | None = None

    def given(self) -> dict:
        return self.model_dump(exclude_none=True)


class Family(_Facts):
    """One instance family (``p5en``): its hand-checked types and what the platform derives from it."""

    types: dict[str, TypeFacts]
    """The family's hand-checked types (EFA card layout, EFA generation and rate, disks)."""
    gin_gda: bool
    """GPU-initiated EFA (EFA-GDA, NCCL GIN type 5) runs on the family."""
    burn_in_nccl_seconds: int = Field(gt=0)
    """The burn-in's time allowance for the intra-node NCCL bench on one node (an allowance, not a measurement)."""
    fabric: Fabric | None
    """null: no figures (the origin says why); its pools get no NCCL floor and no acceptance figures."""
    origin: dict[str, str]

    @model_validator(mode="after")
    def _origin(self) -> "Family":
        _cited(self.origin, {"types", "gin_gda", "burn_in_nccl_seconds"} | ({"fabric"} if self.fabric is None else set()),
               "family")
        if self.fabric is not None and self.fabric.instance_type not in self.types:
            raise ValueError(f"fabric.instance_type: {self.fabric.instance_type} is not one of the family's types")
        return self


class Facts(_Facts):
    """The file: sources and measurements by name, GPU records, family entries."""

    about: str
    sources: dict[str, str]
    """Cited address by name."""
    gpus: dict[str, Gpu]
    measurements: dict[str, Measurement]
    families: dict[str, Family]

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, raw: dict) -> dict:
        """Measurements' ``source`` (a name in ``sources``) joined with their ``says``; figures' ``measurement``
        (a name in ``measurements``) replaced by the measurement."""
        if not isinstance(raw, dict):
            return raw
        sources = raw.get("sources") or {}
        measurements = {name: _measurement(m, sources, f"measurements.{name}")
                        for name, m in (raw.get("measurements") or {}).items()}
        families = {}
        for name, fam in (raw.get("families") or {}).items():
            fabric = fam.get("fabric") if isinstance(fam, dict) else None
            if isinstance(fabric, dict):
                fabric = {k: _figure(v, measurements, f"families.{name}.fabric.{k}") for k, v in fabric.items()}
                fam = dict(fam, fabric=fabric)
            families[name] = fam
        return dict(raw, measurements=measurements, families=families)


def _measurement(m: dict, sources: dict[str, str], where: str) -> dict:
    m = dict(m)
    name, says = m.pop("source", None), m.pop("says", None)
    if name not in sources:
        raise ValueError(f"{where}.source: {name!r} is not in sources; allowed: {', '.join(sources)}")
    if not says:
        raise ValueError(f"{where}.says: required (what the source says)")
    return {**m, "source": f"{sources[name]}: {says}"}


def _figure(spec, measurements: dict[str, dict], where: str):
    if not isinstance(spec, dict) or not isinstance(spec.get("measurement"), str):
        return spec
    name = spec["measurement"]
    if name not in measurements:
        raise ValueError(f"{where}.measurement: {name!r} is not in measurements; allowed: {', '.join(measurements)}")
    return dict(spec, measurement=measurements[name])


def _path(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if p not in ("function-after", "function-before"))


def read(path: Path) -> Facts:
    """The typed file; ValueError naming the file and each bad field's path."""
    try:
        return Facts.model_validate(json.loads(path.read_text()))
    except ValidationError as e:
        lines = [f"{_path(err['loc']) or '(file)'}: {err['msg'].removeprefix('Value error, ')}" for err in e.errors()]
        raise ValueError(f"{path.name}: invalid\n  " + "\n  ".join(lines)) from None

"""Expected fabric figures per instance family: the instance catalog's (``catalog/data/gpu-facts.json``,
``families.<f>.fabric``: each a public measurement with its source, or derived from the family's EFA
rate), and the figures derived here from the link rates (all-to-all). A family the catalog gives no
figures has none here (``family_of`` says so)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import catalog
from catalog.facts import FigureSpec
from stackconfig.stack import Pool

ML_ENG_NETWORK = catalog.FACTS.sources["ml-eng-network"]
NCCL_TESTS_PERF = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"
DEEPEP_README = ("https://github.com/deepseek-ai/DeepEP/blob/dd758caf451848bd150e1046af3d0a73e5fff38d/README.md"
                 "#performance")

EFFICIENCY = 0.8
"""Share of a link's rate an application-level collective gets, for derived figures only:
ml-engineering network/README.md, multi-node training footnote ("if it's advertised as 400Gbps in the
best case expect to get 320Gbps (about 80%)")."""
GIB = 1024 ** 3


@dataclass(frozen=True)
class Figure:
    """Expected bus bandwidth (GB/s = 1e9 B/s, nccl-tests' busbw) of one collective."""

    busbw: float
    at_bytes: int | None
    """Payload the figure was measured at (None: large, not stated)."""
    source: str
    derivation: str | None = None
    """None: a public measurement (``source`` says where); else how it was derived, not measured."""

    @property
    def derived(self) -> bool:
        return self.derivation is not None


@dataclass(frozen=True)
class Family:
    name: str
    instance_type: str
    gpu: str
    nvlink_gbs: float
    """NVLink unidirectional bandwidth per GPU, GB/s (the catalog's GPU record)."""
    intra_all_reduce: Figure
    """One node, all its GPUs (NVLink/NVSwitch)."""
    pair_all_reduce: Figure
    """Two nodes, all their GPUs, NCCL's own algorithm choice (Tree/NVLSTree on 2 nodes can exceed the
    network rate: https://github.com/NVIDIA/nccl-tests/issues/196), as nccl-tests' public 2-node runs."""
    world_all_reduce: Figure
    """Three or more nodes (network-bound)."""
    intra_all_reduce_without_nvls: Figure | None
    """One node with ``NCCL_NVLS_ENABLE=0``; None where the GPU has no NVLink SHARP."""

    @property
    def efa_gbps(self) -> float:
        return catalog.CATALOG[self.instance_type].efa_gbps

    @property
    def gpus(self) -> int:
        return catalog.CATALOG[self.instance_type].gpus


def _rate(gbps: float, what: str) -> Figure:
    return Figure(round(gbps / 8 * EFFICIENCY, 2), None, f"{ML_ENG_NETWORK} (80% of the advertised rate)",
                  derivation=f"{what}: {gbps:g} Gbps EFA = {gbps / 8:g} GB/s x {EFFICIENCY} efficiency "
                             f"(no public measurement found)")


def _figure(spec: FigureSpec, efa_gbps: float, what: str) -> Figure:
    if spec.efa_rate:
        return _rate(efa_gbps, what)
    m = spec.measurement
    return Figure(m.busbw, m.at_bytes, m.source, spec.derivation)


def family(name: str) -> Family:
    """The figures of family ``name``, from its catalog entry; KeyError when the catalog gives it none."""
    fam = catalog.FACTS.families.get(name)
    if fam is None or fam.fabric is None:
        raise KeyError(f"no fabric figures for family {name!r} in {catalog.FACTS_PATH}; known: {', '.join(EXPECTED)}")
    f = fam.fabric
    it = catalog.CATALOG[f.instance_type]
    nvls_off = f.node_all_reduce_without_nvls
    return Family(name, f.instance_type, it.gpu_model, it.gpu.nvlink_gbs,
                  _figure(f.node_all_reduce, it.efa_gbps, name),
                  _figure(f.pair_all_reduce, it.efa_gbps, f"{name} (2 nodes)"),
                  _figure(f.world_all_reduce, it.efa_gbps, name),
                  None if nvls_off is None else _figure(nvls_off, it.efa_gbps, name))


class _Families(Mapping[str, Family]):
    """Every family the catalog gives figures, read from the catalog at each use."""

    def __getitem__(self, name: str) -> Family:
        return family(name)

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, fam in catalog.FACTS.families.items() if fam.fabric is not None])

    def __len__(self) -> int:
        return len(list(iter(self)))


EXPECTED: Mapping[str, Family] = _Families()
"""Per instance family: all-reduce figures within a node, over two nodes, over three or more."""

DEEPEP_REFERENCE = {
    "source": DEEPEP_README,
    "note": "DeepEP's own V2 figures, on CX7 InfiniBand (not EFA): context only, not a threshold; "
            "8K tokens, hidden 7168, top-8, FP8 dispatch, BF16 combine; logical bandwidth",
    "figures": [
        {"arch": "SM90", "topo": "EP 8 x 2", "dispatch": 90, "combine": 81, "unit": "GB/s (RDMA)"},
        {"arch": "SM90", "topo": "EP 8 x 4", "dispatch": 61, "combine": 61, "unit": "GB/s (RDMA)"},
        {"arch": "SM100", "topo": "EP 8", "dispatch": 726, "combine": 740, "unit": "GB/s (NVLink)"},
    ],
}


def family_of(pool: Pool) -> Family:
    try:
        return family(pool.instance.family)
    except KeyError as e:
        raise KeyError(f"pool {pool.name}: {e.args[0]}") from None


def expected(family: Family, scope: str, op: str, nodes: int, gpus: int | None = None,
             nvls: bool = True) -> Figure:
    """The figure a series of ``scope`` ("node", "world" or "pairs") and ``op`` over ``nodes`` nodes
    is held to (all-to-all: always derived, from the link rates). ``nvls``: NCCL may use NVLink SHARP
    (``NCCL_NVLS_ENABLE`` not 0); without it a node whose GPUs have NVLink SHARP is held to the family's
    figure without it."""
    g = gpus or family.gpus
    span = 1 if scope == "node" else (2 if scope == "pairs" else nodes)
    if op == "all_reduce" and span == 1 and not nvls and family.intra_all_reduce_without_nvls is not None:
        return family.intra_all_reduce_without_nvls
    if op == "all_reduce":
        return {1: family.intra_all_reduce, 2: family.pair_all_reduce}.get(span, family.world_all_reduce)
    if op != "all_to_all":
        raise ValueError(f"unknown op {op!r}")
    if span == 1:
        return Figure(round(family.nvlink_gbs * EFFICIENCY, 2), None, f"{ML_ENG_NETWORK} (NVLink table)",
                      derivation=f"all-to-all busbw within a node is bounded by NVLink's unidirectional "
                                 f"{family.nvlink_gbs:g} GB/s per GPU; x {EFFICIENCY} (no public measurement found)")
    n = span * g
    share = family.efa_gbps / 8 / g
    bound = share * (n - 1) / (n - g)
    return Figure(round(bound * EFFICIENCY, 2), None, NCCL_TESTS_PERF,
                  derivation=f"each GPU sends (n-g)/n of its buffer over its {share:g} GB/s share of the node's "
                             f"{family.efa_gbps:g} Gbps EFA, so busbw <= {share:g} x (n-1)/(n-g) = {bound:.1f} GB/s "
                             f"for n={n}, g={g}; x {EFFICIENCY} (no public measurement found)")

"""Expected fabric figures per instance family, each citing a public measurement or stating its derivation."""

from __future__ import annotations

from dataclasses import dataclass, replace

from catalog import CATALOG
from stackconfig.stack import Pool




# --- expected figures ------------------------------------------------------------------------------

ML_ENG_NETWORK = "https://github.com/stas00/ml-engineering/blob/master/network/README.md"
ML_ENG_BENCH = "https://github.com/stas00/ml-engineering/blob/master/network/benchmarks/README.md"
AWSOME_NCCL = ("https://github.com/aws-samples/awsome-distributed-training/blob/main/"
               "micro-benchmarks/nccl-tests/README.md")
NCCL_TESTS_PERF = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"
NCCL_TESTS_2NODE = "https://github.com/NVIDIA/nccl-tests/issues/196"
DEEPEP_README = ("https://github.com/deepseek-ai/DeepEP/blob/dd758caf451848bd150e1046af3d0a73e5fff38d/README.md"
                 "#performance")
DEEPEP_TEST_EP = ("https://github.com/deepseek-ai/DeepEP/blob/dd758caf451848bd150e1046af3d0a73e5fff38d/"
                  "tests/elastic/test_ep.py")

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
    """NVLink unidirectional bandwidth per GPU, GB/s (ml-engineering network/README.md, NVLink table)."""
    intra_all_reduce: Figure
    """One node, all its GPUs (NVLink/NVSwitch)."""
    pair_all_reduce: Figure
    """Two nodes, all their GPUs, NCCL's own algorithm choice (Tree/NVLSTree on 2 nodes can exceed the
    network rate: nccl-tests issue 196), as nccl-tests' public 2-node runs."""
    world_all_reduce: Figure
    """Three or more nodes (network-bound)."""

    @property
    def efa_gbps(self) -> float:
        return CATALOG[self.instance_type].efa_gbps

    @property
    def gpus(self) -> int:
        return CATALOG[self.instance_type].gpus


def _link(gbps: float) -> float:
    return gbps / 8 * EFFICIENCY


_A100 = Figure(235.0, None, f"{ML_ENG_NETWORK} (NVLink, case study): nccl-tests all_reduce on an 8x A100 node, "
                            "235 GB/s busbw (about 80% of NVLink 3's 300 GB/s unidirectional)")
_H100 = Figure(480.0, 4 * 10 ** 9, f"{ML_ENG_NETWORK} (SHARP, case study): 8x H100 NVLink 4 all-reduce, 480 GB/s "
                                   "busbw at a 4 GB payload (NCCL chose NVLS)")
_H200 = Figure(474.13, 4 * GIB, f"{ML_ENG_BENCH}: one 8x H200 node, torch all_reduce over NCCL 2.30.7, 474.13 GB/s "
                                "busbw at 4 GiB (nccl-tests on the same node: 473.10)")
_B200 = Figure(838.97, 16 * GIB, f"{ML_ENG_BENCH}: one 8x B200 node, all_reduce 838.97 GB/s busbw at 16 GiB")
_B300 = replace(_B200, derivation="no public B300 figure found: B300 has NVLink 5 like B200 (900 GB/s "
                                  "unidirectional per GPU, ml-engineering NVLink table), so the B200 measurement")
_P4DE_PAIR = Figure(78.33, 2 * GIB, f"{AWSOME_NCCL}: all_reduce_perf on 2x p4de.24xlarge, 78.33 GB/s busbw at 2 GiB")
_P5_PAIR = Figure(443.72, 2 * GIB, f"{AWSOME_NCCL}: all_reduce_perf on 2x p5.48xlarge, 443.72 GB/s busbw at 2 GiB "
                                   "(465.87 at 4 GiB)")
_P4_WORLD = Figure(42.5, None, f"{ML_ENG_NETWORK} (EFA): EFA v1 on P4 instances, 'effective 340 Gbps for "
                               "all_reduce tests' = 42.5 GB/s")


def _same(f: Figure, why: str) -> Figure:
    return replace(f, derivation=why)


def _rate(gbps: float, what: str) -> Figure:
    return Figure(round(_link(gbps), 2), None, f"{ML_ENG_NETWORK} (80% of the advertised rate)",
                  derivation=f"{what}: {gbps:g} Gbps EFA = {gbps / 8:g} GB/s x {EFFICIENCY} efficiency "
                             f"(no public measurement found)")


_P5_AGG = "same 3200 Gbps aggregate EFA per node as p5.48xlarge, so the p5 2-node measurement"
EXPECTED: dict[str, Family] = {
    "p4d": Family("p4d", "p4d.24xlarge", "A100", 300.0, _A100,
                  _same(_P4DE_PAIR, "same 4x100 Gbps EFA v1 and 8x A100 NVSwitch as p4de, so the p4de measurement"),
                  _P4_WORLD),
    "p4de": Family("p4de", "p4de.24xlarge", "A100", 300.0, _A100, _P4DE_PAIR, _P4_WORLD),
    "p5": Family("p5", "p5.48xlarge", "H100", 450.0, _H100, _P5_PAIR, _rate(3200, "p5")),
    "p5e": Family("p5e", "p5e.48xlarge", "H200", 450.0, _H200, _same(_P5_PAIR, _P5_AGG + " (32x100G EFA v2 too)"),
                  _rate(3200, "p5e")),
    "p5en": Family("p5en", "p5en.48xlarge", "H200", 450.0, _H200, _same(_P5_PAIR, _P5_AGG + " (16x200G EFA v3)"),
                   _rate(3200, "p5en")),
    "p6-b200": Family("p6-b200", "p6-b200.48xlarge", "B200", 900.0, _B200,
                      _same(_P5_PAIR, _P5_AGG + " (8x400G EFA v4)"), _rate(3200, "p6-b200")),
    "p6-b300": Family("p6-b300", "p6-b300.48xlarge", "B300", 900.0, _B300, _rate(6400, "p6-b300 (2 nodes)"),
                      _rate(6400, "p6-b300")),
}
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
    name = pool.instance.family
    if name not in EXPECTED:
        raise KeyError(f"pool {pool.name}: no fabric figures for family {name!r}; known: {', '.join(EXPECTED)}")
    return EXPECTED[name]


NVLS_OFF_H200 = Figure(345.19, 4 * GIB, "this project's run on 2 of a host's 8 H200 (NV18, NCCL 2.28.9, "
                       "NCCL_NVLS_ENABLE=0): docs/measurements/fabric-h200x2.json (BENCHMARKS.md)")
"""Hopper NVLink all-reduce without NVLink SHARP: the public 474 GB/s needs NVLS (NCCL's multicast)."""


def expected(family: Family, scope: str, op: str, nodes: int, gpus: int | None = None,
             nvls: bool = True) -> Figure:
    """The figure a series of ``scope`` ("node", "world" or "pairs") and ``op`` over ``nodes`` nodes
    is held to (all-to-all: always derived, from the link rates). ``nvls``: NCCL may use NVLink SHARP
    (``NCCL_NVLS_ENABLE`` not 0); without it a Hopper node is held to the measured NVLS-off figure."""
    g = gpus or family.gpus
    span = 1 if scope == "node" else (2 if scope == "pairs" else nodes)
    if op == "all_reduce" and span == 1 and not nvls and family.gpu in ("H100", "H200"):
        return NVLS_OFF_H200
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

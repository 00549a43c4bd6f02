"""Writes the SYNTHETIC samples of this folder (see README.md): fabric_bench's JSON, nccl-tests'
tables and DeepEP test_ep's lines, from fake timings of a simple model (time = latency + bytes /
bandwidth), with planted faults. None of these numbers is a measurement.

    python tests/data/fabric/make_samples.py     # from the repository root; rewrites the *_synthetic files
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from workloads import fabric_bench as FB  # noqa: E402 (after the path)

GIB, MIB = 1024 ** 3, 1024 ** 2
SIZES = FB.sizes(MIB, 4 * GIB)


def fake_seconds(op: str, nbytes: int, n: int, peak_busbw: float, latency_us: float) -> float:
    """The time at which ``op`` over ``n`` ranks reaches ``peak_busbw`` GB/s at large sizes."""
    algbw = peak_busbw / FB.bus_factor(op, n)
    return latency_us / 1e6 + nbytes / (algbw * FB.GB)


def series(op: str, n: int, peak: float, latency_us: float, **extra) -> dict:
    return {"op": op, "ranks": n, **extra,
            "sizes": [FB.point(op, s, fake_seconds(op, s, n, peak, latency_us), n) for s in SIZES]}


def fabric_sample() -> dict:
    """A p5en-like pool of 4 nodes: node 2's NVLink is slow (300 vs about 470 GB/s), the link between
    nodes 0 and 3 is slow (250 vs about 440 GB/s)."""
    hosts = {k: f"ip-10-1-0-{10 + k}.ec2.internal" for k in range(4)}
    results = [dict(scope="world", **series(op, 32, peak, lat, nodes=[0, 1, 2, 3]))
               for op, peak, lat in (("all_reduce", 330.0, 90.0), ("all_to_all", 60.0, 120.0))]
    for k in range(4):
        for op, peak, lat in (("all_reduce", 300.0 if k == 2 else 470.0, 25.0), ("all_to_all", 380.0, 30.0)):
            results.append(dict(scope="node", **series(op, 8, peak, lat, node=k, host=hosts[k])))
    pairs = []
    for i, rnd in enumerate(FB.round_robin(4)):
        for a, b in rnd:
            peak = 250.0 if (a, b) == (0, 3) else 440.0 + a + b
            s = 2 * GIB
            pairs.append({"nodes": [a, b], "hosts": [hosts[a], hosts[b]], "op": "all_reduce", "ranks": 16,
                          "round": i, **FB.point("all_reduce", s, fake_seconds("all_reduce", s, 16, peak, 80.0), 16)})
    machine = {"gpu": "NVIDIA H200", "nccl": "2.31.2", "torch": "2.13.0", "cuda": "13.0", "backend": "nccl",
               "hostname_of_node": {str(k): h for k, h in hosts.items()},
               "node_name_of_node": {str(k): h for k, h in hosts.items()}, "env": {"NCCL_NVLS_ENABLE": "1"}}
    world = {"ranks": 32, "nodes": 4, "ranks_per_node": 8, "node_of_rank": [r // 8 for r in range(32)]}
    settings = {"dtype": "float32", "warmup": 5, "iters": 20, "min_bytes": MIB, "max_bytes": 4 * GIB, "factor": 2,
                "pair_bytes": 2 * GIB, "pair_warmup": 3, "pair_iters": 10, "no_check": False,
                "scopes": ["node", "world", "pairs"], "ops": ["all_reduce", "all_to_all"]}
    return FB.document(machine, world, settings, results, sorted(pairs, key=lambda p: p["nodes"]), synthetic=True)


# nccl-tests' table layout (NVIDIA/nccl-tests src/common.cu: the two header lines, then per size:
# size, count, type, redop, root, then time/algbw/busbw/#wrong out-of-place and in-place).
HEADER = [f"#{'':62}out-of-place{'':23}in-place",
          f"#{'size':>11}{'count':>14}{'type':>10}{'redop':>8}{'root':>8}"
          f"{'time':>9}{'algbw':>8}{'busbw':>8}{'#wrong':>7}{'time':>9}{'algbw':>8}{'busbw':>8}{'#wrong':>7}",
          f"#{'(B)':>11}{'(elements)':>14}{'':26}{'(us)':>9}{'(GB/s)':>8}{'(GB/s)':>8}{'':7}{'(us)':>9}"
          f"{'(GB/s)':>8}{'(GB/s)':>8}"]


def nccl_row(op: str, nbytes: int, n: int, peak: float, latency_us: float, redop: str) -> str:
    t = fake_seconds(op, nbytes, n, peak, latency_us)
    algbw, busbw = FB.bandwidth(op, nbytes, t, n)
    count = nbytes // 4
    us = t * 1e6
    cell = f"{us:8.1f}" if us < 1e5 else f"{us:8.0f}"
    half = f"{cell} {algbw:7.2f} {busbw:7.2f} {0:6d}"
    return f"{nbytes:12d}  {count:12d}     float  {redop:>6}      -1 {half} {half}"


def nccl_text(op: str, binary: str, hosts: list[str], peak: float, latency: float, prefix: str,
              noise: list[str] = ()) -> str:
    n = 8 * len(hosts)
    lines = [(f"# nThread 1 nGpus 1 minBytes 8 maxBytes {4 * GIB} step: 2(factor) warmup iters: 5 iters: 20 "
              "agg iters: 1 validation: 1 graph: 0"), "#", "# Using devices"]
    for r in range(n):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on {hosts[r // 8]} device  {r % 8} "
                     f"[0000:{16 * (r % 8) + 0x10:02x}:00] NVIDIA H200")
    lines += ["NCCL version 2.31.2+cuda13.0", *noise, "#", *HEADER]
    redop = "sum" if op == "all_reduce" else "none"
    smallest = 4 * (n if op == "all_to_all" else 1)
    rows = [nccl_row(op, s, n, peak, latency, redop) for s in FB.sizes(8, 4 * GIB) if s >= smallest]
    avg = sum(float(r.split()[7]) + float(r.split()[11]) for r in rows) / (2 * len(rows))
    lines += [*rows, "# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g}", "#"]
    return "\n".join(prefix + ln for ln in [f"# Collective test starting: {binary}", *lines]) + "\n"


def ep_line(mark: str, kind: str, rank: int, ranks: int, so: float, su: float, t_us: float, nbytes: int,
            what: str, local: float, local_us: float) -> str:
    """One line as DeepEP@dd758caf tests/elastic/test_ep.py prints it (its f-strings' format)."""
    return (f"   {mark} EP: {rank:3}/{ranks} | {kind}: {so:.0f} GB/s (SO), {su:.0f} GB/s (SU), {t_us:.3f} us, "
            f"{nbytes:.0f} bytes | {what}: {local:.0f} GB/s, {local_us:.3f} us")


KERNELS = (("*", "dispatch", "copy"), ("-", "expanded dispatch", "copy"), ("#", "cached dispatch", "copy"),
           ("@", "combine", "reduce"), ("+", "reduced combine", "reduce"))


def deepep_text() -> str:
    """Two nodes: intranode (EP 8 on each) and internode (EP 16); rank 11 (node 1) is slow on scale-out."""
    hosts = ["ip-10-1-0-10.ec2.internal", "ip-10-1-0-11.ec2.internal"]
    out = []
    for node, host in enumerate(hosts):
        tag = f"DEEPEP intranode {host}| "
        out += [tag + "Config:", tag + " > Ranks: 1 x 8", tag + " > Experts: 6/256",
                tag + " > Tokens: 4096 (max: 4096), hidden: 7168", tag + " > #SM: 24, #QPs: 0/0", tag,
                tag + "Running all test cases:"]
        for r in range(8):
            for mark, kind, what in KERNELS:
                su = 600 + 3 * r
                out.append(tag + ep_line(mark, kind, r, 8, 0, su, 150.0 + r, 96_000_000, what, 900, 40.5))
    for node, host in enumerate(hosts):
        tag = f"DEEPEP internode {host}| "
        out += [tag + "Config:", tag + " > Ranks: 2 x 8"]
        for r in range(8 * node, 8 * node + 8):
            for mark, kind, what in KERNELS:
                so = 20 if (r == 11 and "dispatch" in kind) else 45 + r % 3
                out.append(tag + ep_line(mark, kind, r, 16, so, 300 + r, 900.0 + r, 270_000_000, what, 800, 60.25))
    return "\n".join(out) + "\n"


def main() -> None:
    (HERE / "fabric_bench_p5en_4node_synthetic.json").write_text(json.dumps(fabric_sample(), indent=1, sort_keys=True)
                                                                 + "\n")
    hosts = ["ip-10-1-0-10.ec2.internal", "ip-10-1-0-11.ec2.internal"]
    (HERE / "nccl_all_reduce_perf_2node_synthetic.txt").write_text(
        nccl_text("all_reduce", "all_reduce_perf", hosts, 440.0, 70.0, "0: "))
    noise = ["ip-10-1-0-10:4000:4000 [0] NCCL INFO NET/OFI Selected provider is efa"]
    (HERE / "nccl_alltoall_perf_2node_synthetic.txt").write_text(
        nccl_text("all_to_all", "alltoall_perf", hosts, 90.0, 110.0, "[1,0]<stdout>:", noise))
    (HERE / "deepep_test_ep_2node_synthetic.log").write_text(deepep_text())


if __name__ == "__main__":
    main()

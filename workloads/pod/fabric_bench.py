"""Fabric bandwidth of a GPU pool, measured through torch.distributed and NCCL as the run uses them.

Run under ``torchrun`` on every node of the pool (one process per GPU). Measures, with nccl-tests'
definitions (``algbw = bytes / time``; ``busbw = algbw * 2(n-1)/n`` for all-reduce and
``* (n-1)/n`` for all-to-all, n = ranks of the group, GB = 1e9 bytes):

- ``node``: all-reduce and all-to-all within each node (NVLink), every node at once: a slow node is named;
- ``world``: all-reduce and all-to-all over every rank of every node (EFA between nodes);
- ``pairs``: all-reduce over the GPUs of two nodes, every pair of nodes once, in rounds where each node
  is in at most one pair (round-robin): a slow node or link is named.

Each size is timed over ``--iters`` back-to-back calls after ``--warmup`` calls; a rank's time is the
mean per call, a group's the slowest of its ranks. The first call of each size also checks the result
(``wrong``: elements that differ, as nccl-tests' ``#wrong``). The environment is used as given (the
pod's NCCL_*/FI_* variables, NCCL_NVLS_ENABLE included, are never overridden).

Rank 0 writes one JSON document (``format: fabric-bench/1``: machine, NCCL version, world, results per
scope and size, results per pair) to ``--out`` and, with ``--print-json``, prints it on one stdout line
after ``FABRIC_BENCH_JSON``. ``workloads/acceptance.py`` compares it with the family's figures.

Standard library plus torch; torch is imported inside ``main`` only, so this module imports anywhere.

Usage::

    torchrun --standalone --nproc-per-node=8 fabric_bench.py --out fabric.json          # one host
    torchrun --nnodes=N --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST0:29500 \\
        fabric_bench.py --out fabric.json --print-json                                   # a pool
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import socket
import sys
import time
from typing import Any, Callable, Sequence

FORMAT = "fabric-bench/1"
LOADED_NCCL = "/usr/local/lib/rl-platform/loaded_nccl.py"
"""workloads/image/loaded_nccl.py as both image recipes install it: the NCCL torch maps, as it reports itself."""
JSON_MARKER = "FABRIC_BENCH_JSON"
OPS = ("all_reduce", "all_to_all")
SCOPES = ("node", "world", "pairs")
GB = 1e9
UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}
ENV_PREFIXES = ("NCCL_", "FI_", "TORCH_NCCL", "CUDA_DEVICE_MAX_CONNECTIONS", "RDMAV_")


# --- the arithmetic (nccl-tests doc/PERFORMANCE.md) ----------------------------------------------

def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` over ``n`` ranks."""
    if n < 1:
        raise ValueError(f"{n} ranks")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "all_to_all":
        return (n - 1) / n
    raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")


def bandwidth(op: str, nbytes: int, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of one ``op`` call over ``nbytes`` (a rank's buffer) taking ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"time {seconds!r} s")
    algbw = nbytes / seconds / GB
    return algbw, algbw * bus_factor(op, n)


def parse_size(text: str) -> int:
    """nccl-tests' size syntax: bytes with an optional binary K/M/G/T suffix ("1M" = 1048576)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in UNITS and not t[-1:].isdigit() else ""
    number = t[: len(t) - len(unit)]
    if not number.isdigit() or int(number) <= 0:
        raise ValueError(f"size {text!r}: a positive number of bytes, optionally with K, M, G or T (binary)")
    return int(number) * UNITS[unit]


def sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"sizes {min_bytes}..{max_bytes} x{factor}")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def fit(op: str, nbytes: int, n: int, elem: int) -> int:
    """The largest buffer of at most ``nbytes`` that ``op`` over ``n`` ranks can take (all-to-all:
    a whole number of elements per peer)."""
    unit = elem * (n if op == "all_to_all" else 1)
    return max(unit, nbytes // unit * unit)


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of ``n`` nodes exactly once, in rounds where each node is in at most one pair
    (the circle method: n-1 rounds for even n, n for odd n with one node idle per round)."""
    players: list[int | None] = list(range(n))
    if n % 2:
        players.append(None)
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return [r for r in rounds if r]


def point(op: str, nbytes: int, seconds: float, n: int, wrong: int = 0) -> dict[str, Any]:
    """One measured size, in the JSON's units (µs, GB/s)."""
    algbw, busbw = bandwidth(op, nbytes, seconds, n)
    return {"bytes": nbytes, "time_us": round(seconds * 1e6, 3), "algbw": round(algbw, 3),
            "busbw": round(busbw, 3), "wrong": int(wrong)}


def document(machine: dict, world: dict, settings: dict, results: list[dict], pairs: list[dict],
             synthetic: bool = False) -> dict[str, Any]:
    return {"format": FORMAT, "synthetic": synthetic, "machine": machine, "world": world,
            "settings": settings, "results": results, "pairs": pairs}


# --- command line --------------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="where rank 0 writes the JSON document")
    p.add_argument("--print-json", action="store_true", help=f"rank 0 also prints it after {JSON_MARKER}")
    p.add_argument("--scope", default=",".join(SCOPES),
                   help="comma list of node, world, pairs (default: all that apply to the world)")
    p.add_argument("--ops", default=",".join(OPS), help="comma list of all_reduce, all_to_all")
    p.add_argument("--min-bytes", type=parse_size, default=parse_size("1M"))
    p.add_argument("--max-bytes", type=parse_size, default=parse_size("4G"))
    p.add_argument("--factor", type=int, default=2)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--pair-bytes", type=parse_size, default=parse_size("2G"),
                   help="all-reduce size of the pair test (nccl-tests' public 2-node figures are at 2-4 GiB)")
    p.add_argument("--pair-warmup", type=int, default=3)
    p.add_argument("--pair-iters", type=int, default=10)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--no-check", action="store_true", help="skip the result check of each size")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                   help="gloo: CPU tensors, only to test this script without GPUs")
    p.add_argument("--ranks-per-node", type=int, default=0,
                   help="treat each N consecutive ranks as one node (default: torchrun's LOCAL_WORLD_SIZE); "
                        "lets one host emulate several nodes for a test")
    args = p.parse_args(argv)
    args.scopes = [s for s in args.scope.split(",") if s]
    args.op_list = [o for o in args.ops.split(",") if o]
    for s in args.scopes:
        if s not in SCOPES:
            p.error(f"--scope {s!r}: one of {', '.join(SCOPES)}")
    for o in args.op_list:
        if o not in OPS:
            p.error(f"--ops {o!r}: one of {', '.join(OPS)}")
    if args.iters < 1 or args.warmup < 0 or args.pair_iters < 1 or args.pair_warmup < 0:
        p.error("--iters/--pair-iters at least 1, --warmup/--pair-warmup at least 0")
    try:
        sizes(args.min_bytes, args.max_bytes, args.factor)
    except ValueError as e:
        p.error(str(e))
    return args


# --- the measurement (torch) ---------------------------------------------------------------------

class Bench:
    """One rank's view: torch, its device, timing and the collectives over a group."""

    def __init__(self, args: argparse.Namespace):
        import torch
        import torch.distributed as dist
        self.torch, self.dist, self.args = torch, dist, args
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.gpu = args.backend == "nccl"
        if self.gpu:
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        dist.init_process_group(args.backend)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.dtype = getattr(torch, args.dtype)
        self.elem = torch.tensor([], dtype=self.dtype).element_size()

    # time ---------------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize(self.device)

    def timed(self, call: Callable[[], Any], iters: int) -> float:
        """Mean seconds per call over ``iters`` back-to-back calls."""
        if self.gpu:
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                call()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        return (time.perf_counter() - t0) / iters

    def barrier(self, group=None) -> None:
        if self.gpu:
            self.dist.barrier(group=group, device_ids=[self.local_rank])
        else:
            self.dist.barrier(group=group)

    def group_max(self, value: float, group) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=group)
        return float(t.item())

    def group_sum(self, value: int, group) -> int:
        t = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, group=group)
        return int(t.item())

    # one size ----------------------------------------------------------------------------------------
    def measure(self, op: str, nbytes: int, group, members: list[int], warmup: int, iters: int) -> dict:
        torch, dist, n = self.torch, self.dist, len(members)
        nbytes = fit(op, nbytes, n, self.elem)
        count = nbytes // self.elem
        me = members.index(self.rank)
        x = torch.empty(count, dtype=self.dtype, device=self.device)
        y = torch.empty_like(x) if op == "all_to_all" else None
        wrong = 0
        if not self.args.no_check:
            if op == "all_reduce":
                x.fill_(1)
                dist.all_reduce(x, group=group)
                wrong = int((x != n).sum().item())
            else:
                x.fill_(me % 200 + 1)
                dist.all_to_all_single(y, x, group=group)
                want = (torch.arange(n, device=self.device) % 200 + 1).to(self.dtype).repeat_interleave(count // n)
                wrong = int((y != want).sum().item())
        x.zero_()
        if op == "all_reduce":
            def call():
                dist.all_reduce(x, group=group)
        else:
            def call():
                dist.all_to_all_single(y, x, group=group)
        for _ in range(warmup):
            call()
        self.sync()
        self.barrier(group)
        seconds = self.group_max(self.timed(call, iters), group)
        wrong = self.group_sum(wrong, group)
        return point(op, nbytes, seconds, n, wrong)

    # groups --------------------------------------------------------------------------------------
    def my_group(self, groups: list[list[int]]):
        """The group of ``groups`` (disjoint rank lists) this rank is in, or None (created by the
        members only where torch allows it, else by every rank in the same order)."""
        import inspect
        local = "use_local_synchronization" in inspect.signature(self.dist.new_group).parameters
        mine = None
        for ranks in groups:
            if self.rank in ranks:
                mine = (self.dist.new_group(ranks, use_local_synchronization=True) if local
                        else self.dist.new_group(ranks)), ranks
            elif not local:
                self.dist.new_group(ranks)
        return mine

    def drop(self, group) -> None:
        try:
            self.dist.destroy_process_group(group)
        except Exception:  # noqa: BLE001 - older torch: subgroups live until the end
            pass


def _identity(b: Bench, args: argparse.Namespace) -> dict:
    torch = b.torch
    lws = args.ranks_per_node or int(os.environ.get("LOCAL_WORLD_SIZE", "0")) or b.world
    node = (b.rank // lws if args.ranks_per_node or "GROUP_RANK" not in os.environ
            else int(os.environ["GROUP_RANK"]))
    info = {"rank": b.rank, "node": node, "local_rank": b.local_rank, "host": socket.gethostname(),
            "node_name": os.environ.get("NODE_NAME", "")}
    if b.gpu:
        info["device"] = torch.cuda.get_device_name(b.device)
    return info


def _machine(b: Bench, ranks: list[dict], nodes: dict[int, list[int]]) -> dict:
    torch = b.torch
    m: dict[str, Any] = {"torch": torch.__version__, "backend": b.args.backend,
                         "hostname_of_node": {str(k): ranks[v[0]]["host"] for k, v in nodes.items()},
                         "node_name_of_node": {str(k): ranks[v[0]]["node_name"] for k, v in nodes.items()},
                         "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}}
    if b.gpu:
        m["nccl"] = runpy.run_path(LOADED_NCCL)["version"]()
        m["cuda"] = torch.version.cuda
        m["gpu"] = ranks[0].get("device", "")
    return m


def run(args: argparse.Namespace) -> dict | None:
    b = Bench(args)
    dist = b.dist
    ranks: list[dict] = [None] * b.world  # type: ignore[list-item]
    dist.all_gather_object(ranks, _identity(b, args))
    nodes: dict[int, list[int]] = {}
    for r in ranks:
        nodes.setdefault(r["node"], []).append(r["rank"])
    nnodes = len(nodes)
    host = {k: ranks[v[0]]["node_name"] or ranks[v[0]]["host"] for k, v in nodes.items()}
    scopes = [s for s in args.scopes if not (s == "pairs" and nnodes < 2) and not (s == "node" and nnodes == 1)]
    if nnodes == 1 and "node" in args.scopes and "world" not in scopes:
        scopes.insert(0, "world")  # one host: the world is the node
    steps = sizes(args.min_bytes, args.max_bytes, args.factor)
    results: list[dict] = []
    pairs: list[dict] = []

    def series(scope: str, op: str, group, members: list[int], extra: dict) -> None:
        points = [b.measure(op, s, group, members, args.warmup, args.iters) for s in steps]
        if b.rank == members[0]:
            results.append({"scope": scope, "op": op, "ranks": len(members), **extra, "sizes": points})

    for scope in scopes:
        b.barrier()
        if scope == "world":
            for op in args.op_list:
                series("world", op, None, list(range(b.world)), {"nodes": sorted(nodes)})
        elif scope == "node":
            mine = b.my_group([nodes[k] for k in sorted(nodes)])
            group, members = mine
            k = ranks[b.rank]["node"]
            for op in args.op_list:
                series("node", op, group, members, {"node": k, "host": host[k]})
            b.drop(group)
        else:
            for i, rnd in enumerate(round_robin(nnodes)):
                order = sorted(nodes)
                groups = [nodes[order[a]] + nodes[order[c]] for a, c in rnd]
                mine = b.my_group(groups)
                if mine is not None:
                    group, members = mine
                    p = b.measure("all_reduce", args.pair_bytes, group, members, args.pair_warmup, args.pair_iters)
                    if b.rank == members[0]:
                        a, c = next((order[x], order[y]) for (x, y), g in zip(rnd, groups) if g == members)
                        pairs.append({"nodes": [a, c], "hosts": [host[a], host[c]], "op": "all_reduce",
                                      "ranks": len(members), "round": i, **p})
                    b.drop(group)
                b.barrier()
    gathered: list[Any] = [None] * b.world
    dist.all_gather_object(gathered, (results, pairs))
    doc = None
    if b.rank == 0:
        all_results = sorted((r for res, _ in gathered for r in res),
                             key=lambda r: (SCOPES.index(r["scope"]), r.get("node", -1), OPS.index(r["op"])))
        all_pairs = sorted((p for _, ps in gathered for p in ps), key=lambda p: p["nodes"])
        world = {"ranks": b.world, "nodes": nnodes, "ranks_per_node": len(nodes[min(nodes)]),
                 "node_of_rank": [r["node"] for r in ranks]}
        settings = {k: getattr(args, k) for k in ("dtype", "warmup", "iters", "min_bytes", "max_bytes", "factor",
                                                  "pair_bytes", "pair_warmup", "pair_iters", "no_check")}
        settings["scopes"], settings["ops"] = scopes, args.op_list
        doc = document(_machine(b, ranks, nodes), world, settings, all_results, all_pairs)
    b.barrier()
    dist.destroy_process_group()
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    doc = run(args)
    if doc is not None:
        text = json.dumps(doc, sort_keys=True)
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                f.write(text + "\n")
        if args.print_json:
            print(f"{JSON_MARKER} {text}", flush=True)
        for r in doc["results"]:
            where = f"node {r['node']} ({r['host']})" if r["scope"] == "node" else r["scope"]
            peak = max(r["sizes"], key=lambda s: s["busbw"])
            print(f"{where} {r['op']} over {r['ranks']} ranks: peak busbw {peak['busbw']:.1f} GB/s at "
                  f"{peak['bytes']} B; wrong {sum(s['wrong'] for s in r['sizes'])}", flush=True)
        for p in doc["pairs"]:
            print(f"pair {p['nodes'][0]}-{p['nodes'][1]} ({p['hosts'][0]}, {p['hosts'][1]}) all_reduce: "
                  f"busbw {p['busbw']:.1f} GB/s at {p['bytes']} B; wrong {p['wrong']}", flush=True)
        if any(s["wrong"] for r in doc["results"] for s in r["sizes"]) or any(p["wrong"] for p in doc["pairs"]):
            print("fabric_bench: WRONG results (data corruption on the fabric)", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

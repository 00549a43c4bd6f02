"""Parsers: nccl-tests tables, DeepEP test_ep.py lines, fabric_bench JSON."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping


from workloads.pod import fabric_bench as FB



# --- parsers -------------------------------------------------------------------------------------------

_LAUNCHER_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s))")
_NCCL_RANK = re.compile(r"^#\s*Rank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*?)\s*$")
_NCCL_VERSION = re.compile(r"NCCL version (\S+)")
_NCCL_START = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_NCCL_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_NCCL_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S+)?")
_WRONG = re.compile(r"^(\d+|N/A|[\d.]+e[-+]\d+)$")


def _num(tok: str) -> float:
    return float(tok)


def _wrong(tok: str) -> int | float | None:
    if not _WRONG.match(tok):
        raise ValueError(f"#wrong column {tok!r}")
    if tok == "N/A":
        return None
    return int(tok) if tok.isdigit() else float(tok)


def parse_nccl_tests(text: str) -> dict[str, Any]:
    """One nccl-tests run (``all_reduce_perf``, ``alltoall_perf``, ...): its rows, with out-of-place
    and in-place time (µs), algbw and busbw (GB/s) and #wrong, plus what the header says (NCCL version,
    ranks and their hosts, the collective when printed). Launcher prefixes (``0: `` from srun,
    ``[1,0]<stdout>:`` from mpirun) and interleaved NCCL log lines are skipped; a row that starts
    with a size but does not have nccl-tests' columns is an error."""
    out: dict[str, Any] = {"collective": None, "nccl_version": None, "ranks": {}, "rows": [],
                           "avg_busbw": None, "out_of_bounds": None}
    root_column = True
    for raw in text.splitlines():
        line = _LAUNCHER_PREFIX.sub("", raw, count=1).strip()
        if not line:
            continue
        if m := _NCCL_VERSION.search(line):
            out["nccl_version"] = out["nccl_version"] or m.group(1)
            continue
        if line.startswith("#"):
            if m := _NCCL_RANK.match(line):
                out["ranks"][int(m.group(1))] = {"host": m.group(2), "device": int(m.group(3)), "gpu": m.group(4)}
            elif m := _NCCL_START.match(line):
                out["collective"] = m.group(1)
            elif m := _NCCL_AVG.match(line):
                out["avg_busbw"] = float(m.group(1))
            elif m := _NCCL_OOB.match(line):
                out["out_of_bounds"] = int(m.group(1))
            else:
                words = line.lstrip("#").split()
                if words[:2] in (["size", "count"], ["bytes", "N"]):
                    root_column = "root" in words
            continue
        tokens = line.split()
        if not tokens[0].isdigit():
            continue  # NCCL INFO/WARN lines, launcher chatter
        width = 13 if root_column else 12
        if len(tokens) != width:
            raise ValueError(f"nccl-tests row with {len(tokens)} columns, {width} expected: {raw!r}")
        size, count, dtype, redop = int(tokens[0]), int(tokens[1]), tokens[2], tokens[3]
        root = int(tokens[4]) if root_column else None
        rest = tokens[5:] if root_column else tokens[4:]
        try:
            oop = {"time_us": _num(rest[0]), "algbw": _num(rest[1]), "busbw": _num(rest[2]), "wrong": _wrong(rest[3])}
            ip = {"time_us": _num(rest[4]), "algbw": _num(rest[5]), "busbw": _num(rest[6]), "wrong": _wrong(rest[7])}
        except ValueError as e:
            raise ValueError(f"nccl-tests row: {e}: {raw!r}") from None
        out["rows"].append({"bytes": size, "count": count, "type": dtype, "redop": redop, "root": root,
                            "out_of_place": oop, "in_place": ip})
    if not out["rows"]:
        raise ValueError("no nccl-tests rows found")
    return out


def from_nccl_tests(parsed: Mapping[str, Any], op: str, nodes: int | None = None, scope: str | None = None,
                    ranks_per_node: int | None = None) -> dict[str, Any]:
    """A fabric-bench document holding one nccl-tests run (in-place columns for all-reduce, as torch's
    in-place all_reduce; out-of-place otherwise), so ``compare`` reads it like fabric_bench's own."""
    ranks = len(parsed["ranks"]) or None
    hosts = sorted({r["host"] for r in parsed["ranks"].values()})
    nodes = nodes or len(hosts) or 1
    ranks = ranks or (ranks_per_node or 8) * nodes
    column = "in_place" if op == "all_reduce" else "out_of_place"
    # #wrong is a count of wrong elements; old nccl-tests printed a max error (a float) there instead.
    points = [{"bytes": r["bytes"], "time_us": r[column]["time_us"], "algbw": r[column]["algbw"],
               "busbw": r[column]["busbw"], "wrong": r[column]["wrong"] if isinstance(r[column]["wrong"], int) else 0}
              for r in parsed["rows"] if r["bytes"] > 0]
    scope = scope or ("node" if nodes == 1 else "world")
    series = {"scope": scope, "op": op, "ranks": ranks, "sizes": points}
    if scope == "node":
        series.update(node=0, host=hosts[0] if hosts else "")
    else:
        series["nodes"] = list(range(nodes))
    machine = {"nccl": parsed["nccl_version"], "source": "nccl-tests",
               "hostname_of_node": {str(i): h for i, h in enumerate(hosts)}}
    world = {"ranks": ranks, "nodes": nodes, "ranks_per_node": ranks // nodes}
    return FB.document(machine, world, {}, [series], [])


_EP_KINDS = {"*": "dispatch", "-": "expanded dispatch", "#": "cached dispatch", "@": "combine",
             "+": "reduced combine"}
_EP_LINE = re.compile(
    r"(?P<mark>[*\-#@+]) EP:\s*(?P<rank>\d+)/(?P<ranks>\d+) \| (?P<kind>dispatch|expanded dispatch|cached dispatch|"
    r"combine|reduced combine): (?P<so>\d+) GB/s \(SO\), (?P<su>\d+) GB/s \(SU\), (?P<us>\d+\.\d+) us, "
    r"(?P<bytes>\d+) bytes \| (?P<what>copy|reduce): (?P<local>\d+) GB/s, (?P<local_us>\d+\.\d+) us\s*$")
_EP_TAG = re.compile(r"DEEPEP (?P<phase>intranode|internode) (?P<node>\S+)\|")
DEEPEP_TAG = "DEEPEP {phase} {node}| "
"""What the acceptance Job puts before each line of DeepEP's test, to name the node and the phase."""


def parse_deepep(text: str) -> list[dict[str, Any]]:
    """The bandwidth lines of DeepEP V2's ``tests/elastic/test_ep.py`` (deepseek-ai/DeepEP@dd758caf,
    the ``dist_print`` calls of ``test_dispatch_combine``): per rank and kernel, scale-out (SO, RDMA)
    and scale-up (SU, NVLink) GB/s, time, bytes, and the copy/reduce epilogue's GB/s and time.

    Strict on that format: a line with `` EP: `` and a kernel name that does not match it entirely,
    or whose marker does not belong to its kernel (``*`` dispatch, ``-`` expanded dispatch, ``#`` cached
    dispatch, ``@`` combine, ``+`` reduced combine), is an error. An acceptance-Job tag
    (``DEEPEP <phase> <node>| ``) or a ``kubectl logs --prefix`` prefix before it is kept as phase/node."""
    out = []
    for raw in text.splitlines():
        if " EP:" not in raw or " | " not in raw:
            continue
        m = _EP_LINE.search(raw)
        if not m:
            if re.search(r"[*\-#@+] EP:\s*\d+/\d+ \| ", raw):
                raise ValueError(f"DeepEP test_ep line not in the dd758caf format: {raw!r}")
            continue
        if _EP_KINDS[m["mark"]] != m["kind"]:
            raise ValueError(f"DeepEP line marker {m['mark']!r} is not {m['kind']!r}'s: {raw!r}")
        tag = _EP_TAG.search(raw[: m.start()])
        pod = re.match(r"^\[pod/([^/\]]+)", raw)
        out.append({"phase": tag["phase"] if tag else None, "node": tag["node"] if tag else (pod[1] if pod else None),
                    "rank": int(m["rank"]), "ranks": int(m["ranks"]), "kernel": m["kind"],
                    "so_gbs": int(m["so"]), "su_gbs": int(m["su"]), "time_us": float(m["us"]),
                    "bytes": int(m["bytes"]), "epilogue": m["what"], "epilogue_gbs": int(m["local"]),
                    "epilogue_us": float(m["local_us"])})
    return out


def load_fabric_bench(source: str | Mapping[str, Any]) -> dict[str, Any]:
    """A fabric_bench document from a dict, its JSON text, or a log holding its ``FABRIC_BENCH_JSON``
    line (the last one wins); checked for the fields ``compare`` reads."""
    if isinstance(source, Mapping):
        doc = dict(source)
    else:
        lines = [ln.split(FB.JSON_MARKER, 1)[1] for ln in source.splitlines() if FB.JSON_MARKER in ln]
        doc = json.loads(lines[-1] if lines else source)
    if doc.get("format") != FB.FORMAT:
        raise ValueError(f"not a {FB.FORMAT} document (format {doc.get('format')!r})")
    for key in ("machine", "world", "results", "pairs"):
        if key not in doc:
            raise ValueError(f"{FB.FORMAT} document without {key!r}")
    for r in doc["results"]:
        if r.get("scope") not in FB.SCOPES or r.get("op") not in FB.OPS or not r.get("sizes"):
            raise ValueError(f"bad result series: {json.dumps(r)[:200]}")
        for s in r["sizes"]:
            if not {"bytes", "busbw", "algbw", "time_us", "wrong"} <= set(s):
                raise ValueError(f"bad size entry: {s}")
    for p in doc["pairs"]:
        if not {"nodes", "busbw", "bytes", "wrong"} <= set(p) or len(p["nodes"]) != 2:
            raise ValueError(f"bad pair entry: {p}")
    return doc

"""Results against the family's figures and against the pool itself: names slow nodes and pairs."""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence



from workloads.acceptance.expected import (DEEPEP_REFERENCE, EXPECTED, Family, Figure, expected)
from workloads.acceptance.parsers import (load_fabric_bench, parse_deepep)


# --- comparison ----------------------------------------------------------------------------------------

THRESHOLD = 0.8
"""Share of its figure a measured series must reach (``compare``'s default)."""


def floor_of(fig: Figure, threshold: float = THRESHOLD) -> float:
    """The busbw a series is held to: ``threshold`` x its figure (the GPU burn-in uses it too)."""
    return round(threshold * fig.busbw, 2)


def _peak(series: Mapping[str, Any]) -> dict[str, Any]:
    return max(series["sizes"], key=lambda s: s["busbw"])


def _host(doc: Mapping[str, Any], node: int) -> str:
    m = doc["machine"]
    return (m.get("node_name_of_node", {}).get(str(node)) or m.get("hostname_of_node", {}).get(str(node))
            or f"node {node}")


def _label(series: Mapping[str, Any]) -> str:
    where = f"node {series['node']}" if series["scope"] == "node" else f"{series['scope']} ({series['ranks']} ranks)"
    return f"{where} {series['op']}"


def _deepep_check(records: list[dict], gpus: int, relative: float) -> dict[str, Any]:
    """Per phase, kernel and EP size: the median SO (across nodes) or SU (within a node) GB/s, and the
    ranks below ``relative`` x that median, by node."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["phase"] or ("intranode" if r["ranks"] <= gpus else "internode"), r["kernel"],
                           r["ranks"]), []).append(r)
    checks, slow = [], []
    for (phase, kernel, ranks), rs in sorted(groups.items()):
        metric = "su_gbs" if ranks <= gpus else "so_gbs"
        med = statistics.median(r[metric] for r in rs)
        low = [r for r in rs if r[metric] < relative * med]
        checks.append({"phase": phase, "kernel": kernel, "ranks": ranks, "metric": metric.removesuffix("_gbs").upper(),
                       "median_gbs": med, "min_gbs": min(r[metric] for r in rs), "count": len(rs),
                       "ok": not low})
        for r in low:
            slow.append({"phase": phase, "kernel": kernel, "rank": r["rank"], "ranks": ranks,
                         "node": r["node"] if r["node"] is not None else f"node {r['rank'] // gpus}",
                         "gbs": r[metric], "median_gbs": med})
    return {"checks": checks, "slow": slow, "ok": not slow, "reference": DEEPEP_REFERENCE}


def compare(results: str | Mapping[str, Any], family: str | Family, threshold: float = THRESHOLD,
            relative: float = 0.8, deepep: str | Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The acceptance report of a fabric_bench document against ``family``'s figures.

    A series or pair fails below ``threshold`` x its figure (figures that are derived, not measured,
    only warn: ``advisory``), or below ``relative`` x the pool's median of its peers (nodes against
    nodes, pairs against pairs), or with wrong results. A node is named slow when its own NVLink test
    fails, or when most of its pairs (at least two) fail; a failing pair not explained by a slow node
    is a slow link. ``deepep``: DeepEP test_ep output (text or ``parse_deepep`` records), checked
    rank against the median of its kernel."""
    doc = load_fabric_bench(results)
    fam = EXPECTED[family] if isinstance(family, str) else family
    world = doc["world"]
    nodes_n, gpus = int(world["nodes"]), int(world.get("ranks_per_node") or fam.gpus)
    nvls = (doc["machine"].get("env") or {}).get("NCCL_NVLS_ENABLE", "1") != "0"
    checks: list[dict] = []
    curves: list[dict] = []
    node_rows: dict[int, dict] = {}

    def check(what: str, scope: str, op: str, measured: dict, fig: Figure, span_nodes: int) -> dict:
        floor = floor_of(fig, threshold)
        ok = measured["busbw"] >= floor
        return {"what": what, "scope": scope, "op": op, "nodes": span_nodes, "measured": measured["busbw"],
                "at_bytes": measured["bytes"], "expected": fig.busbw, "expected_at_bytes": fig.at_bytes,
                "floor": floor, "source": fig.source, "derivation": fig.derivation, "derived": fig.derived,
                "ok": ok, "advisory": fig.derived, "wrong": measured.get("wrong", 0)}

    by_node_op: dict[str, list[tuple[int, float]]] = {}
    for s in doc["results"]:
        span = 1 if s["scope"] == "node" else len(s.get("nodes") or range(nodes_n))
        fig = expected(fam, "node" if span == 1 else "world", s["op"], span, gpus, nvls=nvls)
        peak = _peak(s)
        wrong = sum(p["wrong"] for p in s["sizes"])
        c = check(_label(s), s["scope"], s["op"], {**peak, "wrong": wrong}, fig, span)
        if s["scope"] == "node":
            k = int(s["node"])
            c["node"], c["host"] = k, s.get("host") or _host(doc, k)
            by_node_op.setdefault(s["op"], []).append((k, peak["busbw"]))
        checks.append(c)
        curves.append({"label": _label(s), "scope": s["scope"], "op": s["op"], "node": s.get("node"),
                       "points": [[p["bytes"], p["busbw"]] for p in s["sizes"]],
                       "floor": c["floor"], "expected": fig.busbw, "ok": (c["ok"] or c["advisory"]) and not wrong})

    slow_nodes: dict[int, list[str]] = {}
    for c in checks:
        if c["scope"] == "node":
            k = c["node"]
            row = node_rows.setdefault(k, {"node": k, "host": c["host"], "ok": True, "why": []})
            row[c["op"]] = c["measured"]
            if c["wrong"]:
                row["why"].append(f"{c['op']}: {c['wrong']} wrong elements")
            if not c["ok"] and not c["advisory"]:
                row["why"].append(f"{c['op']} {c['measured']:.1f} GB/s < floor {c['floor']:g} "
                                  f"({threshold:g} x {c['expected']:g})")
    for op, vals in by_node_op.items():
        if len(vals) >= 3:
            med = statistics.median(v for _, v in vals)
            for k, v in vals:
                if v < relative * med:
                    node_rows[k]["why"].append(f"{op} {v:.1f} GB/s < {relative:g} x the pool's node median {med:.1f}")
    for k, row in node_rows.items():
        row["ok"] = not row["why"]
        if row["why"]:
            slow_nodes[k] = list(row["why"])

    pair_rows: list[dict] = []
    pairs = doc["pairs"]
    if pairs:
        fig = expected(fam, "pairs", "all_reduce", 2, gpus)
        floor = round(threshold * fig.busbw, 2)
        med = statistics.median(p["busbw"] for p in pairs)
        for p in pairs:
            why = []
            if p["wrong"]:
                why.append(f"{p['wrong']} wrong elements")
            if p["busbw"] < floor and not fig.derived:
                why.append(f"{p['busbw']:.1f} GB/s < floor {floor:g} ({threshold:g} x {fig.busbw:g})")
            if len(pairs) >= 3 and p["busbw"] < relative * med:
                why.append(f"{p['busbw']:.1f} GB/s < {relative:g} x the pool's pair median {med:.1f}")
            a, b = p["nodes"]
            pair_rows.append({"nodes": [a, b], "hosts": p.get("hosts") or [_host(doc, a), _host(doc, b)],
                              "busbw": p["busbw"], "bytes": p["bytes"], "ok": not why, "why": why,
                              "advisory": fig.derived and p["busbw"] < floor})
        checks.append({"what": f"pairs all_reduce ({len(pairs)} pairs, median)", "scope": "pairs", "op": "all_reduce",
                       "nodes": 2, "measured": med, "at_bytes": pairs[0]["bytes"], "expected": fig.busbw,
                       "expected_at_bytes": fig.at_bytes, "floor": floor, "source": fig.source,
                       "derivation": fig.derivation, "derived": fig.derived, "ok": med >= floor,
                       "advisory": fig.derived, "wrong": sum(p["wrong"] for p in pairs)})
        # A node in most of its pairs' failures (at least two) is the slow one; the rest are links.
        fails: dict[int, int] = {}
        total: dict[int, int] = {}
        for r in pair_rows:
            for n in r["nodes"]:
                total[n] = total.get(n, 0) + 1
                fails[n] = fails.get(n, 0) + (not r["ok"])
        for n in sorted(total):
            if fails.get(n, 0) >= 2 and fails[n] * 2 > total[n]:
                slow_nodes.setdefault(n, []).append(f"{fails[n]} of its {total[n]} pairs fail")
    slow_pairs = [{"nodes": r["nodes"], "hosts": r["hosts"], "busbw": r["busbw"], "why": r["why"],
                   "cause": ("node " + ", ".join(str(n) for n in r["nodes"] if n in slow_nodes))
                   if any(n in slow_nodes for n in r["nodes"]) else "link"}
                  for r in pair_rows if not r["ok"]]

    dep = None
    if deepep is not None:
        records = parse_deepep(deepep) if isinstance(deepep, str) else list(deepep)
        dep = _deepep_check(records, gpus, relative) if records else {"checks": [], "slow": [], "ok": False,
                                                                      "error": "no DeepEP bandwidth lines found"}
    failed = [c for c in checks if (not c["ok"] and not c["advisory"]) or c["wrong"]]
    ok = not failed and not slow_nodes and not slow_pairs and (dep is None or dep["ok"])
    return {
        "format": "fabric-acceptance/1", "family": fam.name, "gpu": fam.gpu, "ok": ok,
        "synthetic": bool(doc.get("synthetic")), "threshold": threshold, "relative": relative,
        "machine": {k: v for k, v in doc["machine"].items() if k in ("gpu", "nccl", "torch", "cuda", "source")},
        "world": {k: world.get(k) for k in ("ranks", "nodes", "ranks_per_node")},
        "checks": checks, "failed": [c["what"] for c in failed],
        "warnings": [f"{c['what']}: {c['measured']:.1f} GB/s below the derived floor {c['floor']:.1f}"
                     for c in checks if c["advisory"] and not c["ok"]],
        "nodes": [node_rows[k] for k in sorted(node_rows)],
        "pairs": pair_rows,
        "slow_nodes": [{"node": k, "host": _host(doc, k) if k not in node_rows else node_rows[k]["host"], "why": w}
                       for k, w in sorted(slow_nodes.items())],
        "slow_pairs": slow_pairs,
        "deepep": dep,
        "curves": curves,
    }

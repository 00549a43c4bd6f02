"""The acceptance report as an SVG: bandwidth by message size against the threshold, per node and pair."""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping
from xml.sax.saxutils import escape



from workloads.acceptance.expected import (GIB)


# --- the plot ----------------------------------------------------------------------------------------

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def _fmt_bytes(n: float) -> str:
    for unit, div in (("G", GIB), ("M", 1024 ** 2), ("K", 1024)):
        if n >= div:
            v = n / div
            return f"{v:g}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{int(n)}"


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * exp >= v:
            return m * exp
    return 10 * exp


def _line_panel(curves: list[dict], x0: float, y0: float, w: float, h: float, legend_x: float) -> list[str]:
    xs = [p[0] for c in curves for p in c["points"]]
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    hi = hi if hi > lo else lo + 1
    ymax = _nice_max(1.05 * max([p[1] for c in curves for p in c["points"]] + [c["floor"] for c in curves] + [1e-9]))

    def X(b: float) -> float:
        return x0 + (math.log2(b) - lo) / (hi - lo) * w

    def Y(v: float) -> float:
        return y0 + h - v / ymax * h

    out = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    for i in range(6):
        v = ymax * i / 5
        out.append(f'<line x1="{x0}" y1="{Y(v):.1f}" x2="{x0 + w}" y2="{Y(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{Y(v) + 4:.1f}" text-anchor="end" font-size="11">{v:g}</text>')
    step = max(1, math.ceil((hi - lo) / 8))
    e = math.ceil(lo)
    while e <= hi:
        out.append(f'<text x="{X(2 ** e):.1f}" y="{y0 + h + 16}" text-anchor="middle" font-size="11">'
                   f'{_fmt_bytes(2 ** e)}</text>')
        e += step
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 34}" text-anchor="middle" font-size="12">message size (bytes, '
               f'log scale)</text>')
    out.append(f'<text x="{x0 - 44}" y="{y0 + h / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 {x0 - 44} {y0 + h / 2})">bus bandwidth (GB/s)</text>')
    floors: dict[float, str] = {}
    for i, c in enumerate(curves):
        color = _COLORS[i % len(_COLORS)]
        pts = " ".join(f"{X(b):.1f},{Y(v):.1f}" for b, v in c["points"])
        dash = "" if c["ok"] else ' stroke-dasharray="2 2"'
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for b, v in c["points"]:
            out.append(f'<circle cx="{X(b):.1f}" cy="{Y(v):.1f}" r="2.5" fill="{color}"/>')
        floors.setdefault(c["floor"], color)
        ly = y0 + 12 + 30 * i
        out.append(f'<line x1="{legend_x}" y1="{ly - 4}" x2="{legend_x + 20}" y2="{ly - 4}" stroke="{color}" '
                   f'stroke-width="2"/>')
        out.append(f'<text x="{legend_x + 26}" y="{ly}" font-size="11">{escape(c["label"])}</text>')
        out.append(f'<text x="{legend_x + 26}" y="{ly + 13}" font-size="10" fill="{"#333" if c["ok"] else "#d62728"}">'
                   f'floor {c["floor"]:g} GB/s{"" if c["ok"] else ": FAIL"}</text>')
    for floor, color in floors.items():
        out.append(f'<line x1="{x0}" y1="{Y(floor):.1f}" x2="{x0 + w}" y2="{Y(floor):.1f}" stroke="{color}" '
                   f'stroke-dasharray="6 4" stroke-width="1.2"/>')
    return out


def _bar_panel(title: str, bars: list[tuple[str, float, bool]], floor: float | None, x0: float, y0: float,
               w: float, h: float) -> list[str]:
    ymax = _nice_max(1.05 * max([v for _, v, _ in bars] + [floor or 0, 1e-9]))
    out = [f'<text x="{x0}" y="{y0 - 8}" font-size="13" font-weight="bold">{escape(title)}</text>',
           f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    for i in range(6):
        v = ymax * i / 5
        y = y0 + h - v / ymax * h
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{v:g}</text>')
    slot = w / max(1, len(bars))
    for i, (label, v, ok) in enumerate(bars):
        bh = v / ymax * h
        x = x0 + i * slot + slot * 0.15
        cx = x + slot * 0.35
        out.append(f'<rect x="{x:.1f}" y="{y0 + h - bh:.1f}" width="{slot * 0.7:.1f}" height="{bh:.1f}" '
                   f'fill="{"#2ca02c" if ok else "#d62728"}"><title>{escape(label)}: {v:g} GB/s</title></rect>')
        if len(bars) <= 64:
            out.append(f'<text x="{cx:.1f}" y="{y0 + h + 12}" text-anchor="end" font-size="9" '
                       f'transform="rotate(-45 {cx:.1f} {y0 + h + 12})">{escape(label)}</text>')
    if floor:
        y = y0 + h - floor / ymax * h
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#d62728" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{x0 + w - 4}" y="{y - 4:.1f}" text-anchor="end" font-size="11" fill="#d62728">'
                   f'floor {floor:g} GB/s</text>')
    return out


def _plotted(curves: list[dict]) -> list[dict]:
    """What the line chart shows: every series over several nodes; of the per-node series, per op the
    median node (when there are several) and each failing node."""
    out = [c for c in curves if c.get("scope") != "node"]
    by_op: dict[str, list[dict]] = {}
    for c in curves:
        if c.get("scope") == "node":
            by_op.setdefault(c["op"], []).append(c)
    for op, cs in by_op.items():
        if len(cs) == 1:
            out.append(cs[0])
            continue
        sizes = [b for b, _ in cs[0]["points"]]
        med = [[b, statistics.median(dict(map(tuple, c["points"])).get(b, 0.0) for c in cs)] for b in sizes]
        out.append({"label": f"median node {op} ({len(cs)} nodes)", "scope": "node", "op": op, "points": med,
                    "floor": cs[0]["floor"], "ok": True})
        out += [c for c in cs if not c["ok"]]
    return out


def _short(host: str) -> str:
    return host.split(".")[0]


def _wrap(text: str, width: int = 130) -> list[str]:
    words, lines, cur = text.split(" "), [], ""
    for word in words:
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = "    " + word
        else:
            cur = f"{cur} {word}" if cur else word
    return lines + [cur]


def plot_svg(report: Mapping[str, Any]) -> str:
    """The report as a standalone SVG: bus bandwidth against message size with each series' floor
    (dashed), then bars per node (all-reduce within the node) and per pair of nodes, then what failed."""
    W, left, pw, ph = 1000, 80, 640, 300
    parts: list[str] = []
    y = 64
    title = (f"Fabric acceptance, {report['family']} ({report['gpu']}): {'PASS' if report['ok'] else 'FAIL'}; "
             f"{report['world'].get('nodes')} nodes x {report['world'].get('ranks_per_node')} GPUs, "
             f"NCCL {report['machine'].get('nccl') or '?'}")
    parts.append(f'<text x="{left}" y="28" font-size="16" font-weight="bold">{escape(title)}</text>')
    if report.get("synthetic"):
        parts.append(f'<text x="{left}" y="46" font-size="12" fill="#d62728">SYNTHETIC DATA: not a measurement</text>')
    curves = [c for c in _plotted(list(report["curves"])) if c["points"]]
    if curves:
        parts += _line_panel(curves, left, y, pw, ph, left + pw + 20)
        y += max(ph, 30 * len(curves)) + 70
    node_bars = [(f"{n['node']} {_short(n['host'])}", n.get("all_reduce", 0.0), n["ok"]) for n in report["nodes"]
                 if "all_reduce" in n]
    if node_bars:
        floor = next((c["floor"] for c in report["checks"] if c["scope"] == "node" and c["op"] == "all_reduce"), None)
        parts += _bar_panel("all-reduce within each node (NVLink)", node_bars, floor, left, y, pw, 160)
        y += 160 + 110
    if report["pairs"]:
        floor = next((c["floor"] for c in report["checks"] if c["scope"] == "pairs"), None)
        bars = [(f"{p['nodes'][0]}-{p['nodes'][1]}", p["busbw"], p["ok"]) for p in report["pairs"]]
        parts += _bar_panel("all-reduce over each pair of nodes (EFA)", bars, floor, left, y, pw, 160)
        y += 160 + 60
    lines = [f"slow node {s['node']} ({s['host']}): {'; '.join(s['why'])}" for s in report["slow_nodes"]]
    lines += [f"slow pair {p['nodes'][0]}-{p['nodes'][1]} ({p['cause']}): {'; '.join(p['why'])}"
              for p in report["slow_pairs"]]
    lines += [f"{w} (derived figure: warning only)" for w in report.get("warnings", [])]
    if report.get("deepep"):
        lines += [f"DeepEP {s['phase']} {s['kernel']} rank {s['rank']}/{s['ranks']} on {s['node']}: {s['gbs']} GB/s "
                  f"(median {s['median_gbs']:g})" for s in report["deepep"]["slow"]]
    for text in [ln for line in lines[:40] for ln in _wrap(line)]:
        parts.append(f'<text x="{left}" y="{y}" font-size="12" fill="#d62728">{escape(text)}</text>')
        y += 16
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{y + 20}" viewBox="0 0 {W} {y + 20}" '
            f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(parts)
            + "\n</svg>\n")

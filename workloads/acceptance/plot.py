"""The acceptance report as an SVG, drawn with matplotlib: bus bandwidth by message size against each
series' floor, then bars per node (all-reduce within the node) and per pair of nodes against theirs,
then what failed.

Guarantees: the title says PASS or FAIL, the family, GPU, world and NCCL version; synthetic data says
so; every axis has ticks and a label with its unit, every legend is outside its plot area; failing
series are dotted and failing bars red. The same report gives byte-identical SVG (``SVG_STYLE``,
no date; the settings ``bench.plots.STYLE`` also uses, which this layer cannot import). matplotlib is
imported only by ``plot_svg``. Plot areas, series, floors and bars carry ``gid``s (``PANEL``,
``CURVE``, ``FLOOR``, ``BAR``) that tests find them by.
"""

from __future__ import annotations

import io
import statistics
from typing import TYPE_CHECKING, Any, Mapping

from workloads.acceptance.expected import GIB

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

SVG_STYLE = {"svg.hashsalt": "moe-rl-platform", "svg.fonttype": "none", "axes.axisbelow": True,
             "axes.grid": True, "grid.color": "#eeeeee", "legend.frameon": False}
"""On top of matplotlib's own defaults: SVG ids from a fixed salt, text as ``<text>`` elements."""
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
OK_COLOUR, FAIL_COLOUR = "#2ca02c", "#d62728"
PANEL, CURVE, FLOOR, BAR = "panel", "curve", "floor", "bar"
"""``gid`` prefixes: ``panel:<lines|nodes|pairs>``, ``curve:<label>``, ``floor:<GB/s>``,
``bar:<label>:<ok|FAIL>``."""
WIDTH, LINE_H, BAR_H, NOTE_H = 10.0, 3.2, 2.2, 0.17
"""Figure width and panel heights, inches (notes: per line)."""
MAX_BAR_LABELS = 64
"""Above this many bars their tick labels are left out (they would overlap)."""


def _fmt_bytes(n: float, _pos: object = None) -> str:
    for unit, div in (("G", GIB), ("M", 1024 ** 2), ("K", 1024)):
        if n >= div:
            v = n / div
            return f"{v:g}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{int(n)}"


def _outside(ax: Axes, name: str, **kwargs: Any) -> None:
    """The legend just right of the plot area, ``gid`` ``legend:<name>``."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), **kwargs).set_gid(f"legend:{name}")


def _line_panel(ax: Axes, curves: list[dict]) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.set_gid(f"{PANEL}:lines")
    floors: dict[float, str] = {}
    for i, c in enumerate(curves):
        colour = _COLORS[i % len(_COLORS)]
        ax.plot([b for b, _ in c["points"]], [v for _, v in c["points"]], color=colour, linewidth=2, marker="o",
                markersize=3, linestyle="-" if c["ok"] else ":", gid=f"{CURVE}:{c['label']}",
                label=f"{c['label']}\nfloor {c['floor']:g} GB/s{'' if c['ok'] else ': FAIL'}")
        floors.setdefault(c["floor"], colour)
    for floor, colour in floors.items():
        ax.axhline(floor, color=colour, linestyle=(0, (6, 4)), linewidth=1.2, gid=f"{FLOOR}:{floor:g}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=10))
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt_bytes))
    ax.set_ylim(0, 1.05 * max([v for c in curves for _, v in c["points"]] + list(floors) + [1e-9]))
    ax.set(title="bus bandwidth by message size (dashed: each series' floor)",
           xlabel="message size (bytes, log scale)", ylabel="bus bandwidth (GB/s)")
    _outside(ax, "series", fontsize=8)


def _bar_panel(ax: Axes, name: str, title: str, xlabel: str, bars: list[tuple[str, float, bool]],
               floor: float | None) -> None:
    from matplotlib.patches import Patch
    ax.set_gid(f"{PANEL}:{name}")
    for i, (label, v, ok) in enumerate(bars):
        ax.bar(i, v, 0.7, color=OK_COLOUR if ok else FAIL_COLOUR, gid=f"{BAR}:{label}:{'ok' if ok else 'FAIL'}")
    ax.set_xticks(range(len(bars)), [b[0] for b in bars] if len(bars) <= MAX_BAR_LABELS else [],
                  rotation=45, ha="right", fontsize=8)
    ax.grid(False, axis="x")
    ax.set_ylim(0, 1.05 * max([v for _, v, _ in bars] + [floor or 0, 1e-9]))
    handles = [Patch(color=OK_COLOUR, label="meets its figures"), Patch(color=FAIL_COLOUR, label="FAIL")]
    if floor:
        handles.insert(0, ax.axhline(floor, color=FAIL_COLOUR, linestyle=(0, (6, 4)), gid=f"{FLOOR}:{floor:g}",
                                     label=f"floor {floor:g} GB/s"))
    ax.set(title=title, xlabel=xlabel, ylabel="bus bandwidth (GB/s)")
    _outside(ax, name, handles=handles)


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


def _failures(report: Mapping[str, Any]) -> list[str]:
    lines = [f"slow node {s['node']} ({s['host']}): {'; '.join(s['why'])}" for s in report["slow_nodes"]]
    lines += [f"slow pair {p['nodes'][0]}-{p['nodes'][1]} ({p['cause']}): {'; '.join(p['why'])}"
              for p in report["slow_pairs"]]
    lines += [f"{w} (derived figure: warning only)" for w in report.get("warnings", [])]
    if report.get("deepep"):
        lines += [f"DeepEP {s['phase']} {s['kernel']} rank {s['rank']}/{s['ranks']} on {s['node']}: {s['gbs']} GB/s "
                  f"(median {s['median_gbs']:g})" for s in report["deepep"]["slow"]]
    return [ln for line in lines[:40] for ln in _wrap(line)]


def plot_svg(report: Mapping[str, Any]) -> str:
    """The report as a standalone SVG: bus bandwidth against message size with each series' floor
    (dashed), then bars per node (all-reduce within the node) and per pair of nodes, then what failed."""
    import matplotlib.style
    from matplotlib.figure import Figure
    curves = [c for c in _plotted(list(report["curves"])) if c["points"]]
    node_bars = [(f"{n['node']} {_short(n['host'])}", n.get("all_reduce", 0.0), n["ok"]) for n in report["nodes"]
                 if "all_reduce" in n]
    pair_bars = [(f"{p['nodes'][0]}-{p['nodes'][1]}", p["busbw"], p["ok"]) for p in report["pairs"]]
    notes = _failures(report)
    panels = ([("lines", max(LINE_H, 0.42 * len(curves)))] if curves else []) + \
             ([("nodes", BAR_H)] if node_bars else []) + ([("pairs", BAR_H)] if pair_bars else []) + \
             ([("notes", NOTE_H * len(notes) + 0.2)] if notes else [])
    title = (f"Fabric acceptance, {report['family']} ({report['gpu']}): {'PASS' if report['ok'] else 'FAIL'}; "
             f"{report['world'].get('nodes')} nodes x {report['world'].get('ranks_per_node')} GPUs, "
             f"NCCL {report['machine'].get('nccl') or '?'}")
    with matplotlib.style.context(["default", SVG_STYLE]):
        fig = Figure(figsize=(WIDTH, 0.9 + sum(h for _, h in panels)), layout="constrained")
        fig.suptitle(title + ("\nSYNTHETIC DATA: not a measurement" if report.get("synthetic") else ""),
                     fontweight="bold")
        axes = fig.subplots(len(panels) or 1, 1, squeeze=False,
                            height_ratios=[h for _, h in panels] or None)[:, 0]
        for ax, (name, _) in zip(axes, panels):
            if name == "lines":
                _line_panel(ax, curves)
            elif name == "nodes":
                floor = next((c["floor"] for c in report["checks"] if c["scope"] == "node" and c["op"] == "all_reduce"), None)
                _bar_panel(ax, name, "all-reduce within each node (NVLink)", "node", node_bars, floor)
            elif name == "pairs":
                floor = next((c["floor"] for c in report["checks"] if c["scope"] == "pairs"), None)
                _bar_panel(ax, name, "all-reduce over each pair of nodes (EFA)", "pair of nodes", pair_bars, floor)
            else:
                ax.set_axis_off()
                ax.text(0, 1, "\n".join(notes), va="top", fontsize=9, color=FAIL_COLOUR, gid=f"{PANEL}:notes")
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()

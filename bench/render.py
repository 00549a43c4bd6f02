"""``report.md`` and the SVG plots from the figures (``figures.compute``) and the checked attempts.

Guarantees: a ratio is printed with its interval and with what the repeats say about noise; a
share of the gain is printed only when the whole gain is beyond that noise; different amounts of
work between arms are stated; artifacts marked as simulated say so in the report's first line.
The plots are plain SVG (no plotting library, so ``report`` stays light): ticks on both axes, the
legend in the right margin outside the data, a dash pattern per repeat, the warm-up band, and fault
labels staggered so they do not overlap: throughput per step per arm and repeat, cost per million
tokens per arm (whole attempt and steady state), and a timeline per fault.
"""

from __future__ import annotations

import math
from datetime import datetime
from html import escape

from .artifacts import Collected
from .checks import TOKENS

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
W, H = 860, 360


def _num(x: float | None, fmt: str = ",.1f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _ratio(r: dict) -> str:
    lo, hi = r["ci95"]
    noise = ("noise between repeats unknown (one repeat)" if r["repeat_noise"] is None else
             f"repeat noise {100 * r['repeat_noise']:.1f}%: " +
             ("beyond the noise" if r["beyond_noise"] else "NOT beyond the noise"))
    return f"{r['value']:.3f}x (95% CI {lo:.3f}-{hi:.3f}; {noise})"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"] \
        + ["| " + " | ".join(r) + " |" for r in rows]


def _evidence(ev: dict) -> str:
    asked, got = ev["asked"], ev["sglang_resolved"]
    parts = []
    for key in ("moe_a2a_backend", "moe_runner_backend", "deepep_mode", "deepep_v2_mode"):
        if asked.get(key) or got.get(key):
            parts.append(f"{key} asked {asked.get(key) or '(default)'}, resolved "
                         f"{'/'.join(got.get(key) or []) or 'not logged'}")
    gin = ev["nccl_gin"]
    parts.append(f"NCCL network {'/'.join(ev['nccl_network']) or 'not logged (NCCL_DEBUG=INFO)'} for fabric "
                 f"{asked.get('fabric')}; GIN {'initialised' if gin == [True] else 'not logged' if gin == [False] else 'in some repeats'}")
    return "; ".join(parts)


def _repeat_rows(rows: list[dict]) -> list[list[str]]:
    out = []
    for r in rows:
        e2e, parts = r["end_to_end"] or {}, r["step_parts_s"]
        out.append([str(r["block"]), r["attempt"], f"{r['measured_steps']} (from step {r['first_step']})",
                    f"{r['rollout_tokens_per_s']:,.0f}", _num(e2e.get("tokens_per_s"), ",.0f"),
                    _num(parts["step"]), _num(parts["update_weights"]), f"{r['jct_s']:,.0f}",
                    _num(r["cost_usd"], ",.2f"), _num(r["usd_per_million_tokens"], ",.3f"),
                    _num(r["steady_usd_per_million_tokens"], ",.3f"), r["mode"]])
    return out


REPEAT_HEAD = ["block", "attempt", "measured steps", "rollout tokens/s (median)", "end-to-end tokens/s", "step s",
               "weight sync s", "JCT s", "$", "$ / M tokens (attempt)", "$ / M tokens (steady)", "mode"]


def markdown(report: dict, simulated: str | None) -> str:
    out = []
    if simulated:
        out += [f"**Made by the simulator, not measured: {simulated}**", ""]
    out += [f"# Benchmark {report['experiment']}", "",
            f"Baseline arm `{report['baseline']}`; {report['warmup_steps']} warm-up steps left out (counted from "
            f"each attempt's first step), {report['measured_steps']} measured steps planned per attempt (at least "
            f"{report['min_measured_steps']} required), {report['repeats']} repeats in {report['order']} blocks: "
            f"{' '.join(report['schedule'])}.", "",
            f"Tokens: {report['token_definition']}. Prices: {report['price_source']} (each figure's source is "
            f"listed under \"Price basis\"). Nodes: {report['node_sets']}.", "",
            "## Arms", ""]
    rows = []
    for name, a in report["arms"].items():
        t, parts, q = a["rollout_tokens_per_s"], a["step_parts_s"], a["quality"]
        rows.append([name, "/".join(a["mode"]), f"{t['median']:,.0f} ({t['iqr'][0]:,.0f}-{t['iqr'][1]:,.0f})",
                     _num(a["end_to_end_tokens_per_s"], ",.0f"), _num(a["end_to_end_samples_per_s"], ",.2f"),
                     _num(parts["step"]), _num(parts["train_wait"]), _num(parts["train"]),
                     _num(parts["update_weights"]), _num(q["mean_reward"], ".3f"), _num(q["kl"], ".5f"),
                     _num(q["truncated_ratio"], ".3f"), _num(a["mean_response_len"], ",.0f"),
                     _num(a["jct_s"]["median"], ",.0f"), _num(a["cost_usd"], ",.2f"),
                     _num(a["usd_per_million_tokens"], ",.3f"), _num(a["steady_usd_per_million_tokens"], ",.3f")])
    out += _table(["arm", "mode", "rollout tokens/s (median, IQR)", "end-to-end tokens/s", "samples/s", "step s",
                   "train wait s", "train s", "weight sync s", "mean reward", "KL", "truncated", "response len",
                   "JCT s", "$ / attempt", "$ / M tokens (attempt)", "$ / M tokens (steady)"], rows)
    out += ["", "End to end: tokens and samples trained per wall-clock second over the measured steps. $ / M tokens "
                "(attempt): the whole attempt's node time (start-up included) per generated token; (steady): the "
                "nodes' price x their number / end-to-end tokens per second.", "", "## Per repeat", ""]
    for name, a in report["arms"].items():
        out += [f"### {name}", ""] + _table(REPEAT_HEAD, _repeat_rows(a["per_repeat"])) + [""]
    util = [(n, rl, u) for n, a in report["arms"].items() for rl, u in (a["utilisation_measured_window"] or {}).items()]
    if util:
        out += ["## Utilisation over the measured steps (Container Insights, per role)", ""]
        out += _table(["arm", "role", "GPU util %", "EFA rx+tx Gbit/s/node", "RDMA read Gbit/s/node",
                       "RDMA write Gbit/s/node"], [[n, rl, _num(u["gpu_util"]), _num(u["efa_gbps"], ",.2f"),
                                                   _num(u["rdma_read_gbps"], ",.2f"), _num(u["rdma_write_gbps"], ",.2f")]
                                                  for n, rl, u in util]) + [""]
    out += ["## Evidence per arm (from the logs)", ""]
    out += [f"- `{n}`: {_evidence(a['evidence'])}." for n, a in report["arms"].items()]
    out += ["", "## Price basis", ""] + [f"- `{n}`: {'; '.join(a['price_basis'])}." for n, a in report["arms"].items()]
    out += ["", "## Against the baseline", ""]
    for name, a in report["arms"].items():
        if "ratio_vs_baseline" not in a:
            continue
        r = a["ratio_vs_baseline"]
        blocks = ", ".join(f"block {b}: {v:.3f}x" for b, v in r["per_block"].items())
        out.append(f"- `{name}`: rollout throughput {_ratio(r)}; {blocks}.")
        w = a["work_vs_baseline"]
        if w and w["different"]:
            out.append(f"  Different work: mean response length {100 * w['relative']:+.1f}% against the baseline. "
                       f"Throughput in tokens/s still compares, but step time and cost per step do not: longer "
                       f"responses hold the engines longer per step (the step waits for its longest sample) "
                       f"and fill the KV cache sooner.")
        if a["mode_vs_baseline"]:
            out.append(f"  Different mode: {a['mode_vs_baseline']}.")
    out += ["", f"Interval: {next(iter(a['ratio_vs_baseline']['method'] for a in report['arms'].values() if 'ratio_vs_baseline' in a), '')} "
                f"(one value per repeat: the median of its measured steps; BENCHMARKS.md measures its coverage)."]
    d = report["decomposition"]
    if d:
        out += ["", "## Where the gain comes from", "",
                f"Whole gain `{d['whole']['from']}` -> `{d['whole']['to']}`: {_ratio(d['whole']['ratio'])}.", ""]
        for link in d["links"]:
            share = "withheld" if link["share"] is None else f"{100 * link['share']:.0f}% of the gain"
            changes = ", ".join(f"{k}: {v[0]} -> {v[1]}" for k, v in link["changes"].items()) or "nothing"
            out.append(f"- {link['name']} (`{link['from']}` -> `{link['to']}`): {_ratio(link['ratio'])}; "
                       f"{share}. Changes: {changes}.")
        if d["shares_withheld_because"]:
            out.append(f"\nShares withheld: {d['shares_withheld_because']}.")
        out.append(f"\nMethod: {d['method']}.")
    if report["faults"]:
        out += ["", "## Faults", "", "| arm | attempt | fault | at step | detection s | back to steady s | "
                "steps lost | tokens lost | outcome (RayJob status) | resumed from |",
                "|---|---|---|---:|---:|---:|---:|---:|---|---|"]
        for arm, attempts in report["faults"].items():
            for folder, faults in attempts.items():
                for f in faults:
                    if "error" in f:
                        out.append(f"| {arm} | {folder} | {f['kind']} | {f.get('step')} | {f['error']} |||| "
                                   f"{f.get('outcome', '')} | {f.get('resumed_from', '')} |")
                        continue
                    out.append(f"| {arm} | {folder} | {f['kind']} | {f['step']} | {_num(f['detection_s'])} | "
                               f"{_num(f['back_to_steady_s'])} | {f['steps_lost']} | {f['tokens_lost']:,} | "
                               f"{f['outcome']} | {f['resumed_from']} (step {f['resumed_at_step']}) |")
        out += ["", "Fault attempts, per repeat:", ""] + _table(REPEAT_HEAD, _repeat_rows(
            list(report["fault_attempts"].values())))
    if report.get("serving"):
        out += ["", "## Fixed-workload rollout (sglang bench_serving)", "",
                "| arm | attempt | at step | TTFT p50 / p99 ms | TPOT p50 / p99 ms | ITL p50 / p99 ms | output tok/s |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for arm, attempts in report["serving"].items():
            for folder, r in attempts.items():
                if not r or "error" in r:
                    out.append(f"| {arm} | {folder} | | {(r or {}).get('error', 'no serving.json')} ||||")
                    continue
                out.append(f"| {arm} | {folder} | {r.get('startedAtStep')} | "
                           + " | ".join(f"{r[f'median_{k}_ms']:.1f} / {r[f'p99_{k}_ms']:.1f}" for k in ("ttft", "tpot", "itl"))
                           + f" | {r['output_throughput']:,.0f} |")
    notes = [f"`{n}`: {a['malformed_perf_lines']} malformed perf lines skipped" for n, a in report["arms"].items()
             if a["malformed_perf_lines"]]
    notes += [f"`{n}`: Ray's log deduplication collapsed {a['lines_collapsed_by_ray_dedup']} lines (set "
              f"RAY_DEDUP_LOGS=0 in the run's environment)" for n, a in report["arms"].items()
              if a["lines_collapsed_by_ray_dedup"]]
    if notes:
        out += ["", "## Log notes", ""] + [f"- {n}" for n in notes]
    out += ["", "Plots: `throughput.svg`, `cost.svg`" + (", `faults.svg`" if report["faults"] else "") + "."]
    return "\n".join(out) + "\n"


DASHES = ("", "7,3", "2,2", "9,3,2,3", "4,4")
"""One dash pattern per repeat, so repeats of an arm are told apart."""
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 32, 48
"""Plot margins; the legend sits in the right margin, outside the data."""


def _ticks(top: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(top / step)) + 1)]


class _Plot:
    """Axes with ticks from x0..x1 and 0..y1, and a legend outside the plot area."""

    def __init__(self, title: str, xlabel: str, ylabel: str, x0: float, x1: float, y1: float,
                 xticks: bool = True):
        self.xt, self.yt = [x0 + t for t in _ticks(x1 - x0, 6)], _ticks(y1)
        self.x0, self.x1, self.y1 = x0, max(self.xt[-1], x0 + 1), self.yt[-1]
        self.out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
                    f'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
                    f'<text x="{(LEFT + W - RIGHT) / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>',
                    f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle">{escape(xlabel)}</text>',
                    f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" text-anchor="middle">'
                    f'{escape(ylabel)}</text>']
        for t in self.yt:
            _, y = self.xy(self.x0, t)
            self.out += [f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#e5e5e5"/>',
                         f'<line x1="{LEFT - 4}" y1="{y:.1f}" x2="{LEFT}" y2="{y:.1f}" stroke="black"/>',
                         f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{t:,.6g}</text>']
        for t in self.xt if xticks else []:
            x, _ = self.xy(t, 0)
            self.out += [f'<line x1="{x:.1f}" y1="{H - BOTTOM}" x2="{x:.1f}" y2="{H - BOTTOM + 4}" stroke="black"/>',
                         f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{t:,.6g}</text>']
        self.out += [f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="black"/>',
                     f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="black"/>']
        self.legend_y = TOP + 4

    def xy(self, x: float, y: float) -> tuple[float, float]:
        return (LEFT + (W - LEFT - RIGHT) * (x - self.x0) / ((self.x1 - self.x0) or 1),
                H - BOTTOM - (H - BOTTOM - TOP) * y / (self.y1 or 1))

    def legend(self, label: str, colour: str, dash: str = "", box: bool = False) -> None:
        x, y = W - RIGHT + 14, self.legend_y
        self.out.append(f'<rect x="{x}" y="{y - 8}" width="22" height="10" fill="{colour}" opacity="0.3"/>' if box else
                        f'<line x1="{x}" y1="{y - 3}" x2="{x + 22}" y2="{y - 3}" stroke="{colour}" stroke-width="2"'
                        + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        self.out.append(f'<text x="{x + 28}" y="{y}">{escape(label)}</text>')
        self.legend_y += 15

    def svg(self) -> str:
        return "\n".join(self.out + ["</svg>"]) + "\n"


def throughput_svg(arms: dict[str, list[Collected]], warmup: int) -> str:
    series = {}
    for name, cs in arms.items():
        for c in cs:
            gpus = c.rollout_gpus()
            series[(name, c.attempt.repeat)] = [(s.rollout_id, s.metrics[TOKENS] * gpus)
                                                for s in c.log.first().values() if TOKENS in s.metrics]
    xs = [x for pts in series.values() for x, _ in pts] or [0, 1]
    plot = _Plot("Rollout throughput per step (whole rollout pool)", "rollout step", "tokens/s", min(xs), max(xs),
                 max((y for pts in series.values() for _, y in pts), default=1) * 1.05)
    first = min(xs)
    if warmup:
        (bx0, _), (bx1, _) = plot.xy(first, 0), plot.xy(first + warmup - 0.5, 0)
        plot.out.append(f'<rect x="{bx0:.1f}" y="{TOP}" width="{bx1 - bx0:.1f}" height="{H - BOTTOM - TOP}" '
                        f'fill="#bbbbbb" opacity="0.35"/>')
        plot.legend(f"warm-up ({warmup} steps)", "#999999", box=True)
    for i, name in enumerate(arms):
        colour = COLOURS[i % len(COLOURS)]
        for (arm, rep), pts in sorted(series.items()):
            if arm != name:
                continue
            dash = DASHES[(rep - 1) % len(DASHES)]
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (plot.xy(a, b) for a, b in pts))
            plot.out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" opacity="0.85"'
                            + (f' stroke-dasharray="{dash}"' if dash else "") + f' points="{path}"/>')
            plot.legend(f"{name} r{rep}", colour, dash)
    return plot.svg()


def cost_svg(report: dict) -> str:
    vals = {n: (a["usd_per_million_tokens"], a["steady_usd_per_million_tokens"]) for n, a in report["arms"].items()}
    top = max((v for pair in vals.values() for v in pair if v), default=1) * 1.15
    plot = _Plot("Cost per million generated tokens", "arm", "USD / M tokens", 0, max(len(vals), 1), top, xticks=False)
    kinds = (("whole attempt", 0), ("steady state", 1))
    for i, (name, pair) in enumerate(vals.items()):
        for label, k in kinds:
            v = pair[k]
            x, _ = plot.xy(i + 0.15 + 0.35 * k, 0)
            width = plot.xy(0.33, 0)[0] - plot.xy(0, 0)[0]
            if v is None:
                plot.out.append(f'<text x="{x:.1f}" y="{H - BOTTOM - 5}">no price</text>')
                continue
            _, y = plot.xy(0, v)
            plot.out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{H - BOTTOM - y:.1f}" '
                            f'fill="{COLOURS[k]}" opacity="{1 - 0.4 * k}"/>')
            plot.out.append(f'<text x="{x + width / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle">{v:,.3f}</text>')
        cx, _ = plot.xy(i + 0.5, 0)
        plot.out.append(f'<text x="{cx:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{escape(name)}</text>')
    for label, k in kinds:
        plot.legend(label, COLOURS[k], box=True)
    return plot.svg()


def faults_svg(attempts: list[Collected]) -> str:
    pts, marks = [], []
    for c in attempts:
        t0, gpus = c.start, c.rollout_gpus()
        pts += [((s.at - t0).total_seconds(), s.metrics[TOKENS] * gpus, c.attempt.repeat)
                for s in c.log.steps if s.at and TOKENS in s.metrics]
        for f in c.faults:
            for key, colour in (("injectedAt", "red"), ("detectedAt", "orange")):
                if f.get(key):
                    at = datetime.fromisoformat(f[key].replace("Z", "+00:00"))
                    marks.append(((at - t0).total_seconds(), colour, f"r{c.attempt.repeat} {f['kind']} {key[:-2]}"))
    plot = _Plot("Fault timeline: throughput per step", "seconds since the attempt's RayJob started", "tokens/s", 0,
                 max([p[0] for p in pts] + [m[0] for m in marks] + [1]), max([p[1] for p in pts] + [1]) * 1.05)
    for rep in sorted({p[2] for p in pts}):
        colour = COLOURS[(rep - 1) % len(COLOURS)]
        for x, y, r in pts:
            if r == rep:
                px, py = plot.xy(x, y)
                plot.out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2" fill="{colour}"/>')
        plot.legend(f"repeat {rep}", colour)
    seen: list[float] = []
    for x, colour, label in sorted(marks):
        px, _ = plot.xy(x, 0)
        row = sum(1 for q in seen if abs(q - px) < 120) % 6
        seen.append(px)
        plot.out.append(f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{H - BOTTOM}" stroke="{colour}"/>')
        plot.out.append(f'<text x="{px + 3:.1f}" y="{TOP + 12 + 13 * row}" fill="{colour}" font-size="10" '
                        f'stroke="white" stroke-width="3" paint-order="stroke">{escape(label)}</text>')
    plot.legend("injected", "red")
    plot.legend("detected", "orange")
    return plot.svg()

"""``report.md`` and the SVG plots from the figures (``figures.compute``) and the checked attempts.

Guarantees: a ratio is printed with its interval and with what the repeats say about noise; a
share of the gain is printed only when the whole gain is beyond that noise; different amounts of
work between arms are stated; artifacts marked as simulated say so in the report's first line.
The plots are plain SVG (no plotting library): throughput per step per arm, cost per million tokens
per arm, and a timeline per fault.
"""

from __future__ import annotations

from datetime import datetime
from html import escape

from .artifacts import Collected
from .figures import TOKENS

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
W, H, PAD = 720, 320, 50


def _num(x: float | None, fmt: str = ",.1f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _ratio(r: dict) -> str:
    lo, hi = r["ci95"]
    noise = ("noise between repeats unknown (one repeat)" if r["repeat_noise"] is None else
             f"repeat noise {100 * r['repeat_noise']:.1f}%: " +
             ("beyond the noise" if r["beyond_noise"] else "NOT beyond the noise"))
    return f"{r['value']:.3f}x (95% CI {lo:.3f}-{hi:.3f}; {noise})"


def markdown(report: dict, simulated: str | None) -> str:
    out = []
    if simulated:
        out += [f"**Made by the simulator, not measured: {simulated}**", ""]
    out += [f"# Benchmark {report['experiment']}", "",
            f"Baseline arm `{report['baseline']}`; {report['warmup_steps']} warm-up steps left out, "
            f"{report['measured_steps']} measured steps per attempt, {report['repeats']} repeats, order "
            f"{report['order']}.", "",
            "| arm | rollout tokens/s (median, IQR) | step s | JCT s | GPU-h / attempt | $ / attempt "
            "| $ / M tokens | response len | GPU util % | EFA Gbit/s/node |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, a in report["arms"].items():
        t = a["rollout_tokens_per_s"]
        st = a["step_time_s"]
        out.append(f"| {name} | {t['median']:,.0f} ({t['iqr'][0]:,.0f}-{t['iqr'][1]:,.0f}) | "
                   f"{_num(st and st['median'])} | {a['jct_s']['median']:,.0f} | {a['gpu_hours']:,.2f} | "
                   f"{_num(a['cost_usd'], ',.2f')} | {_num(a['usd_per_million_tokens'], ',.3f')} | "
                   f"{_num(a['mean_response_len'], ',.0f')} | {_num(a['gpu_util'])} | {_num(a['efa_gbps'], ',.2f')} |")
    out += ["", "## Against the baseline", ""]
    for name, a in report["arms"].items():
        if "ratio_vs_baseline" not in a:
            continue
        out.append(f"- `{name}`: rollout throughput {_ratio(a['ratio_vs_baseline'])}.")
        w = a["work_vs_baseline"]
        if w and w["different"]:
            out.append(f"  Different work: mean response length {100 * w['relative']:+.1f}% against the baseline. "
                       f"Throughput in tokens/s still compares, but step time and cost per step do not: longer "
                       f"responses hold the engines longer per step (the step waits for its longest sample) "
                       f"and fill the KV cache sooner.")
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


def _frame(title: str, xlabel: str, ylabel: str, ymax: float) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
            f'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
            f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>',
            f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - 10}" y2="{H - PAD}" stroke="black"/>',
            f'<line x1="{PAD}" y1="30" x2="{PAD}" y2="{H - PAD}" stroke="black"/>',
            f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">{escape(xlabel)}</text>',
            f'<text x="12" y="{H / 2}" transform="rotate(-90 12 {H / 2})" text-anchor="middle">{escape(ylabel)}</text>',
            f'<text x="{PAD - 4}" y="34" text-anchor="end">{ymax:,.0f}</text>',
            f'<text x="{PAD - 4}" y="{H - PAD}" text-anchor="end">0</text>']


def _xy(x: float, y: float, xmax: float, ymax: float) -> tuple[float, float]:
    return (PAD + (W - PAD - 20) * x / (xmax or 1), H - PAD - (H - PAD - 30) * y / (ymax or 1))


def throughput_svg(arms: dict[str, list[Collected]]) -> str:
    series = {(name, c.attempt.repeat): [(s.rollout_id, s.metrics[TOKENS] * c.rollout_gpus())
                                         for s in c.log.first().values() if TOKENS in s.metrics]
              for name, cs in arms.items() for c in cs}
    xmax = max((x for pts in series.values() for x, _ in pts), default=1)
    ymax = max((y for pts in series.values() for _, y in pts), default=1) * 1.1
    out = _frame("Rollout throughput per step (whole rollout pool)", "rollout step", "tokens/s", ymax)
    for i, name in enumerate(arms):
        colour = COLOURS[i % len(COLOURS)]
        for (arm, rep), pts in series.items():
            if arm != name:
                continue
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (_xy(a, b, xmax, ymax) for a, b in pts))
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1" opacity="0.8" points="{path}"/>')
        out.append(f'<text x="{W - 160}" y="{40 + 14 * i}" fill="{colour}">{escape(name)}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"


def cost_svg(report: dict) -> str:
    vals = {n: a["usd_per_million_tokens"] for n, a in report["arms"].items()}
    ymax = max((v for v in vals.values() if v), default=1) * 1.2
    out = _frame("Cost per million generated tokens", "arm", "USD / M tokens", ymax)
    width = (W - PAD - 40) / max(len(vals), 1)
    for i, (name, v) in enumerate(vals.items()):
        x = PAD + 10 + i * width
        if v is None:
            out.append(f'<text x="{x + width / 3}" y="{H - PAD - 5}">no price</text>')
        else:
            _, y = _xy(0, v, 1, ymax)
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{width * 0.6:.1f}" height="{H - PAD - y:.1f}" '
                       f'fill="{COLOURS[i % len(COLOURS)]}"/>')
            out.append(f'<text x="{x + width * 0.3:.1f}" y="{y - 4:.1f}" text-anchor="middle">{v:,.3f}</text>')
        out.append(f'<text x="{x + width * 0.3:.1f}" y="{H - PAD + 14}" text-anchor="middle">{escape(name)}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"


def faults_svg(attempts: list[Collected]) -> str:
    pts, marks = [], []
    for c in attempts:
        t0 = c.start
        pts += [((s.at - t0).total_seconds(), s.metrics[TOKENS] * c.rollout_gpus(), c.attempt.folder)
                for s in c.log.steps if s.at and TOKENS in s.metrics]
        for f in c.faults:
            for key, colour in (("injectedAt", "red"), ("detectedAt", "orange")):
                if f.get(key):
                    at = datetime.fromisoformat(f[key].replace("Z", "+00:00"))
                    marks.append(((at - t0).total_seconds(), colour, f"{f['kind']} {key[:-2]}"))
    xmax = max([p[0] for p in pts] + [m[0] for m in marks] + [1])
    ymax = max([p[1] for p in pts] + [1]) * 1.1
    out = _frame("Fault timeline: throughput per step (red: injected, orange: detected)", "seconds since the "
                 "attempt's RayJob started", "tokens/s", ymax)
    for x, y, _ in pts:
        px, py = _xy(x, y, xmax, ymax)
        out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2" fill="{COLOURS[0]}"/>')
    for x, colour, label in marks:
        px, _ = _xy(x, 0, xmax, ymax)
        out.append(f'<line x1="{px:.1f}" y1="30" x2="{px:.1f}" y2="{H - PAD}" stroke="{colour}"/>')
        out.append(f'<text x="{px + 3:.1f}" y="44" fill="{colour}">{escape(label)}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"

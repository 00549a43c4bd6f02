"""``report.md`` from the figures (``figures.compute``); the plots are ``bench.plots``.

Guarantees: a ratio is printed with its interval and with what the repeats say about noise; a
share of the gain is printed only when the whole gain is beyond that noise; different amounts of
work between arms are stated; artifacts marked as simulated say so in the report's first line.
"""

from __future__ import annotations


def _num(x: float | None, fmt: str = ",.1f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _ratio(r: dict) -> str:
    lo, hi = r["ci95"]
    noise = ("noise between repeats unknown (one repeat)" if r["repeat_noise"] is None else
             f"repeat noise {100 * r['repeat_noise']:.1f}%: " +
             ("beyond the noise" if r["beyond_noise"] else "NOT beyond the noise"))
    refused = f"; {r['claim_refused']}" if r.get("claim_refused") else ""
    return f"{r['value']:.3f}x (95% CI {lo:.3f}-{hi:.3f}; {noise}{refused})"


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
                    f"{r['rollout_tokens_per_s']:,.0f}", f"{r['step_rate_median']:,.0f}",
                    _num(e2e.get("tokens_per_s"), ",.0f"),
                    _num(parts["step"]), _num(parts["update_weights"]), f"{r['jct_s']:,.0f}", _num(r["startup_s"], ",.0f"),
                    _num(r["cost_usd"], ",.2f"), _num(r["usd_per_million_tokens"], ",.3f"),
                    _num(r["steady_usd_per_million_tokens"], ",.3f"), r["mode"]])
    return out


REPEAT_HEAD = ["block", "attempt", "measured steps", "rollout tokens/s (Σtokens/Σtime)", "median step tokens/s",
               "end-to-end tokens/s", "step s", "weight sync s", "JCT s (gang wait incl.)", "of it start-up s", "$",
               "$ / M tokens (attempt)", "$ / M tokens (steady)", "mode"]


def markdown(report: dict, simulated: str | None, plots: bool = True) -> str:
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
        step = t["step_rate"]
        rows.append([name, "/".join(a["mode"]), f"{t['throughput']:,.0f}",
                     f"{step['median']:,.0f} ({step['iqr'][0]:,.0f}-{step['iqr'][1]:,.0f})",
                     _num(a["end_to_end_tokens_per_s"], ",.0f"), _num(a["end_to_end_samples_per_s"], ",.2f"),
                     _num(parts["step"]), _num(parts["train_wait"]), _num(parts["train"]),
                     _num(parts["update_weights"]), _num(q["mean_reward"], ".3f"), _num(q["kl"], ".5f"),
                     _num(q["truncated_ratio"], ".3f"), _num(a["mean_response_len"], ",.0f"),
                     _num(a["jct_s"]["median"], ",.0f"), _num(a["cost_usd"], ",.2f"),
                     _num(a["usd_per_million_tokens"], ",.3f"), _num(a["steady_usd_per_million_tokens"], ",.3f")])
    out += _table(["arm", "mode", "rollout tokens/s (Σtokens/Σtime)", "per-step tokens/s (median, IQR)",
                   "end-to-end tokens/s", "samples/s", "step s",
                   "train wait s", "train s", "weight sync s", "mean reward", "KL", "truncated", "response len",
                   "JCT s (gang wait incl.)", "$ / attempt", "$ / M tokens (attempt)", "$ / M tokens (steady)"], rows)
    out += ["", "Rollout tokens/s: the sum of the measured steps' generated tokens over the sum of their "
                "perf/rollout_time (the whole rollout pool; the comparison's figure); per step: "
                "perf/tokens_per_gpu_per_sec x --rollout-num-gpus, descriptive only (a median of rates is not a "
                f"throughput). JCT: {report['jct_definition']}. End to end: tokens and samples trained per wall-clock second "
                f"over the measured steps. $ / M tokens "
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
                f"(BENCHMARKS.md measures its coverage under hostile noise)."]
    d = report["decomposition"]
    if d:
        out += ["", "## Where the gain comes from", "",
                f"Whole gain `{d['whole']['from']}` -> `{d['whole']['to']}`: {_ratio(d['whole']['ratio'])}.", ""]
        for link in d["links"]:
            share = "share withheld" if link["share"] is None else f"{100 * link['share']:.0f}% of the gain"
            if link.get("not_isolated"):
                share = share.replace("of the gain", "of the gain,") + " " + link["not_isolated"].replace(
                    "its share is that of ", "")
            changes = ", ".join(f"{k}: {v[0]} -> {v[1]}" for k, v in link["changes"].items()) or "nothing"
            out.append(f"- {link['name']} (`{link['from']}` -> `{link['to']}`): {_ratio(link['ratio'])}; "
                       f"{share}. Changes: {changes}.")
        if d["shares_withheld_because"]:
            out.append(f"\nShares withheld: {d['shares_withheld_because']}.")
        if d.get("fabric"):
            out.append(f"\nFabric: {d['fabric']}.")
        out.append(f"\nMethod: {d['method']}.")
    if report["faults"]:
        out += ["", "## Faults", "", "Timed from the kill (the kubelet's Killing Event of the pod FIS hit, or FIS' start of "
                "a terminate). Two detections, each named: the run's first reaction (Miles' health check or engine "
                "recovery line, the hit RayJob's end) and the platform's (KubeRay's first Event about the hit RayJob "
                "or its RayCluster; 0 or below when it came before the kubelet's Killing, whose time is to the second).", "",
                "| arm | attempt | fault | at step | run detection s | run reacted by | platform detection s | "
                "platform reacted by | back to steady s | steps lost | tokens lost | outcome (RayJob status) | resumed from |",
                "|---|---|---|---:|---:|---|---:|---|---:|---:|---:|---|---|"]
        for arm, attempts in report["faults"].items():
            for folder, faults in attempts.items():
                for f in faults:
                    if "error" in f:
                        out.append(f"| {arm} | {folder} | {f['kind']} | {f.get('step')} | {f['error']} ||||||| "
                                   f"{f.get('outcome', '')} | {f.get('resumed_from', '')} |")
                        continue
                    reacted = " | ".join(f"{_num(f[f'{who}_detection_s'])} | {f[f'{who}_detected_by'] or 'nothing reacted'}"
                                         for who in ("run", "platform"))
                    out.append(f"| {arm} | {folder} | {f['kind']} | {f['step']} | {reacted} | "
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
    if plots:
        out += ["", "Plots: `throughput.svg`, `cost.svg`" + (", `faults.svg`" if report["faults"] else "") + "."]
    return "\n".join(out) + "\n"

"""The figures of ``report.json``, computed from checked artifacts only (``artifacts.Collected``, then
``checks``: its own log, complete, finite, the same nodes, evidence that agrees with the arm).

Per attempt: ``per_attempt`` (throughput, the rest of the step, end to end, quality, utilisation over
the measured window, money, nodes, evidence). Per arm: rollout throughput, Σtokens/Σtime over all its
measured steps and per repeat, beside the median and interquartile range of the per-step rates
(descriptive), and the attempts' figures summarised (medians; means for quality and money). Against
the baseline: the throughput ratio paired by block with its interval (``stats.ratio``, the repeat's
Σtokens/Σtime as the unit) and whether it is beyond the noise between repeats, refused when the two
attempts of a block ran on different nodes (``check_same_nodes`` allows that only when asked: a
node's speed would then read as the arm's), the difference in work (response length) and in mode
(sync/async). The
decomposition splits the gain along a chain of arms in log space: link share = ln(link ratio) /
ln(whole ratio). It assumes the links multiply (no interaction between what they change) and lists
everything that differs between a link's two arms; shares are withheld when the whole gain is not
beyond the noise, or when two arms of a link differ in work by more than ``WORK_TOLERANCE`` or in
mode. A link whose arms differ in more than one run-file field gets the share of those fields together
(its pair of arms isolates them together) and no share of any one of them, which no pair of arms
isolates: the EFA-versus-DeepEP split needs arms that differ in ``fabric`` alone and in ``deepep``
alone, and the report says which arm such a pair would start from; when no link changes ``fabric`` it
says that no share is the fabric's.

Fault arms are kept out of the comparison; each of their faults gets its outcome, detection time,
time back to steady throughput, steps and tokens lost and the checkpoint it resumed from, from the
attempt's own signals (``bench.recovery``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, median

from .artifacts import ArtifactError, Collected
from .checks import check_complete, check_finite, check_own_log, check_same_nodes, node_set
from .cost import Prices
from .evidence import contradictions, read_evidence
from .experiment import Experiment, arm_run, differences
from .per_attempt import attempt_figures, step_tokens_per_s, throughput
from .recovery import fault_figures
from .stats import ArmSample, TooFewRepeats, ratio, summary

WORK_TOLERANCE = 0.05
"""Response lengths differing by more than this between two arms are reported as different work."""


@dataclass
class ArmFigures:
    name: str
    attempts: list[Collected]
    sample: ArmSample
    json: dict
    nodes: dict[int, dict]
    """Block -> the nodes per role its attempt ran on."""


def _med(rows: list[dict], *path: str) -> float | None:
    vals = []
    for r in rows:
        for p in path:
            r = r.get(p) if isinstance(r, dict) else None
        if r is not None:
            vals.append(r)
    return round(median(vals), 4) if vals else None


def _merge_evidence(rows: list[dict]) -> dict:
    out: dict = {"sglang_resolved": {}, "nccl_network": [], "nccl_gin": [], "asked": {}}
    for r in rows:
        ev = r["evidence"]
        for k, vals in ev["sglang_resolved"].items():
            out["sglang_resolved"].setdefault(k, [])
            out["sglang_resolved"][k] += [v for v in vals if v not in out["sglang_resolved"][k]]
        out["nccl_network"] += [n for n in ev["nccl_network"] if n not in out["nccl_network"]]
        if ev["nccl_gin"] not in out["nccl_gin"]:
            out["nccl_gin"].append(ev["nccl_gin"])
        out["asked"] = ev["asked"]
    return out


def arm_figures(exp: Experiment, name: str, attempts: list[Collected], rows: list[dict]) -> ArmFigures:
    sums = {c.attempt.repeat: throughput(c, exp.warmup_steps) for c in attempts}
    sample = ArmSample({k: tokens / seconds for k, (tokens, seconds) in sums.items()})
    tput = {"throughput": round(sum(t for t, _ in sums.values()) / sum(s for _, s in sums.values()), 2),
            "per_repeat": {str(k): round(v, 2) for k, v in sample.by_repeat.items()},
            "step_rate": summary([v for c in attempts for v in step_tokens_per_s(c, exp.warmup_steps)]).to_json()}
    usd = [r["cost_usd"] for r in rows]
    tokens = sum(r["tokens_generated"] for r in rows)
    roles = sorted({k for r in rows for k in (r["utilisation_measured_window"] or {})})
    util = {rl: {m: _med(rows, "utilisation_measured_window", rl, m) for m in
                 ("gpu_util", "efa_gbps", "rdma_read_gbps", "rdma_write_gbps")} for rl in roles}
    out = {
        "attempts": [c.attempt.folder for c in attempts],
        "mode": sorted({r["mode"] for r in rows}),
        "rollout_gpus": sorted({r["rollout_gpus"] for r in rows}),
        "rollout_tokens_per_s": tput,
        "step_parts_s": {k: _med(rows, "step_parts_s", k) for k in rows[0]["step_parts_s"]},
        "end_to_end_tokens_per_s": _med(rows, "end_to_end", "tokens_per_s"),
        "end_to_end_samples_per_s": _med(rows, "end_to_end", "samples_per_s"),
        "quality": {k: _med(rows, "quality", k) for k in rows[0]["quality"]},
        "jct_s": {"median": _med(rows, "jct_s"), "per_repeat": [r["jct_s"] for r in rows],
                  "startup_median": _med(rows, "startup_s")},
        "gpu_hours": round(fmean(r["gpu_hours"] for r in rows), 3),
        "node_hours": round(fmean(r["node_hours"] for r in rows), 3),
        "cost_usd": None if None in usd else round(fmean(usd), 2),
        "price_basis": sorted({b for r in rows for b in r["price_basis"]}),
        "usd_per_million_tokens": None if None in usd or not tokens else round(sum(usd) / tokens * 1e6, 4),
        "steady_usd_per_million_tokens": _med(rows, "steady_usd_per_million_tokens"),
        "tokens_generated": tokens,
        "mean_response_len": _med(rows, "quality", "mean_response_len"),
        "utilisation_measured_window": util or None,
        "evidence": _merge_evidence(rows),
        "per_repeat": rows,
        "malformed_perf_lines": sum(r["malformed_perf_lines"] for r in rows),
        "lines_collapsed_by_ray_dedup": sum(r["lines_collapsed_by_ray_dedup"] for r in rows),
    }
    return ArmFigures(name, attempts, sample, out, {r["block"]: r["nodes"] for r in rows})


def _work(arm: dict, base: dict) -> dict | None:
    a, b = arm["mean_response_len"], base["mean_response_len"]
    if a is None or b is None or not b:
        return None
    rel = a / b - 1
    return {"relative": round(rel, 4), "different": abs(rel) > WORK_TOLERANCE}


def _other_nodes(arm: ArmFigures, base: ArmFigures) -> str | None:
    """Why a block's pair cannot be trusted: its two attempts ran on different nodes."""
    for block in sorted(set(arm.nodes) & set(base.nodes)):
        if arm.nodes[block] != base.nodes[block]:
            return (f"in block {block} {arm.name} and {base.name} ran on different nodes (a node's speed would read "
                    f"as the arm's): no claim")
    return None


def arm_ratio(arm: ArmFigures, base: ArmFigures):
    try:
        return ratio(arm.sample, base.sample, _other_nodes(arm, base))
    except TooFewRepeats as err:
        raise ArtifactError(f"arm {arm.name} against {base.name}: {err}") from None


def check(root: Path, exp: Experiment, collected: list[Collected], across_node_sets: bool = False
          ) -> tuple[dict[str, dict], str | None]:
    """Refuse what does not add up; the per-attempt figures by folder and the node-set note."""
    rows, sets = {}, {}
    for c in collected:
        text = (root / c.attempt.folder / "driver.log").read_text(errors="replace")
        check_own_log(c, text)
        check_complete(exp, c)
        check_finite(exp, c)
        ev = read_evidence(c, text)
        wrong = contradictions(c, ev)
        if wrong:
            raise ArtifactError(f"{wrong[0]}: the arm did not run what it claims")
        nodes = node_set(root, c)
        if not exp.arm(c.attempt.arm).faults:
            sets[c.attempt.folder] = nodes
        rows[c.attempt.folder] = (c, nodes, ev)
    note = check_same_nodes(sets, across_node_sets) if sets else None
    return rows, note


def compute(exp: Experiment, collected: list[Collected], prices: Prices, root: Path,
            across_node_sets: bool = False) -> dict:
    by_arm: dict[str, list[Collected]] = {}
    for c in collected:
        by_arm.setdefault(c.attempt.arm, []).append(c)
    missing = [a.name for a in exp.arms if a.name not in by_arm]
    if missing:
        raise ArtifactError(f"arm {missing[0]}: no attempt collected")
    checked, node_note = check(Path(root), exp, collected, across_node_sets)
    rows = {f: attempt_figures(exp, c, prices, nodes, ev) for f, (c, nodes, ev) in checked.items()}
    compared = [a.name for a in exp.arms if not a.faults]
    figs = {name: arm_figures(exp, name, by_arm[name], [rows[c.attempt.folder] for c in by_arm[name]])
            for name in compared}
    base = figs[exp.baseline]
    arms: dict[str, dict] = {}
    for name, f in figs.items():
        entry = dict(f.json)
        if name != exp.baseline:
            entry["ratio_vs_baseline"] = arm_ratio(f, base).to_json()
            entry["work_vs_baseline"] = _work(f.json, base.json)
            entry["mode_vs_baseline"] = None if f.json["mode"] == base.json["mode"] else (
                f"{'/'.join(f.json['mode'])} against {'/'.join(base.json['mode'])}: a step is not the same unit")
        arms[name] = entry
    return {"experiment": exp.name, "baseline": exp.baseline, "warmup_steps": exp.warmup_steps,
            "measured_steps": exp.steps, "min_measured_steps": exp.min_measured_steps, "repeats": exp.repeats,
            "order": exp.order, "schedule": [c.attempt.folder for c in collected],
            "jct_definition": "KubeRay's status.startTime to status.endTime of the attempt's RayJobs: gang wait and "
                              "start-up included (startup_s: before the Ray job began); cost is the nodes over the "
                              "same time, so it includes them too; the steady-state cost does not",
            "token_definition": "generated response tokens: perf/tokens_per_gpu_per_sec x --rollout-num-gpus x "
                                "perf/rollout_time per step, the sum of the step's response lengths (Miles "
                                "miles/ray/rollout/metrics.py:142-149); prompt tokens not counted",
            "price_source": prices.basis, "node_sets": node_note or "every compared attempt ran on the nodes of the first",
            "arms": arms, "decomposition": _decomposition(exp, figs),
            "faults": {a.name: {c.attempt.folder: fault_figures(exp, c) for c in by_arm[a.name]}
                       for a in exp.arms if a.faults},
            "serving": {a.name: {c.attempt.folder: c.serving for c in by_arm[a.name]}
                        for a in exp.arms if a.serving},
            "fault_attempts": {c.attempt.folder: rows[c.attempt.folder] for a in exp.arms if a.faults
                               for c in by_arm[a.name]}}


def _not_isolated(start: str, fields: list[str]) -> str | None:
    """What a link's share is of when its arms differ in more than one run-file field: its pair of arms
    isolates them together, no pair isolates any one of them."""
    if len(fields) <= 1:
        return None
    return (f"its share is that of its {len(fields)} run-file fields together ({', '.join(fields)}); no pair of arms "
            f"isolates one of them, so no share of any one of them is given: an arm equal to `{start}` but for one of "
            f"them would measure that one's share")


def _fabric(exp: Experiment, links: list[dict]) -> str | None:
    """Why no share is the fabric's when no link changes ``fabric``: the EFA-versus-DeepEP split."""
    if any("fabric" in link["changes"] for link in links):
        return None
    fabric = arm_run(exp, exp.baseline).fabric
    return (f"no link changes `fabric` (every arm's is {fabric}), so no share is the fabric's and every share is "
            f"measured on {fabric}: arms equal but for `fabric` would measure its part")


def _decomposition(exp: Experiment, figs: dict[str, ArmFigures]) -> dict | None:
    if not exp.decomposition:
        return None
    whole = arm_ratio(figs[exp.decomposition[-1].to], figs[exp.baseline])
    why = None if whole.beyond_noise else "the whole gain is not beyond the noise between repeats: no share is given"
    links = []
    for link in exp.decomposition:
        a, b = figs[link.to].json, figs[link.from_].json
        work = _work(a, b)
        if why is None and work and work["different"]:
            why = (f"link {link.name}: mean response length differs by {100 * work['relative']:+.1f}% (more than "
                   f"{100 * WORK_TOLERANCE:.0f}%): the arms did different work")
        if why is None and a["mode"] != b["mode"]:
            why = f"link {link.name}: {'/'.join(a['mode'])} against {'/'.join(b['mode'])} (a step is not the same unit)"
        r = arm_ratio(figs[link.to], figs[link.from_])
        changes = differences(exp, link.from_, link.to)
        links.append({"name": link.name, "from": link.from_, "to": link.to, "ratio": r.to_json(), "share": r,
                      "changes": {k: list(v) for k, v in changes.items()},
                      "not_isolated": _not_isolated(link.from_, list(changes))})
    for link in links:
        r = link["share"]
        link["share"] = None if why or whole.value == 1 else round(math.log(r.value) / math.log(whole.value), 4)
    return {"whole": {"from": exp.baseline, "to": exp.decomposition[-1].to, "ratio": whole.to_json()},
            "links": links, "shares_withheld_because": why, "fabric": _fabric(exp, links),
            "method": "share = ln(link ratio) / ln(whole ratio); assumes the links multiply (no interaction) and "
                      "attributes to a link every field that differs between its two arms (listed in changes)"}

"""The figures of ``report.json``, computed from checked artifacts only (``artifacts.Collected``).

Per arm: rollout throughput of the whole rollout pool (``perf/tokens_per_gpu_per_sec`` x the
attempt's rollout GPUs, per measured step; median and interquartile range), step time
(``perf/step_time``), job completion time (RayJob ``status.startTime`` to ``status.endTime``), GPU-hours
and cost per attempt (node-hours x the node's price), cost per million generated tokens (whole
attempts: every step's tokens = throughput x ``perf/rollout_time``), mean response length, and GPU
utilisation and EFA traffic when ``cloudwatch.json`` is there. Against the baseline: the throughput
ratio with a bootstrap interval and whether it is beyond the noise between repeats, and the
difference in work (response length). The decomposition splits the gain along a chain of arms in
log space: link share = ln(link ratio) / ln(whole ratio). It assumes the links multiply (no
interaction between what they change) and attributes to a link everything that differs between its
two arms, which the report lists.

Fault arms are kept out of the comparison; each of their faults gets its outcome, detection time,
time back to steady throughput, steps and tokens lost and the checkpoint it resumed from, from the
attempt's own signals (``bench.recovery``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, median

from .artifacts import ArtifactError, Collected
from .cloudwatch import summarise
from .cost import Prices
from .experiment import Experiment, differences
from .recovery import fault_figures
from .stats import ArmSample, arm_sample, ratio, summary

TOKENS = "perf/tokens_per_gpu_per_sec"
WORK_TOLERANCE = 0.05
"""Response lengths differing by more than this between two arms are reported as different work."""


def step_tokens_per_s(c: Collected, warmup: int) -> list[float]:
    gpus = c.rollout_gpus()
    return [s.metrics[TOKENS] * gpus for s in c.measured(warmup)]


def attempt_tokens(c: Collected) -> float:
    """Tokens generated in the attempt (every first occurrence of a step, warm-up included)."""
    gpus = c.rollout_gpus()
    return sum(s.metrics.get(TOKENS, 0.0) * gpus * s.metrics.get("perf/rollout_time", 0.0)
               for s in c.log.first().values())


def attempt_cost(c: Collected, prices: Prices) -> tuple[float | None, list[str]]:
    hours = c.seconds / 3600
    total, bases = 0.0, set()
    for node in c.nodes:
        price, basis = prices.node(node)
        bases.add(basis)
        if price is None:
            return None, sorted(bases)
        total += price * hours
    return total, sorted(bases)


@dataclass
class ArmFigures:
    name: str
    attempts: list[Collected]
    sample: ArmSample
    json: dict


def arm_figures(exp: Experiment, name: str, attempts: list[Collected], prices: Prices, seed: int) -> ArmFigures:
    groups = [step_tokens_per_s(c, exp.warmup_steps) for c in attempts]
    steps = [s for c in attempts for s in c.measured(exp.warmup_steps)]
    step_times = [s.metrics["perf/step_time"] for s in steps if "perf/step_time" in s.metrics]
    lengths = [s.metrics["rollout/response_len/mean"] for s in steps if "rollout/response_len/mean" in s.metrics]
    costs = [attempt_cost(c, prices) for c in attempts]
    usd = None if any(cost is None for cost, _ in costs) else [cost for cost, _ in costs]
    tokens = sum(attempt_tokens(c) for c in attempts)
    cw = [summarise(c.cloudwatch) for c in attempts if c.cloudwatch]
    gpu_util = [x["gpu_util"] for x in cw if x["gpu_util"] is not None]
    efa = [x["efa_gbps"] for x in cw if x["efa_gbps"] is not None]
    sample = arm_sample(groups, seed)
    tput = summary([v for g in groups for v in g]).to_json()
    tput["per_repeat_median"] = [round(median(g), 4) for g in groups]
    out = {
        "attempts": [c.attempt.folder for c in attempts],
        "rollout_gpus": sorted({c.rollout_gpus() for c in attempts}),
        "rollout_tokens_per_s": tput,
        "step_time_s": summary(step_times).to_json() if step_times else None,
        "jct_s": {"median": round(median(c.seconds for c in attempts), 1),
                  "per_repeat": [round(c.seconds, 1) for c in attempts]},
        "gpu_hours": round(fmean(sum(n.gpus for n in c.nodes) * c.seconds / 3600 for c in attempts), 3),
        "node_hours": round(fmean(len(c.nodes) * c.seconds / 3600 for c in attempts), 3),
        "cost_usd": None if usd is None else round(fmean(usd), 2),
        "price_basis": sorted({b for _, bases in costs for b in bases}),
        "usd_per_million_tokens": None if usd is None or not tokens else round(sum(usd) / tokens * 1e6, 4),
        "tokens_generated": round(tokens),
        "mean_response_len": round(fmean(lengths), 2) if lengths else None,
        "gpu_util": round(fmean(gpu_util), 2) if gpu_util else None,
        "efa_gbps": round(fmean(efa), 3) if efa else None,
        "malformed_perf_lines": sum(len(c.log.malformed) for c in attempts),
        "lines_collapsed_by_ray_dedup": sum(c.log.collapsed for c in attempts),
    }
    return ArmFigures(name, attempts, sample, out)


def _work(arm: dict, base: dict) -> dict | None:
    a, b = arm["mean_response_len"], base["mean_response_len"]
    if a is None or b is None or not b:
        return None
    rel = a / b - 1
    return {"relative": round(rel, 4), "different": abs(rel) > WORK_TOLERANCE}


def compute(exp: Experiment, collected: list[Collected], prices: Prices) -> dict:
    by_arm: dict[str, list[Collected]] = {}
    for c in collected:
        by_arm.setdefault(c.attempt.arm, []).append(c)
    missing = [a.name for a in exp.arms if a.name not in by_arm]
    if missing:
        raise ArtifactError(f"arm {missing[0]}: no attempt collected")
    compared = [a.name for a in exp.arms if not a.faults]
    figs = {name: arm_figures(exp, name, by_arm[name], prices, seed=i) for i, name in enumerate(compared)}
    base = figs[exp.baseline]
    arms: dict[str, dict] = {}
    for name, f in figs.items():
        entry = dict(f.json)
        if name != exp.baseline:
            entry["ratio_vs_baseline"] = ratio(f.sample, base.sample).to_json()
            entry["work_vs_baseline"] = _work(f.json, base.json)
        arms[name] = entry
    report = {"experiment": exp.name, "baseline": exp.baseline, "warmup_steps": exp.warmup_steps,
              "measured_steps": exp.steps, "repeats": exp.repeats, "order": exp.order, "arms": arms,
              "decomposition": _decomposition(exp, figs),
              "faults": {a.name: {c.attempt.folder: fault_figures(exp, c) for c in by_arm[a.name]}
                         for a in exp.arms if a.faults},
              "serving": {a.name: {c.attempt.folder: c.serving for c in by_arm[a.name]}
                          for a in exp.arms if a.serving}}
    return report


def _decomposition(exp: Experiment, figs: dict[str, ArmFigures]) -> dict | None:
    if not exp.decomposition:
        return None
    whole = ratio(figs[exp.decomposition[-1].to].sample, figs[exp.baseline].sample)
    links = []
    for link in exp.decomposition:
        r = ratio(figs[link.to].sample, figs[link.from_].sample)
        share = math.log(r.value) / math.log(whole.value) if whole.beyond_noise and whole.value != 1 else None
        links.append({"name": link.name, "from": link.from_, "to": link.to, "ratio": r.to_json(),
                      "share": None if share is None else round(share, 4),
                      "changes": {k: list(v) for k, v in differences(exp, link.from_, link.to).items()}})
    why = None if whole.beyond_noise else (
        "one repeat per arm: the noise between repeats is unknown" if whole.noise is None
        else "the whole gain is not beyond the noise between repeats: no share is given")
    return {"whole": {"from": exp.baseline, "to": exp.decomposition[-1].to, "ratio": whole.to_json()},
            "links": links, "shares_withheld_because": why,
            "method": "share = ln(link ratio) / ln(whole ratio); assumes the links multiply (no interaction) and "
                      "attributes to a link every field that differs between its two arms (listed in changes)"}

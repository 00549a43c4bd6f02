"""How often the report's 95% interval covers the true ratio, and how often "beyond the noise" fires on
equal arms, across simulated experiments under hostile noise (a benchmark, not a test).

    python -m bench.coverage [--experiments 500] [--seed 1] [--jobs 2] [--condition NAME ...] [--json OUT] [--write]
    python -m bench.coverage --figures OUT --write    # the section from figures measured before (elsewhere)

Each experiment is ``experiments/example-ab.yaml`` without its fault arm (``nccl`` against ``deepep-v1``)
in the shape of the seed's comparison (``experiments/seed-ab.yaml``: its warm-up, measured steps and
repeats), simulated by ``bench.simulate`` with its own seed and read back by ``write_report`` exactly as
``bench report --across-node-sets`` reads it; the figures come from its ``report.json``
(``ratio_vs_baseline``). Two scenarios per experiment, with independent seeds: ``deepep-v1``'s true
throughput 1.1 times ``nccl``'s (coverage) and equal (false alarms). An arm's true throughput is its
long-run Σtokens/Σtime on a normal node whatever its noise (``bench.noise.calibration``), so a stalling
arm with equal throughput is equal. Each condition (``CONDITIONS``) adds its hostile noise to 3% step
noise and 2% drift per repeat. The old headline (the median of each repeat's step rates, the same
paired t and noise rule) is computed from the same reports, for comparison. ``--write`` replaces the
section between the ``bench-coverage`` markers of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .report import write_report
from .simulate import ArmTruth, Truth, simulate
from .stats import ArmSample, ratio

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- bench-coverage -->", "<!-- /bench-coverage -->"
TRUE_RATIO = 1.1
BASE_RATE = 50000.0
SHAPE = ("warmupSteps", "steps", "repeats")
"""What the experiments take from ``experiments/seed-ab.yaml``."""


@dataclass(frozen=True)
class Condition:
    summary: str
    baseline: dict = field(default_factory=dict)
    """``ArmTruth`` fields of ``nccl`` (the baseline)."""
    arm: dict = field(default_factory=dict)
    """``ArmTruth`` fields of ``deepep-v1``."""
    cluster: dict = field(default_factory=dict)
    """``Truth`` fields."""


STALLS = {"stall_share": 0.05, "stall_slowdown": (2.0, 3.0)}
TAILS = {"tail_df": 2.0}
CONDITIONS = {
    "steady": Condition("3% step noise, 2% drift per repeat"),
    "one-arm stalls": Condition("5% of deepep-v1's steps 2-3x slower", arm=STALLS),
    "one-arm heavy tails": Condition("deepep-v1's step noise Student t, 2 degrees of freedom", arm=TAILS),
    "slow node, one arm more": Condition("a node at 85% speed; deepep-v1 lands on it in 50% of its attempts, nccl in "
                                         "10%", baseline={"slow_node_share": 0.1}, arm={"slow_node_share": 0.5}),
    "autocorrelated steps": Condition("AR(1) step noise, coefficient 0.8", cluster={"autocorrelation": 0.8}),
    "drift across repeats": Condition("5% drift per repeat and 1% per attempt along the schedule",
                                      baseline={"repeat_drift": 0.05}, arm={"repeat_drift": 0.05},
                                      cluster={"drift_per_attempt": 0.01}),
    "unequal step counts": Condition("logs starting up to 30 steps late (10-40 measured steps), response length "
                                     "spread 30%", baseline={"response_len_cv": 0.3}, arm={"response_len_cv": 0.3},
                                     cluster={"late_start": 30}),
    "all at once": Condition("all of the above", baseline={"slow_node_share": 0.1, "repeat_drift": 0.05,
                                                           "response_len_cv": 0.3},
                             arm={**STALLS, **TAILS, "slow_node_share": 0.5, "repeat_drift": 0.05, "response_len_cv": 0.3},
                             cluster={"autocorrelation": 0.8, "drift_per_attempt": 0.01, "late_start": 30}),
}


def experiment(directory: Path) -> Path:
    """The example's two compared arms in the seed comparison's shape."""
    doc = yaml.safe_load((ROOT / "experiments" / "example-ab.yaml").read_text())
    seed = yaml.safe_load((ROOT / "experiments" / "seed-ab.yaml").read_text())
    doc["arms"] = [a for a in doc["arms"] if not a.get("faults")]
    doc |= {k: seed[k] for k in SHAPE}
    path = directory / "experiment.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def truth(condition: Condition, seed: int, true_ratio: float) -> Truth:
    arm = {"noise": 0.03, "repeat_drift": 0.02}
    return Truth(arms={"nccl": ArmTruth(tokens_per_s=BASE_RATE, **(arm | condition.baseline)),
                       "deepep-v1": ArmTruth(tokens_per_s=BASE_RATE * true_ratio, **(arm | condition.arm))},
                 seed=seed, capacity_type="ON_DEMAND", **condition.cluster)


def one(task: tuple[str, int, float]) -> dict:
    """The report's ratio of one simulated experiment, and the old headline's from the same report."""
    name, seed, true_ratio = task
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "d"
        simulate(experiment(Path(tmp)), truth(CONDITIONS[name], seed, true_ratio), root)
        report = write_report(root, across_node_sets=True, plots=False)
    arm, base = (report["arms"][a] for a in ("deepep-v1", "nccl"))
    medians = [ArmSample({r["block"]: r["step_rate_median"] for r in a["per_repeat"]}) for a in (arm, base)]
    old = ratio(*medians)
    return {"condition": name, "ratio": true_ratio, **arm["ratio_vs_baseline"],
            "old": {"ci95": [old.low, old.high], "beyond_noise": old.beyond_noise}}


def measure(names: list[str], n: int, seed: int, jobs: int) -> list[dict]:
    """Per condition: ``n`` experiments at the true ratio and ``n`` with equal arms."""
    tasks = [(name, seed + 2 * i + k, r) for name in names for i in range(n) for k, r in enumerate((TRUE_RATIO, 1.0))]
    t = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(one, tasks, chunksize=8))
    seconds = time.perf_counter() - t
    where = {"python": platform.python_version(), "processes": jobs, "cpus": os.cpu_count()}
    return [summarise(name, [r for r in results if r["condition"] == name], n, seed, seconds / len(names)) | where
            for name in names]


def _holds(r: dict) -> bool:
    return r["ci95"][0] <= r["ratio"] <= r["ci95"][1]


def summarise(name: str, results: list[dict], n: int, seed: int, seconds: float) -> dict:
    true = [r for r in results if r["ratio"] != 1.0]
    equal = [r for r in results if r["ratio"] == 1.0]
    claimed = [r for r in true if r["claim_refused"] is None]
    widths = sorted(r["ci95"][1] - r["ci95"][0] for r in true)
    return {"condition": name, "summary": CONDITIONS[name].summary, "experiments": n, "seed": seed,
            "coverage": sum(map(_holds, true)) / n,
            "claimed": len(claimed) / n,
            "coverage_claimed": sum(map(_holds, claimed)) / len(claimed) if claimed else None,
            "false_alarms": sum(r["beyond_noise"] for r in equal) / n,
            "refused_equal": sum(r["claim_refused"] is not None for r in equal) / n,
            "median_width": widths[n // 2],
            "old_coverage": sum(_holds({**r["old"], "ratio": r["ratio"]}) for r in true) / n,
            "old_false_alarms": sum(r["old"]["beyond_noise"] for r in equal) / n, "seconds": round(seconds, 1)}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def row(m: dict) -> str:
    return (f"| {m['condition']} | {m['summary']} | {m['experiments']} | {_pct(m['coverage'])} | {_pct(m['claimed'])} | "
            f"{_pct(m['coverage_claimed'])} | {_pct(m['false_alarms'])} | {m['median_width']:.3f} | "
            f"{_pct(m['old_coverage'])} | {_pct(m['old_false_alarms'])} |")


def verdict(m: dict) -> str:
    """Whether the condition meets the targets where the report claims, and how often it refuses."""
    claimed = round(m["claimed"] * m["experiments"])
    met = m["coverage_claimed"] is not None and m["coverage_claimed"] >= 0.93 and m["false_alarms"] <= 0.05
    figures = (f"coverage {_pct(m['coverage_claimed'])} of {claimed} claimed intervals, false alarms "
               f"{_pct(m['false_alarms'])}")
    if claimed == m["experiments"]:
        return f"{'meets both targets' if met else 'TARGET MISSED'} ({figures})"
    return (f"the report refuses the claim in {_pct(1 - m['claimed'])} of its experiments (detected: a block's two "
            f"attempts on different nodes); where it claims: {'meets both targets' if met else 'TARGET MISSED'} "
            f"({figures})")


def section(now: list[dict], command: str) -> str:
    seconds, m = sum(x["seconds"] for x in now), now[0]
    shape = yaml.safe_load((ROOT / "experiments" / "seed-ab.yaml").read_text())
    lines = [BEGIN, "## Coverage of the ratio's interval under hostile noise (`python -m bench.coverage`)", "",
             f"Generated by `{command}` (Python {m['python']}, {m['processes']} processes on a machine of {m['cpus']} "
             f"CPUs, {seconds:.0f} s): per "
             f"condition, {now[0]['experiments']} simulated experiments with `deepep-v1` {TRUE_RATIO}x as fast as "
             f"`nccl` (coverage) and {now[0]['experiments']} with equal arms (false alarms), seeds {m['seed']} to "
             f"{m['seed'] + 2 * m['experiments'] - 1} in every condition (`bench.simulate`; `nccl` and `deepep-v1` of "
             f"`experiments/example-ab.yaml` in the shape of `experiments/seed-ab.yaml`: {shape['warmupSteps']} warm-up "
             f"and {shape['steps']} measured steps, {shape['repeats']} repeats), each read by `write_report` as "
             f"`bench report --across-node-sets` reads it. An arm's true throughput is its long-run Σtokens/Σtime "
             f"on a normal node, whatever its noise (`bench.noise.calibration`). Coverage: the share whose 95% "
             f"interval holds the true ratio (target >= 93%). False alarms: the share of equal-arm experiments "
             f"reported \"beyond the noise\" (target <= 5%). Claimed: the share where the report makes its claim; it "
             f"refuses it (`claim_refused`) when the two attempts of a block ran on different nodes (their "
             f"`nodes.json`), which is how it detects a node that one arm lands on more. \"Old headline\": the "
             f"median of each repeat's step rates with the same paired t and noise rule (the code before issue "
             f"37), computed from the same reports.", "",
             "| condition | noise on top of 3% steps and 2% per repeat | experiments | coverage | claimed | coverage "
             "where claimed | false alarms | median CI width | old headline: coverage | old headline: false alarms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [row(m) for m in now]
    lines += ["", "Verdict per condition:", ""] + [f"- {m['condition']}: {verdict(m)}." for m in now] + [END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experiments", type=int, default=500, help="per condition and scenario")
    p.add_argument("--seed", type=int, default=1, help="the first experiment's seed")
    p.add_argument("--jobs", type=int, default=2, help="processes")
    p.add_argument("--condition", action="append", choices=sorted(CONDITIONS), help="default: every condition")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    p.add_argument("--figures", type=Path, help="figures measured before (--json), instead of measuring again")
    p.add_argument("--write", action="store_true", help="replace the section of BENCHMARKS.md")
    args = p.parse_args(argv)
    now = json.loads(args.figures.read_text()) if args.figures else measure(
        args.condition or list(CONDITIONS), args.experiments, args.seed, args.jobs)
    if args.json:
        args.json.write_text(json.dumps(now, indent=1) + "\n")
    command = (f"python -m bench.coverage --experiments {now[0]['experiments']} --seed {now[0]['seed']} --jobs "
               f"{now[0]['processes']}")
    text = section(now, command)
    print(text)
    if args.write:
        from .benchmark import write_section
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()

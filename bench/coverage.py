"""How often the report's 95% interval covers the true ratio, and how often "beyond the noise" fires on
equal arms, across simulated experiments under hostile noise (a benchmark, not a test).

    python -m bench.coverage [--experiments 20000] [--claimed 2000] [--seed 1 --seed 10000001] [--jobs 2]
                             [--condition NAME ...] [--json OUT] [--write]
    python -m bench.coverage --figures OUT --write    # the section from figures measured before (elsewhere)

Each experiment is ``experiments/example-ab.yaml`` without its fault arm (``nccl`` against ``deepep-v1``)
in the shape of the seed's comparison (``experiments/seed-ab.yaml``: its warm-up, measured steps and
repeats), with its own seed. Its figures are the report's ``ratio_vs_baseline`` on what ``bench.simulate``
would write: ``drawn`` takes the simulator's draws (``bench.noise.attempt_noise``) through the report's
own arithmetic, a hundred times faster than writing the artifacts and reading them back, and ``measure``
runs each condition's first experiments through ``bench.simulate`` and ``write_report`` (as ``bench report
--across-node-sets`` reads them) too, and stops if the two differ in any figure. Two scenarios per
experiment, with independent seeds: ``deepep-v1``'s true throughput 1.1 times ``nccl``'s (coverage) and
equal (false alarms). An arm's true throughput is its long-run Σtokens/Σtime on a normal node whatever its
noise (``bench.noise.calibration``), so a stalling arm with equal throughput is equal. Each condition
(``CONDITIONS``) adds its hostile noise to 3% step noise and 2% drift per repeat. Coverage and false alarms
are counted where the report claims, each with its Wilson interval: a target is met only when that interval
is wholly on its side (``target``), so a figure within its sampling error of a target is said to be so.
Experiments continue, seed after seed, until the report claims ``--claimed`` intervals in both scenarios.
The old headline (the median of each repeat's step rates, the same paired t and noise rule) is computed
from the same draws, for comparison. ``--write`` replaces the section between the ``bench-coverage``
markers of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from statistics import median

import yaml

from .experiment import Experiment, load_experiment, schedule
from .figures import ArmFigures, arm_ratio
from .noise import attempt_noise
from .report import write_report
from .simulate import GPUS_PER_NODE, ArmTruth, Truth, rollout_figures, simulate
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
    return _result(task, arm["ratio_vs_baseline"], ratio(*medians))


def _result(task: tuple[str, int, float], new: dict, old) -> dict:
    return {"condition": task[0], "ratio": task[2], **new,
            "old": {"ci95": [old.low, old.high], "beyond_noise": old.beyond_noise}}


@cache
def _plan() -> tuple[Experiment, list[tuple[str, int, int, int]]]:
    """The experiment and, per slot of its schedule, (arm, repeat, rollout GPUs, samples per step)."""
    with tempfile.TemporaryDirectory() as tmp:
        exp = load_experiment(experiment(Path(tmp)))
    return exp, [(a.arm, a.repeat, a.run.nodes["rollout"] * GPUS_PER_NODE,
                  a.run.grpo.rollout_batch_size * a.run.grpo.n_samples_per_prompt) for a in schedule(exp)]


def drawn(task: tuple[str, int, float]) -> dict:
    """What ``one`` gives, from the simulator's draws alone (``bench.noise.attempt_noise``, the figures
    ``bench.simulate.rollout_figures`` logs) through the report's own arithmetic (``per_attempt.throughput``
    and ``step_rate_median``, ``figures.arm_ratio`` with its node rule), without writing or reading an
    attempt: a hundred times faster. ``measure`` checks it against ``one`` on each condition's first
    experiments."""
    name, seed, true_ratio = task
    (exp, slots), t = _plan(), truth(CONDITIONS[name], seed, true_ratio)
    sums: dict[str, dict[int, float]] = {"deepep-v1": {}, "nccl": {}}
    medians: dict[str, dict[int, float]] = {"deepep-v1": {}, "nccl": {}}
    nodes: dict[str, dict[int, bool]] = {"deepep-v1": {}, "nccl": {}}
    for slot, (arm_name, repeat, gpus, samples) in enumerate(slots):
        noise = attempt_noise(t, t.arm(arm_name), slot)
        steps = []
        for _ in range(noise.first, exp.total_steps):
            tput = noise.rate * noise.steps.rate() * 1.0  # bench.simulate's product, bit for bit
            steps.append(rollout_figures(tput, noise.steps.response_len(), samples, gpus))
        measured = steps[exp.warmup_steps:]
        tokens = sum(per_gpu * gpus * seconds for seconds, per_gpu in measured)
        sums[arm_name][repeat] = tokens / sum(seconds for seconds, _ in measured)
        medians[arm_name][repeat] = round(median(per_gpu * gpus for _, per_gpu in measured), 2)
        nodes[arm_name][repeat] = noise.slow
    arm, base = (ArmFigures(a, [], ArmSample(sums[a]), {}, nodes[a]) for a in ("deepep-v1", "nccl"))
    return _result(task, arm_ratio(arm, base).to_json(), ratio(*(ArmSample(medians[a]) for a in ("deepep-v1", "nccl"))))


CHECKED = 5
"""Experiments per condition and scenario that ``measure`` also runs through ``write_report`` (``one``)."""
Z95 = 1.959964
ROUNDS = 40
"""At most this many times ``--experiments`` per condition and scenario while claims are too few."""


def measure(names: list[str], n: int, seed: int, jobs: int, claimed: int = 0) -> list[dict]:
    """Per condition: ``n`` experiments at the true ratio and ``n`` with equal arms, then ``n`` more of each
    (the next seeds) until the report claims at least ``claimed`` intervals in both scenarios (at most
    ``ROUNDS`` times ``n``). The first ``CHECKED`` of each scenario must give through ``write_report``
    what ``drawn`` gives."""
    out = []
    with ProcessPoolExecutor(jobs) as pool:
        for name in names:
            t, results = time.perf_counter(), []
            while not results or (len(results) < 2 * n * ROUNDS and min(_claims(results)) < claimed):
                tasks = [(name, seed + len(results) + 2 * i + k, r) for i in range(n)
                         for k, r in enumerate((TRUE_RATIO, 1.0))]
                if not results:  # before the many: a simulator or report that does not run stops here
                    _check(pool, name, seed, [drawn(task) for task in tasks[:2 * CHECKED]])
                results += pool.map(drawn, tasks, chunksize=256)
            out.append(summarise(name, results, len(results) // 2, seed, time.perf_counter() - t))
    where = {"python": platform.python_version(), "processes": jobs, "cpus": os.cpu_count()}
    return [m | where for m in out]


def _claims(results: list[dict]) -> tuple[int, int]:
    """Claimed intervals (at the true ratio, with equal arms); ``results[i]`` is of seed ``seed + i``."""
    return tuple(sum(r["claim_refused"] is None for r in results if (r["ratio"] == 1.0) == equal)
                 for equal in (False, True))


def _check(pool, name: str, seed: int, results: list[dict]) -> None:
    tasks = [(name, seed + i, r["ratio"]) for i, r in enumerate(results[:2 * CHECKED])]
    for task, full, fast in zip(tasks, pool.map(one, tasks), results):
        if full != fast:
            raise RuntimeError(f"bench.coverage: experiment {task}: write_report gives {full}, drawn gives {fast}")


def _holds(r: dict) -> bool:
    return r["ci95"][0] <= r["ratio"] <= r["ci95"][1]


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson's 95% score interval of a share ``k / n`` (Wilson 1927): the sampling error of a figure."""
    if not n:
        return 0.0, 1.0
    p, z2 = k / n, Z95 * Z95
    centre, half = p + z2 / (2 * n), Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (centre - half) / (1 + z2 / n), (centre + half) / (1 + z2 / n)


def summarise(name: str, results: list[dict], n: int, seed: int, seconds: float) -> dict:
    true = [r for r in results if r["ratio"] != 1.0]
    equal = [r for r in results if r["ratio"] == 1.0]
    claimed = [r for r in true if r["claim_refused"] is None]
    claimed_equal = [r for r in equal if r["claim_refused"] is None]
    widths = sorted(r["ci95"][1] - r["ci95"][0] for r in true)
    covered, alarms = sum(map(_holds, claimed)), sum(r["beyond_noise"] for r in claimed_equal)
    return {"condition": name, "summary": CONDITIONS[name].summary, "experiments": n, "seed": seed,
            "coverage": sum(map(_holds, true)) / n,
            "claimed": len(claimed) / n, "claimed_n": len(claimed), "claimed_equal_n": len(claimed_equal),
            "coverage_claimed": covered / len(claimed) if claimed else None,
            "coverage_claimed_95": wilson(covered, len(claimed)),
            "false_alarms": sum(r["beyond_noise"] for r in equal) / n,
            "false_alarms_claimed": alarms / len(claimed_equal) if claimed_equal else None,
            "false_alarms_claimed_95": wilson(alarms, len(claimed_equal)),
            "refused_equal": sum(r["claim_refused"] is not None for r in equal) / n,
            "median_width": widths[n // 2],
            "old_coverage": sum(_holds({**r["old"], "ratio": r["ratio"]}) for r in true) / n,
            "old_false_alarms": sum(r["old"]["beyond_noise"] for r in equal) / n, "seconds": round(seconds, 1)}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _span(x: float | None, bounds: tuple[float, float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}% ({100 * bounds[0]:.1f}-{100 * bounds[1]:.1f})"


def row(m: dict) -> str:
    return (f"| {m['condition']} | {m['summary']} | {m['seed']} | {m['experiments']} | {_pct(m['coverage'])} | "
            f"{_pct(m['claimed'])} | "
            f"{m['claimed_n']} | {_span(m['coverage_claimed'], m['coverage_claimed_95'])} | "
            f"{_span(m['false_alarms_claimed'], m['false_alarms_claimed_95'])} | {m['median_width']:.3f} | "
            f"{_pct(m['old_coverage'])} | {_pct(m['old_false_alarms'])} |")


def target(m: dict) -> str:
    """Met, missed, or not told apart from the target by the sample: coverage >= 93% and false alarms <= 5%,
    where the report claims, each figure's Wilson interval wholly on one side."""
    cov, fa = m["coverage_claimed_95"], m["false_alarms_claimed_95"]
    if cov[0] >= 0.93 and fa[1] <= 0.05:
        return "meets both targets"
    if cov[1] < 0.93 or fa[0] > 0.05:
        return "TARGET MISSED"
    return "NOT SHOWN (a figure within its sampling error of the target)"


def verdict(m: dict) -> str:
    """Whether the condition meets the targets where the report claims, and how often it refuses."""
    figures = (f"coverage {_pct(m['coverage_claimed'])} of {m['claimed_n']} claimed intervals, false alarms "
               f"{_pct(m['false_alarms_claimed'])} of {m['claimed_equal_n']} claims on equal arms")
    if m["claimed"] == 1 and m["claimed_equal_n"] == m["experiments"]:
        return f"{target(m)} ({figures})"
    return (f"the report refuses the claim in {_pct(1 - m['claimed'])} of its experiments (detected: a block's two "
            f"attempts on different nodes); where it claims: {target(m)} ({figures})")


def section(now: list[dict], command: str) -> str:
    now = sorted(now, key=lambda x: (list(CONDITIONS).index(x["condition"]), x["seed"]))
    seconds, m = sum(x["seconds"] for x in now), now[0]
    shape = yaml.safe_load((ROOT / "experiments" / "seed-ab.yaml").read_text())
    seeds = sorted({x["seed"] for x in now})
    lines = [BEGIN, "## Coverage of the ratio's interval under hostile noise (`python -m bench.coverage`)", "",
             f"Generated by `{command}` (Python {m['python']}, {m['processes']} processes on a machine of {m['cpus']} "
             f"CPUs, {seconds:.0f} s in all). Per condition and first seed ({', '.join(map(str, seeds))}): "
             f"simulated experiments with `deepep-v1` {TRUE_RATIO}x as fast as `nccl` (coverage) and as many with equal "
             f"arms (false alarms), seed after seed, at least {m['min_experiments']} of each and more until the report "
             f"claims at least {m['min_claimed']} intervals in both (`nccl` and `deepep-v1` of "
             f"`experiments/example-ab.yaml` in the shape of `experiments/seed-ab.yaml`: {shape['warmupSteps']} warm-up "
             f"and {shape['steps']} measured steps, {shape['repeats']} repeats). Each experiment is the simulator's "
             f"draws (`bench.noise.attempt_noise`) through the report's own arithmetic (`bench.coverage.drawn`); the "
             f"first {CHECKED} of each condition, seed and scenario also go through `bench.simulate` and `write_report` "
             f"as `bench report --across-node-sets` reads them, and must give the same figures. An arm's true "
             f"throughput is its long-run Σtokens/Σtime on a normal node, whatever its noise "
             f"(`bench.noise.calibration`). Coverage: the share whose 95% interval holds the true ratio (target >= "
             f"93%). False alarms: the share of equal-arm experiments reported \"beyond the noise\" (target <= 5%). "
             f"Both are given where the report claims, with their Wilson 95% interval in brackets (the sampling "
             f"error): a target is met when the whole interval is on its side. Claimed: the share where the report "
             f"makes its claim; it refuses it (`claim_refused`) when the two attempts of a block ran on different "
             f"nodes (their `nodes.json`), which is how it detects a node that one arm lands on more. \"Old "
             f"headline\": the median of each repeat's step rates with the same paired t and noise rule (the code "
             f"before issue 37), over every experiment.", "",
             "| condition | noise on top of 3% steps and 2% per repeat | seed | experiments | coverage | claimed | claimed "
             "intervals | coverage where claimed | false alarms where claimed | median CI width | old headline: "
             "coverage | old headline: false alarms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [row(x) for x in now]
    lines += ["", "Verdict per condition and seed:", ""]
    lines += [f"- {x['condition']}, seed {x['seed']}: {verdict(x)}." for x in now] + [END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experiments", type=int, default=20000, help="at least, per condition and scenario")
    p.add_argument("--claimed", type=int, default=2000, help="claimed intervals per condition and scenario, at least")
    p.add_argument("--seed", type=int, action="append", help="a first seed (repeat for more; default 1)")
    p.add_argument("--jobs", type=int, default=2, help="processes")
    p.add_argument("--condition", action="append", choices=sorted(CONDITIONS), help="default: every condition")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    p.add_argument("--figures", type=Path, action="append",
                   help="figures measured before (--json; repeat to join runs), instead of measuring again")
    p.add_argument("--write", action="store_true", help="replace the section of BENCHMARKS.md")
    args = p.parse_args(argv)
    names = args.condition or list(CONDITIONS)
    seeds = sorted(args.seed or [1])
    if any(b < a + 2 * args.experiments * ROUNDS for a, b in zip(seeds, seeds[1:])):
        p.error(f"seeds {seeds}: each first seed must be {2 * args.experiments * ROUNDS} past the one before, so no "
                f"experiment is drawn twice")
    now = [m for path in args.figures for m in json.loads(path.read_text())] if args.figures else [
        m | {"min_experiments": args.experiments, "min_claimed": args.claimed}
        for seed in seeds for m in measure(names, args.experiments, seed, args.jobs, args.claimed)]
    if args.json:
        args.json.write_text(json.dumps(now, indent=1) + "\n")
    given = " ".join(f"--seed {s}" for s in dict.fromkeys(x["seed"] for x in now))
    command = (f"python -m bench.coverage --experiments {now[0]['min_experiments']} --claimed {now[0]['min_claimed']} "
               f"{given} --jobs {now[0]['processes']}")
    text = section(now, command)
    print(text)
    if args.write:
        from .benchmark import write_section
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()

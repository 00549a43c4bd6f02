"""The offline plan of p5en-prod as a ratio to its import floor, for BENCHMARKS.md.

    python benchmarks/import_floor.py [--runs 7] [--write]   # --write rewrites its section of BENCHMARKS.md

The floor is a fresh process that imports the SDKs the plan needs: ``pulumi, pulumi_aws,
pulumi_kubernetes, pydantic, yaml``. The plan is ``moe-rl plan p5en-prod`` as typed (its own process:
analysis.plan.own_process, the SDKs trimmed to the program's classes by analysis/sdk_subset.py, whose
cache one plan writes first). For comparison, the same plan run as a library call in a process it does
not own (``analysis.plan.main``, as ``python -m analysis.plan`` runs it: the SDKs in full, every object
freed at exit).
Each figure is the median of ``--runs`` fresh processes, run in turn, as CPU time (user + system of the
child, which load on a shared machine changes far less than wall time) and wall time. A child process
also splits one plan into its phases.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sections import rewrite  # benchmarks/sections.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
STACK = "p5en-prod"
BEGIN, END = "<!-- plan-import-floor -->", "<!-- /plan-import-floor -->"
BARE = "import pulumi, pulumi_aws, pulumi_kubernetes, pydantic, yaml"
LIMIT = 6.0
"""The plan's most: 6x its import floor (CPU); above it, this script exits 1 (after writing its figures)."""

PROCESSES = {
    "plan": [str(Path(sys.executable).with_name("moe-rl")), "plan", STACK],  # the installed command
    "floor": [sys.executable, "-c", BARE],
    "library": [sys.executable, "-c", f"import sys; from analysis import plan; sys.exit(plan.main([{STACK!r}]))"],
}
_PHASES = f"""
import gc, json, time
t = time.process_time
start = t()
gc.disable()
{BARE}
floor = t()
from analysis import plan, sdk_subset
trimmed_in = t()
sdk_subset.install()
trimmed = t()
from analysis.planning import make_plan
from workloads.checks import gate
import program
project = t()
cfg = gate.typed({STACK!r})
if gate.field_problems(cfg): raise SystemExit("the stack does not pass the gate")
placements = plan.workload_placements(cfg)
checked = t()
graph = plan.record(cfg)
recorded = t()
plan.render_text(make_plan(cfg, graph, *placements))
done = t()
print(json.dumps({{"sdk_imports": floor - start, "project_imports": trimmed_in - floor + project - trimmed,
                  "trimmed_sdks_installed": trimmed - trimmed_in, "gate_and_placements": checked - project,
                  "program_under_mocks_with_its_sdk_classes": recorded - checked,
                  "rules_and_text": done - recorded}}))
"""


def _child(args: list[str]) -> tuple[float, float, str]:
    """(CPU s, wall s, stdout) of one fresh process run from the repository root."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall, done.stdout


def measure(runs: int) -> dict:
    text = _child(PROCESSES["plan"])[2]  # also writes the trimmed SDKs' cache, once per SDK versions and program
    if text != _child(PROCESSES["library"])[2]:
        raise SystemExit("moe-rl plan and analysis.plan.main print different plans")
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in PROCESSES}
    for _ in range(runs):
        for name, args in PROCESSES.items():
            samples[name].append(_child(args)[:2])
    phases = json.loads(_child([sys.executable, "-c", _PHASES])[2])
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in samples.items()}
    return {"runs": runs, "median": med, "phases": phases, "load": os.getloadavg()[0]}


def section(m: dict) -> str:
    (plan_cpu, plan_wall), (floor_cpu, floor_wall), (lib_cpu, lib_wall) = (m["median"][k] for k in PROCESSES)
    ratio = plan_cpu / floor_cpu
    phases = ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in m["phases"].items())
    return "\n".join([
        BEGIN, f"## The offline plan against its import floor ({STACK})", "",
        f"Written by `python benchmarks/import_floor.py --runs {m['runs']} --write` on "
        f"{datetime.date.today().isoformat()}; medians of {m['runs']} fresh processes, CPU time (user + system) "
        f"and wall time, on the machine above (load average {m['load']:.1f} when written: other work stretches "
        f"wall time far more than CPU time).", "",
        "| process | CPU s | wall s | it / floor (CPU) |", "|---|---:|---:|---:|",
        f"| `moe-rl plan {STACK}` | {plan_cpu:.2f} | {plan_wall:.2f} | **{ratio:.2f}x** |",
        f"| import floor: `{BARE}` | {floor_cpu:.2f} | {floor_wall:.2f} | 1.00x |",
        f"| the same plan as a library call (`analysis.plan.main`: the SDKs in full, objects freed at exit) "
        f"| {lib_cpu:.2f} | {lib_wall:.2f} | {lib_cpu / floor_cpu:.2f}x |", "",
        f"The plan takes {ratio:.2f}x its import floor (the most allowed: {LIMIT:.0f}x), every check kept: it "
        f"prints the library call's plan, byte for byte (checked as this is written), and "
        f"tests/test_sdk_subset.py compares every stack's registered graph with the SDKs' in full. One plan's phases (CPU, one process, cyclic collection off as "
        f"in the plan's own): {phases}. The trimmed SDKs load lazily, so their classes are counted in the "
        f"program's phase.",
        END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--write", action="store_true", help="rewrite this section of BENCHMARKS.md")
    args = parser.parse_args()
    measured = measure(args.runs)
    text = section(measured)
    print(text)
    if args.write:
        rewrite(ROOT / "BENCHMARKS.md", text, BEGIN, END)
    plan_cpu, floor_cpu = measured["median"]["plan"][0], measured["median"]["floor"][0]
    if plan_cpu > LIMIT * floor_cpu:
        raise SystemExit(f"the plan takes {plan_cpu / floor_cpu:.2f}x its import floor, more than {LIMIT:.0f}x")


if __name__ == "__main__":
    main()

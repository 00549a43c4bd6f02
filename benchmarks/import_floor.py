"""The offline plan of p5en-prod as a ratio to its import floor, for BENCHMARKS.md.

    python benchmarks/import_floor.py [--runs 5] [--write]   # --write rewrites its section of BENCHMARKS.md

The floor is a fresh process that imports every third-party module the plan loads (the SDKs it needs:
pulumi, pulumi_aws's and pulumi_kubernetes' modules of the resources the program declares, pydantic,
PyYAML, pulumi_policy, parliament), listed by a plan run in a child process in the order it loads them;
the bare floor imports only ``pulumi, pulumi_aws, pulumi_kubernetes, pydantic, yaml`` (pulumi_aws loads
a service's modules on first use, so it leaves out most of what the plan cannot do without). Each figure
is the median of ``--runs`` fresh processes, run in turn, as CPU time (user + system of the child, which
load on a shared machine changes far less than wall time) and wall time. A child process also splits one
plan into its phases (``--phases``).
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
import tempfile
import time
from pathlib import Path

from sections import rewrite  # benchmarks/sections.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
STACK = "p5en-prod"
BEGIN, END = "<!-- plan-import-floor -->", "<!-- /plan-import-floor -->"
BARE = "import pulumi, pulumi_aws, pulumi_kubernetes, pydantic, yaml"
LIMIT = 6.0
"""The plan's most: 6x its import floor (CPU)."""

_LIST = f"""
import io, json, sys
from analysis import plan
out, sys.stdout = sys.stdout, io.StringIO()
plan.main([{STACK!r}])
sys.stdout = out
print(json.dumps([n for n, m in list(sys.modules.items()) if m is not None
                  and "site-packages" in (getattr(m, "__file__", None) or "")]))
"""
_FLOOR = "import importlib, json, sys\nfor m in json.load(open(sys.argv[1])): importlib.import_module(m)\n"
_PHASES = f"""
import importlib, io, json, sys, time
t = time.process_time
start = t()
for m in json.load(open(sys.argv[1])): importlib.import_module(m)
sdk = t()
from analysis import plan
from analysis.planning import make_plan
from workloads.checks import gate
project = t()
cfg = gate.typed({STACK!r})
if gate.field_problems(cfg): raise SystemExit("the stack does not pass the gate")
placements = plan.workload_placements(cfg)
checked = t()
graph = plan.record(cfg)
recorded = t()
plan.render_text(make_plan(cfg, graph, *placements))
done = t()
print(json.dumps({{"sdk_imports": sdk - start, "project_imports": project - sdk, "gate_and_placements": checked - project,
                  "program_under_mocks": recorded - checked, "rules_and_text": done - recorded}}))
"""


def _child(args: list[str]) -> tuple[float, float, str]:
    """(CPU s, wall s, stdout) of one fresh ``python`` process run from the repository root."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall, done.stdout


def measure(runs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        modules = Path(tmp) / "modules.json"
        modules.write_text(_child(["-c", _LIST])[2])
        count = len(json.loads(modules.read_text()))
        samples: dict[str, list[tuple[float, float]]] = {"plan": [], "floor": [], "bare": []}
        for _ in range(runs):
            samples["plan"].append(_child(["-m", "analysis.plan", STACK])[:2])
            samples["floor"].append(_child(["-c", _FLOOR, str(modules)])[:2])
            samples["bare"].append(_child(["-c", BARE])[:2])
        phases = json.loads(_child(["-c", _PHASES, str(modules)])[2])
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in samples.items()}
    return {"runs": runs, "modules": count, "median": med, "phases": phases, "load": os.getloadavg()[0]}


def section(m: dict) -> str:
    (plan_cpu, plan_wall), (floor_cpu, floor_wall), (bare_cpu, bare_wall) = (m["median"][k] for k in
                                                                             ("plan", "floor", "bare"))
    ratio = plan_cpu / floor_cpu
    phases = ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in m["phases"].items())
    return "\n".join([
        BEGIN, f"## The offline plan against its import floor ({STACK})", "",
        f"Written by `python benchmarks/import_floor.py --runs {m['runs']} --write` on "
        f"{datetime.date.today().isoformat()}; medians of {m['runs']} fresh processes, CPU time (user + system) "
        f"and wall time, on the machine above (load average {m['load']:.1f} when written: other work stretches "
        f"wall time far more than CPU time).", "",
        "| process | CPU s | wall s | plan / it (CPU) |", "|---|---:|---:|---:|",
        f"| `python -m analysis.plan {STACK}` | {plan_cpu:.2f} | {plan_wall:.2f} | 1.00x |",
        f"| import floor: the {m['modules']} third-party modules the plan loads | {floor_cpu:.2f} | {floor_wall:.2f} "
        f"| **{ratio:.2f}x** |",
        f"| bare floor: `{BARE}` | {bare_cpu:.2f} | {bare_wall:.2f} | {plan_cpu / bare_cpu:.1f}x |", "",
        f"The plan takes {ratio:.2f}x its import floor (the most allowed: {LIMIT:.0f}x). One plan's phases (CPU, one "
        f"process): {phases}. The bare floor leaves out what the plan cannot do without: pulumi_aws and "
        f"pulumi_kubernetes load the module of every resource type of a service or API group (ec2, eks, iam, ...; "
        f"apps/v1, rbac, ...) on first use; that is most of the floor, and of the plan, and no check of ours is in "
        f"it. Checks and rules together are the gate, placements, rules and text phases.",
        END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="rewrite this section of BENCHMARKS.md")
    args = parser.parse_args()
    text = section(measure(args.runs))
    print(text)
    if args.write:
        rewrite(ROOT / "BENCHMARKS.md", text, BEGIN, END)


if __name__ == "__main__":
    main()

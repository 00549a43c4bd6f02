"""``python -m bench report DIR``: read only the collected artifacts and write ``report.json``,
``report.md`` and the SVG plots into DIR. Runs anywhere, offline.

Guarantees: artifacts that do not add up fail with one line (``ArtifactError``) and no report is
written; a directory the simulator made (``simulated.json``) says so in the report's first line.
"""

from __future__ import annotations

import json
from pathlib import Path

from .artifacts import read_experiment_dir
from .cost import load_prices
from .figures import compute
from .render import cost_svg, faults_svg, markdown, throughput_svg

SIMULATED_FILE = "simulated.json"


def write_report(root: Path, stack: str | None = None) -> dict:
    root = Path(root)
    exp, collected = read_experiment_dir(root)
    report = compute(exp, collected, load_prices(stack))
    if stack:  # each link's changes as the arms render on the experiment's stack (bench/arms.py)
        from .arms import rendered_link_changes
        rendered_link_changes(report, exp, exp.stack)
    simulated = None
    if (root / SIMULATED_FILE).is_file():
        simulated = json.loads((root / SIMULATED_FILE).read_text()).get("note", "bench/simulate.py")
        report["simulated"] = simulated
    compared = {a.name: [c for c in collected if c.attempt.arm == a.name] for a in exp.arms if not a.faults}
    (root / "report.json").write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    (root / "report.md").write_text(markdown(report, simulated))
    (root / "throughput.svg").write_text(throughput_svg(compared))
    (root / "cost.svg").write_text(cost_svg(report))
    faulted = [c for c in collected if c.faults]
    if faulted:
        (root / "faults.svg").write_text(faults_svg(faulted))
    return report

"""``python -m bench report DIR``: read only the collected artifacts and write ``report.json``,
``report.md`` and (unless ``plots`` is false) the SVG plots into DIR. Runs anywhere, offline.

Guarantees: artifacts that do not add up fail with one line (``ArtifactError``) and no report is
written; report.json holds no NaN or infinity (``allow_nan=False``: a figure that is not a number has
been refused before, naming attempt, step and key); without plots matplotlib is not imported
(``bench.plots``); a directory the simulator made
(``simulated.json``) says so in the report's first line. ``spot_client`` (a boto3 EC2 client) first
collects the Spot prices of the attempts' Spot nodes into ``spot-prices.json`` (``cost``).
"""

from __future__ import annotations

import json
from pathlib import Path

from stackconfig.files import STACKS_DIR

from .artifacts import read_experiment_dir
from .checks import node_set
from .cost import SPOT_FILE, collect_spot_prices, load_prices
from .figures import compute
from .render import markdown

SIMULATED_FILE = "simulated.json"


def write_report(root: Path, stack: str | None = None, across_node_sets: bool = False,
                 spot_client: object | None = None, plots: bool = True, stack_dir: Path = STACKS_DIR) -> dict:
    root = Path(root)
    exp, collected = read_experiment_dir(root)
    if spot_client is not None:
        wanted = {}
        for c in collected:
            zones = node_set(root, c)["zones"]
            for n in c.nodes:
                if n.capacity_type == "SPOT":
                    key = f"{n.instance_type} {zones.get(n.name, '')}"
                    lo, hi = wanted.get(key, (c.start, c.end))
                    wanted[key] = (min(lo, c.start), max(hi, c.end))
        (root / SPOT_FILE).write_text(json.dumps(collect_spot_prices(spot_client, wanted), indent=1) + "\n")
    report = compute(exp, collected, load_prices(stack, root, stack_dir), root, across_node_sets)
    if stack:  # each link's changes as the arms render on the experiment's stack (bench/arms.py)
        from .arms import rendered_link_changes
        rendered_link_changes(report, exp, exp.stack, stack_dir)
    simulated = None
    if (root / SIMULATED_FILE).is_file():
        simulated = json.loads((root / SIMULATED_FILE).read_text()).get("note", "bench/simulate.py")
        report["simulated"] = simulated
    compared = {a.name: [c for c in collected if c.attempt.arm == a.name] for a in exp.arms if not a.faults}
    (root / "report.json").write_text(json.dumps(report, indent=1, sort_keys=False, allow_nan=False) + "\n")
    (root / "report.md").write_text(markdown(report, simulated, plots))
    if not plots:
        return report
    from .plots import cost_svg, faults_svg, throughput_svg
    label = simulated is not None
    (root / "throughput.svg").write_text(throughput_svg(compared, exp.warmup_steps, simulated=label))
    (root / "cost.svg").write_text(cost_svg(report, simulated=label))
    faulted = [c for c in collected if c.faults]
    if faulted:
        figures = {folder: figs for arm in report["faults"].values() for folder, figs in arm.items()}
        (root / "faults.svg").write_text(faults_svg(faulted, figures, simulated=label))
    return report

"""`python -m bench report` reads artifacts offline: it loads neither Pulumi, the AWS provider nor
the components (their import alone took longer than the report's own work), nor matplotlib unless it
draws the plots; a stack it is given still fails in one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.simulate import ArmTruth, Truth, simulate

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pulumi", "pulumi_aws", "components")
PLOTTING = "matplotlib"
TRUTH = Truth(arms={arm: ArmTruth(tokens_per_s=50000) for arm in ("nccl", "deepep-v1", "deepep-v1-faults")})
LOADED = "import json, sys; {run}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"


def top_level_modules(run: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after ``run``."""
    done = subprocess.run([sys.executable, "-c", LOADED.format(run=run)], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.fixture()
def simulated(tmp_path: Path) -> Path:
    simulate(Path("experiments/example-ab.yaml"), TRUTH, tmp_path / "d")
    return tmp_path / "d"


def test_importing_the_report_and_its_plots_loads_no_pulumi_components_or_matplotlib():
    """matplotlib is imported by the plotting functions, when they draw."""
    assert not top_level_modules("import bench.__main__, bench.report, bench.plots") & {*HEAVY, PLOTTING}


def test_the_report_command_without_plots_loads_no_pulumi_components_or_matplotlib(simulated: Path):
    loaded = top_level_modules(f"from bench.__main__ import main; assert main(['report', {str(simulated)!r}, "
                               f"'--no-plots']) == 0")
    assert not loaded & {*HEAVY, PLOTTING}
    assert (simulated / "report.md").is_file() and not (simulated / "cost.svg").exists()


def test_a_stack_that_does_not_exist_fails_in_one_line(simulated: Path, capsys):
    assert main(["report", str(simulated), "--stack", "no-such-stack"]) == 2  # an unknown stack is an invalid input (workloads.cli.base)
    err = capsys.readouterr().err
    assert err.startswith("bench: stack 'no-such-stack': no stack file") and err.count("\n") == 1

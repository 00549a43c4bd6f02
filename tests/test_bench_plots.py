"""The report's plots (bench.plots), read back as SVG XML: what is drawn is the data, against ticks
that say where it is, with the legends naming what is drawn, outside the plot area."""

import copy
import json
import shutil
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from pathlib import Path
from statistics import median

import pytest

from bench.__main__ import main
from bench.artifacts import read_experiment_dir
from bench.plots import BAR, FAULT, PLOT_AREA, SERIES, STAGGER, faults_svg
from bench.simulate import ArmTruth, Truth, simulate
from svgread import NUMBER, axis_labels, by_id, one, points, right_of, texts, ticks, y_scale

EXPERIMENT = Path("experiments/example-ab.yaml")
TRUTH = Truth(arms={"nccl": ArmTruth(tokens_per_s=50000), "deepep-v1": ArmTruth(tokens_per_s=60000),
                    "deepep-v1-faults": ArmTruth(tokens_per_s=60000)}, seed=4, capacity_type="ON_DEMAND")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("plots") / "d"
    simulate(EXPERIMENT, TRUTH, root)
    assert main(["report", str(root)]) == 0
    return root


def svg(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def legend_beside_the_plot(root: ET.Element, title: str) -> list[str]:
    """The legend's labels (title first), after checking that it lies right of the plot area."""
    legend = one(root, f"legend:{title}")
    assert right_of(legend, one(root, PLOT_AREA))
    return texts(legend)


def test_throughput_draws_each_repeat_of_each_arm_against_its_ticks(made: Path):
    root = svg(made / "throughput.svg")
    report = json.loads((made / "report.json").read_text())
    arms = list(report["arms"])
    lines = by_id(root, f"{SERIES}:")
    assert set(lines) == {f"{SERIES}:{a}:r{r}" for a in arms for r in (1, 2, 3)}
    assert legend_beside_the_plot(root, "arm") == ["arm", *arms]
    assert legend_beside_the_plot(root, "repeat") == ["repeat", "r1", "r2", "r3", "warm-up (3 steps)"]
    assert axis_labels(root) == ["rollout step", "tokens/s"]
    assert "Rollout throughput per step (whole rollout pool)" in texts(root)
    ys = ticks(root, "y")
    assert len(ys) >= 4 and all(NUMBER.match(t) for _, t in ys) and "0" == ys[0][1]
    assert [int(t) for _, t in ticks(root, "x")] == sorted(int(t) for _, t in ticks(root, "x"))
    value = y_scale(root)
    for arm in arms:
        drawn = [value(y) for r in (1, 2, 3) for _, y in points(lines[f"{SERIES}:{arm}:r{r}"])]
        assert len(drawn) == 3 * report["warmup_steps"] + 3 * report["measured_steps"]
        assert median(drawn) == pytest.approx(report["arms"][arm]["rollout_tokens_per_s"]["step_rate"]["median"], rel=0.03)


def test_cost_bars_are_the_reported_figures(made: Path):
    root = svg(made / "cost.svg")
    report = json.loads((made / "report.json").read_text())
    arms = list(report["arms"])
    assert [t for _, t in ticks(root, "x")] == arms
    assert legend_beside_the_plot(root, "cost over") == ["cost over", "whole attempt", "steady state"]
    assert axis_labels(root) == ["arm", "USD / M tokens"]
    value = y_scale(root)
    for arm in arms:
        for kind, key in (("whole attempt", "usd_per_million_tokens"), ("steady state", "steady_usd_per_million_tokens")):
            top = min(y for _, y in points(one(root, f"{BAR}:{arm}:{kind}")))
            assert value(top) == pytest.approx(report["arms"][arm][key], rel=0.005)
            assert f"{report['arms'][arm][key]:,.3f}" in texts(root)


def test_faults_draw_each_kill_and_detection_per_repeat(made: Path):
    root = svg(made / "faults.svg")
    report = json.loads((made / "report.json").read_text())["faults"]["deepep-v1-faults"]
    faults = {r: report[f"deepep-v1-faults/r{r}"] for r in (1, 2, 3)}
    expected = {f"{FAULT}:{f['kind']}:r{r}:{event}" for r, fs in faults.items() for f in fs
                for key, event in (("killedAt", "killed"), ("runDetectedAt", "run-reacted"),
                                   ("platformDetectedAt", "platform-reacted")) if f.get(key)}
    assert len(expected) >= 6 and set(by_id(root, f"{FAULT}:")) == expected
    assert set(by_id(root, f"{SERIES}:")) == {f"{SERIES}:r{r}" for r in (1, 2, 3)}
    assert legend_beside_the_plot(root, "repeat") == ["repeat", "r1", "r2", "r3"]
    assert legend_beside_the_plot(root, "fault") == ["fault", "killed", "run reacted", "platform reacted"]
    assert axis_labels(root) == ["seconds since the attempt's RayJob started", "tokens/s"]
    kinds = {f["kind"] for fs in faults.values() for f in fs}
    assert {texts(g)[0].strip() for g in by_id(root, f"{FAULT}-label:").values()} == kinds


def test_fault_labels_close_together_go_on_different_rows(made: Path):
    _, collected = read_experiment_dir(made)
    attempt = copy.deepcopy(next(c for c in collected if c.faults))
    first = datetime.fromisoformat(attempt.faults[0]["injectedAt"].replace("Z", "+00:00"))
    figures = {attempt.attempt.folder: [{"kind": f"kind-{i}", "killedAt": (first + timedelta(seconds=10 * i)).isoformat()}
                                        for i in range(len(attempt.faults))]}  # every fault within a small share
    root = ET.fromstring(faults_svg([attempt], figures))
    labels = by_id(root, f"{FAULT}-label:")
    assert len(labels) == len(attempt.faults) >= 2
    rows = {float(t.get("y")) for g in labels.values() for t in g.iter() if t.tag.endswith("text")}
    assert len(rows) == len(labels)
    assert STAGGER * (attempt.end - attempt.start).total_seconds() > 10 * len(labels)


def test_the_same_input_gives_the_same_bytes(made: Path, tmp_path: Path):
    shutil.copytree(made, tmp_path / "d")
    assert main(["report", str(tmp_path / "d")]) == 0
    for name in ("throughput.svg", "cost.svg", "faults.svg"):
        assert (tmp_path / "d" / name).read_bytes() == (made / name).read_bytes()


def test_no_plots_writes_no_svg_and_names_none(made: Path, tmp_path: Path):
    shutil.copytree(made, tmp_path / "d", ignore=shutil.ignore_patterns("*.svg", "report.*"))
    assert main(["report", str(tmp_path / "d"), "--no-plots"]) == 0
    assert not list((tmp_path / "d").glob("*.svg"))
    assert "Plots:" not in (tmp_path / "d" / "report.md").read_text()
    assert "Plots: `throughput.svg`, `cost.svg`, `faults.svg`." in (made / "report.md").read_text()

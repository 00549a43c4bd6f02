"""`python -m bench report` on directories the simulator made: the configured figures come back."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from bench.__main__ import main
from bench.simulate import ArmTruth, Truth, simulate

EXPERIMENT = Path("experiments/example-ab.yaml")
TRUTH = Truth(arms={"nccl": ArmTruth(tokens_per_s=50000, repeat_drift=0.0, response_len=3000, efa_gbps=40, gpu_util=60),
                    "deepep-v1": ArmTruth(tokens_per_s=60000, repeat_drift=0.0, response_len=3000, efa_gbps=50,
                                          gpu_util=70),
                    "deepep-v1-faults": ArmTruth(tokens_per_s=60000, repeat_drift=0.0)}, seed=3,
              capacity_type="ON_DEMAND")


@pytest.fixture()
def simulated(tmp_path: Path) -> Path:
    simulate(EXPERIMENT, TRUTH, tmp_path / "d")
    return tmp_path / "d"


def test_report_finds_the_configured_figures(simulated: Path):
    assert main(["report", str(simulated), "--no-plots"]) == 0
    report = json.loads((simulated / "report.json").read_text())
    nccl, deepep = report["arms"]["nccl"], report["arms"]["deepep-v1"]
    lo, hi = deepep["ratio_vs_baseline"]["ci95"]
    assert lo <= 60000 / 50000 <= hi
    assert deepep["ratio_vs_baseline"]["beyond_noise"] is True
    assert nccl["rollout_tokens_per_s"]["throughput"] == pytest.approx(50000, rel=0.02)
    assert nccl["rollout_tokens_per_s"]["step_rate"]["iqr"][0] <= 50000 <= nccl["rollout_tokens_per_s"]["step_rate"]["iqr"][1]
    util = nccl["utilisation_measured_window"]
    assert util["rollout"]["gpu_util"] == pytest.approx(60, rel=0.03) and util["train"]["gpu_util"] == pytest.approx(60, rel=0.03)
    assert deepep["utilisation_measured_window"]["rollout"]["efa_gbps"] == pytest.approx(50, rel=0.03)
    assert nccl["mean_response_len"] == pytest.approx(3000, rel=0.02)
    # 4 on-demand p5en nodes held per attempt at the catalog's on-demand price
    assert nccl["price_basis"] == ["catalog on-demand p5en.48xlarge, us-east-1"]
    assert nccl["cost_usd"] > 0 and nccl["usd_per_million_tokens"] > deepep["usd_per_million_tokens"]
    assert report["decomposition"]["links"][0]["share"] == pytest.approx(1.0)
    assert report["decomposition"]["links"][0]["changes"] == {"deepep.version": ["off", "v1"]}  # run-file fields
    # with --stack: what the link changes as the arms render on the stack (bench/arms.py)
    assert main(["report", str(simulated), "--stack", "p5en-shared", "--no-plots"]) == 0
    rendered = json.loads((simulated / "report.json").read_text())["decomposition"]["links"][0]["changes"]
    assert rendered["argv.--sglang-moe-a2a-backend"] == [None, "deepep"]
    md = (simulated / "report.md").read_text()
    assert md.startswith("**Made by the simulator, not measured")


def test_fault_figures(simulated: Path):
    assert main(["report", str(simulated), "--no-plots"]) == 0
    faults = json.loads((simulated / "report.json").read_text())["faults"]["deepep-v1-faults"]["deepep-v1-faults/r1"]
    rollout, trainer = faults
    assert rollout["kind"] == "delete-rollout-pod" and rollout["steps_lost"] == 0
    assert rollout["run_detection_s"] == 20.0 and rollout["back_to_steady_s"] is not None
    assert rollout["run_detected_by"].startswith("Miles health check failed")
    # KubeRay makes the deleted pod again before the run notices (a grace-0 delete removes the Pod at once)
    for f in faults:
        assert f["platform_detected_by"].startswith("KubeRay Event CreatedWorkerPod")
        assert 0 < f["platform_detection_s"] < f["run_detection_s"]
    # trainer lost after step 24 with saveInterval 10: the resume starts at step 20, steps 20-24 redone
    assert trainer["resumed_at_step"] == 20 and trainer["steps_lost"] == 5 and trainer["resumed_from_last_checkpoint"]
    assert trainer["tokens_lost"] > 0


def test_equal_arms_are_not_beyond_the_noise(tmp_path: Path):
    same = Truth(arms={"nccl": ArmTruth(tokens_per_s=50000, repeat_drift=0.05),
                       "deepep-v1": ArmTruth(tokens_per_s=50000, repeat_drift=0.05),
                       "deepep-v1-faults": ArmTruth(tokens_per_s=50000)}, seed=11)
    simulate(EXPERIMENT, same, tmp_path / "d")
    assert main(["report", str(tmp_path / "d"), "--no-plots"]) == 0
    report = json.loads((tmp_path / "d" / "report.json").read_text())
    assert report["arms"]["deepep-v1"]["ratio_vs_baseline"]["beyond_noise"] is False
    assert report["decomposition"]["links"][0]["share"] is None
    assert "Shares withheld" in (tmp_path / "d" / "report.md").read_text()


def test_different_work_is_stated(tmp_path: Path):
    longer = Truth(arms={**TRUTH.arms, "deepep-v1": ArmTruth(tokens_per_s=60000, response_len=4000)}, seed=5)
    simulate(EXPERIMENT, longer, tmp_path / "d")
    assert main(["report", str(tmp_path / "d"), "--no-plots"]) == 0
    assert "Different work: mean response length +3" in (tmp_path / "d" / "report.md").read_text()  # truly +33%


def _fails(root: Path, capsys) -> str:
    assert main(["report", str(root)]) == 1
    assert not (root / "report.json").exists()
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


def test_missing_arm_fails_in_one_line(simulated: Path, capsys):
    shutil.rmtree(simulated / "deepep-v1" / "r2")
    assert "deepep-v1/r2: no folder" in _fails(simulated, capsys)


def test_no_measured_step_fails(simulated: Path, capsys):
    log = simulated / "nccl" / "r1" / "driver.log"
    log.write_text("\n".join(line for line in log.read_text().splitlines() if "tokens_per_gpu_per_sec" not in line))
    assert "nccl/r1: no measured step" in _fails(simulated, capsys)


def test_log_of_another_run_fails(simulated: Path, capsys):
    other = simulated / "nccl" / "r1" / "rayjob.json"
    other.write_text(other.read_text().replace("example-ab-nccl-r1", "someone-else"))
    assert "not of run 'example-ab-nccl-r1'" in _fails(simulated, capsys)


def test_steps_beyond_the_run_fail(simulated: Path, capsys):
    log = simulated / "nccl" / "r2" / "driver.log"
    log.write_text(log.read_text().replace("perf 20:", "perf 900:"))
    assert "step 900, beyond the run's 33 steps" in _fails(simulated, capsys)


def test_the_shipped_example_is_the_simulators_and_current(tmp_path: Path):
    """examples/bench-report is the simulator's, and its report and plots are what `report` writes today
    (byte for byte, so the plots are also reproducible): per-repeat tables, the evidence per arm and the
    price basis."""
    root = Path("examples/bench-report")
    md = (root / "report.md").read_text()
    assert md.splitlines()[0].startswith("**Made by the simulator, not measured")
    assert json.loads((root / "simulated.json").read_text())["note"]
    for text in ("## Per repeat", "## Evidence per arm", "## Price basis", "Tokens: generated response tokens"):
        assert text in md
    from bench.simulate import EXAMPLE_TRUTH
    simulate(Path("experiments/example-ab.yaml"), EXAMPLE_TRUTH, tmp_path / "sim")  # the artifacts are today's too
    made = sorted(p.relative_to(tmp_path / "sim") for p in (tmp_path / "sim").rglob("*") if p.is_file())
    assert [p for p in made if (tmp_path / "sim" / p).read_bytes() != (root / p).read_bytes()] == []
    shutil.copytree(root, tmp_path / "d")
    assert main(["report", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d" / "report.md").read_text() == md
    for name in ("throughput.svg", "cost.svg", "faults.svg"):
        assert (tmp_path / "d" / name).read_bytes() == (root / name).read_bytes(), name
        assert "Made by the simulator, not measured" in (root / name).read_text(), name  # read alone too


def test_the_headline_is_throughput_not_the_median_step(tmp_path: Path):
    """Miles logs per step sum(response_lengths)/rollout_time/rollout_num_gpus (radixark/miles@49cac7b5
    miles/ray/rollout/metrics.py:149); an arm's throughput is Σtokens/Σtime. An arm whose steps are faster
    but one in five stalls at a third of the speed delivers 14% less (its long-run Σtokens/Σtime, the
    simulator's tokens_per_s): the median step said about +10%, beyond the noise."""
    stalls = ArmTruth(tokens_per_s=43000, stall_share=0.2, stall_slowdown=(3.0, 3.0), repeat_drift=0.0)
    truth = Truth(arms={"nccl": ArmTruth(tokens_per_s=50000, repeat_drift=0.0), "deepep-v1": stalls,
                        "deepep-v1-faults": stalls}, seed=8, capacity_type="ON_DEMAND")
    simulate(EXPERIMENT, truth, tmp_path / "d")
    assert main(["report", str(tmp_path / "d"), "--no-plots"]) == 0
    arms = json.loads((tmp_path / "d" / "report.json").read_text())["arms"]
    r = arms["deepep-v1"]["ratio_vs_baseline"]
    assert r["ci95"][0] <= 0.86 <= r["ci95"][1] and r["value"] < 0.9
    assert arms["deepep-v1"]["rollout_tokens_per_s"]["step_rate"]["median"] > arms["nccl"]["rollout_tokens_per_s"][
        "step_rate"]["median"]  # the median step still says faster: it stays, as a descriptive column


def test_jct_and_cost_say_the_gang_wait_is_in_them(simulated: Path):
    """JCT runs from KubeRay's status.startTime, before the gang is scheduled: the report says so and
    gives the start-up before the Ray job began (the simulator's 5 minutes), which the cost holds too."""
    assert main(["report", str(simulated), "--no-plots"]) == 0
    report = json.loads((simulated / "report.json").read_text())
    row = report["arms"]["nccl"]["per_repeat"][0]
    assert row["startup_s"] == 300.0 and row["jct_s"] > row["startup_s"]
    assert "gang wait and start-up included" in report["jct_definition"]
    md = (simulated / "report.md").read_text()
    assert "JCT s (gang wait incl.)" in md and "of it start-up s" in md and "so it includes them too" in md


def test_a_link_that_changes_more_than_one_thing_gets_its_pairs_share_and_none_of_one_field(tmp_path: Path):
    """A link whose arms differ in two run-file fields: its pair of arms isolates the two together, so its share
    is given as theirs together; no pair isolates either one (as EFA's against DeepEP's when no arm varies the
    fabric alone), so no share of one field is printed, and the report says which arm an isolating pair would
    start from. The shares of a chain still add up to the whole gain."""
    exp = yaml.safe_load(EXPERIMENT.read_text())
    exp["arms"] = [a for a in exp["arms"] if not a.get("faults")] + [
        {"name": "two", "set": {"deepep": {"version": "v1"}, "grpo": {"rolloutMaxResponseLen": 4096},
                                "extraArgs": ["--seed", "7"]}}]
    exp["arms"][1]["set"] = {"deepep": {"version": "v1"}, "grpo": {"rolloutMaxResponseLen": 4096}}  # two fields
    exp["decomposition"] = [{"name": "deepep", "from": "nccl", "to": "deepep-v1"},
                            {"name": "seed", "from": "deepep-v1", "to": "two"}]
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(exp))
    truth = Truth(arms={"nccl": ArmTruth(tokens_per_s=40000, repeat_drift=0.0),
                        "deepep-v1": ArmTruth(tokens_per_s=50000, repeat_drift=0.0),
                        "two": ArmTruth(tokens_per_s=60000, repeat_drift=0.0)}, seed=2)
    simulate(tmp_path / "e.yaml", truth, tmp_path / "d")
    assert main(["report", str(tmp_path / "d"), "--no-plots"]) == 0
    d = json.loads((tmp_path / "d" / "report.json").read_text())["decomposition"]
    both, one = d["links"]
    assert d["shares_withheld_because"] is None and one["not_isolated"] is None
    assert both["share"] + one["share"] == pytest.approx(1.0, abs=2e-4)
    assert both["not_isolated"].startswith("its share is that of its 2 run-file fields together")
    assert "an arm equal to `nccl` but for one of them would measure that one's share" in both["not_isolated"]
    md = (tmp_path / "d" / "report.md").read_text()
    assert "% of the gain, its 2 run-file fields together" in md and "share of any one of them" in md
    assert d["fabric"].startswith("no link changes `fabric` (every arm's is efa), so no share is the fabric's")
    assert "arms equal but for `fabric` would measure its part" in md


def test_the_simulated_attempts_ask_and_resolve_what_the_arms_render(tmp_path: Path):
    """The simulator plays each arm's argv as the stack renders it (bench/arms.py), so the seed's NCCL arm
    asks SGLang for the expert GEMM its DeepEP arm runs (issue 34 A5) and its engines log it resolved."""
    from bench.arms import render_arm
    from bench.artifacts import read_experiment_dir
    from bench.evidence import read_evidence
    from bench.experiment import load_experiment
    from workloads.checks import gate
    seed = Path("experiments/seed-ab.yaml")
    simulate(seed, Truth(arms={}, seed=1), tmp_path / "d")
    exp = load_experiment(seed)
    cfg = gate.read(exp.stack)
    seen = {}
    for c in read_experiment_dir(tmp_path / "d")[1]:
        ev = read_evidence(c, (tmp_path / "d" / c.attempt.folder / "driver.log").read_text())
        rendered = render_arm(exp, c.attempt.arm, cfg)
        assert {k: v for k, v in ev.asked.items() if k != "fabric"} == {
            k: rendered.get("argv.--sglang-" + k.replace("_", "-")) for k in ev.asked if k != "fabric"}
        seen[c.attempt.arm] = ev.sglang["moe_runner_backend"]
    assert seen["miles-nccl"] == seen["miles-deepep-v2"] == ["deep_gemm"]

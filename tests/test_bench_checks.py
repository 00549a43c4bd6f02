"""What `report` refuses or reads from each attempt (bench.checks, bench.evidence, bench.per_attempt): a
directory the simulator made, altered the way a real run goes wrong."""

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from bench.__main__ import main
from bench.simulate import ArmTruth, Truth, simulate

EXPERIMENT = Path("experiments/example-ab.yaml")
ARMS = {"nccl": ArmTruth(tokens_per_s=50000, gpu_util=60, reward=0.4, kl=0.003, train_s=60),
        "deepep-v1": ArmTruth(tokens_per_s=60000, gpu_util=70), "deepep-v1-faults": ArmTruth(tokens_per_s=60000)}
TRUTH = Truth(arms=ARMS, seed=4, capacity_type="ON_DEMAND")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sim") / "d"
    simulate(EXPERIMENT, TRUTH, root)
    return root


@pytest.fixture()
def d(made: Path, tmp_path: Path) -> Path:
    shutil.copytree(made, tmp_path / "d")
    return tmp_path / "d"


def refused(root: Path, capsys, *extra: str) -> str:
    assert main(["report", str(root), *extra]) == 1
    assert not (root / "report.json").exists()
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


def report(root: Path, *extra: str) -> dict:
    assert main(["report", str(root), "--no-plots", *extra]) == 0  # the plots: test_bench_plots
    return json.loads((root / "report.json").read_text())


def edit(path: Path, fn) -> None:
    path.write_text(fn(path.read_text()))


def test_a_failed_job_is_refused(d: Path, capsys):
    edit(d / "nccl/r2/rayjob.json", lambda t: t.replace('"SUCCEEDED"', '"FAILED"'))
    assert "nccl/r2: RayJob example-ab-nccl-r2-1 ended FAILED, not SUCCEEDED" in refused(d, capsys)


def test_a_log_cut_short_of_the_planned_steps_is_refused(d: Path, capsys):
    lines = (d / "nccl/r1/driver.log").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if "perf 16: {" in line)
    (d / "nccl/r1/driver.log").write_text("\n".join(lines[:cut]) + "\n")
    assert "nccl/r1: driver.log lacks planned step(s) 16, 17, 18, 19, 20 and 12 more of 0..32" in refused(d, capsys)


def _drop_steps_below(root: Path, folder: str, first: int) -> None:
    pattern = re.compile(r"(?:perf|rollout|step) (\d+): \{")
    def keep(line: str) -> bool:
        m = pattern.search(line)
        return m is None or int(m.group(1)) >= first
    edit(root / folder / "driver.log", lambda t: "\n".join(x for x in t.splitlines() if keep(x)) + "\n")


def test_warm_up_counts_from_the_attempts_first_step(d: Path):
    """A resumed attempt (its log starts at step 20) warms up again: steps 20-22 are left out."""
    _drop_steps_below(d, "nccl/r1", 20)
    row = report(d)["arms"]["nccl"]["per_repeat"][0]
    assert row["attempt"] == "nccl/r1" and row["first_step"] == 23 and row["measured_steps"] == 10


def test_too_few_measured_steps_are_refused(d: Path, capsys):
    _drop_steps_below(d, "nccl/r1", 24)
    assert "nccl/r1: 6 measured steps after 3 warm-up steps from step 24; minMeasuredSteps is 10" in refused(d, capsys)


def test_throughput_uses_the_argvs_rollout_gpus_not_every_node_touched(d: Path):
    """A replacement pod on a third rollout node must not turn equal throughput into 1.5x."""
    nodes = json.loads((d / "deepep-v1/r1/nodes.json").read_text())
    extra = json.loads(json.dumps(next(n for n in nodes["items"] if n["metadata"]["labels"]["rl.platform/role"] == "rollout")))
    extra["metadata"]["name"] = "ip-10-0-3-99.ec2.internal"
    nodes["items"].append(extra)
    (d / "deepep-v1/r1/nodes.json").write_text(json.dumps(nodes))
    got = report(d, "--across-node-sets")
    argv = json.loads(yaml.safe_load(json.loads((d / "deepep-v1/r1/rayjob.json").read_text())["spec"]["runtimeEnvYAML"])
                      ["env_vars"]["MILES_ARGV"])
    gpus = int(argv[argv.index("--rollout-num-gpus") + 1])
    assert got["arms"]["deepep-v1"]["rollout_gpus"] == [gpus]
    assert got["arms"]["deepep-v1"]["per_repeat"][0]["rollout_tokens_per_s"] == pytest.approx(60000, rel=0.05)
    assert "deepep-v1/r1 ran its rollout pods on other nodes than nccl/r1" in got["node_sets"]


def test_different_node_sets_are_refused_unless_asked(d: Path, capsys):
    edit(d / "nccl/r2/nodes.json", lambda t: t.replace("ip-10-0-2-10", "ip-10-0-2-77"))
    assert "nccl/r2 ran its train pods on other nodes than nccl/r1 (ip-10-0-2-77.ec2.internal)" in refused(d, capsys)
    assert report(d, "--across-node-sets")["arms"]["nccl"]["per_repeat"][1]["nodes"]["train"][0] == "ip-10-0-2-11.ec2.internal"


def test_nan_in_a_used_key_is_refused_naming_attempt_step_and_key(d: Path, capsys):
    lines = (d / "nccl/r1/driver.log").read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if "perf 10: {'perf/train_wait_time'" in line)
    lines[i] = re.sub(r"'perf/step_time': [0-9.e+-]+", "'perf/step_time': nan", lines[i])
    (d / "nccl/r1/driver.log").write_text("\n".join(lines) + "\n")
    assert "nccl/r1: step 10: perf/step_time is nan (not a finite number)" in refused(d, capsys)


def test_another_attempts_log_is_refused(d: Path, capsys):
    edit(d / "nccl/r1/driver.log", lambda t: re.sub(r"job raysubmit_\w+:", "job raysubmit_other:", t))
    assert "nccl/r1: driver.log is of job raysubmit_other, not of this attempt's RayJobs" in refused(d, capsys)


def test_an_arm_whose_engines_resolved_another_backend_is_refused(d: Path, capsys):
    edit(d / "deepep-v1/r2/driver.log", lambda t: t.replace("'moe_a2a_backend': 'deepep'", "'moe_a2a_backend': 'none'"))
    assert ("deepep-v1/r2: SGLang resolved moe_a2a_backend none, the argv asked for deepep: the arm did not run "
            "what it claims") in refused(d, capsys)


def test_nccl_on_sockets_under_an_efa_arm_is_refused(d: Path, capsys):
    edit(d / "nccl/r3/driver.log", lambda t: t.replace("Using network AWS Libfabric", "Using network Socket"))
    assert "nccl/r3: NCCL chose network Socket where fabric efa means Libfabric" in refused(d, capsys)


def test_evidence_rest_of_step_quality_and_price_basis_are_reported(d: Path):
    got = report(d)
    nccl, deepep = got["arms"]["nccl"], got["arms"]["deepep-v1"]
    assert deepep["evidence"]["sglang_resolved"]["moe_a2a_backend"] == ["deepep"]
    assert nccl["evidence"]["nccl_network"] == ["AWS Libfabric"]
    assert nccl["step_parts_s"]["train"] == pytest.approx(ARMS["nccl"].train_s, rel=0.03)
    assert nccl["step_parts_s"]["update_weights"] == pytest.approx(0.15 * ARMS["nccl"].train_s, rel=0.05)
    assert nccl["quality"]["mean_reward"] == pytest.approx(ARMS["nccl"].reward, abs=0.02)
    assert nccl["quality"]["kl"] == pytest.approx(ARMS["nccl"].kl, rel=0.2)
    assert 0 <= nccl["quality"]["truncated_ratio"] <= 0.04
    period = nccl["step_parts_s"]["step"]
    assert nccl["end_to_end_samples_per_s"] == pytest.approx(32 * 8 / period, rel=0.05)
    assert 0 < nccl["end_to_end_tokens_per_s"] < nccl["rollout_tokens_per_s"]["throughput"]
    assert 0 < nccl["steady_usd_per_million_tokens"] < nccl["usd_per_million_tokens"]
    md = (d / "report.md").read_text()
    for text in ("## Per repeat", "### nccl", "## Evidence per arm", "moe_a2a_backend asked deepep, resolved deepep",
                 "## Price basis", "catalog on-demand p5en.48xlarge, us-east-1", "Tokens: generated response tokens",
                 "weight sync s", "mean reward"):
        assert text in md


def test_utilisation_is_over_the_measured_steps_only(d: Path):
    """GPUs idle during gang wait, pulls and model load must not lower the figure."""
    doc = json.loads((d / "nccl/r1/cloudwatch.json").read_text())
    log = (d / "nccl/r1/driver.log").read_text()
    first = re.search(r"\[(\S+ \S+) rollout_manager\] metrics.py:89 - perf 3:", log).group(1).replace(" ", "T")
    for r in doc["MetricDataResults"]:
        r["Values"] = [0.0 if t[:19] < first[:19] else v for t, v in zip(r["Timestamps"], r["Values"])]
    (d / "nccl/r1/cloudwatch.json").write_text(json.dumps(doc))
    row = report(d)["arms"]["nccl"]["per_repeat"][0]
    assert row["utilisation_measured_window"]["rollout"]["gpu_util"] == pytest.approx(ARMS["nccl"].gpu_util, rel=0.05)
    assert row["utilisation_measured_window"]["train"]["rdma_write_gbps"] > 0


def test_an_async_arm_is_marked_and_withholds_the_shares(d: Path):
    for r in (1, 2, 3):
        edit(d / f"deepep-v1/r{r}/rayjob.json", lambda t: t.replace("/root/miles/train.py", "/root/miles/train_async.py"))
    got = report(d)
    assert got["arms"]["deepep-v1"]["mode"] == ["async"]
    assert "async against sync" in got["arms"]["deepep-v1"]["mode_vs_baseline"]
    assert got["decomposition"]["links"][0]["share"] is None
    assert "Different mode: async against sync" in (d / "report.md").read_text()


def test_response_lengths_differing_more_than_5_percent_withhold_the_shares(tmp_path: Path):
    longer = Truth(arms={**ARMS, "deepep-v1": ArmTruth(tokens_per_s=60000, response_len=3300)}, seed=4)
    simulate(EXPERIMENT, longer, tmp_path / "d")
    got = report(tmp_path / "d")
    assert got["arms"]["deepep-v1"]["ratio_vs_baseline"]["beyond_noise"] is True
    assert got["decomposition"]["links"][0]["share"] is None
    why = got["decomposition"]["shares_withheld_because"]
    assert re.search(r"mean response length differs by \+(9|10|11)\.\d% \(more than 5%\)", why), why


@pytest.mark.parametrize("experiment", sorted(Path("experiments").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_experiment_simulates_and_reports(experiment: Path, tmp_path: Path):
    simulate(experiment, Truth(arms={}, capacity_type="ON_DEMAND"), tmp_path / "d")
    got = report(tmp_path / "d")
    assert set(got["arms"]) == {a["name"] for a in yaml.safe_load(experiment.read_text())["arms"] if not a.get("faults")}


def test_a_measured_step_without_its_rollout_time_is_refused(d: Path, capsys):
    """Throughput is Σtokens/Σperf/rollout_time: a step that logged its rate without its time has no tokens."""
    edit(d / "nccl/r1/driver.log", lambda t: re.sub(r"(perf 9: \{.*?)'perf/rollout_time': [0-9.e+-]+, ", r"\1", t))
    assert "nccl/r1: step 9 logged perf/tokens_per_gpu_per_sec without perf/rollout_time" in refused(d, capsys)


def test_a_block_on_two_node_sets_refuses_the_claim_even_when_asked(d: Path):
    """With --across-node-sets the report is written, but a block whose two attempts ran on different nodes
    cannot say whether the arm or the node was faster: the ratio keeps its interval and makes no claim."""
    edit(d / "nccl/r2/nodes.json", lambda t: t.replace("ip-10-0-3-10", "ip-10-0-3-99"))
    r = report(d, "--across-node-sets")["arms"]["deepep-v1"]["ratio_vs_baseline"]
    assert r["claim_refused"].startswith("in block 2 deepep-v1 and nccl ran on different nodes")
    assert r["ci95"][0] > 1 and r["beyond_noise"] is False
    assert "no claim" in (d / "report.md").read_text()

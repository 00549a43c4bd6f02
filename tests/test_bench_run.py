"""`python -m bench run`: dry run, and a whole experiment against a fake cluster that plays the
RayJobs, pods and driver logs the run command's client reads (submit, resume after a fault, collect)."""

import json
from pathlib import Path
from workloads.checks import gate

import pytest
import yaml

from kubernetes.client import ApiException

import bench_fakes
from bench.__main__ import main
from bench_fakes import CLUSTER, NAMESPACE, FakeClock, FakeRuns, _hostnames, _pod, _now
from bench_fakes_aws import _aws
from components.faults import FAULT_TAG, FAULT_TARGET_LABEL, pod_delete_template
from workloads.render.common import RAY_GROUP_LABEL
from workloads.render.runs import RUN_LABEL

EXAMPLE = Path("experiments/example-ab.yaml")
REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rl-p5en-shared"


def pinned(out: Path) -> list[str]:
    """``--stack-dir`` of a folder beside ``out`` whose p5en-shared has real-looking digests: what a
    submission sends may not carry a placeholder (``workloads.deploy.submit.sendable``)."""
    from test_first_deploy import pinned_stack_dir
    out.parent.mkdir(parents=True, exist_ok=True)
    return ["--stack-dir", str(pinned_stack_dir(out.parent))]


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> FakeClock:
    fake = bench_fakes.use_clock(monkeypatch, FakeClock())  # nothing in these tests waits for real
    return fake


def test_dry_run_prints_every_attempt_in_order(capsys):
    assert main(["run", str(EXAMPLE), "--dry-run"]) == 0
    text = capsys.readouterr().out
    heads = [line.split(":")[0] for line in text.splitlines() if line.startswith("# ")]
    arms = ["nccl", "deepep-v1", "deepep-v1-faults"]
    assert heads == [f"# {a}/r1" for a in arms] + [f"# {a}/r2" for a in arms[::-1]] + [f"# {a}/r3" for a in arms]
    jobs = list(yaml.safe_load_all(text))  # a valid multi-document stream as printed, one RayJob per attempt
    assert [j["kind"] for j in jobs] == ["RayJob"] * 9
    env = yaml.safe_load(jobs[0]["spec"]["runtimeEnvYAML"])["env_vars"]
    assert env["RAY_DEDUP_LOGS"] == "0"  # every perf line reaches the driver log


def test_the_seed_comparison_dry_runs_each_arm_on_its_own_profile(capsys):
    """Every arm of experiments/seed-ab.yaml passes the run checks its profile imposes (a baseline
    engine over two nodes would be refused: Slime's NCCL is 2.27.5) and gets its profile's image."""
    assert main(["run", "experiments/seed-ab.yaml", "--dry-run"]) == 0
    text = capsys.readouterr().out
    jobs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(text)}
    images = {name.rsplit("-r", 1)[0]: job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
              ["containers"][0]["image"] for name, job in jobs.items()}
    assert ":slime-" in images["seed-ab-slime"] and ":miles-sglang0.5.19-" in images["seed-ab-miles-nccl"]
    assert images["seed-ab-miles-nccl"] == images["seed-ab-miles-deepep-v2"]  # only the all-to-all differs


def test_run_submits_injects_resumes_and_collects(tmp_path, monkeypatch):
    """Against a cluster that refuses a team member what the API refuses (403), the faults go through
    FIS; the killed trainer fails the job, the next attempt loads the last complete checkpoint."""
    monkeypatch.setattr("time.sleep", lambda s: None)  # the runner's, the detector's and FIS' polls
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    lines: list[str] = []
    out = tmp_path / "out"
    assert main(["run", str(EXAMPLE), "--out", str(out), "--repository", REPOSITORY, "--log-bucket", "b", *pinned(out)],
                client=lambda: fake, out=lines.append, aws=aws) == 0
    assert [j["metadata"]["name"] for j in fake.submitted][:4] == [
        "example-ab-nccl-r1-1", "example-ab-deepep-v1-r1-1", "example-ab-deepep-v1-faults-r1-1",
        "example-ab-deepep-v1-faults-r1-2"]  # the trainer fault made the job fail: resumed as attempt 2
    assert clients["fis"].started[:2] == ["EXT-alpha-delete-rollout-pod", "EXT-alpha-delete-trainer-pod"]
    faults = json.loads((out / "deepep-v1-faults" / "r1" / "faults.json").read_text())
    assert [f["kind"] for f in faults] == ["delete-rollout-pod", "delete-trainer-pod"]
    assert all(f["actionStartedAt"] for f in faults)
    assert [f["hit"] for f in faults] == [[f"{j}-{g}-0"] for j, g in (("example-ab-deepep-v1-faults-r1-1", "rollout"),
                                                                      ("example-ab-deepep-v1-faults-r1-1", "trainer"))]
    assert faults[1]["resumedAs"] == "example-ab-deepep-v1-faults-r1-2"
    jobs = json.loads((out / "deepep-v1-faults" / "r1" / "rayjob.json").read_text())["items"]
    assert [j["status"]["jobStatus"] for j in jobs] == ["FAILED", "SUCCEEDED"]
    assert (out / "experiment.yaml").read_text() == EXAMPLE.read_text()
    # every attempt after the first is held to the first one's nodes, per pool
    first, later = fake.submitted[0], fake.submitted[1]
    assert "affinity" not in first["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    held = {g["groupName"]: g["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][-1] for g in later["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    assert held["trainer"] == {"key": "kubernetes.io/hostname", "operator": "In", "values": ["train-0", "train-1"]}
    assert held["rollout"]["values"] == ["rollout-0", "rollout-1"]
    from workloads.checks.crds import crd_schema, validate
    assert validate(later, crd_schema("ray.io/v1", "RayJob")) == []
    assert main(["report", str(out), "--no-plots"]) == 0
    report = json.loads((out / "report.json").read_text())
    rollout, trainer = report["faults"]["deepep-v1-faults"]["deepep-v1-faults/r1"]
    assert rollout["outcome"].startswith("survived in place") and rollout["engines_recovered"] == 1
    assert trainer["job_status"] == "FAILED" and "resubmitted as example-ab-deepep-v1-faults-r1-2" in trainer["outcome"]
    assert trainer["loaded_iteration"] == trainer["last_saved_iteration"] and trainer["resumed_from_last_checkpoint"]
    assert report["arms"]["nccl"]["rollout_gpus"] == [16]


def test_faults_never_use_kubernetes_calls_a_team_member_lacks(tmp_path, monkeypatch):
    """The fake answers 403 to pod delete, node patch, eviction and cluster-wide pod lists, as the
    API answers a team member (render.teams.SUBMITTER_RULES); every fault kind still runs."""
    monkeypatch.setattr("time.sleep", lambda s: None)
    exp = yaml.safe_load(EXAMPLE.read_text())
    exp["arms"] = [a for a in exp["arms"] if a["name"] == "nccl"] + [
        {"name": "node", "set": {"deepep": {"version": "v1"}}, "faults": [{"kind": "terminate-gpu-node", "atStep": 12}]}]
    exp["decomposition"] = []  # the example's 3 mirrored repeats, as every experiment has (bench.experiment)
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(exp))
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--log-bucket", "b", "--repository", REPOSITORY, *pinned(tmp_path / "o")], client=lambda: fake, out=print, aws=aws) == 0
    # one terminate per repeat of the fault arm, each on a node the group had then (a lost node is replaced)
    gone = ["rollout-0", "rollout-0-new", "rollout-0-new-new"]
    assert clients["fis"].started == ["EXT-terminate-gpu-node"] * 3 and fake.gone == set(gone)
    assert clients["ec2"].tags == {f"i-{n}": {} for n in gone}  # tagged for the fault, untagged after
    for repeat, node in enumerate(gone, 1):
        nodes = json.loads((tmp_path / "o" / "node" / f"r{repeat}" / "nodes.json").read_text())["items"]
        assert node in {n["metadata"]["name"] for n in nodes}  # recorded before it disappeared


def test_a_drain_is_refused_by_the_runs_budget_so_it_is_no_fault():
    """With RBAC to evict, the Eviction API still answers 429 for every pod the `runs` budget guards;
    an experiment asking for a drain is refused with that reason, naming the crash to use instead."""
    fake = FakeRuns(save_interval=10, total=33, admin=True)
    fake.submit({"metadata": {"name": "r-1", "labels": {RUN_LABEL: "r"}},
                 "spec": {"rayClusterSpec": {"workerGroupSpecs": [{"groupName": "rollout", "template": {}}]}}})
    victim = next(p for p in fake.pods if p.metadata.labels[RAY_GROUP_LABEL] == "rollout")
    with pytest.raises(ApiException) as refused:
        fake.core.create_namespaced_pod_eviction(victim.metadata.name, NAMESPACE, None)
    assert refused.value.status == 429
    with pytest.raises(ApiException) as forbidden:  # and a team member may not evict at all
        FakeRuns(save_interval=10, total=33).core.create_namespaced_pod_eviction(victim.metadata.name, NAMESPACE, None)
    assert forbidden.value.status == 403
    exp = yaml.safe_load(EXAMPLE.read_text())
    exp["arms"][2]["faults"] = [{"kind": "drain-gpu-node", "atStep": 12}]
    from bench.experiment import parse_experiment
    with pytest.raises(ValueError, match="429.*terminate-gpu-node"):
        parse_experiment(exp, "x.yaml")


def test_a_pod_fault_is_a_crash_without_the_save_on_stop_checkpoint(tmp_path, monkeypatch):
    """FIS deletes with gracePeriodSeconds 0: no preStop, so no checkpoint is saved at the fault (a
    grace period would run SAVE_ON_STOP and save one); the resume loads the last periodic save."""
    monkeypatch.setattr("time.sleep", lambda s: None)
    spec = pod_delete_template(CLUSTER, NAMESPACE, "trainer")
    assert {p["key"]: p["value"] for p in spec["actions"][0]["parameters"]}["gracePeriodSeconds"] == "0"
    fake = FakeRuns(save_interval=10, total=33)
    _, aws = _aws(fake)
    assert main(["run", str(EXAMPLE), "--out", str(tmp_path / "o"), "--log-bucket", "b", "--repository", REPOSITORY, *pinned(tmp_path / "o")], client=lambda: fake, out=print, aws=aws) == 0
    log = (tmp_path / "o" / "deepep-v1-faults" / "r1" / "driver.log").read_text()
    saved = [int(line.split("iteration")[1].split()[0]) for line in log.splitlines() if "successfully saved" in line]
    assert all((i + 1) % 10 == 0 for i in saved)  # only the periodic saves: none at the fault


FAILURES = ["submit", "rayjobs", "start_experiment", "experiment_failed", "list_namespaced_event", "read_node"]


@pytest.mark.parametrize("where", FAILURES)
def test_a_failure_at_any_step_leaves_the_cluster_as_found(tmp_path, monkeypatch, where):
    monkeypatch.setattr("time.sleep", lambda s: None)
    exp = yaml.safe_load(EXAMPLE.read_text())
    exp["arms"] = [a for a in exp["arms"] if a["name"] in ("nccl", "deepep-v1-faults")]
    exp["arms"][1]["faults"] = [{"kind": "terminate-gpu-node", "atStep": 12}]
    exp["decomposition"] = []
    exp["arms"].reverse()  # mirrored order: the fault arm's attempt is the first of block 1
    exp["baseline"] = "nccl"
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(exp))
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake, fail_with="simulated" if where == "experiment_failed" else None)
    calls = {"n": 0}

    def broken(target, name):
        real = getattr(target, name)

        def call(*a, **k):
            calls["n"] += 1
            # start_experiment: the first call is the preflight's target preview, before any attempt
            if calls["n"] >= {"submit": 1, "start_experiment": 2}.get(name, 3):
                raise RuntimeError(f"{name} broke")
            return real(*a, **k)
        setattr(target, name, call)
    if where in ("submit", "rayjobs"):
        broken(fake, where)
    elif where == "start_experiment":
        broken(clients["fis"], where)
    elif where != "experiment_failed":
        broken(fake.core, where)
    lines: list[str] = []
    try:  # a FaultError is one line and exit 1; anything else goes on as itself, after the clean-up
        assert main(["run", str(path), "--out", str(tmp_path / "o"), "--log-bucket", "b", "--repository", REPOSITORY, *pinned(tmp_path / "o")],
                    client=lambda: fake, out=lines.append, aws=aws) == 1
    except RuntimeError as err:
        assert str(err) == f"{where} broke"
    text = "\n".join(lines)
    assert "left as found: fault engine" in text and "left as found: attempts" in text
    unfinished = [n for n, j in fake.jobs.items() if j["status"]["jobDeploymentStatus"] == "Running"]
    if where != "rayjobs":
        assert unfinished == []  # every attempt it started is cancelled or done
    assert all(not t for t in clients["ec2"].tags.values())  # no instance left tagged for termination
    assert (tmp_path / "o" / "deepep-v1-faults" / "r1" / "INCOMPLETE").is_file()  # what it saw, marked


def test_a_serving_arm_runs_sglang_bench_serving_against_its_router_and_reports_latency(tmp_path, monkeypatch):
    """The arm's run pins its router to the head on a fixed port; once the step is logged the benchmark
    starts in the head (a team member's exec) and its result line is read back into the report."""
    monkeypatch.setattr("time.sleep", lambda s: None)
    exp = yaml.safe_load(EXAMPLE.read_text())
    exp["arms"] = [a for a in exp["arms"] if a["name"] != "deepep-v1-faults"]
    exp["arms"][1]["serving"] = {"atStep": 5, "inputLen": 512, "outputLen": 256, "maxConcurrency": 32}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(exp))
    keys = json.loads(Path("tests/data/sglang-0.5.19-bench-serving.json").read_text())["result_keys"]
    fake = FakeRuns(save_interval=10, total=33)
    fake.serving_result = {k: 10.0 + i for i, k in enumerate(keys)}
    _, aws = _aws(fake)
    out = tmp_path / "o"
    assert main(["run", str(path), "--out", str(out), "--log-bucket", "b", "--repository", REPOSITORY, *pinned(out)],
                client=lambda: fake, out=print, aws=aws) == 0
    job = next(j for j in fake.submitted if j["metadata"]["name"].startswith("example-ab-deepep-v1-r1"))
    argv = json.loads(yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]["MILES_ARGV"])
    assert argv[argv.index("--sglang-router-port") + 1] == "30100" and "--pin-rollout-manager-to-head" in argv
    start = next(c for c in fake.execs if "sglang.bench_serving" in c[-1])
    assert "--random-output-len 256" in start[-1] and "http://$HEAD_IP:30100" in start[-1]
    assert not (out / "nccl" / "r1" / "serving.json").exists()
    assert main(["report", str(out), "--no-plots"]) == 0
    serving = json.loads((out / "report.json").read_text())["serving"]["deepep-v1"]["deepep-v1/r1"]
    assert serving["p99_itl_ms"] == fake.serving_result["p99_itl_ms"]
    assert "sglang bench_serving" in (out / "report.md").read_text()


def test_emitted_and_simulated_objects_validate(capsys, tmp_path):
    """The RayJobs `run` submits (with RAY_DEDUP_LOGS) against KubeRay v1.7.0's CRD; the simulator's
    RayJobs (status included) against the CRD and its Nodes against Kubernetes' schema."""
    import kubernetes_validate

    from bench.simulate import EXAMPLE_TRUTH, simulate
    from test_workloads import k8s_version
    from workloads.checks.crds import crd_schema, validate
    from workloads.schema.stack import ProgramConfig
    from stackconfig.files import read_stack

    schema = crd_schema("ray.io/v1", "RayJob")
    assert main(["run", str(EXAMPLE), "--dry-run"]) == 0
    jobs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(jobs) == 9 and all(validate(j, schema) == [] for j in jobs)
    simulate(EXAMPLE, EXAMPLE_TRUTH, tmp_path / "d")
    version = k8s_version(gate.read("p5en-shared"))
    for folder in (tmp_path / "d").glob("*/r*"):
        doc = json.loads((folder / "rayjob.json").read_text())
        for job in doc.get("items", [doc]):
            assert validate(job, schema) == []
        for node in json.loads((folder / "nodes.json").read_text())["items"]:
            kubernetes_validate.validate(node, version, strict=True)
    # the fault engine's objects in a team namespace (rendered with workloads.faultInjection)
    from workloads.render.faults import fault_rbac
    team = gate.read("p5en-shared").workloads.teams[0]
    rbac = fault_rbac(team)
    for obj in rbac:
        kubernetes_validate.validate(obj, version, strict=True)
    assert {o["metadata"]["namespace"] for o in rbac} == {f"team-{team.name}"}
    assert {o["kind"] for o in rbac} == {"ServiceAccount", "Role", "RoleBinding", "Lease"}  # nothing cluster-wide


def _experiment(tmp_path: Path, faults: list[dict], **extra) -> Path:
    """The example's baseline and one fault arm with ``faults``, 3 mirrored repeats."""
    exp = yaml.safe_load(EXAMPLE.read_text())
    exp["arms"] = [a for a in exp["arms"] if a["name"] == "nccl"] + [
        {"name": "node", "set": {"deepep": {"version": "v1"}}, "faults": faults}]
    exp["decomposition"] = []
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(exp | extra))
    return path


def _run(path: Path, fake: "FakeRuns", aws, out: Path, *extra: str) -> tuple[int, str]:
    lines: list[str] = []
    code = main(["run", str(path), "--out", str(out), "--log-bucket", "b", "--repository", REPOSITORY, *pinned(out), *extra],
                client=lambda: fake, out=lines.append, aws=aws)
    return code, "\n".join(lines)


def test_a_resumed_attempt_is_never_pinned_to_the_node_fis_terminated(tmp_path, capsys):
    """Miles without fault tolerance: the terminated node fails the job and it is resumed. Pinned to the
    first attempt's nodes (one of them now gone, its replacement under a new name) the resumed pods could
    never schedule and `bench run` polled for ever; an arm whose faults remove nodes is not pinned."""
    fake = FakeRuns(save_interval=10, total=33, engines_recover=False)
    clients, aws = _aws(fake)
    code, text = _run(_experiment(tmp_path, [{"kind": "terminate-gpu-node", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 0, capsys.readouterr().err
    assert "node/r1: resumed as attempt 2" in text and fake.gone == {"rollout-0", "rollout-0-new", "rollout-0-new-new"}
    resumed = next(j for j in fake.submitted if j["metadata"]["name"] == "example-ab-node-r1-2")
    assert all(_hostnames(g) is None for g in resumed["spec"]["rayClusterSpec"]["workerGroupSpecs"])
    jobs = json.loads((tmp_path / "o" / "node" / "r1" / "rayjob.json").read_text())["items"]
    assert [j["status"]["jobStatus"] for j in jobs] == ["FAILED", "SUCCEEDED"]


def test_a_failure_after_the_resume_of_its_fault_ends_the_attempt_incomplete_not_resumed_again(tmp_path, capsys):
    """One resume per fault: the resumed attempt failing by itself at step 20 is a failure no fault of the arm
    explains; resubmitting it would put it on the last fault's account (its ``resumedAs``) and bound the
    resubmissions only by the attempt's deadline (review of #37, C3)."""
    fake = FakeRuns(save_interval=10, total=33, engines_recover=False)
    _, aws = _aws(fake)
    fake.fails_at["example-ab-node-r1-2"] = 20
    code, text = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 1 and "node/r1: resumed as attempt 2" in text
    assert "example-ab-node-r1-3" not in {j["metadata"]["name"] for j in fake.submitted}
    reason = (tmp_path / "o" / "node" / "r1" / "INCOMPLETE").read_text()
    assert "example-ab-node-r1-2 failed after the resume from delete-rollout-pod at step 12" in reason, reason
    assert "--only node/r1" in capsys.readouterr().err


def test_a_failure_after_the_run_recovered_from_its_fault_is_incomplete_not_resumed(tmp_path, capsys):
    """A delete-rollout-pod at step 12 the run survived in place (Miles recovered the engine, steps went on),
    then a crash at step 25 no fault explains: not resumed on the fault's account (review37c A1)."""
    fake = FakeRuns(save_interval=10, total=33)
    _, aws = _aws(fake)
    fake.fails_at["example-ab-node-r1-1"] = 25
    code, text = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 1 and "resumed as attempt" not in text, text
    assert "example-ab-node-r1-2" not in {j["metadata"]["name"] for j in fake.submitted}
    reason = (tmp_path / "o" / "node" / "r1" / "INCOMPLETE").read_text()
    assert "example-ab-node-r1-1 failed after it had recovered from delete-rollout-pod at step 12" in reason, reason
    assert "--only node/r1" in capsys.readouterr().err


def test_a_hit_named_by_its_namespace_is_recorded_as_the_pod_and_detection_starts_at_its_killing(tmp_path):
    """FIS may name the pod it hit ``<namespace>/<pod>``: the record keeps the pod's own name, so the report finds
    its kubelet ``Killing`` Event instead of falling back to FIS' action start (review of #37, C1)."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    clients["fis"].qualified = True
    code, _ = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 0
    (fault,) = json.loads((tmp_path / "o" / "node" / "r1" / "faults.json").read_text())
    assert fault["hit"] == ["example-ab-node-r1-1-rollout-0"]
    from bench.artifacts import read_experiment_dir
    from bench.reaction import killed
    attempt = next(c for c in read_experiment_dir(tmp_path / "o")[1] if c.attempt.folder == "node/r1")
    assert killed(attempt, fault)[1].startswith("kubelet Event Killing")


@pytest.mark.parametrize("stuck", ["never scheduled", "stalls"])
def test_every_wait_has_a_deadline_from_the_experiment_and_ends_incomplete(tmp_path, capsys, clock, stuck):
    """Pods that never schedule wait 3 x estimate.startupMinutes for a first step; a job that hangs after
    step 15 waits 3 x estimate.stepSeconds for the next; then the attempt is left as found, marked
    INCOMPLETE with the reason, and the experiment goes on."""
    fake = FakeRuns(save_interval=10, total=33)
    _, aws = _aws(fake)
    path = _experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}])
    if stuck == "never scheduled":
        fake.unschedulable.add("example-ab-nccl-r2")
    else:
        fake.hangs_after["example-ab-node-r1"] = 15
    code, text = _run(path, fake, aws, tmp_path / "o")
    assert code == 1
    err = capsys.readouterr().err
    est = yaml.safe_load(EXAMPLE.read_text())["estimate"]
    if stuck == "never scheduled":
        folder, limit = "nccl/r2", 3 * est["startupMinutes"] * 60
        assert f"no step logged {limit + 30:.0f} s after its submission (deadline {limit:.0f} s)" in err
    else:
        folder, limit = "node/r1", 3 * est["stepSeconds"]
        assert "no step after step 15 for" in err and f"(deadline {limit:.0f} s)" in err
    assert f"--only {folder}" in err and "1 of 6 attempts INCOMPLETE" in err
    assert (tmp_path / "o" / folder / "INCOMPLETE").read_text().startswith(f"{folder}: Overdue: {folder}:")
    assert {j["metadata"]["name"] for j in fake.submitted} >= {"example-ab-nccl-r3-1", "example-ab-node-r3-1"}  # went on
    assert not [n for n, j in fake.jobs.items() if j["status"]["jobDeploymentStatus"] in ("Running", "Initializing")]


def test_pins_follow_the_nodes_that_exist(tmp_path, capsys):
    """A pinned node replaced between two attempts (a node group update, no fault): the next attempt's pool
    is left unpinned, and the attempt after it is pinned to the nodes that replaced the set."""
    fake = FakeRuns(save_interval=10, total=33)
    _, aws = _aws(fake)
    exp = yaml.safe_load(EXAMPLE.read_text())
    exp["arms"], exp["decomposition"] = [a for a in exp["arms"] if not a.get("faults")], []
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(exp))
    next_attempt = fake.next_attempt

    def replace_after_first(run):  # asked just before each submission
        if len(fake.submitted) == 1:
            fake.gone.add("rollout-1")
            fake.nodes["rollout"] = ["rollout-0", "rollout-9"]
        return next_attempt(run)
    fake.next_attempt = replace_after_first
    code, text = _run(path, fake, aws, tmp_path / "o")
    assert code == 0, capsys.readouterr().err
    assert "deepep-v1/r1: pool rollout not pinned: its pinned node(s) rollout-1 are gone" in text
    pins = [{g["groupName"]: _hostnames(g) for g in j["spec"]["rayClusterSpec"]["workerGroupSpecs"]} for j in fake.submitted]
    assert pins[1] == {"trainer": {"train-0", "train-1"}, "rollout": None}
    assert pins[2] == {"trainer": {"train-0", "train-1"}, "rollout": {"rollout-0", "rollout-9"}}


def test_a_pod_fault_never_hits_a_pod_a_teammate_labelled_by_hand(tmp_path, capsys):
    """A teammate who ignores the Lease labelled a pod of their run for the same template: the fault is not
    injected (FIS could pick their pod), the attempt is INCOMPLETE, their pod untouched, the Lease freed."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    theirs = _pod("their-run-1-rollout-0", "their-run", "rollout", "rollout-7", _now(), 1,
                  {FAULT_TARGET_LABEL: "rollout"})
    fake.pods.insert(0, theirs)
    fake.logs["their-run-1"], fake.next_step["their-run-1"] = [], 0
    code, _ = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 1 and theirs in fake.pods and clients["fis"].started == []
    assert "pods not labelled by this attempt carry rl.platform/fault-target=rollout in team-alpha " \
        "(their-run-1-rollout-0)" in (tmp_path / "o" / "node" / "r1" / "INCOMPLETE").read_text()
    assert [p.metadata.name for p in fake.pods if FAULT_TARGET_LABEL in p.metadata.labels] == [theirs.metadata.name]
    assert [h for h, _ in fake.coordination.writes][-1] is None  # freed after each refused attempt


def test_a_node_fault_terminates_exactly_the_instance_tagged_for_it(tmp_path, capsys):
    """An instance still tagged from an earlier fault whose clean-up failed is not terminated: each fault
    tags its instance with a value of its own and points the template at that value."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    clients["ec2"].tags["i-train-1"] = {FAULT_TAG: CLUSTER}  # what the clean-up of an earlier run left
    code, text = _run(_experiment(tmp_path, [{"kind": "terminate-gpu-node", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 0, capsys.readouterr().err
    assert fake.gone == {"rollout-0", "rollout-0-new", "rollout-0-new-new"}  # train-1 still there
    values = [json.loads((tmp_path / "o" / "node" / f"r{r}" / "faults.json").read_text())[0]["tag"] for r in (1, 2, 3)]
    assert len(set(values)) == 3 and all(v.startswith(f"{CLUSTER}:") for v in values)
    assert [t["node"]["resourceTags"][FAULT_TAG] for _, t in clients["fis"].updated[1:]] == values  # [0]: preflight


def test_a_fault_fis_resolved_to_another_target_too_makes_the_attempt_incomplete(tmp_path, capsys):
    """FIS resolves its targets when it starts, after the pre-checks: a teammate's pod labelled in between is
    hit as well; the attempt is not counted (``bench.faults`` reads ListExperimentResolvedTargets)."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    clients["fis"].also_resolved = [{"resourceType": "aws:eks:pod", "targetName": "pod",
                                     "targetInformation": {"namespace": NAMESPACE, "podName": "their-run-1-rollout-0"}}]
    code, _ = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 1
    assert "their-run-1-rollout-0, not this attempt's" in (tmp_path / "o" / "node" / "r1" / "INCOMPLETE").read_text()


def test_an_experiment_started_on_another_faults_tag_is_stopped_and_the_attempt_incomplete(tmp_path, capsys):
    """A concurrent update of the template between this fault's update and its start aims FIS at another
    value: the experiment is stopped at once and the attempt not counted."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    clients["fis"].started_on = f"{CLUSTER}:someone-else"
    code, _ = _run(_experiment(tmp_path, [{"kind": "terminate-gpu-node", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 1 and clients["fis"].stopped
    assert "someone-else, not this fault's" in (tmp_path / "o" / "node" / "r1" / "INCOMPLETE").read_text()


@pytest.mark.parametrize("lacks", ["fis:StartExperiment", "ec2:CreateTags"])
def test_a_fault_the_member_may_not_start_is_refused_before_anything_runs(tmp_path, capsys, lacks):
    """Without the node policy a terminate-gpu-node failed with AccessDenied at its step, hours in; the
    FIS target preview (actionsMode skip-all) and EC2's DryRun ask first, before any submission."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    if lacks == "fis:StartExperiment":
        clients["fis"].denied.add("EXT-terminate-gpu-node")
    else:
        clients["ec2"].may_tag = False
    code, _ = _run(_experiment(tmp_path, [{"kind": "terminate-gpu-node", "atStep": 12}]), fake, aws, tmp_path / "o")
    err = capsys.readouterr().err
    assert code == 1 and fake.submitted == [] and clients["fis"].started == []
    assert "refused (" in err and "attach the stack output benchFaults.nodePolicy" in err


def _one_attempt_incomplete(tmp_path):
    """The example's arms without faults run on the fake cluster, attempt deepep-v1/r2 never scheduled (bench run
    exits 1): the fake runs, AWS and the experiment file."""
    fake = FakeRuns(save_interval=10, total=33)
    _, aws = _aws(fake)
    exp = yaml.safe_load(EXAMPLE.read_text())
    exp["arms"] = [a for a in exp["arms"] if not a.get("faults")]
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(exp))
    fake.unschedulable.add("example-ab-deepep-v1-r2")
    assert _run(path, fake, aws, tmp_path / "o")[0] == 1
    return fake, aws, path


def test_only_runs_one_incomplete_attempt_again_and_the_experiment_becomes_reportable(tmp_path, capsys):
    """One attempt INCOMPLETE made the whole experiment unreportable; `--only <arm>/r<n>` runs it again
    under a fresh attempt number into the same directory, and the report then reads every attempt."""
    fake, aws, path = _one_attempt_incomplete(tmp_path)
    assert main(["report", str(tmp_path / "o"), "--no-plots"]) == 1
    assert "deepep-v1/r2: marked INCOMPLETE by bench run" in capsys.readouterr().err
    fake.unschedulable.clear()
    code, text = _run(path, fake, aws, tmp_path / "o", "--only", "deepep-v1/r2")
    assert code == 0 and "deepep-v1/r2: submitted example-ab-deepep-v1-r2 as attempt 2" in text
    assert [j["metadata"]["name"] for j in fake.submitted][-1] == "example-ab-deepep-v1-r2-2" and len(fake.submitted) == 7
    jobs = json.loads((tmp_path / "o" / "deepep-v1" / "r2" / "rayjob.json").read_text())["items"]
    assert [j["metadata"]["name"] for j in jobs] == ["example-ab-deepep-v1-r2-2"]  # not the cancelled attempt 1
    assert main(["report", str(tmp_path / "o"), "--no-plots"]) == 0


SEED_P5EN = Path("experiments/seed-p5en.yaml")


@pytest.mark.parametrize("late", [0, 1])
def test_a_step_that_saves_may_take_its_save_and_no_more(tmp_path, capsys, late):
    """seed-p5en saves 9,394 GB after steps 20, 40 and 45, about 30 min each on p5en-seed's file system
    (21,600 GiB x 250 MB/s/TiB); the next-step deadline was 3 x stepSeconds (540 s), so its attempts ended
    INCOMPLETE at the first save. A save taking its derived time (the file system's provisioned throughput)
    passes; one taking longer than 3 x that plus 3 x stepSeconds is still a hang."""
    from bench.deadlines import SLACK, deadlines
    from bench.experiment import load_experiment
    from bench.storage import save_time
    from test_first_deploy import pinned_stack_dir
    exp = load_experiment(SEED_P5EN)
    stack_dir = pinned_stack_dir(tmp_path, "p5en-seed")
    cfg = gate.read("p5en-seed", stack_dir)
    save = save_time(exp, cfg, "slime")
    assert round(save.save / 1e9) == 9394
    assert 29 * 60 < save.seconds < 30 * 60  # 9,394 GB / (21,600 / 1,024 TiB x 250 MB/s)
    limits = deadlines(exp, "slime", cfg)
    assert limits.saves_after == {19, 39, 44} and limits.step_s == SLACK * exp.estimate.step_seconds
    fake = FakeRuns(save_interval=20, total=45)
    fake.save_s = save.seconds if not late else SLACK * (save.seconds + exp.estimate.step_seconds) + 60
    _, aws = _aws(fake)
    lines: list[str] = []
    out = tmp_path / "o"
    code = main(["run", str(SEED_P5EN), "--out", str(out), "--log-bucket", "b", "--repository", REPOSITORY,
                 "--stack-dir", str(stack_dir), "--only", "slime/r1"], client=lambda: fake, out=lines.append, aws=aws)
    err = capsys.readouterr().err
    if not late:
        assert code == 0, err
        jobs = json.loads((out / "slime" / "r1" / "rayjob.json").read_text())["items"]
        assert [j["status"]["jobStatus"] for j in jobs] == ["SUCCEEDED"]
        assert sum("successfully saved checkpoint" in line for line in fake.logs["seed-p5en-slime-r1-1"]) == 3
    else:
        assert code == 1
        assert f"no step after step 19 for" in err and f"(deadline {limits.next_step_s(19):.0f} s, with its save)" in err


def test_an_only_rerun_is_pinned_to_the_nodes_the_report_compares(tmp_path, capsys):
    """`--only` started unpinned: on a pool with a spare node the re-run could land elsewhere and the report then
    refused the experiment (other nodes than the first attempt's). It is pinned to the first compared attempt's
    nodes, where they still exist."""
    fake, aws, path = _one_attempt_incomplete(tmp_path)
    fake.unschedulable.clear()
    fake.spare["rollout"] = ["rollout-9"]  # a spare node, free and found first
    code, text = _run(path, fake, aws, tmp_path / "o", "--only", "deepep-v1/r2")
    assert code == 0, capsys.readouterr().err
    assert main(["report", str(tmp_path / "o"), "--no-plots"]) == 0, capsys.readouterr().err
    pins = {g["groupName"]: _hostnames(g) for g in fake.submitted[-1]["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    assert pins == {"trainer": {"train-0", "train-1"}, "rollout": {"rollout-0", "rollout-1"}}
    assert "--only: pinned to the nodes of nccl/r1, the first attempt the report compares" in text

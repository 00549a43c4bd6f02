"""`python -m bench run`: dry run, and a whole experiment against a fake cluster that plays the
RayJobs, pods and driver logs the run command's client reads (submit, resume after a fault, collect)."""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import yaml

from bench.__main__ import main
from workloads.render.common import RAY_GROUP_LABEL
from workloads.render.runs import RUN_LABEL
from workloads.runs.client import RunClient

EXAMPLE = Path("experiments/example-ab.yaml")
STEPS_PER_POLL = 8
REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rl-p5en-shared"


def _pod(name: str, run: str, group: str, node: str, created: datetime):
    return SimpleNamespace(metadata=SimpleNamespace(name=name, namespace="team-alpha", creation_timestamp=created,
                                                    owner_references=[], labels={RUN_LABEL: run, RAY_GROUP_LABEL: group}),
                           spec=SimpleNamespace(node_name=node), status=SimpleNamespace(phase="Running"))


def _perf(step: int, at: datetime) -> list[str]:
    stamp = at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    r = {"rollout/response_len/mean": 3000.0, "perf/rollout_time": 90.0, "perf/tokens_per_gpu_per_sec": 1000.0}
    t = {"perf/train_wait_time": 90.0, "perf/train_time": 60.0, "perf/step_time": 150.0}
    return [f"(RolloutManager pid=1, ip=10.0.3.1) [{stamp} rollout_manager] metrics.py:89 - perf {step}: {r}",
            f"(MegatronTrainRayActor pid=2, ip=10.0.2.1) [{stamp} train_cell0_rank0] train_metric_utils.py:56 - "
            f"perf {step}: {t}"]


class FakeCore:
    def __init__(self, cluster: "FakeRuns"):
        self.cluster = cluster
        self.api_client = SimpleNamespace(sanitize_for_serialization=lambda o: o)
        self.deleted, self.evicted, self.patched = [], [], []

    def list_namespaced_pod(self, namespace, label_selector=""):
        want = dict(p.split("=") for p in label_selector.split(",") if "=" in p)
        return SimpleNamespace(items=[p for p in self.cluster.pods
                                      if all(p.metadata.labels.get(k) == v for k, v in want.items())])

    def read_node(self, name):
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "rl.platform/role": name.split("-")[0], "rl.platform/pool": name.split("-")[0],
            "node.kubernetes.io/instance-type": "p5en.48xlarge", "eks.amazonaws.com/capacityType": "CAPACITY_BLOCK"}},
            "spec": {"providerID": f"aws:///us-east-1a/i-{name}"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}

    def delete_namespaced_pod(self, name, namespace):
        self.deleted.append(name)
        pod = next(p for p in self.cluster.pods if p.metadata.name == name)
        self.cluster.pods.remove(pod)
        run, group = pod.metadata.labels[RUN_LABEL], pod.metadata.labels[RAY_GROUP_LABEL]
        if group == "trainer":
            self.cluster.fail(run)
        self.cluster.pods.append(_pod(name + "-x", run, group, pod.spec.node_name,
                                      datetime.now(timezone.utc) + timedelta(seconds=1)))


class FakeRuns(RunClient):
    """The run command's client over an in-memory cluster: each list of RayJobs moves them on."""

    def __init__(self, save_interval: int, total: int):
        self.core = FakeCore(self)
        self.jobs: dict[str, dict] = {}
        self.logs: dict[str, list[str]] = {}
        self.next_step: dict[str, int] = {}
        self.pods: list = []
        self.submitted: list[dict] = []
        self.interval, self.total = save_interval, total

    def tier_sizes(self, pools):
        return {}

    def driver_log(self, team, run, rayjob):
        return "\n".join(self.logs[rayjob]) + "\n"

    def submit(self, rayjob):
        md = rayjob["metadata"]
        run = md["labels"][RUN_LABEL]
        done = [n for n, j in self.jobs.items() if j["metadata"]["labels"][RUN_LABEL] == run]
        last = max((self.next_step[n] for n in done), default=0)
        job = {**rayjob, "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING",
                                    "jobId": f"raysubmit_{md['name']}", "startTime": datetime.now(timezone.utc).isoformat()}}
        self.jobs[md["name"]] = job
        self.logs[md["name"]] = [f"Running entrypoint for job raysubmit_{md['name']}: python3 miles_launcher.py"]
        self.next_step[md["name"]] = last // self.interval * self.interval  # resume at the checkpoint boundary
        self.pods = [p for p in self.pods if p.metadata.labels[RUN_LABEL] != run]
        for group, pool in (("trainer", "train"), ("rollout", "rollout")):
            for i in range(2):
                self.pods.append(_pod(f"{md['name']}-{group}-{i}", run, group, f"{pool}-{i}",
                                      datetime.now(timezone.utc)))
        self.submitted.append(job)
        return job

    def fail(self, run):
        for name, job in self.jobs.items():
            if job["metadata"]["labels"][RUN_LABEL] == run and job["status"]["jobStatus"] == "RUNNING":
                job["status"] |= {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED",
                                  "endTime": datetime.now(timezone.utc).isoformat()}

    def rayjobs(self, team=None, run=None):
        for name, job in self.jobs.items():
            if job["status"]["jobStatus"] != "RUNNING":
                continue
            for _ in range(STEPS_PER_POLL):
                if self.next_step[name] >= self.total:
                    job["status"] |= {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED",
                                      "endTime": datetime.now(timezone.utc).isoformat()}
                    break
                self.logs[name] += _perf(self.next_step[name], datetime.now(timezone.utc))
                self.next_step[name] += 1
        return sorted((j for j in self.jobs.values() if run is None or j["metadata"]["labels"][RUN_LABEL] == run),
                      key=lambda j: j["metadata"]["name"])


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
    monkeypatch.setattr("time.sleep", lambda s: None)  # the runner's and the fault detector's polls
    fake = FakeRuns(save_interval=10, total=33)
    lines: list[str] = []
    out = tmp_path / "out"
    assert main(["run", str(EXAMPLE), "--out", str(out), "--repository", REPOSITORY], client=lambda: fake, out=lines.append) == 0
    assert [j["metadata"]["name"] for j in fake.submitted][:4] == [
        "example-ab-nccl-r1-1", "example-ab-deepep-v1-r1-1", "example-ab-deepep-v1-faults-r1-1",
        "example-ab-deepep-v1-faults-r1-2"]  # the trainer fault made the job fail: resumed as attempt 2
    faults = json.loads((out / "deepep-v1-faults" / "r1" / "faults.json").read_text())
    assert [f["kind"] for f in faults] == ["delete-rollout-pod", "delete-trainer-pod"]
    assert all(f["detectedAt"] for f in faults) and faults[1]["resumedAs"] == "example-ab-deepep-v1-faults-r1-2"
    assert fake.core.deleted[0].startswith("example-ab-deepep-v1-faults-r1-1-rollout")
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
    from workloads.crds import crd_schema, validate
    assert validate(later, crd_schema("ray.io/v1", "RayJob")) == []
    assert main(["report", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    trainer = report["faults"]["deepep-v1-faults"]["deepep-v1-faults/r1"][1]
    assert trainer["resumed_from_last_checkpoint"] and trainer["resumed_at_step"] % 10 == 0
    assert report["arms"]["nccl"]["rollout_gpus"] == [16]


def test_drain_cordons_and_evicts_all_but_daemonsets():
    from bench.experiment import FaultKind
    from bench.faults import inject, uncordon

    fake = FakeRuns(save_interval=10, total=33)
    fake.submit({"metadata": {"name": "r-1", "labels": {RUN_LABEL: "r"}}, "spec": {}})
    calls = []
    daemon = _pod("efa-plugin-x", "", "", "rollout-0", datetime.now(timezone.utc))
    daemon.metadata.owner_references = [SimpleNamespace(kind="DaemonSet")]
    victims = [p for p in fake.pods if p.spec.node_name == "rollout-0"] + [daemon]
    fake.core.patch_node = lambda name, body: calls.append(("patch", name, body))
    fake.core.list_pod_for_all_namespaces = lambda field_selector: (
        calls.append(("list", field_selector)) or SimpleNamespace(items=victims))
    fake.core.create_namespaced_pod_eviction = lambda name, ns, body: calls.append(("evict", name, body.metadata.name))
    record = inject(fake, FaultKind.DRAIN_GPU_NODE, "alpha", "r")
    assert record["target"] == "node/rollout-0"
    assert calls[0] == ("patch", "rollout-0", {"spec": {"unschedulable": True}})
    assert calls[1] == ("list", "spec.nodeName=rollout-0")
    assert [c[1] for c in calls if c[0] == "evict"] == ["r-1-rollout-0"]  # the DaemonSet's pod stays
    uncordon(fake, record)
    assert calls[-1] == ("patch", "rollout-0", {"spec": {"unschedulable": False}})


def test_emitted_and_simulated_objects_validate(capsys, tmp_path):
    """The RayJobs `run` submits (with RAY_DEDUP_LOGS) against KubeRay v1.7.0's CRD; the simulator's
    RayJobs (status included) against the CRD and its Nodes against Kubernetes' schema."""
    import kubernetes_validate

    from bench.simulate import EXAMPLE_TRUTH, simulate
    from test_workloads import k8s_version
    from workloads.crds import crd_schema, validate
    from workloads.stack import ProgramConfig
    from stackconfig.files import read_stack

    schema = crd_schema("ray.io/v1", "RayJob")
    assert main(["run", str(EXAMPLE), "--dry-run"]) == 0
    jobs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(jobs) == 9 and all(validate(j, schema) == [] for j in jobs)
    simulate(EXAMPLE, EXAMPLE_TRUTH, tmp_path / "d")
    version = k8s_version(read_stack("p5en-shared", model=ProgramConfig))
    for folder in (tmp_path / "d").glob("*/r*"):
        doc = json.loads((folder / "rayjob.json").read_text())
        for job in doc.get("items", [doc]):
            assert validate(job, schema) == []
        for node in json.loads((folder / "nodes.json").read_text())["items"]:
            kubernetes_validate.validate(node, version, strict=True)

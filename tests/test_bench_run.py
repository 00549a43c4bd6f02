"""`python -m bench run`: dry run, and a whole experiment against a fake cluster that plays the
RayJobs, pods and driver logs the run command's client reads (submit, resume after a fault, collect)."""

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from workloads.checks import gate

import pytest
import yaml

from kubernetes.client import ApiException

from bench.__main__ import main
from test_bench_faults import shell_read
from components.faults import FAULT_TAG, FAULT_TARGET_LABEL, pod_delete_template, template_specs
from workloads.pod.miles_launcher import JOB_LINE
from workloads.render.common import RAY_GROUP_LABEL, RAY_NODE_TYPE_LABEL
from workloads.render.runs import ATTEMPT_LABEL, RUN_LABEL
from workloads.cli.runs_client import RunClient

EXAMPLE = Path("experiments/example-ab.yaml")
STEPS_PER_POLL = 8
REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rl-p5en-shared"


def pinned(out: Path) -> list[str]:
    """``--stack-dir`` of a folder beside ``out`` whose p5en-shared has real-looking digests: what a
    submission sends may not carry a placeholder (``workloads.deploy.submit.sendable``)."""
    from test_first_deploy import pinned_stack_dir
    out.parent.mkdir(parents=True, exist_ok=True)
    return ["--stack-dir", str(pinned_stack_dir(out.parent))]
CLUSTER = "rl-p5en-shared"


NAMESPACE = "team-alpha"
GUARDED = {"headgroup", "trainer", "rollout"}
"""The groups the `runs` PodDisruptionBudget holds (maxUnavailable 0), render.runs.team_run_budget."""


def _pod(name: str, run: str, group: str, node: str | None, created: datetime, attempt: int = 1,
         extra: dict | None = None):
    """A pod of the run; without a node it is Pending (the scheduler found none its affinity allows)."""
    labels = {RUN_LABEL: run, RAY_GROUP_LABEL: group, ATTEMPT_LABEL: str(attempt),
              RAY_NODE_TYPE_LABEL: "head" if group == "headgroup" else "worker", **(extra or {})}
    return SimpleNamespace(metadata=SimpleNamespace(name=name, namespace=NAMESPACE, creation_timestamp=created,
                                                    owner_references=[], labels=labels),
                           spec=SimpleNamespace(node_name=node),
                           status=SimpleNamespace(phase="Running" if node else "Pending"))


class FakeClock:
    """bench.deadlines.CLOCK in the tests, and the fake cluster's time: sleeping advances it, nothing waits."""

    def __init__(self):
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def now(self) -> datetime:
        return datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc) + timedelta(seconds=self.t)


TIME = FakeClock()


def _now() -> datetime:
    return TIME.now()


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> FakeClock:
    from bench.deadlines import CLOCK
    fake = FakeClock()
    monkeypatch.setattr(sys.modules[__name__], "TIME", fake)
    for name in ("monotonic", "sleep", "now"):
        monkeypatch.setattr(CLOCK, name, getattr(fake, name))
    monkeypatch.setattr("time.sleep", fake.sleep)  # nothing in these tests waits for real
    return fake


def _hostnames(group: dict) -> set[str] | None:
    """The node names a worker group's required node affinity allows (bench.pinning), None when unpinned."""
    terms = (((group["template"].get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    allowed = [set(e["values"]) for t in terms for e in t.get("matchExpressions", []) if e["key"] == "kubernetes.io/hostname"]
    return set.intersection(*allowed) if allowed else None


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _perf(step: int, at: datetime) -> list[str]:
    stamp = _stamp(at)
    r = {"rollout/response_len/mean": 3000.0, "perf/rollout_time": 90.0, "perf/tokens_per_gpu_per_sec": 1000.0}
    t = {"perf/train_wait_time": 90.0, "perf/train_time": 60.0, "perf/step_time": 150.0}
    return [f"(RolloutManager pid=1, ip=10.0.3.1) [{stamp} rollout_manager] metrics.py:89 - perf {step}: {r}",
            f"(MegatronTrainRayActor pid=2, ip=10.0.2.1) [{stamp} train_cell0_rank0] train_metric_utils.py:56 - "
            f"perf {step}: {t}"]


def _saved(step: int, at: datetime) -> str:
    """Megatron's line once a save is complete (checkpointing.py:742-745, radixark/Megatron-LM 37f91617)."""
    return (f"(MegatronTrainRayActor pid=2, ip=10.0.2.1)   [{at.strftime('%Y-%m-%d %H:%M:%S.%f')}] successfully saved "
            f"checkpoint from iteration {step:7d} to /mnt/fsx/checkpoints/x [ t 1/4, p 1/1 ]")


def _plain(obj):
    """What the client's ``sanitize_for_serialization`` makes of an object: camelCase keys, ISO times."""
    if isinstance(obj, SimpleNamespace):
        obj = vars(obj)
    if isinstance(obj, dict):
        return {k.split("_")[0] + "".join(w.title() for w in k.split("_")[1:]): _plain(v) for k, v in obj.items()
                if v is not None}
    return obj.isoformat() if isinstance(obj, datetime) else obj


def _api_error(status: int, reason: str):
    return ApiException(status=status, reason=reason)


class FakeCore:
    """The core API as a team member sees it (render.teams.SUBMITTER_RULES): no pod delete, no node
    patch, no eviction, no cluster-wide pod list (403); with ``admin`` RBAC an eviction of a pod the
    `runs` budget guards is refused 429, as the Eviction API does under maxUnavailable 0."""

    def __init__(self, cluster: "FakeRuns", admin: bool = False):
        self.cluster, self.admin = cluster, admin
        self.api_client = SimpleNamespace(sanitize_for_serialization=_plain)

    def list_namespaced_pod(self, namespace, label_selector=""):
        want = dict(p.split("=") for p in label_selector.split(",") if "=" in p)
        return SimpleNamespace(items=[p for p in self.cluster.pods
                                      if all(p.metadata.labels.get(k) == v for k, v in want.items())])

    def list_namespaced_event(self, namespace):
        return SimpleNamespace(items=list(self.cluster.events))

    def list_node(self, label_selector=""):
        pool = label_selector.split("=", 1)[1]
        return SimpleNamespace(items=[self.read_node(n) for n in self.cluster.nodes.get(pool, [])])

    def read_node(self, name):
        if name in self.cluster.gone:
            raise _api_error(404, "NotFound")
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "rl.platform/role": name.split("-")[0], "rl.platform/pool": name.split("-")[0],
            "node.kubernetes.io/instance-type": "p5en.48xlarge", "eks.amazonaws.com/capacityType": "CAPACITY_BLOCK"}},
            "spec": {"providerID": f"aws:///us-east-1a/i-{name}"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}

    def delete_namespaced_pod(self, name, namespace, **_):
        raise _api_error(403, "Forbidden")

    def patch_node(self, name, body):
        raise _api_error(403, "Forbidden")

    def list_pod_for_all_namespaces(self, **_):
        raise _api_error(403, "Forbidden")

    def create_namespaced_pod_eviction(self, name, namespace, body):
        if not self.admin:
            raise _api_error(403, "Forbidden")
        pod = next(p for p in self.cluster.pods if p.metadata.name == name)
        if RUN_LABEL in pod.metadata.labels and pod.metadata.labels[RAY_GROUP_LABEL] in GUARDED:
            raise _api_error(429, "TooManyRequests")  # Cannot evict pod as it would violate the pod's disruption budget
        self.cluster.kill(pod, grace=30)


class FakeRuns(RunClient):
    """The run command's client over an in-memory cluster: each list of RayJobs moves them on. Its
    driver logs are the launcher's files, read through exec (``tail -c``)."""

    def __init__(self, save_interval: int, total: int, admin: bool = False, engines_recover: bool = True):
        self.core = FakeCore(self, admin)
        self.engines_recover = engines_recover
        """False: Miles without fault tolerance, a lost rollout engine fails the job."""
        self.unschedulable: set[str] = set()
        """Runs whose pods find no node this time (a capacity gap): they stay Pending."""
        self.hangs_after: dict[str, int] = {}
        """Run -> the last step its job logs before it hangs (a collective that never returns)."""
        self.jobs: dict[str, dict] = {}
        self.logs: dict[str, list[str]] = {}
        self.next_step: dict[str, int] = {}
        self.pods: list = []
        self.events: list = []
        self.gone: set[str] = set()
        self.nodes = {pool: [f"{pool}-{i}" for i in range(2)] for pool in ("train", "rollout")}
        """Each pool's nodes; a terminated one is replaced by a new node of the group (a new name)."""
        self.submitted: list[dict] = []
        self.cancelled: list[str] = []
        self.execs: list[list[str]] = []
        self.interval, self.total = save_interval, total
        self.serving_result: dict = {}
        self.allowed: dict[str, dict[str, set[str] | None]] = {}
        """RayJob -> group -> the nodes its affinity allows (None: any node of its pool)."""
        self.stalled: set[str] = set()
        """RayJobs waiting for a rollout engine that cannot come back: no step advances."""
        self.polls, self.max_polls = 0, 3000
        self.last_poll: datetime | None = None

    def tier_sizes(self, pools):
        return {}

    def _exec(self, team, pod, command):
        self.execs.append(command)
        if command[0] == "cat":  # the serving benchmark's result line, once started
            started = any("sglang.bench_serving" in c[-1] for c in self.execs)
            return (0, json.dumps(self.serving_result) + "\n") if started else (1, "")
        if "sglang.bench_serving" in command[-1]:
            return 0, ""
        owner = next(p for p in self.pods if p.metadata.name == pod)
        name = f"{owner.metadata.labels[RUN_LABEL]}-{owner.metadata.labels[ATTEMPT_LABEL]}"
        return 0, shell_read(("\n".join(self.logs[name]) + "\n").encode(), command[2])

    def submit(self, rayjob):
        md = rayjob["metadata"]
        run = md["labels"][RUN_LABEL]
        done = [n for n, j in self.jobs.items() if j["metadata"]["labels"][RUN_LABEL] == run]
        last = max((self.next_step[n] for n in done), default=0)
        job = {**rayjob, "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING",
                                    "jobId": f"raysubmit_{md['name']}", "startTime": _now().isoformat()}}
        self.jobs[md["name"]] = job
        resume = last // self.interval * self.interval  # resume after the last complete save
        self.logs[md["name"]] = [JOB_LINE.format(job_id=f"raysubmit_{md['name']}")] + (
            [f"(MegatronTrainRayActor pid=2, ip=10.0.2.1)  successfully loaded checkpoint from /mnt/fsx/checkpoints/x "
             f"[ t 1/4, p 1/1 ] at iteration {resume - 1}"] if resume else [])
        self.next_step[md["name"]] = resume
        attempt = int(md["name"].rsplit("-", 1)[1])
        self.pods = [p for p in self.pods if p.metadata.labels[RUN_LABEL] != run]
        groups = {g["groupName"]: g for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
        self.allowed[md["name"]] = {g: _hostnames(spec) for g, spec in groups.items()}
        self.pods.append(_pod(f"{md['name']}-head", run, "headgroup", "system-0", _now(), attempt))
        for group, pool in (("trainer", "train"), ("rollout", "rollout")):
            labels = (groups.get(group) or {}).get("template", {}).get("metadata", {}).get("labels", {})
            extra = {k: v for k, v in labels.items() if k == FAULT_TARGET_LABEL}
            for i in range(len(self.nodes[pool])):
                self.pods.append(_pod(f"{md['name']}-{group}-{i}", run, group, self.place(md["name"], group, pool),
                                      _now(), attempt, extra))
        if run in self.unschedulable:
            for pod in self.pods:
                if self._job_of(pod) == md["name"] and pod.metadata.labels[RAY_GROUP_LABEL] != "headgroup":
                    pod.spec.node_name, pod.status.phase = None, "Pending"
        if any(p.status.phase == "Pending" for p in self.pods if self._job_of(p) == md["name"]):
            job["status"] |= {"jobDeploymentStatus": "Initializing", "jobStatus": ""}  # the gang never starts
        self.submitted.append(job)
        return job

    def place(self, job: str, group: str, pool: str) -> str | None:
        """A node of the pool the group's affinity allows and no pod of the job holds (one GPU pod a node)."""
        allowed, taken = self.allowed[job].get(group), {p.spec.node_name for p in self.pods if self._job_of(p) == job}
        return next((n for n in self.nodes[pool] if n not in taken and (allowed is None or n in allowed)), None)

    def _job_of(self, pod) -> str:
        return f"{pod.metadata.labels[RUN_LABEL]}-{pod.metadata.labels[ATTEMPT_LABEL]}"

    def kill(self, pod, grace: int):
        """A pod gone: with a grace period its preStop asks for a checkpoint first (render.runs.SAVE_ON_STOP);
        a lost trainer fails the job, a lost rollout engine is recovered in place."""
        name, now = self._job_of(pod), _now()
        self.pods.remove(pod)
        if grace > 0:
            self.logs[name].append(_saved(self.next_step[name] - 1, now))
            self.next_step[name] = (self.next_step[name] // self.interval + 1) * self.interval  # a graceful save
        if grace == 0 and pod.spec.node_name not in self.gone:  # the kubelet stops the container (a node gone: none)
            self.event("Killing", "Pod", pod.metadata.name, now)
        self.event("CreatedWorkerPod", "RayCluster", f"{name}-raycluster-x", now + timedelta(seconds=2))
        now += timedelta(seconds=1)  # what the run logs next comes after the kill
        group = pod.metadata.labels[RAY_GROUP_LABEL]
        if group == "trainer" or not self.engines_recover:
            self.fail(pod.metadata.labels[RUN_LABEL])
        else:
            node = pod.spec.node_name
            if node in self.gone:  # its node was terminated: the engine comes back where its affinity allows
                node = self.place(name, group, "rollout")
            if node is None:  # no node it may run on: the engine never comes back, the job waits for it
                self.stalled.add(name)
                return
            self.logs[name].append(f"(RolloutManager pid=1, ip=10.0.3.1) [{_stamp(now)} rollout_manager] "
                                   f"server_group.py:209 - Recovered 1 dead rollout engines (worker_type=regular)")
            self.pods.append(_pod(pod.metadata.name + "-x", pod.metadata.labels[RUN_LABEL], group, node,
                                  now + timedelta(seconds=1), int(pod.metadata.labels[ATTEMPT_LABEL]),
                                  {k: v for k, v in pod.metadata.labels.items() if k == FAULT_TARGET_LABEL}))

    def event(self, reason: str, kind: str, name: str, at: datetime) -> None:
        self.events.append(SimpleNamespace(
            metadata=SimpleNamespace(name=f"ev-{len(self.events)}"), reason=reason,
            involved_object=SimpleNamespace(kind=kind, name=name), event_time=at, last_timestamp=None,
            first_timestamp=None))

    def terminate(self, node: str):
        self.gone.add(node)
        self.nodes = {pool: [n + "-new" if n == node else n for n in names] for pool, names in self.nodes.items()}
        for pod in [p for p in self.pods if p.spec.node_name == node]:
            self.kill(pod, grace=0)

    def fail(self, run):
        for name, job in self.jobs.items():
            if job["metadata"]["labels"][RUN_LABEL] == run and job["status"]["jobStatus"] == "RUNNING":
                job["status"] |= {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED",
                                  "endTime": (_now() + timedelta(seconds=3)).isoformat()}  # Ray sees it fail
        self.pods = [p for p in self.pods if p.metadata.labels[RUN_LABEL] != run]  # the cluster is deleted

    def cancel(self, team, run, now=False):
        names = [n for n, j in self.jobs.items() if j["metadata"]["labels"][RUN_LABEL] == run
                 and j["status"]["jobDeploymentStatus"] not in ("Complete", "Failed", "Suspended")]
        for n in names:
            self.jobs[n]["status"] |= {"jobDeploymentStatus": "Suspended", "jobStatus": "STOPPED"}
        self.pods = [p for p in self.pods if self._job_of(p) not in names]  # suspended: its Ray cluster deleted
        self.cancelled += names
        return names

    def rayjobs(self, team=None, run=None):
        self.polls += 1
        if self.polls > self.max_polls:
            raise AssertionError(f"bench run polled the RayJobs {self.polls} times: a wait without a deadline")
        now = _now()
        since, self.last_poll = self.last_poll or now, now  # the steps of this poll ran since the last one
        for name, job in self.jobs.items():
            if job["status"]["jobStatus"] != "RUNNING" or name in self.stalled:
                continue
            if self.next_step[name] > self.hangs_after.get(job["metadata"]["labels"][RUN_LABEL], self.total):
                continue
            for i in range(STEPS_PER_POLL):
                at = since + (now - since) * (i + 1) / STEPS_PER_POLL
                if self.next_step[name] >= self.total:
                    job["status"] |= {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED",
                                      "endTime": at.isoformat()}
                    self.pods = [p for p in self.pods if self._job_of(p) != name]  # its Ray cluster is deleted
                    break
                step = self.next_step[name]
                self.logs[name] += _perf(step, at)
                if (step + 1) % self.interval == 0:
                    self.logs[name].append(_saved(step, at))
                self.next_step[name] += 1
        return sorted((j for j in self.jobs.values() if run is None or j["metadata"]["labels"][RUN_LABEL] == run),
                      key=lambda j: j["metadata"]["name"])


class Refused(Exception):
    """botocore's ClientError as far as the bench reads it: ``response["Error"]["Code"]``."""

    def __init__(self, code: str):
        super().__init__(code)
        self.response = {"Error": {"Code": code}}


class FakeFIS:
    """AWS FIS over the fake cluster: the stack's templates (components.faults, as specified) run as
    their parameters say: a pod-delete with its grace period on one pod its selector matches, a
    terminate on the instances tagged with the template's value; a target preview (actionsMode
    skip-all) acts on nothing; ``denied`` templates answer AccessDeniedException to StartExperiment."""

    def __init__(self, cluster: FakeRuns, ec2: "FakeEC2", fail_with: str | None = None):
        self.cluster, self.ec2, self.fail_with = cluster, ec2, fail_with
        self.specs = {f"EXT-{key}": spec for key, spec in template_specs(CLUSTER, [("alpha", NAMESPACE)]).items()}
        self.started, self.stopped, self.experiments, self.previews = [], [], {}, []
        self.denied: set[str] = set()
        self.updated: list[tuple[str, dict]] = []

    def list_experiment_templates(self, **_):
        return {"experimentTemplates": [{"id": i, "tags": tags} for i, (_, tags) in self.specs.items()]}

    def update_experiment_template(self, id, targets):
        self.updated.append((id, targets))
        spec, _ = self.specs[id]
        for t in spec["targets"]:
            if t["name"] in targets:
                t["resource_tags"] = [{"key": k, "value": v} for k, v in targets[t["name"]]["resourceTags"].items()]

    def start_experiment(self, experimentTemplateId, tags, experimentOptions=None):
        if experimentTemplateId in self.denied:
            raise Refused("AccessDeniedException")
        spec, _ = self.specs[experimentTemplateId]
        exp = f"EXP{len(self.started) + len(self.previews)}"
        if (experimentOptions or {}).get("actionsMode") == "skip-all":
            self.previews.append(experimentTemplateId)
            return {"experiment": {"id": exp}}
        self.started.append(experimentTemplateId)
        action, target = spec["actions"][0], spec["targets"][0]
        now = _now()
        if action["action_id"] == "aws:eks:pod-delete":
            want = dict(kv.split("=") for kv in target["parameters"]["selectorValue"].split(","))
            pod = next(p for p in self.cluster.pods if all(p.metadata.labels.get(k) == v for k, v in want.items()))
            grace = int({p["key"]: p["value"] for p in action["parameters"]}["gracePeriodSeconds"])
            hit = [{"resourceType": "aws:eks:pod", "targetName": "pod",
                    "targetInformation": {"namespace": NAMESPACE, "podName": pod.metadata.name}}]
            self.cluster.kill(pod, grace)
        else:
            tag = target["resource_tags"][0]
            ids = [i for i, t in self.ec2.tags.items() if t.get(tag["key"]) == tag["value"]]
            hit = [{"resourceType": "aws:ec2:instance", "targetName": "node",
                    "targetInformation": {"arn": f"arn:aws:ec2:us-east-1:123456789012:instance/{i}"}} for i in ids]
            for iid in ids:
                self.cluster.terminate(iid.removeprefix("i-"))
        state = {"status": "failed", "reason": self.fail_with} if self.fail_with else {"status": "completed"}
        self.experiments[exp] = {"state": state, "actions": {action["name"]: {"startTime": now}},
                                 "targets": {t["name"]: {"resourceTags": {x["key"]: x["value"] for x in
                                                                          t.get("resource_tags", [])}}
                                             for t in spec["targets"]}, "resolved": hit}
        return {"experiment": {"id": exp}}

    def get_experiment(self, id):
        got = self.experiments[id]
        return {"experiment": {"id": id, "state": got["state"], "actions": got["actions"], "targets": got["targets"]}}

    def list_experiment_resolved_targets(self, experimentId):
        return {"resolvedTargets": self.experiments[experimentId]["resolved"]}

    def stop_experiment(self, id):
        self.stopped.append(id)


class FakeEC2:
    def __init__(self):
        self.tags: dict[str, dict] = {}
        self.may_tag = True

    def create_tags(self, Resources, Tags, DryRun=False):
        if DryRun:
            raise Refused("DryRunOperation" if self.may_tag else "UnauthorizedOperation")
        for r in Resources:
            self.tags.setdefault(r, {}).update({t["Key"]: t["Value"] for t in Tags})

    def delete_tags(self, Resources, Tags):
        for r in Resources:
            for t in Tags:
                self.tags.get(r, {}).pop(t["Key"], None)


class FakeS3:
    """The checkpoint bucket: the launcher's log files as the file system exported them."""

    def __init__(self, cluster: FakeRuns):
        self.cluster, self.reads = cluster, []

    def get_object(self, Bucket, Key, Range):
        self.reads.append((Key, Range))
        run, log = Key.split("/")[-2:]
        text = ("\n".join(self.cluster.logs[f"{run}-{log.removeprefix('driver-').removesuffix('.log')}"]) + "\n").encode()
        start = int(Range.removeprefix("bytes=").rstrip("-"))
        if start >= len(text):
            raise type("ClientError", (Exception,), {"response": {"Error": {"Code": "InvalidRange"}}})()
        return {"Body": SimpleNamespace(read=lambda: text[start:])}


def _aws(fake: FakeRuns, fail_with: str | None = None):
    ec2 = FakeEC2()
    fis = FakeFIS(fake, ec2, fail_with)
    clients = {"fis": fis, "ec2": ec2, "s3": FakeS3(fake)}
    return clients, lambda service, region: clients[service]


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
    assert {o["kind"] for o in rbac} == {"ServiceAccount", "Role", "RoleBinding"}  # nothing cluster-wide


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


def test_a_pod_fault_never_hits_a_teammates_run(tmp_path, capsys):
    """A teammate's fault arm runs in the same namespace, its pods labelled for the same template: the
    fault is not injected (FIS could pick their pod), the attempt is INCOMPLETE, their pod untouched."""
    fake = FakeRuns(save_interval=10, total=33)
    clients, aws = _aws(fake)
    theirs = _pod("their-run-1-rollout-0", "their-run", "rollout", "rollout-7", _now(), 1,
                  {FAULT_TARGET_LABEL: "rollout"})
    fake.pods.insert(0, theirs)
    fake.logs["their-run-1"], fake.next_step["their-run-1"] = [], 0
    code, _ = _run(_experiment(tmp_path, [{"kind": "delete-rollout-pod", "atStep": 12}]), fake, aws, tmp_path / "o")
    assert code == 1 and theirs in fake.pods and clients["fis"].started == []
    assert "pods of other runs carry rl.platform/fault-target=rollout in team-alpha (their-run-1-rollout-0)" in \
        (tmp_path / "o" / "node" / "r1" / "INCOMPLETE").read_text()


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


def test_only_runs_one_incomplete_attempt_again_and_the_experiment_becomes_reportable(tmp_path, capsys):
    """One attempt INCOMPLETE made the whole experiment unreportable; `--only <arm>/r<n>` runs it again
    under a fresh attempt number into the same directory, and the report then reads every attempt."""
    fake = FakeRuns(save_interval=10, total=33)
    _, aws = _aws(fake)
    exp = yaml.safe_load(EXAMPLE.read_text())
    exp["arms"] = [a for a in exp["arms"] if not a.get("faults")]
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(exp))
    fake.unschedulable.add("example-ab-deepep-v1-r2")
    assert _run(path, fake, aws, tmp_path / "o")[0] == 1
    assert main(["report", str(tmp_path / "o"), "--no-plots"]) == 1
    assert "deepep-v1/r2: marked INCOMPLETE by bench run" in capsys.readouterr().err
    fake.unschedulable.clear()
    code, text = _run(path, fake, aws, tmp_path / "o", "--only", "deepep-v1/r2")
    assert code == 0 and "deepep-v1/r2: submitted example-ab-deepep-v1-r2 as attempt 2" in text
    assert [j["metadata"]["name"] for j in fake.submitted][-1] == "example-ab-deepep-v1-r2-2" and len(fake.submitted) == 7
    jobs = json.loads((tmp_path / "o" / "deepep-v1" / "r2" / "rayjob.json").read_text())["items"]
    assert [j["metadata"]["name"] for j in jobs] == ["example-ab-deepep-v1-r2-2"]  # not the cancelled attempt 1
    assert main(["report", str(tmp_path / "o"), "--no-plots"]) == 0

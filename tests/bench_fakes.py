"""The fake cluster of the bench run tests: an in-memory Kubernetes (RayJobs, pods placed as their node
affinity allows, Events, driver logs read through exec, Leases: ``fake_leases``) on a fake clock (``TIME``)
that the tests also give ``bench.deadlines.CLOCK``; FIS, EC2 and S3 over it are ``bench_fakes_aws``."""

import base64
import json
import threading
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from kubernetes.client import ApiException

from components.faults import FAULT_TARGET_LABEL
from fake_leases import FakeLeases
from workloads.pod.miles_launcher import JOB_LINE
from workloads.render.common import RAY_GROUP_LABEL, RAY_NODE_TYPE_LABEL
from workloads.render.runs import ATTEMPT_LABEL, RUN_LABEL
from workloads.cli.runs_client import RunClient

STEPS_PER_POLL = 8
CLUSTER = "rl-p5en-shared"


NAMESPACE = "team-alpha"
GUARDED = {"headgroup", "trainer", "rollout"}
"""The groups the `runs` PodDisruptionBudget holds (maxUnavailable 0), render.runs.team_run_budget."""


def use_clock(monkeypatch, fake: "FakeClock") -> "FakeClock":
    """``fake`` as the fake cluster's clock, ``bench.deadlines.CLOCK`` and ``time.sleep`` for one test."""
    import sys
    from bench.deadlines import CLOCK
    monkeypatch.setattr(sys.modules[__name__], "TIME", fake)
    monkeypatch.setattr("time.sleep", fake.sleep)
    for name in ("monotonic", "sleep", "now"):
        monkeypatch.setattr(CLOCK, name, getattr(fake, name))
    return fake


def _pod(name: str, run: str, group: str, node: str | None, created: datetime, attempt: int = 1,
         extra: dict | None = None):
    """A pod of the run; without a node it is Pending (the scheduler found none its affinity allows)."""
    labels = {RUN_LABEL: run, RAY_GROUP_LABEL: group, ATTEMPT_LABEL: str(attempt),
              RAY_NODE_TYPE_LABEL: "head" if group == "headgroup" else "worker", **(extra or {})}
    return SimpleNamespace(metadata=SimpleNamespace(name=name, namespace=NAMESPACE, creation_timestamp=created,
                                                    owner_references=[], labels=labels),
                           spec=SimpleNamespace(node_name=node),
                           status=SimpleNamespace(phase="Running" if node else "Pending"))


def shell_read(data: bytes, script: str) -> str:
    """What ``tail -c +N | head -c M [| base64]`` prints of ``data``, as the exec stream hands it over: text
    decoded as UTF-8 with replacement (kubernetes ``stream.ws_client.WSClient``)."""
    offset = int(script.split("tail -c +")[1].split()[0]) - 1
    size = int(script.split("head -c ")[1].split()[0])
    out = data[offset:offset + size]
    return (base64.b64encode(out) if "| base64" in script else out).decode("utf-8", "replace")


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

    def patch_namespaced_pod(self, name, namespace, body):
        """A member's pod patch: only ``FAULT_TARGET_LABEL`` (the team pod policy refuses the rest, 422,
        render.pod_rules.member_pod_update); None removes it."""
        labels = (body.get("metadata") or {}).get("labels") or {}
        if set(body) != {"metadata"} or set(body["metadata"]) != {"labels"} or set(labels) != {FAULT_TARGET_LABEL}:
            raise _api_error(422, "Invalid")
        pod = next((p for p in self.cluster.pods if p.metadata.name == name), None)
        if pod is None:
            raise _api_error(404, "NotFound")
        if labels[FAULT_TARGET_LABEL] is None:
            pod.metadata.labels.pop(FAULT_TARGET_LABEL, None)
        else:
            pod.metadata.labels[FAULT_TARGET_LABEL] = labels[FAULT_TARGET_LABEL]
        return pod

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
        self.lock = threading.RLock()
        """Held by every call that changes or walks the jobs and pods: two benches may share the cluster."""
        self.coordination = FakeLeases()
        self.denied: set[tuple[str, str]] = set()
        """(verb, resource) the member's RBAC refuses beyond SUBMITTER_RULES' refusals (a stack without the
        member's fault Role)."""
        self.authorization = SimpleNamespace(create_self_subject_access_review=lambda body: SimpleNamespace(
            status=SimpleNamespace(allowed=(body["spec"]["resourceAttributes"]["verb"],
                                            body["spec"]["resourceAttributes"]["resource"]) not in self.denied)))
        self.template_labels: dict[str, dict[str, dict]] = {}
        """RayJob -> group -> the fault label its pod template carries (KubeRay copies it onto every pod it makes)."""
        self.engines_recover = engines_recover
        """False: Miles without fault tolerance, a lost rollout engine fails the job."""
        self.unschedulable: set[str] = set()
        """Runs whose pods find no node this time (a capacity gap): they stay Pending."""
        self.hangs_after: dict[str, int] = {}
        """Run -> the last step its job logs before it hangs (a collective that never returns)."""
        self.fails_at: dict[str, int] = {}
        """RayJob -> the step at which it fails by itself (a crash no fault caused)."""
        self.jobs: dict[str, dict] = {}
        self.logs: dict[str, list[str]] = {}
        self.next_step: dict[str, int] = {}
        self.pods: list = []
        self.events: list = []
        self.gone: set[str] = set()
        self.nodes = {pool: [f"{pool}-{i}" for i in range(2)] for pool in ("train", "rollout")}
        """Each pool's nodes; a terminated one is replaced by a new node of the group (a new name)."""
        self.spare: dict[str, list[str]] = {}
        """Pool -> nodes beyond the run's size (one pod a node of ``nodes``), tried first: an unpinned pod may land there."""
        self.submitted: list[dict] = []
        self.cancelled: list[str] = []
        self.execs: list[list[str]] = []
        self.interval, self.total = save_interval, total
        self.serving_result: dict = {}
        self.allowed: dict[str, dict[str, set[str] | None]] = {}
        """RayJob -> group -> the nodes its affinity allows (None: any node of its pool)."""
        self.stalled: set[str] = set()
        """RayJobs waiting for a rollout engine that cannot come back: no step advances."""
        self.save_s = 0.0
        """Seconds a save takes (synchronous, as Megatron's): the job logs no step until it is written. With a
        time set the last rollout saves too, as Miles' does (0: only the periodic saves, as the tests before)."""
        self.saving: dict[str, tuple[datetime, int]] = {}
        """RayJob -> (when its save is written, the step saved): its line is logged then."""
        self.polls, self.max_polls = 0, 3000
        self.last_poll: datetime | None = None

    def run_tier_sizes(self, run, train, rollout):
        return {}, {}

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
        with self.lock:
            return self._submit(rayjob)

    def _submit(self, rayjob):
        md = rayjob["metadata"]
        run = md["labels"][RUN_LABEL]
        done = [n for n, j in self.jobs.items() if j["metadata"]["labels"][RUN_LABEL] == run]
        last = max((self.next_step[n] for n in done), default=0)
        job = {**rayjob, "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING",
                                    "jobId": f"raysubmit_{md['name']}", "startTime": _now().isoformat(),
                                    "rayClusterName": f"{md['name']}-raycluster-x"}}
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
            self.template_labels.setdefault(md["name"], {})[group] = extra
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
        return next((n for n in self.spare.get(pool, []) + self.nodes[pool]
                     if n not in taken and (allowed is None or n in allowed)), None)

    def _job_of(self, pod) -> str:
        return f"{pod.metadata.labels[RUN_LABEL]}-{pod.metadata.labels[ATTEMPT_LABEL]}"

    def kill(self, pod, grace: int):
        """A pod gone: with a grace period its preStop asks for a checkpoint first (render.runs.SAVE_ON_STOP);
        a lost trainer fails the job, a lost rollout engine is recovered in place."""
        with self.lock:
            self._kill(pod, grace)

    def _kill(self, pod, grace: int):
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
                                  self.template_labels.get(name, {}).get(group)))  # made from the template

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
        with self.lock:
            return self._rayjobs(run)

    def _rayjobs(self, run):
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
                if name in self.saving:
                    done, saved = self.saving[name]
                    if at < done:
                        break  # the save is still being written
                    self.logs[name].append(_saved(saved, done))
                    del self.saving[name]
                if self.next_step[name] >= self.total:
                    job["status"] |= {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED",
                                      "endTime": at.isoformat()}
                    self.pods = [p for p in self.pods if self._job_of(p) != name]  # its Ray cluster is deleted
                    break
                step = self.next_step[name]
                if self.fails_at.get(name) == step:
                    self.fail(job["metadata"]["labels"][RUN_LABEL])
                    break
                self.logs[name] += _perf(step, at)
                if (step + 1) % self.interval == 0 or (self.save_s and step + 1 == self.total):  # Miles: the last too
                    if self.save_s:
                        self.saving[name] = (at + timedelta(seconds=self.save_s), step)
                    else:
                        self.logs[name].append(_saved(step, at))
                self.next_step[name] += 1
        return sorted((j for j in self.jobs.values() if run is None or j["metadata"]["labels"][RUN_LABEL] == run),
                      key=lambda j: j["metadata"]["name"])

"""How a run is submitted and ended, against KubeRay v1.7.0: HTTPMode (no submitter pod to end a healthy
run or to outlive it), Ray token auth, no head restart, and the run command's cancel, resume, follow
and checkpoint request reading what actually happened."""

from __future__ import annotations

import json

import kubernetes_validate
import yaml
from conftest import ROOT
from test_runs import SHARED, _job, api  # noqa: F401  (api: the fake cluster fixture)
from test_workloads import k8s_version, variant, variant_graph

from workloads.derive.model import derive
from workloads.render import raycluster
from workloads.render.runs import KUBERAY_OWNED_LABELS, NO_HEAD_RESTART, team_run_budget
from workloads.render.teams import SUBMITTER_RULES, team_resource_quota
from workloads.checks.runs import load_run
from workloads.cli.runs import main
from workloads.cli.runs_client import RunClient
from workloads.deploy.submit import run_objects

RUN = ROOT / "runs" / "grpo-qwen3-30b.yaml"
JOBS = "/apis/ray.io/v1/namespaces/team-alpha/rayjobs"
PODS = "/api/v1/namespaces/team-alpha/pods"


def test_a_run_is_posted_by_the_operator_to_its_own_head_with_token_auth_and_no_head_restart():
    cfg = variant(SHARED, {})
    job = run_objects(cfg, load_run(RUN)).rayjob
    spec = job["spec"]
    assert spec["submissionMode"] == "HTTPMode" and "submitterPodTemplate" not in spec
    assert job["metadata"]["annotations"] == {NO_HEAD_RESTART: "true"}  # copied to the RayCluster by KubeRay
    assert spec["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    assert spec["rayClusterSpec"]["rayVersion"] >= "2.52"  # KubeRay refuses token auth below 2.52.0


def test_the_platform_ray_cluster_runs_token_auth_too():
    assert raycluster(derive(variant("p5en-prod", {})))["spec"]["authOptions"] == {"mode": "token"}


def test_teams_may_not_create_disruption_budgets_and_get_one_from_the_platform_and_a_cpu_memory_quota():
    assert not [r for r in SUBMITTER_RULES if "poddisruptionbudgets" in r["resources"]]
    cfg = variant(SHARED, {})
    m = derive(cfg)
    alpha = next(t for t in cfg.workloads.teams if t.name == "alpha")
    budget = team_run_budget(m, alpha)
    kubernetes_validate.validate(budget, k8s_version(cfg), strict=True)
    assert budget["metadata"]["namespace"] == "team-alpha" and budget["spec"]["maxUnavailable"] == 0
    assert budget["spec"]["selector"]["matchExpressions"] == [
        {"key": "ray.io/node-type", "operator": "In", "values": ["head", "worker"]},
        {"key": "ray.io/group", "operator": "In", "values": ["headgroup", "trainer", "rollout"]}]
    # issue 26.4: no label a team writes (its RayJob's rl.platform/run) decides what the budget holds
    assert {e["key"] for e in budget["spec"]["selector"]["matchExpressions"]} <= set(KUBERAY_OWNED_LABELS)
    hard = team_resource_quota(alpha, m.pools, m.head)["spec"]["hard"]
    # alpha: train cap 128 GPUs (16 p5en), rollout cap 256 (32 p5en): 48 nodes of 192 vCPU, 2 TiB, plus a head each.
    nodes = 48
    assert int(hard["requests.cpu"]) == nodes * 192 + nodes * m.head.cpu
    assert int(hard["requests.memory"]) == int(hard["limits.memory"]) == nodes * (2048 * 1024 ** 3 + m.head.memory_bytes)
    registered = {r.inputs["metadata"]["namespace"] for r in variant_graph(SHARED, {}).of_type(
        "kubernetes:policy/v1:PodDisruptionBudget") if r.inputs["metadata"]["name"] == "runs"}
    assert registered == {"team-alpha", "team-beta"}


def _running(name="r-1", attempt_status="RUNNING", deployment="Running"):
    sentinel, lease = "/mnt/fsx/checkpoints/r/SAVE_NOW", "/mnt/fsx/checkpoints/r/RUNNING"
    job = _job(name, "r", "alpha", attempt_status, deployment)
    job["spec"] = {"entrypoint": f"python3 /opt/scripts/miles_launcher.py --marker {lease} --attempt 1",
                   "runtimeEnvYAML": yaml.safe_dump({"env_vars": {"MILES_ARGV": json.dumps(
                       ["train.py", "--save-trigger-sentinel", sentinel])}})}
    job["status"]["jobId"] = f"{name}-abcde"
    return job


def test_cancel_says_no_checkpoint_when_the_touch_failed(api, monkeypatch):
    head = {"metadata": {"name": "r-1-head"}, "status": {"phase": "Running"}}
    fake, client = api({("GET", JOBS): {"items": [_running()]}, ("GET", PODS): {"items": [head]}})
    execs = []
    monkeypatch.setattr(RunClient, "_exec", lambda self, team, pod, command: execs.append(command) or (1, ""))
    out = []
    assert main(["cancel", "alpha", "r"], client=client, out=out.append) == 0
    assert out == ["cancelled r-1 (no checkpoint: none running, the request failed, or none within 30 min)"]
    assert execs == [["touch", "/mnt/fsx/checkpoints/r/SAVE_NOW"]]  # no wait for a save nobody asked for


class _Stream:
    """A finished exec stream: stdout and the status channel's exit code."""

    def __init__(self, code, stdout=""):
        self.code, self.stdout, self.closed = code, stdout, False

    def run_forever(self, timeout=None):
        pass

    @property
    def returncode(self):
        return self.code

    def peek_stdout(self, timeout=0):
        return bool(self.stdout)

    def read_stdout(self, timeout=0):
        out, self.stdout = self.stdout, ""
        return out

    def is_open(self):
        return bool(self.stdout)

    def update(self, timeout=0):
        pass

    def close(self):
        self.closed = True


def test_exec_reads_the_exit_status_from_the_status_channel(api, monkeypatch):
    _, client = api({})
    calls = []
    for code, text in ((1, ""), (0, "saved\n"), (None, "")):
        monkeypatch.setattr("kubernetes.stream.stream", lambda *a, **kw: calls.append(kw) or _Stream(code, text))
        assert client()._exec("alpha", "r-1-head", ["touch", "x"]) == (code, text)
    assert all(kw["_preload_content"] is False for kw in calls)  # a preloaded answer has no status channel

    class NoExitCode(_Stream):
        @property
        def returncode(self):
            raise KeyError("details")  # a Failure status (container not found) carries no exit code
    monkeypatch.setattr("kubernetes.stream.stream", lambda *a, **kw: NoExitCode(1))
    assert client()._exec("alpha", "r-1-head", ["touch", "x"]) == (None, "")


def test_a_resume_after_cancel_is_numbered_after_the_cancelled_attempt(api, monkeypatch):
    attempt = _running()
    fake, client = api({("GET", JOBS): {"items": [attempt]}, ("GET", PODS): {"items": []}})
    monkeypatch.setattr(RunClient, "_exec", lambda self, team, pod, command: (0, "saved"))
    assert main(["cancel", "alpha", "r", "--now"], client=client, out=lambda _: None) == 0
    assert not [c for c in fake.calls if c[0] == "DELETE" and c[1].startswith(JOBS)]  # the attempt stays
    attempt["status"] = {"jobStatus": "NEW", "jobDeploymentStatus": "Suspended"}  # what KubeRay then shows
    assert client().unfinished("alpha", "r") == []
    assert client().next_attempt(load_run(RUN).model_copy(update={"name": "r", "team": "alpha"})) == 2


def test_a_finished_attempt_whose_submitter_pods_remain_does_not_block_submit(api):
    done = _running(attempt_status="SUCCEEDED", deployment="Complete")
    fake, client = api({("GET", JOBS): {"items": [done]}, ("GET", PODS): {"items": []}})
    assert client().unfinished("alpha", "r") == []
    query = [c[2]["labelSelector"] for c in fake.calls if c[1] == PODS]
    assert query == ["rl.platform/run=r,ray.io/node-type"]  # Ray pods only: a submitter Job's pods are kept


def test_follow_streams_ray_job_logs_from_the_latest_head(api, monkeypatch):
    head = {"metadata": {"name": "r-1-head"}, "status": {"phase": "Running"}}
    _, client = api({("GET", JOBS): {"items": [_running()]}, ("GET", PODS): {"items": [head]}})
    calls = []
    monkeypatch.setattr("kubernetes.stream.stream", lambda *a, **kw: calls.append((a, kw)) or _Stream(0, "step 1\n"))
    out = []
    assert main(["follow", "alpha", "r"], client=client, out=out.append) == 0
    assert out == ["step 1"]
    (args, kw), = calls
    assert args[1:3] == ("r-1-head", "team-alpha") and kw["container"] == "ray-head"
    assert kw["command"] == ["ray", "job", "logs", "--follow", "--address", "http://127.0.0.1:8265", "r-1-abcde"]


def test_follow_without_a_running_head_says_so(api, capsys):
    head = {"metadata": {"name": "r-1-head"}, "status": {"phase": "Pending"}}
    _, client = api({("GET", JOBS): {"items": [_running()]}, ("GET", PODS): {"items": [head]}})
    assert main(["follow", "alpha", "r"], client=client, out=lambda _: None) == 1
    assert "has no running head yet" in capsys.readouterr().err



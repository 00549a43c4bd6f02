"""The bench's fault engine and its signals: the FIS templates and policies the stack creates, the
recovery figures read from the RayJob status and the driver log's own lines, the driver log teed by
the launcher and read incrementally."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import yaml

from analysis import mocks
from conftest import ROOT
from bench.artifacts import Collected, Node
from bench.driverlog import DriverLog, LogUnavailable
from bench_fakes import shell_read
from bench.experiment import load_experiment, schedule
from bench.logparse import parse_log
from bench.recovery import fault_figures
from components.faults import (FAULT_TAG, FaultEngine, fis_role_statements, node_policy_statements,
                               team_policy_statements, template_specs, terminate_template)
from workloads.pod.miles_launcher import ARGV_ENV
from workloads.render.common import RAY_NODE_TYPE_LABEL
from workloads.render.runs import ATTEMPT_LABEL, RUN_LABEL

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def _perf(step: int, at: datetime) -> str:
    r = {"perf/rollout_time": 90.0, "perf/tokens_per_gpu_per_sec": 1000.0}
    return (f"(RolloutManager pid=1, ip=10.0.3.1) [{at.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} rollout_manager] "
            f"metrics.py:89 - perf {step}: {r}")


def _collected(lines: list[str], jobs: list[dict], faults: list[dict]) -> Collected:
    exp = load_experiment("experiments/example-ab.yaml")
    attempt = next(a for a in schedule(exp) if a.arm == "deepep-v1-faults")
    text = "\n".join(lines) + "\n"
    return Collected(attempt, parse_log(text), jobs, [Node("r", "rollout", "rollout", "p5en.48xlarge", "ON_DEMAND", 8)],
                     T0, T0 + timedelta(hours=1), None, faults, text)


def _job(name: str, status: str) -> dict:
    """A RayJob as the runner records it: the argv Miles ran in ``MILES_ARGV`` (its ``--rollout-num-gpus``
    is what ``Collected.rollout_gpus`` reads) and its status."""
    argv = ["/root/miles/train.py", "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8",
            "--rollout-num-gpus", "8"]
    env = yaml.safe_dump({"env_vars": {ARGV_ENV: json.dumps(argv)}})
    return {"metadata": {"name": name}, "spec": {"runtimeEnvYAML": env}, "status": {"jobStatus": status}}


def test_the_outcome_is_the_rayjob_status_not_step_arithmetic():
    """Steps that go on right after the fault once read as "continued (no restart), 0 steps lost"; with
    the RayJob FAILED (and not resubmitted) the outcome says so."""
    lines = [_perf(i, T0 + timedelta(minutes=i)) for i in range(20)]
    fault = {"kind": "delete-trainer-pod", "step": 12, "loggedStep": 12, "rayjob": "r-1",
             "injectedAt": (T0 + timedelta(minutes=12, seconds=30)).isoformat()}
    fig, = fault_figures(load_experiment("experiments/example-ab.yaml"), _collected(lines, [_job("r-1", "FAILED")], [fault]))
    assert fig["job_status"] == "FAILED" and "FAILED" in fig["outcome"] and "not resubmitted" in fig["outcome"]
    assert "continued" not in fig["resumed_from"]


def test_resumed_from_the_last_complete_checkpoint_is_the_iteration_megatron_loaded():
    """The resume is judged by Megatron's own lines: saved from iteration 19 before the fault, loaded at
    iteration 9 after it (the last save was not the one loaded) -> not the last complete checkpoint."""
    saved = lambda i, at: (f"(MegatronTrainRayActor pid=2, ip=10.0.2.1)   [{at.strftime('%Y-%m-%d %H:%M:%S.%f')}] "  # noqa: E731
                           f"successfully saved checkpoint from iteration {i:7d} to /mnt/fsx/checkpoints/r [ t 1/4, p 1/1 ]")
    lines = [_perf(i, T0 + timedelta(minutes=i)) for i in range(25)]
    lines.insert(11, saved(9, T0 + timedelta(minutes=9, seconds=30)))
    lines.insert(22, saved(19, T0 + timedelta(minutes=19, seconds=30)))
    lines += ["(MegatronTrainRayActor pid=2, ip=10.0.2.1)  successfully loaded checkpoint from /mnt/fsx/checkpoints/r "
              "[ t 1/4, p 1/1 ] at iteration 9"] + [_perf(i, T0 + timedelta(minutes=30 + i)) for i in range(10, 25)]
    fault = {"kind": "delete-trainer-pod", "step": 24, "loggedStep": 24, "rayjob": "r-1", "resumedAs": "r-2",
             "injectedAt": (T0 + timedelta(minutes=24, seconds=30)).isoformat()}
    jobs = [_job("r-1", "FAILED"), _job("r-2", "SUCCEEDED")]
    fig, = fault_figures(load_experiment("experiments/example-ab.yaml"), _collected(lines, jobs, [fault]))
    assert (fig["last_saved_iteration"], fig["loaded_iteration"]) == (19, 9)
    assert fig["resumed_from"] == "checkpoint iteration 9" and fig["resumed_from_last_checkpoint"] is False
    assert fig["steps_lost"] == 15  # steps 10-24 were run again


class _Head:
    """A head pod whose exec serves ``tail -c`` of one file, as the launcher's copy on FSx."""

    def __init__(self, data: bytes, code: int | None = 0):
        self.data, self.code, self.commands = data, code, []
        pod = SimpleNamespace(metadata=SimpleNamespace(name="r-1-head", labels={
            RUN_LABEL: "r", ATTEMPT_LABEL: "1", RAY_NODE_TYPE_LABEL: "head"}), status=SimpleNamespace(phase="Running"))
        self.pods = [pod]
        self.core = SimpleNamespace(list_namespaced_pod=lambda ns, label_selector: SimpleNamespace(items=self.pods))

    def _exec(self, team, pod, command):
        self.commands.append(command)
        return self.code, shell_read(self.data, command[2])


def test_the_driver_log_is_read_from_where_it_stopped():
    head = _Head(b"line 1\nline 2\n")
    log = DriverLog("alpha", "r", 1, "/mnt/fsx/checkpoints/r/driver-1.log")
    assert log.read(head) == "line 1\nline 2\n"
    head.data += b"line 3\n"
    assert log.read(head) == "line 3\n" and log.offset == len(head.data)
    assert [c[2].split()[2] for c in head.commands] == ["+1", "+15"]  # only the new bytes each time
    assert log.read(head) == ""


def test_a_log_that_cannot_be_read_is_an_error_saying_so_never_an_empty_log():
    with pytest.raises(LogUnavailable, match="did not end in time"):
        DriverLog("alpha", "r", 1, "/f").read(_Head(b"x", code=None))
    gone = _Head(b"x")
    gone.pods = []
    with pytest.raises(LogUnavailable, match="no running head .* no bucket"):
        DriverLog("alpha", "r", 1, "/f").read(gone)


def test_once_the_head_is_gone_the_rest_comes_from_the_bucket_from_the_same_offset():
    head = _Head(b"abc\n")
    got = []
    s3 = SimpleNamespace(get_object=lambda Bucket, Key, Range: got.append((Bucket, Key, Range)) or {
        "Body": SimpleNamespace(read=lambda: b"def\n")})
    log = DriverLog("alpha", "r", 1, "/mnt/fsx/checkpoints/r/driver-1.log", s3=s3, bucket="b",
                    key_of=lambda p: "checkpoints/teams/alpha/r/driver-1.log")
    assert log.read(head) == "abc\n"
    head.pods = []  # the node went, and the head with it
    assert log.read(head) == "def\n" and got == [("b", "checkpoints/teams/alpha/r/driver-1.log", "bytes=4-")]


def test_the_launcher_tees_the_driver_output_to_the_run_directory(tmp_path):
    """stdout, stderr and native writes reach both the job's own log (Ray reads the process's stdout)
    and the file next to the lease."""
    marker = tmp_path / "checkpoints" / "r" / "RUNNING"
    code = ("import os, sys, runpy; from pathlib import Path; m = runpy.run_path(sys.argv[2]); "
            "m['tee_driver_log'](m['driver_log_path'](Path(sys.argv[1]), 2)); print('perf 0: {}'); "
            "sys.stderr.write('warn\\n'); os.write(1, b'native\\n')")
    done = subprocess.run([sys.executable, "-I", "-c", code, str(marker), str(ROOT / "workloads" / "pod" / "miles_launcher.py")],
                          capture_output=True, text=True, timeout=30)
    teed = (marker.parent / "driver-2.log").read_text()
    for text in ("perf 0: {}", "warn", "native"):
        assert text in done.stdout and text in teed


def test_the_fis_role_terminates_only_the_instance_the_bench_tagged():
    stmt = next(s for s in fis_role_statements("c", "arn:aws:eks:us-east-1:1:cluster/c")
                if s["Action"] == "ec2:TerminateInstances")
    assert stmt["Condition"] == {"StringLike": {f"aws:ResourceTag/{FAULT_TAG}": "c:*"}}  # this cluster's faults
    # as deployed the template matches no instance; each fault points it at its own value
    assert terminate_template("c")["targets"][0]["resource_tags"] == [{"key": FAULT_TAG, "value": "c:unset"}]
    assert terminate_template("c", "f1")["targets"][0]["resource_tags"] == [{"key": FAULT_TAG, "value": "c:f1"}]
    team = team_policy_statements("c", "alpha")[0]
    assert team["Condition"]["StringEquals"]["aws:ResourceTag/rl.platform/team"] == "alpha"
    create, delete, fis = node_policy_statements("c")
    assert create["Condition"]["ForAllValues:StringEquals"] == {"aws:TagKeys": [FAULT_TAG]}  # no other tag can be set
    assert create["Condition"]["StringLike"] == {f"aws:RequestTag/{FAULT_TAG}": "c:*"}  # nor another cluster's value
    assert delete["Condition"]["ForAllValues:StringEquals"] == {"aws:TagKeys": [FAULT_TAG]}
    assert fis["Action"] == ["fis:StartExperiment", "fis:UpdateExperimentTemplate"]  # the node templates only
    assert fis["Condition"]["StringEquals"]["aws:ResourceTag/rl.platform/fault"] == ["terminate-gpu-node"]
    assert not any("fis:UpdateExperimentTemplate" in str(s["Action"]) for s in team_policy_statements("c", "alpha"))


def test_the_fault_engine_registers_templates_pulumi_aws_accepts():
    """pulumi-aws 7.51.1 ``aws.fis.ExperimentTemplate`` with the fields used (under the mock engine)."""
    graph = mocks.run(lambda: FaultEngine("c", "arn:aws:eks:us-east-1:123456789012:cluster/c",
                                          [("alpha", "team-alpha")]), region="us-east-1", stack="t")
    templates = {r.name: r.inputs for r in graph.of_type("aws:fis/experimentTemplate:ExperimentTemplate")}
    assert set(templates) == {f"c-faults-{key}" for key in template_specs("c", [("alpha", "team-alpha")])}
    assert {"c-faults-alpha-delete-rollout-pod", "c-faults-alpha-delete-trainer-pod", "c-faults-terminate-gpu-node"} \
        <= set(templates)  # a pod fault per team, a node fault per cluster (stackconfig/faults.yaml)
    kill = templates["c-faults-alpha-delete-trainer-pod"]
    assert {p["key"]: p["value"] for p in kill["actions"][0]["parameters"]}["gracePeriodSeconds"] == "0"
    assert kill["targets"][0]["parameters"]["namespace"] == "team-alpha"
    entry, = graph.of_type("aws:eks/accessEntry:AccessEntry")
    assert entry.inputs["kubernetesGroups"] == ["rl-fault-injector"]
    json.loads(graph.of_type("aws:iam/rolePolicy:RolePolicy")[0].inputs["policy"])


BENCH_SERVING = json.loads((ROOT / "tests" / "data" / "sglang-0.5.19-bench-serving.json").read_text())


def test_the_serving_benchmark_uses_only_flags_sglang_0_5_19_parses_for_a_fixed_workload():
    from bench.experiment import ServingBench
    from bench.serving import argv
    words = argv(ServingBench(at_step=5, input_len=512, output_len=256), "/mnt/fsx/models/m", "/o.jsonl")
    flags = [w for w in words if w.startswith("--")]
    assert set(flags) <= set(BENCH_SERVING["flags"]), set(flags) - set(BENCH_SERVING["flags"])
    given = dict(zip(words, words[1:]))
    assert given["--dataset-name"] == "random-ids" and given["--random-range-ratio"] == "1.0"  # exact lengths
    assert (given["--random-input-len"], given["--random-output-len"]) == ("512", "256")
    assert "--disable-ignore-eos" not in words  # every answer runs to its fixed length


def test_the_serving_figures_are_read_from_its_own_result_line():
    from bench.serving import METRICS, THROUGHPUT, parse_result
    assert set(METRICS) | set(THROUGHPUT) <= set(BENCH_SERVING["result_keys"])
    line = {k: float(i) for i, k in enumerate(BENCH_SERVING["result_keys"])}
    got = parse_result("\n" + json.dumps(line) + "\n")
    assert got["p99_itl_ms"] == line["p99_itl_ms"] and got["median_ttft_ms"] == line["median_ttft_ms"]
    with pytest.raises(ValueError, match="p99_tpot_ms"):
        parse_result(json.dumps({k: v for k, v in line.items() if k != "p99_tpot_ms"}))



def _health(at: datetime) -> str:
    """Miles' health monitor failing an engine (radixark/miles@49cac7b5 miles/utils/health_monitor.py:154-156)."""
    return (f"(RolloutManager pid=1, ip=10.0.3.1) [{at.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} rollout_manager] "
            f"health_monitor.py:154 - Health check failed for rollout engine 0 (ray timeout or error). Killing actor. "
            f"Exception: The actor is dead because its node has died.")


def _killing(pod: str, at: datetime) -> dict:
    return {"reason": "Killing", "involvedObject": {"kind": "Pod", "name": pod}, "eventTime": at.isoformat()}


def test_detection_runs_from_the_kill_to_the_runs_first_reaction_and_names_it():
    """FIS starts its action, its pod kills ours 40 s later (the kubelet's Killing Event), Miles' health
    monitor fails the engine 15 s after that: detection is 15 s, by Miles' health check, not the 40 s of
    FIS' own start-up that ended at the kubelet's Killing."""
    action = T0 + timedelta(minutes=12, seconds=30)
    lines = [_perf(i, T0 + timedelta(minutes=i)) for i in range(13)] + [_health(action + timedelta(seconds=55))]
    lines += [_perf(i, T0 + timedelta(minutes=i, seconds=30)) for i in range(13, 20)]
    fault = {"kind": "delete-rollout-pod", "step": 12, "loggedStep": 12, "rayjob": "r-1", "hit": ["r-1-rollout-0"],
             "injectedAt": (action - timedelta(seconds=8)).isoformat(), "actionStartedAt": action.isoformat()}
    c = _collected(lines, [_job("r-1", "SUCCEEDED")], [fault])
    c.events = [_killing("r-1-rollout-0", action + timedelta(seconds=40)),
                {"reason": "CreatedWorkerPod", "involvedObject": {"kind": "RayCluster", "name": "r-1-raycluster"},
                 "eventTime": (action + timedelta(seconds=70)).isoformat()}]
    fig, = fault_figures(load_experiment("experiments/example-ab.yaml"), c)
    assert fig["killed_by"] == "kubelet Event Killing (Pod r-1-rollout-0)"
    assert fig["run_detection_s"] == 15.0 and fig["run_detected_by"].startswith("Miles health check failed")


def test_a_repeated_core_v1_event_is_timed_at_its_first_occurrence():
    """A core/v1 Event seen twice (``count`` 2) keeps its first time in ``firstTimestamp`` and moves
    ``lastTimestamp`` on: the kill is the first (review37c C4), not 30 s later."""
    from bench.reaction import event_time
    first, last = T0, T0 + timedelta(seconds=30)
    e = {"reason": "Killing", "count": 2, "firstTimestamp": first.isoformat(), "lastTimestamp": last.isoformat()}
    assert event_time(e) == first
    assert event_time({"lastTimestamp": last.isoformat()}) == last
    assert event_time(e | {"eventTime": (T0 - timedelta(seconds=1)).isoformat()}) == T0 - timedelta(seconds=1)


def _kuberay(reason: str, kind: str, name: str, at: datetime) -> dict:
    """A KubeRay Event as the core/v1 API lists it (events.k8s.io ``regarding`` as ``involvedObject``)."""
    return {"reason": reason, "involvedObject": {"kind": kind, "name": name}, "eventTime": at.isoformat()}


def _rollout_fault(action: datetime, events_after: list[tuple[str, str, str, float]], miles_after: float):
    """An in-place rollout pod fault: FIS' action at ``action``, the kubelet's Killing 20 s later, Miles'
    health check ``miles_after`` s after the kill, and KubeRay's Events (reason, kind, name, s after the kill)."""
    kill = action + timedelta(seconds=20)
    lines = [_perf(i, T0 + timedelta(minutes=i)) for i in range(13)] + [_health(kill + timedelta(seconds=miles_after))]
    lines += [_perf(i, T0 + timedelta(minutes=i, seconds=30)) for i in range(13, 20)]
    fault = {"kind": "delete-rollout-pod", "step": 12, "loggedStep": 12, "rayjob": "r-1", "hit": ["r-1-rollout-0"],
             "injectedAt": (action - timedelta(seconds=8)).isoformat(), "actionStartedAt": action.isoformat()}
    job = _job("r-1", "SUCCEEDED") | {"status": {"jobStatus": "SUCCEEDED", "rayClusterName": "r-1-abcde"}}
    c = _collected(lines, [job], [fault])
    c.events = [_killing("r-1-rollout-0", kill)] + [_kuberay(r, k, n, kill + timedelta(seconds=s))
                                                    for r, k, n, s in events_after]
    fig, = fault_figures(load_experiment("experiments/example-ab.yaml"), c)
    return fig


def test_a_kuberay_event_before_miles_line_reports_both_reactions_each_named():
    """A grace-0 delete removes the Pod object at once: KubeRay makes the worker again a second after the
    kill, Miles' health check fails 15 s after it. Both are reported, each from the kill and named; the
    platform's earlier Event does not stand for the run's reaction."""
    fig = _rollout_fault(T0 + timedelta(minutes=12, seconds=30), [("CreatedWorkerPod", "RayCluster", "r-1-abcde", 1.0)], 15)
    assert fig["run_detection_s"] == 15.0 and fig["run_detected_by"].startswith("Miles health check failed")
    assert fig["platform_detection_s"] == 1.0
    assert fig["platform_detected_by"] == "KubeRay Event CreatedWorkerPod (RayCluster r-1-abcde)"
    assert fig["runDetectedAt"] > fig["platformDetectedAt"] > fig["killedAt"]


def test_the_platforms_reaction_is_kuberays_about_the_hit_job_even_before_the_kubelets_killing():
    """The kubelet's Killing is a core/v1 Event, cut to the second; KubeRay's is to the microsecond and may
    come first: one 0.4 s before the recorded kill is the platform's reaction (at -0.4 s), while one of the
    hit cluster more than 2 s before it (a retry 12 s before, in FIS' start-up; review37c A2), or an Event
    about another RayJob of the attempt (a resubmission's cluster) or a Pod is not KubeRay's about the
    hit job."""
    fig = _rollout_fault(T0 + timedelta(minutes=12, seconds=30), [
        ("CreatedRayCluster", "RayJob", "r-2", -0.6), ("CreatedWorkerPod", "RayCluster", "r-2-fghij", -0.5),
        ("Scheduled", "Pod", "r-1-abcde-rollout-worker-x", -0.45),
        ("FailedToCreateWorkerPod", "RayCluster", "r-1-abcde", -12), ("DeletedWorkerPod", "RayCluster", "r-1-abcde", -2.5),
        ("DeletedWorkerPod", "RayCluster", "r-1-abcde", -0.4), ("CreatedWorkerPod", "RayCluster", "r-1-abcde", 2)], 15)
    assert fig["platform_detection_s"] == -0.4
    assert fig["platform_detected_by"] == "KubeRay Event DeletedWorkerPod (RayCluster r-1-abcde)"
    late = _rollout_fault(T0 + timedelta(minutes=12, seconds=30), [("CreatedWorkerPod", "RayCluster", "r-1-abcde", -25)], 15)
    assert late["platform_detected_by"] is None and late["platform_detection_s"] is None  # before FIS' action


def test_recovery_is_timed_from_the_kill_not_from_the_runners_last_log_read():
    """The runner last read the log at step 10; step 11 completed before the kill; the job came back 20
    minutes later from the checkpoint of step 9. Split at the runner's read, step 11 counted as 'after':
    back to steady 0 s and one lost step. From the kill: about 21 minutes back, steps 10 and 11 lost."""
    kill = T0 + timedelta(minutes=11, seconds=20)
    lines = [_perf(i, T0 + timedelta(minutes=i)) for i in range(12)]
    lines += [_perf(i, kill + timedelta(minutes=20 + i - 9)) for i in range(10, 20)]  # resumed at step 10
    fault = {"kind": "delete-trainer-pod", "step": 10, "loggedStep": 10, "rayjob": "r-1", "resumedAs": "r-2",
             "hit": ["r-1-trainer-0"], "injectedAt": (kill - timedelta(seconds=50)).isoformat(),
             "actionStartedAt": (kill - timedelta(seconds=40)).isoformat()}
    c = _collected(lines, [_job("r-1", "FAILED"), _job("r-2", "SUCCEEDED")], [fault])
    c.events = [_killing("r-1-trainer-0", kill)]
    fig, = fault_figures(load_experiment("experiments/example-ab.yaml"), c)
    assert fig["killedAt"] == kill.isoformat() and fig["last_step_before"] == 11
    assert fig["steps_lost"] == 2 and fig["resumed_at_step"] == 10
    assert fig["back_to_steady_s"] == 21 * 60


def test_a_character_cut_between_two_reads_is_read_whole_and_the_offset_stays_exact(monkeypatch):
    """The exec stream is text (each frame decoded as UTF-8 with replacement): a character cut by
    ``head -c`` came back as U+FFFD and the re-encoded length moved the offset, so the next read started
    mid-character or skipped bytes."""
    monkeypatch.setattr("bench.driverlog.CHUNK", 5)
    data = "abcdé\nfgh€ ij\n".encode()
    head = _Head(data)
    log = DriverLog("alpha", "r", 1, "/mnt/fsx/checkpoints/r/driver-1.log")
    assert log.read_all(head) == data.decode() and log.offset == len(data)

"""The burn-in against the real API server: GPU nodes registered with the burn-in taint take the burn-in's
pods and no run pod, and the taint holds off exactly the nodes it is on (a run that fits on the passed nodes
plus any one tainted node stays unbound); the agent's, the watcher's and the controller's own calls
(``nodes.incluster``), made with tokens bound to their pods, are allowed by the RBAC and the admission
policies the stack renders; a reboot sends a node back to a re-test, and the controller frees it: refused by
the run's disruption budget while the run pod there is Ready, evicted once its preflight refuses the rebooted
node (not Ready); the same pass replaces a hardware failure through (fake) Auto Scaling, and the controller
can evict nothing outside the runs' namespaces."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from conftest import ROOT, recorded
from fake_asg import FakeAws
from in_cluster import pod_api, taint
from kubernetes import client

from components.gpu_node_setup import BURN_IN_TAINT
from nodes import controller, incluster, marks, pairs, replace, watch
from nodes.burn_in import QUARANTINE_TAINT
from nodes.render import NAMESPACE, REPLACE, REPLACE_ACCOUNT, SERVICE_ACCOUNT, WATCH_ACCOUNT
from workloads.checks.runs import load_run
from workloads.render.teams import namespace_of

from controlplane import runs
from controlplane.kube import eventually

pytestmark = pytest.mark.controlplane
RUN = ROOT / "runs" / "grpo-qwen3-30b.yaml"
NEEDED = {"train": 8, "rollout": 16}
"""The run's nodes per pool."""
COUNTS = {pool: n + 1 for pool, n in NEEDED.items()}
"""One node more than the run needs in each pool: a gang that fits on a subset of the nodes."""
NOW = datetime.now(timezone.utc)
OFFERED = re.compile(r"can possibly be assigned to (\S+), once")


def _api(platform, account: str, node: str | None = None) -> incluster.Api:
    return pod_api(platform, NAMESPACE, account, node)


def _pass(platform, node: str, result: str = marks.PASSED, fault: str | None = None) -> None:
    """The agent's write on its own node, with its pod's token: the result, and an Event."""
    agent = _api(platform, SERVICE_ACCOUNT, node)
    seen = agent.node(node)
    agent.patch_node(node, marks.result_patch(seen, taint(BURN_IN_TAINT), taint(QUARANTINE_TAINT), result,
                                              {"seconds": 1}, None if result == marks.PASSED else "DCGM: memory",
                                              NOW, fault=fault))
    agent.create_event(marks.event(seen, result, result, NOW))


def _offered(platform, team: str, rayjob: str) -> dict[str, list[str]]:
    """Ray group -> the nodes Volcano says its pending pods could go to once the gang is complete (their
    PodScheduled condition: volcano v1.15.1 pkg/scheduler/api/job_info.go:866-871, "can possibly be assigned to
    <node>", the task's pipelined node, written by cache.go ``RecordJobStatusEvent``)."""
    found: dict[str, list[str]] = {}
    for p in runs.run_pods(platform, team, rayjob):
        for c in p.status.conditions or [] if not p.spec.node_name else []:
            if c.type == "PodScheduled" and (m := OFFERED.search(c.message or "")):
                found.setdefault(p.metadata.labels.get("ray.io/group", ""), []).append(m.group(1))
    return found


def _not_ready_after_reboot(core, pod) -> None:
    """What the kubelet reports once the rebooted node's sandbox is recreated and the preflight refuses the
    node (``preflight.check_boot``): the init container crash-looping, the main container waiting with its
    last state unknown; phase Running, not Ready (kubernetes v1.35.3 pkg/kubelet/kubelet_pods.go:2533-2556
    keeps a pod that ran out of Pending, ``getPhase`` :1797-1812; ``generateAPIPodStatus`` Ready False)."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    finding = "preflight FAILED on node: reboot: the node rebooted under this pod (boot 1f0e -> 2a9c)"
    status = {"phase": "Running", "conditions": [
        {"type": t, "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now}
        for t in ("Ready", "ContainersReady")],
        "initContainerStatuses": [{"name": watch.PREFLIGHT_CONTAINER, "ready": False, "restartCount": 2,
                                   "image": "x", "imageID": "", "started": False,
                                   "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                   "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": finding,
                                                                "startedAt": now, "finishedAt": now}}}],
        "containerStatuses": [{"name": c.name, "ready": False, "restartCount": 1, "image": c.image, "imageID": "",
                               "started": False, "state": {"waiting": {"reason": "PodInitializing"}},
                               "lastState": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                                            "startedAt": now, "finishedAt": now}}}
                              for c in pod.spec.containers]}
    core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": status})


def test_untested_nodes_hold_runs_off_and_the_controller_frees_and_replaces_through_the_real_api(tmp_path, monkeypatch):
    from controlplane.session import platform_of
    platform = platform_of("p5en-shared", recorded, proven=False, counts=COUNTS)
    core = client.CoreV1Api(platform.cp.client())
    gpu = {pool: sorted(n.metadata.name for n in core.list_node().items
                        if n.metadata.labels.get("rl.platform/pool") == pool) for pool in COUNTS}
    every = [n for names in gpu.values() for n in names]
    assert all(any(t.key == BURN_IN_TAINT.key for t in core.read_node(n).spec.taints) for n in every)
    eventually("a burn-in pod Running on every GPU node", lambda: {
        p.spec.node_name for p in core.list_namespaced_pod(NAMESPACE).items
        if p.status.phase == "Running" and p.spec.node_name in every} == set(every), 120)
    for n in every:  # the boot id a kubelet reports (kwok's nodes have none)
        core.patch_node_status(n, {"status": {"nodeInfo": {"bootID": f"{n}-boot-1"}}})

    run = load_run(RUN)
    assert dict(run.nodes) == NEEDED
    runs.submit(platform, RUN, runs.member_of(platform, run.team))
    job = next(j for j in runs.rayjobs(platform.admin, run.team) if j["metadata"]["labels"]["rl.platform/run"] == run.name)
    name, ns = job["metadata"]["name"], namespace_of(run.team)
    try:
        eventually("the run's pods created", lambda: len(runs.run_pods(platform, run.team, name)) == 1 + sum(NEEDED.values()), 120)
        # every rollout node and all train nodes but two pass: the gang (8 train) fits on the passed seven
        # plus either tainted one, so it stays unbound only while both taints hold.
        spare, held = gpu["train"][-1], gpu["train"][-2]
        for n in every:
            if n not in (spare, held):
                _pass(platform, n)
        runs.through_sessions(platform, 10, lambda: (
            f"run pods bound while two train nodes are untested: {bound}" if (bound := [
                p.metadata.name for p in runs.run_pods(platform, run.team, name) if p.spec.node_name]) else None))
        passed_train, seen = set(gpu["train"]) - {spare, held}, [{}]
        try:  # Volcano puts seven trainers on the seven passed train nodes, none on a tainted one
            eventually("seven trainers placed on the passed train nodes, none on the tainted two", lambda: (
                seen.__setitem__(0, _offered(platform, run.team, name)) or set(seen[0].get("trainer", [])) == passed_train
                and not {spare, held} & {n for names in seen[0].values() for n in names}), 120)
        except AssertionError as e:
            raise AssertionError(f"{e}; Volcano offered: {seen[0]}") from None
        assert not [p.metadata.name for p in runs.run_pods(platform, run.team, name) if p.spec.node_name]
        _pass(platform, held)
        pods = runs.all_running(platform, run.team, name, 1 + sum(NEEDED.values()), 180)
        assert spare not in {p.spec.node_name for p in pods}, "a run pod on the node still untested"

        # a reboot under the run: the watcher sends the node back to a re-test
        rebooted = next(p.spec.node_name for p in pods if p.spec.node_name in gpu["train"])
        watcher = _api(platform, WATCH_ACCOUNT, rebooted)
        assert watch.check(watcher, rebooted, taint(BURN_IN_TAINT)) is None  # passed, same boot
        core.patch_node_status(rebooted, {"status": {"nodeInfo": {"bootID": "after-a-reboot"}}})
        assert watch.check(watcher, rebooted, taint(BURN_IN_TAINT))
        assert core.read_node(rebooted).metadata.labels[marks.RESULT_LABEL] == marks.RETEST

        # the untested spare fails its burn-in for its hardware: quarantined, to be replaced
        _pass(platform, spare, marks.FAILED, fault="hardware")

        # one controller pass, as its pod (its token), the plan it is rendered with, replacement on in the pool
        deployment = client.AppsV1Api(platform.cp.client()).read_namespaced_deployment(REPLACE, NAMESPACE)
        command = deployment.spec.template.spec.containers[0].command
        plan = json.loads(command[command.index("--plan") + 1])
        plan["pools"]["train"]["replace"] = True
        aws = FakeAws(tmp_path, core.read_node(spare).metadata.labels[replace.REGION_LABEL])
        for k, v in aws.env().items():
            monkeypatch.setenv(k, v)
        api = _api(platform, REPLACE_ACCOUNT)
        held_pod = next(p for p in pods if p.spec.node_name == rebooted)
        ref = f"{ns}/{held_pod.metadata.name}"
        try:
            done = controller.reconcile(api, plan, datetime.now(timezone.utc))
        finally:
            aws.close()
        assert f"{rebooted}: eviction of {ref} refused (its disruption budget): tried again in 60 s" in done, done
        assert f"{spare}: replacement requested" in done, done
        assert aws.marked == [replace.instance_id(api.node(spare))]
        assert marks.replacement(api.node(spare))["state"] == "requested"
        assert api.config_map(NAMESPACE, "burn-in-breaker") is not None

        # the kubelet restarts the pod after the reboot, its preflight refuses the node: not Ready, evicted
        _not_ready_after_reboot(core, held_pod)
        done = controller.reconcile(api, {**plan, "pools": {p: {**v, "replace": False} for p, v in plan["pools"].items()}},
                                    datetime.now(timezone.utc))
        assert done == [f"{rebooted}: evicted {ref} to re-test the node"], done
        assert core.read_namespaced_pod(held_pod.metadata.name, ns).metadata.deletion_timestamp is not None

        # where runs do not live, the controller may evict nothing (RBAC, not a policy): the burn-in's own pods
        others = [p for p in core.list_namespaced_pod(NAMESPACE).items if not p.metadata.deletion_timestamp]
        assert others
        with pytest.raises(incluster.ApiError) as refused:
            api.evict(NAMESPACE, others[0].metadata.name)
        assert refused.value.status == 403

        # the controller's pods: only a host pod from a pool's deployed image (the ConfigMap its policy reads as
        # params, filled like the controller's environment); it makes no ConfigMap but its breaker's. A policy's
        # denial without a reason is 422 Invalid (k8s.io/apiserver v0.35.3
        # pkg/admission/plugin/policy/validating/dispatcher.go:298-303).
        image = {e.name: e.value for e in deployment.spec.template.spec.containers[0].env}[pairs.host_image_env("train")]
        host = pairs.host_pod(plan["hosts"]["train"], NAMESPACE, spare, "checked-node", image)
        for bad in ("evil.example/x:1", plan["hosts"]["train"]["spec"]["containers"][0]["image"]):
            with pytest.raises(incluster.ApiError) as refused:
                api.create_pod({**host, "spec": {**host["spec"], "containers": [
                    {**host["spec"]["containers"][0], "image": bad}]}})
            assert refused.value.status == 422 and "'rl-burn-in-replace-pods'" in str(refused.value), refused.value  # Invalid
        api.create_pod(host)  # the same pod with the deployed image: admitted
        api.delete_pod(NAMESPACE, host["metadata"]["name"])
        with pytest.raises(incluster.ApiError) as refused:
            api.save_config_map({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "host-images", "namespace": NAMESPACE}, "data": {"x": "evil"}})
        assert refused.value.status == 422 and "'rl-burn-in-replace-configmaps'" in str(refused.value), refused.value
    finally:
        runs.delete_run(platform, run.team, name)

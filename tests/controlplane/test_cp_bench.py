"""``bench run`` on the real control plane: after a node an attempt ran on is deleted, the next attempt is
pinned only where its pinned nodes still exist (``bench.pinning.existing``) and schedules.

The real ``bench.runner.run_experiment`` submits two repeats of one arm of ``experiments/example-ab.yaml``
as team alpha's member (``RunClient`` on the member's session), pins the second to the first's node set
(``nodes.json`` from ``bench.collect``) and drops a pool whose pinned node is gone. Two seams are stubbed,
because a kwok pod runs no process: each attempt's end (``controlplane.runs.finish``: the RayJob status
KubeRay writes when the head reports the job ended; KubeRay then deletes the cluster itself), and the driver
log (``bench.runner.log_source``: no driver writes one). bench's own poll (``bench.collect.Seen.look``) is
observed, not replaced, so that the Node is deleted only once bench has recorded it, as when an instance
terminates at the end of an attempt; the test puts the Node back afterwards, as the node group's replacement
would (under the same name, which a real replacement never has).

Beside it, while the first attempt runs, the member aims a pod fault as ``bench.faults`` does, with the
member's Role and the team's pod-fault Leases that ``workloads.faultInjection`` renders (``render.faults.fault_rbac``)
and the team pod policy as rendered (``render.pod_rules.member_pod_update``): the rendered Lease taken by update,
renewed and freed, a member's Lease create refused, the label added to and removed from a rollout pod; another
label, or another group's value, refused by the policy.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import ROOT, recorded

import bench.collect
import bench.runner
from bench.lease import TeamLease
from components.faults import FAULT_TARGET_LABEL, fault_lease
from workloads.render.faults import MEMBER_ROLE, fault_rbac
from bench.experiment import load_experiment, schedule
from bench.pinning import HOSTNAME
from workloads.cli.runs_client import RunClient
from workloads.render.runs import RUN_LABEL
from workloads.render.teams import namespace_of

from controlplane import nodes, runs, stack
from controlplane.kube import eventually, refusal
from controlplane.session import STACK_DIR, platform_of

pytestmark = pytest.mark.controlplane
EXPERIMENT = ROOT / "experiments" / "example-ab.yaml"
ARM = "nccl"
POLL_S = 0.5


class _NoLog:
    """A driver log with nothing in it (kwok heads run no driver)."""

    def read(self, api) -> str:
        return ""

    read_all = read


def _pools(platform, pods) -> dict[str, list[str]]:
    out = defaultdict(list)
    for pod in pods:
        out[runs.node_pool(platform, pod.spec.node_name)].append(pod.spec.node_name)
    return {pool: sorted(names) for pool, names in out.items()}


def _hostname_pins(rayjob: dict) -> dict[str, list[str] | None]:
    """Worker group -> the hostnames its pods are held to (None: not pinned)."""
    out = {}
    for group in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        terms = (((group["template"]["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
        pins = [e["values"] for t in terms for e in t.get("matchExpressions", []) if e["key"] == HOSTNAME]
        out[group["groupName"]] = sorted(pins[0]) if pins else None
    return out


def _member_aims_a_pod_fault(platform, api: RunClient, team: str, pods) -> None:
    ns = namespace_of(team)
    rbac = [o for o in fault_rbac(next(t for t in platform.cfg.workloads.teams if t.name == team))
            if o["metadata"]["name"] == MEMBER_ROLE or o["kind"] == "Lease"]  # the Leases within the team quota
    platform.admin.apply_all(rbac)
    lease = TeamLease(api.coordination, ns, fault_lease("rollout"), "controlplane-check")
    try:  # 403 until the RBAC authorizer has seen the new binding
        eventually("the member's Lease", lambda: lease.acquire(0, 0) or True, 30)
        squat = {"metadata": {"name": "squatter", "namespace": ns}, "spec": {}}
        refused = refusal(lambda: api.coordination.create_namespaced_lease(ns, squat))
        # RBAC's refusal, not the quota's (a quota refusal is 403 too: test_cp_tenancy)
        assert refused and refused.startswith("403") and " cannot create resource " in refused, refused
        pod = next(p.metadata.name for p in pods if p.metadata.labels.get("ray.io/group") == "rollout")

        def patch(labels):
            return refusal(lambda: api.core.patch_namespaced_pod(pod, ns, {"metadata": {"labels": labels}}))
        assert patch({FAULT_TARGET_LABEL: "rollout"}) is None
        lease.renew()
        for bad in ({RUN_LABEL: "their-run"}, {FAULT_TARGET_LABEL: "trainer"}):
            refused = patch(bad)
            assert refused and "a team member may change only the label" in refused, refused
        assert patch({FAULT_TARGET_LABEL: None}) is None
        assert lease.release().startswith("released"), lease
    finally:
        for o in rbac:
            platform.admin.delete(o["apiVersion"], o["kind"], o["metadata"]["name"], ns)


def test_after_a_pinned_node_is_deleted_the_next_attempt_schedules(tmp_path: Path, monkeypatch):
    platform = platform_of("p5en-shared", recorded)
    exp = load_experiment(EXPERIMENT)
    attempts = [a for a in schedule(exp) if a.arm == ARM][:2]
    team, ns = attempts[0].run.team, namespace_of(attempts[0].run.team)
    api = RunClient(platform.cp.client(runs.member_of(platform, team)))
    monkeypatch.setattr(bench.runner, "log_source", lambda cfg, s3=None, bucket=None: lambda *_: _NoLog())
    seen: set[str] = set()
    look = bench.collect.Seen.look

    def watched(self, *args, **kwargs):  # bench's own poll, observed: which nodes it has recorded
        look(self, *args, **kwargs)
        seen.update(self.nodes)
    monkeypatch.setattr(bench.collect.Seen, "look", watched)
    printed: list[str] = []
    outcome: dict[str, object] = {}

    def bench_run() -> None:
        try:
            outcome["status"] = bench.runner.run_experiment(
                EXPERIMENT, tmp_path / "out", False, lambda: api, printed.append, runs.REPOSITORY, STACK_DIR,
                poll_s=POLL_S, s3=lambda region: None, log_bucket="kwok-has-no-bucket", only=[a.folder for a in attempts])
        except BaseException as err:  # noqa: BLE001 (re-raised by the test below)
            outcome["error"] = err
    runner = threading.Thread(target=bench_run, daemon=True)
    runner.start()

    def rayjob_of(run_name: str) -> dict | None:
        found = platform.admin.list(*runs.RAYJOB, namespace=ns, label_selector=f"{RUN_LABEL}={run_name}")
        return found[-1] if found else None

    node_sets, gone, rayjobs = [], None, []
    try:
        for a in attempts:
            job = eventually(f"{a.folder}'s RayJob", lambda a=a: outcome.get("error") or rayjob_of(a.run.name), 300)
            assert not isinstance(job, BaseException), f"bench run stopped: {job}"
            name = job["metadata"]["name"]
            rayjobs.append(job)
            pods = runs.all_running(platform, team, name, 1 + sum(a.run.nodes.values()), 240)
            node_sets.append(_pools(platform, pods))
            if gone is None:
                _member_aims_a_pod_fault(platform, api, team, pods)
            cluster = runs.rayjob_cluster(platform, team, name)
            if gone is None:  # the first attempt's rollout node goes, once bench has read every node it ran on
                ran_on = {n for names in node_sets[0].values() for n in names}
                eventually(f"bench run read the nodes of {a.folder}", lambda: ran_on <= seen, 60)
                gone = node_sets[0]["rollout"][0]
                platform.admin.delete("v1", "Node", gone)
            runs.finish(platform, team, name)
            runs.stopped(platform, ns, cluster, 180)
        runner.join(120)
        assert not runner.is_alive(), "bench run did not end after its last attempt finished"
        assert "error" not in outcome, outcome.get("error")
    finally:
        if gone is not None:
            platform.admin.apply_all(nodes.node_objects(platform.cfg, platform.model, gone, True,
                                                        stack.csi_drivers(platform.graph)))
        runner.join(5)
        for j in rayjobs:
            platform.admin.delete(*runs.RAYJOB, j["metadata"]["name"], ns)
    assert outcome["status"] == 0, printed
    first, second = node_sets
    assert f"{attempts[1].folder}: pool rollout not pinned: its pinned node(s) {gone} are gone" in printed, printed
    assert _hostname_pins(rayjobs[1]) == {"trainer": first["train"], "rollout": None}, _hostname_pins(rayjobs[1])
    assert second["train"] == first["train"] and gone not in second["rollout"], (first, second)


"""A per-pool guarantee delivered by reclaim on the real Volcano v1.15.1 (docs/design/scheduling.md, "Per-pool
guarantees"): team beta's two runs hold twice its train share, and its rollout nodes above its rollout share,
while beta stays within its share summed over pools (its reward-pool share, unused, makes up the difference);
alpha, below its train guarantee, submits a run within its share on each pool that needs one of beta's nodes on
each. With queues in GPU sums Volcano never takes a pod of beta (40 GPUs held, 40 deserved in all) and the claim
waits for ever; with one dimension per pool beta is above its share on both pools, so each of the claim's GPU pods
reclaims one of beta's nodes, and the claim is bound within the pods' grace period and a few scheduling sessions
(the bounds of ``test_cp_reclaim``), no pod of alpha's a victim. A copy of beta's trainer without its pool's
resource (``nvidia.com/gpu`` alone) is refused by the API server (the team pod policy). The nodes advertise their pool's resource as the
advertiser (``nodes.advertise``) makes them (``controlplane.nodes``)."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import pytest
from kubernetes import client
from small_shared import CHECKPOINT_MINUTES, small_shared
from test_cp_reclaim import LAG, SESSIONS, _file, _pods, _run_one_by_one, _scheduled

from stackconfig.labels import pool_gpu_resource
from workloads.checks.run_plan import Planner
from workloads.checks.runs import load_run
from workloads.render.admission import POD_POLICY
from workloads.render.teams import namespace_of
from workloads.schema.labels import RUN_LABEL

from controlplane import runs
from controlplane.kube import eventually

pytestmark = pytest.mark.controlplane
OWN_RESOURCE = "requests its GPU pool's own resource"
"""The pool resource rule's message (``render.pod_limits.one_pools_gpus``)."""
NAME = "p5en-pools"
NODES = {"train": 4, "rollout": 8, "reward": 4}
"""32 train and 64 rollout GPUs (p5en, 8 a node), 16 reward GPUs (g6e.12xlarge, 4 a node)."""
SHARES = {"alpha": {"train": (16, 24, 32), "rollout": (32, 48, 64)},
          "beta": {"train": (0, 8, 16), "rollout": (16, 16, 32), "reward": (0, 16, 16)}}
"""(guarantee, deserved, cap) per pool. Beta's deserved sums to 40 (8 + 16 + 16)."""
RUNS = (("beta-1", "beta", "low", {"train": 1, "rollout": 2}),
        ("beta-2", "beta", "low", {"train": 1, "rollout": 1}),    # beta: train 16 > 8, rollout 24 > 16; 40 in all
        ("alpha-base", "alpha", "normal", {"train": 2, "rollout": 5}),  # alpha: train 16 < its guarantee 24
        ("alpha-claim", "alpha", "normal", {"train": 1, "rollout": 1}))  # alpha to its deserved on both pools
"""The first three fill every train and rollout node, so each of the claim's GPU pods needs one of beta's."""


def test_alpha_reclaims_its_train_guarantee_from_beta_above_its_per_pool_shares(tmp_path):
    platform = small_shared(NAME, NODES, SHARES)
    core = client.CoreV1Api(platform.cp.client())
    for node in core.list_node(label_selector="rl.platform/pool in (train,rollout)").items:
        pool = node.metadata.labels["rl.platform/pool"]
        assert node.status.allocatable[pool_gpu_resource(pool)] == node.status.allocatable["nvidia.com/gpu"] == "8"
    files = [_file(tmp_path, *r) for r in RUNS]
    running = frozenset(name for name, *_ in RUNS[:3])  # submitted one after the other, each running first
    decisions = {d.run: d for d in Planner(platform.cfg).plan([load_run(f) for f in files], running)}
    assert decisions["alpha-claim"].action == "starts" and decisions["beta-2"].action == "preempted", decisions
    grace = CHECKPOINT_MINUTES * 60
    try:
        _run_one_by_one(platform, files[:3], RUNS[:3])
        gpus_only, other_pool = _hostile(core, "beta-1")
        assert POD_POLICY in _refusal(core, gpus_only), "a pod of nvidia.com/gpu alone admitted"
        assert OWN_RESOURCE in _refusal(core, other_pool), "a pod of another pool's resource admitted"
        alpha_before = {p.metadata.uid for p in _pods(core, "alpha")}
        runs.submit(platform, files[3], runs.member_of(platform, "alpha"))
        victims = eventually("a pod evicted", lambda: [p for team in ("alpha", "beta") for p in _pods(core, team)
                                                       if p.metadata.deletion_timestamp], 60)
        gone = max(eventually(f"{p.metadata.name} removed", lambda p=p: _gone(core, p), grace + 30, every=0.2)
                   for p in victims)
        claim = runs.all_running(platform, "alpha", "alpha-claim-1", 3, timeout=60)
        alpha_after = {p.metadata.uid for p in _pods(core, "alpha")}
    finally:
        for name, team, _, _ in RUNS:
            if platform.admin.get(*runs.RAYJOB, f"{name}-1", namespace_of(team)):
                runs.delete_run(platform, team, f"{name}-1")
    assert all(p.metadata.namespace == namespace_of("beta") for p in victims), [p.metadata.name for p in victims]
    assert {p.spec.node_selector["rl.platform/pool"] for p in victims} == {"train", "rollout"}
    assert alpha_before <= alpha_after, "a pod of alpha's running run was deleted"
    deadline = max(p.metadata.deletion_timestamp.timestamp() for p in victims)
    assert abs(gone - deadline) <= LAG, f"victims seen removed {gone - deadline:+.1f} s from their deletion time"
    bound = max(_scheduled(p) for p in claim)
    assert deadline - 1 <= bound <= deadline + SESSIONS, (
        f"claim bound {bound - deadline:+.0f} s from the victims' deletion time (grace {grace} s), allowed "
        f"-1..{SESSIONS}")
    print(f"pool guarantee: claim bound {bound - (deadline - grace):.0f} s after the eviction (grace {grace} s)")


def _hostile(core: client.CoreV1Api, run: str) -> tuple[dict, dict]:
    """Two copies of the run's trainer as KubeRay made it: its pool's resource taken out (8 ``nvidia.com/gpu``
    alone: the whole-node rule, which asks for the pool's resource, refuses it first), and another pool's added
    (the pool resource rule alone refuses it)."""
    trainer = next(p for p in _pods(core, "beta") if p.metadata.labels[RUN_LABEL] == run
                   and p.spec.node_selector["rl.platform/pool"] == "train")
    pod = client.ApiClient().sanitize_for_serialization(trainer)
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k in ("labels", "annotations")}
    pod["metadata"]["name"] = "gpus-only"
    pod["spec"].pop("nodeName", None)
    pod.pop("status", None)
    other = copy.deepcopy(pod)
    for part in ("requests", "limits"):
        pod["spec"]["containers"][0]["resources"][part].pop(pool_gpu_resource("train"))
        other["spec"]["containers"][0]["resources"][part][pool_gpu_resource("rollout")] = "8"
    other["metadata"]["name"] = "another-pools-gpus"
    return pod, other


def _refusal(core: client.CoreV1Api, pod: dict) -> str:
    """The API server's refusal of a dry-run create of ``pod`` in beta's namespace ('' when admitted)."""
    try:
        core.create_namespaced_pod(namespace_of("beta"), pod, dry_run="All")
    except client.ApiException as e:
        return e.body or ""
    return ""


def _gone(core: client.CoreV1Api, pod: client.V1Pod) -> float | None:
    """When the pod was first seen gone (now, on a 404), else None."""
    try:
        core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
    except client.ApiException as e:
        if e.status == 404:
            return datetime.now(timezone.utc).timestamp()
        raise
    return None

"""A quarantined node counts for nothing in Volcano's queue limits, on the real API server and Volcano v1.15.1
(docs/design/scheduling.md, "Per-pool guarantees", "What a guarantee delivers"): Volcano sums every node's
allocatable into the total each queue's ``realCapability`` (the pool's GPUs less the other queues' guarantees)
comes from, taints notwithstanding (pkg/scheduler/framework/session.go:273-275), so the advertiser
(``nodes.advertise``) writes 0 of a node's pool resource while it carries the quarantine taint.

Train has 4 nodes (32 GPUs), one of them quarantined; alpha is guaranteed 16 train GPUs, beta none. The
advertiser's write, made with its own pod's token on that node, passes the admission policy
``rl-gpu-resource-own-node`` (the real API server's CEL); the kubelet's copy of capacity to allocatable
(kubernetes v1.35.3 pkg/kubelet/nodestatus/setters.go:293-313) is made here, kwok has no kubelet. Beta's limit
on train is then 24 - 16 = 8 GPUs: its first run (one train node) binds, its second waits; alpha's run of two
train nodes, its guarantee, binds on the two usable nodes left. With the quarantined node still advertising 8
(the advertiser before), beta's limit is 32 - 16 = 16, its second run binds, and alpha's guarantee is one node
short (beta, at its deserved 16, is not reclaimable). Once the taint is gone, the advertiser writes 8 back."""

from __future__ import annotations

import pytest
from kubernetes import client
from in_cluster import pod_api, taint
from small_shared import small_shared
from test_cp_reclaim import _file, _run_one_by_one

from components.gpu_node_setup import QUARANTINE_TAINT
from nodes import advertise, incluster
from nodes.pool_resources import ACCOUNT, NAMESPACE, RUN_BLOCKING_TAINTS, head_slots, resources, whole_node_gpus
from stackconfig.labels import POOL_LABEL, pool_gpu_resource
from workloads.render.teams import namespace_of

from controlplane import runs
from controlplane.kube import eventually

pytestmark = pytest.mark.controlplane
NAME = "p5en-unusable"
NODES = {"train": 4, "rollout": 4}
SHARES = {"alpha": {"train": (16, 16, 32), "rollout": (0, 16, 32)},
          "beta": {"train": (0, 16, 32), "rollout": (0, 16, 32)}}
"""(guarantee, deserved, cap) per pool."""
QUARANTINED = "train-003"
KEY = pool_gpu_resource("train")
RUNS = (("beta-1", "beta", "low", {"train": 1, "rollout": 1}),
        ("beta-2", "beta", "low", {"train": 1, "rollout": 1}),
        ("alpha-claim", "alpha", "normal", {"train": 2, "rollout": 1}))
SESSIONS = 5


def _advertise(platform, api: incluster.Api, node: str) -> dict | None:
    """One pass of the advertiser on ``node``, then the kubelet's copy of the pool resource to allocatable."""
    m = platform.model
    patch = advertise.step(api, node, resources(m), POOL_LABEL, m.head_pool.name, head_slots(m),
                           whole_node=whole_node_gpus(m), taints=RUN_BLOCKING_TAINTS)
    core = client.CoreV1Api(platform.cp.client())
    value = core.read_node(node).status.capacity[KEY]
    core.patch_node_status(node, {"status": {"allocatable": {KEY: value}}})
    return patch


def _taints(core: client.CoreV1Api, node: str, quarantined: bool) -> None:
    kept = [t for t in core.read_node(node).spec.taints or [] if t.key != QUARANTINE_TAINT.key]
    core.patch_node(node, {"spec": {"taints": [taint(t) for t in kept] + ([taint(QUARANTINE_TAINT)] if quarantined
                                                                              else [])}})


def test_a_quarantined_node_leaves_no_room_in_the_other_teams_limit(tmp_path):
    platform = small_shared(NAME, NODES, SHARES)
    core = client.CoreV1Api(platform.cp.client())
    api = pod_api(platform, NAMESPACE, ACCOUNT, QUARANTINED)
    files = [_file(tmp_path, *r) for r in RUNS]
    _taints(core, QUARANTINED, True)
    try:
        assert _advertise(platform, api, QUARANTINED) == {"status": {"capacity": {KEY: "0"}}}
        assert core.read_node(QUARANTINED).status.allocatable[KEY] == "0"
        _run_one_by_one(platform, files[:1], RUNS[:1])
        runs.submit(platform, files[1], runs.member_of(platform, "beta"))
        eventually("beta-2's cluster", lambda: runs.rayjob_cluster(platform, "beta", "beta-2-1"), 60)

        def beta_2_unbound() -> str | None:
            bound = [p.metadata.name for p in runs.run_pods(platform, "beta", "beta-2-1") if p.spec.node_name]
            return f"beta-2 bound beyond beta's train limit: {bound}" if bound else None
        runs.through_sessions(platform, SESSIONS, beta_2_unbound)
        runs.submit(platform, files[2], runs.member_of(platform, "alpha"))
        claim = runs.all_running(platform, "alpha", "alpha-claim-1", 1 + sum(RUNS[2][3].values()), timeout=60)
        assert QUARANTINED not in {p.spec.node_name for p in claim}
        assert beta_2_unbound() is None
    finally:
        for name, team, _, _ in RUNS:
            if platform.admin.get(*runs.RAYJOB, f"{name}-1", namespace_of(team)) and runs.rayjob_cluster(
                    platform, team, f"{name}-1"):
                runs.delete_run(platform, team, f"{name}-1")
        _taints(core, QUARANTINED, False)
    assert _advertise(platform, api, QUARANTINED) == {"status": {"capacity": {KEY: "8"}}}
    assert core.read_node(QUARANTINED).status.allocatable[KEY] == "8"

"""Head slots (review35 A2): a team's heads, Terminating ones included, take at most its ``maxRuns`` of the head pool.

``count/rayjobs`` frees when a RayJob is deleted, while its head keeps its place on the head pool for up to its grace
(1800 s, the save on stop), so ``validate_head_room``'s bound (the teams' ``maxRuns`` sum to at most the pool's heads)
did not hold for live head pods. Now every head-pool node advertises ``rl.platform/head-slot`` as many as the heads it
holds (the advertiser, ``nodes.pool_resources``), every run head requests one (admission refuses a team pod on the
head pool without exactly one, and one elsewhere with any), and the team's ResourceQuota holds the slots at
``maxRuns``; the quota counts a Terminating pod until its grace has passed (kubernetes
pkg/quota/v1/evaluator/core/pods.go ``QuotaV1Pod``)."""

from __future__ import annotations

import copy

import pytest
from test_admission import cfg, policies, rayjob, refused, run_pods  # noqa: F401 (fixtures)
from test_gpu_resource_advertiser import RULES, USER, _node, _written, policy  # noqa: F401 (fixture)
from test_nodes import evaluate, request_from
from test_workloads import variant

from controlplane.nodes import quantities
from nodes import advertise
from nodes.pool_resources import advertiser_objects
from stackconfig.labels import HEAD_SLOT_RESOURCE, POOL_LABEL
from workloads.deploy.torchx_miles import resource
from workloads.derive.layout import heads_per_node
from workloads.derive.model import derive
from workloads.render.admission import POD_POLICY, RAYJOB_POLICY
from workloads.render.ray import raycluster
from workloads.render.teams import team_resource_quota

SLOT = "head-slot"
RESOURCES = {"train": "rl.platform/gpu-train", "rollout": "rl.platform/gpu-rollout"}


def _slots(container: dict) -> tuple[str | None, str | None]:
    r = container["resources"]
    return r.get("requests", {}).get(HEAD_SLOT_RESOURCE), r.get("limits", {}).get(HEAD_SLOT_RESOURCE)


def test_every_head_the_platform_renders_requests_one_head_slot_and_no_other_pod_any(rayjob):
    head, *workers = run_pods(rayjob)
    assert [_slots(c) for c in head["spec"]["containers"]] == [("1", "1")]
    assert all(_slots(c) == (None, None) for p in workers for c in [*p["spec"]["containers"], *p["spec"]["initContainers"]])
    m = derive(variant("p5en-prod", {}))  # a stack of its own RayCluster
    cluster = raycluster(m)["spec"]
    assert [_slots(c) for c in cluster["headGroupSpec"]["template"]["spec"]["containers"]] == [("1", "1")]
    assert all(_slots(c) == (None, None) for g in cluster["workerGroupSpecs"] for c in g["template"]["spec"]["containers"])
    assert resource(m.head).devices[HEAD_SLOT_RESOURCE] == 1  # TorchX's head too
    assert all(HEAD_SLOT_RESOURCE not in resource(g).devices for g in m.workers)


def _slotted(pod: dict, containers: str | None, init: str | None = None) -> dict:
    """``pod`` with its first container's (and every init container's) head slots set to ``containers`` (``init``);
    None: none stated."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    for c, n in [(spec["containers"][0], containers), *((c, init) for c in spec.get("initContainers", []))]:
        c["resources"] = copy.deepcopy(c["resources"])  # the head's stage container shares the head's dict (runs)
        for part in ("requests", "limits"):
            c["resources"][part].pop(HEAD_SLOT_RESOURCE, None)
            if n is not None:
                c["resources"][part][HEAD_SLOT_RESOURCE] = n
    return out


def test_a_team_pod_on_the_head_pool_requests_exactly_one_head_slot_and_a_pod_elsewhere_none(policies, rayjob):
    head, trainer, rollout = run_pods(rayjob)
    # the head stages its data in an init container of the head's resources (render.runs): one slot for the pod
    assert [_slots(c) for c in head["spec"]["initContainers"]] == [("1", "1")]
    assert refused(policies[POD_POLICY], head) == []
    attacks = {
        "a head without a slot": _slotted(head, None, "1"),
        "a head of 0 slots": _slotted(head, "0", "1"),
        "a head of 2 slots": _slotted(head, "2", "1"),
        "a head of 1500m slots": _slotted(head, "1500m", "1"),
        "a head's init container of 2 slots": _slotted(head, "1", "2"),
        "a trainer with a head slot": _slotted(trainer, "1"),
        "a rollout pod's init container with a head slot": _slotted(rollout, None, "1"),
    }
    admitted = [name for name, pod in attacks.items()
                if not any(SLOT in msg for msg in refused(policies[POD_POLICY], pod))]
    assert admitted == []


def test_a_team_rayjob_whose_head_template_drops_its_head_slot_is_refused(policies, rayjob):
    job = copy.deepcopy(rayjob)
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    for part in ("requests", "limits"):
        head["resources"][part].pop(HEAD_SLOT_RESOURCE)
    assert refused(policies[RAYJOB_POLICY], rayjob) == []
    assert any(SLOT in msg for msg in refused(policies[RAYJOB_POLICY], job))


def test_each_teams_quota_holds_its_head_slots_at_its_max_runs(cfg):
    m = derive(cfg)
    hard = {t.name: team_resource_quota(t, m.pools, m.head)["spec"]["hard"] for t in cfg.workloads.teams}
    assert {n: h[f"requests.{HEAD_SLOT_RESOURCE}"] for n, h in hard.items()} == {
        t.name: str(t.max_runs) for t in cfg.workloads.teams}


def test_head_pool_nodes_advertise_the_heads_they_hold(cfg):
    m = derive(cfg)
    n = heads_per_node(cfg)
    assert n == 3
    ds = next(o for o in advertiser_objects(m) if o["kind"] == "DaemonSet")
    command = ds["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--head-pool") + 1:command.index("--head-pool") + 4] == [
        m.head_pool.name, "--head-slots", str(n)]
    assert advertise.HEAD_SLOT == HEAD_SLOT_RESOURCE  # the script runs without the repository
    head = _node("cpu-000", m.head_pool.name, {"cpu": "64"})
    assert advertise.wanted(head, RESOURCES, POOL_LABEL, m.head_pool.name, n, **RULES) == {
        "status": {"capacity": {HEAD_SLOT_RESOURCE: "3"}}}
    head["status"]["capacity"][HEAD_SLOT_RESOURCE] = "3"
    assert advertise.wanted(head, RESOURCES, POOL_LABEL, m.head_pool.name, n, **RULES) is None  # already so
    gpu = _node()
    assert advertise.wanted(gpu, RESOURCES, POOL_LABEL, m.head_pool.name, n, **RULES) == {
        "status": {"capacity": {"rl.platform/gpu-train": "8"}}}  # a GPU node as before
    # kwok's nodes (the control-plane tier) advertise what the advertiser writes, and only on the head pool
    assert {p.name: quantities(p, m).get(HEAD_SLOT_RESOURCE) for p in m.pools} == {
        p.name: str(n) if p.name == m.head_pool.name else None for p in m.pools}


@pytest.fixture(scope="module")
def head_pool(cfg):
    return derive(cfg).head_pool.name


def test_the_advertiser_may_set_a_head_pool_nodes_head_slots_to_the_heads_it_holds_only(policy, head_pool):
    old = _node("cpu-000", head_pool, {"cpu": "64"})
    request = request_from("cpu-000", USER)
    to = {n: _written(old, lambda node, n=n: node["status"]["capacity"].update({HEAD_SLOT_RESOURCE: n}))
          for n in ("3", "4", "0")}
    assert evaluate(policy, request, to["3"], old) == []
    refusals = {
        "4 slots": (request, to["4"]),
        "0 slots": (request, to["0"]),
        "a GPU pool's resource on the head node": (request, _written(
            old, lambda n: n["status"]["capacity"].update({"rl.platform/gpu-train": "8"}))),
        "another node's head slots": (request_from("cpu-001", USER), to["3"]),
        "head slots on a GPU node": (request_from("train-000", USER), _written(
            _node(), lambda n: n["status"]["capacity"].update({HEAD_SLOT_RESOURCE: "3"}))),
    }
    admitted = [what for what, (req, new) in refusals.items()
                if not evaluate(policy, req, new, old if new["metadata"]["name"] == "cpu-000" else _node())]
    assert admitted == []

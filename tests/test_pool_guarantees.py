"""Per-pool guarantees (issue 35 item 3): the per-pool GPU resource every team GPU pod requests (admission holds
it to its pool), each team's Queue dimensions and ResourceQuota per pool, the planner judging per pool, and what
``runs plan`` reports of a guarantee it cannot meet. docs/design/scheduling.md ("Per-pool guarantees")."""

from __future__ import annotations

import copy
import re

import kubernetes_validate
from test_admission import cfg, policies, rayjob, refused, run_pods  # noqa: F401 (fixtures)
from test_scheduling_rules import SHARED, run
from test_workloads import k8s_version, variant

from stackconfig.labels import POOL_LABEL, pool_gpu_resource
from workloads.checks.pool_guarantees import unmet_guarantees
from workloads.checks.run_plan import Planner
from workloads.cli.runs import main
from workloads.derive.model import derive
from workloads.derive.resources import GPU
from workloads.render.admission import POD_POLICY
from workloads.render.teams import team_queue, team_resource_quota

# Kubernetes' qualified name for an extended resource (apimachinery validation IsQualifiedName, one domain prefix)
QUALIFIED = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _quota_admits(hard: dict[str, str], pods: list[dict[str, int]]) -> int:
    """How many of ``pods`` (their requests, created in order) the ResourceQuota admission plugin admits before
    the first it refuses: a pod is refused when, on a resource ``hard`` lists as ``requests.<name>``, the
    namespace's requests would pass the hard value (KubeRay creates a cluster's pods one by one and stops at
    the first refused, ray-project/kuberay v1.7.0 raycluster_controller.go:1203-1211)."""
    used: dict[str, int] = {}
    for i, pod in enumerate(pods):
        if any(f"requests.{r}" in hard and used.get(r, 0) + n > int(hard[f"requests.{r}"]) for r, n in pod.items()):
            return i
        for r, n in pod.items():
            used[r] = used.get(r, 0) + n
    return len(pods)


def _gpu_pod(pool: str, gpus: int = 8) -> dict[str, int]:
    """A whole p5en node's GPUs on ``pool``, with the pool's resource in the same count (what admission asks
    of a team pod on a GPU pool, docs/design/scheduling.md)."""
    return {GPU: gpus, pool_gpu_resource(pool): gpus}


def test_every_gpu_pool_has_a_valid_resource_name_of_its_own():
    cfg = variant(SHARED, {})
    names = {pool_gpu_resource(p.name) for p in cfg.pools if p.instance.is_gpu}
    assert names == {"rl.platform/gpu-train", "rl.platform/gpu-rollout", "rl.platform/gpu-reward"}
    assert all(QUALIFIED.match(n) and not n.split("/")[0].endswith("kubernetes.io") for n in names)
    assert QUALIFIED.match(pool_gpu_resource("a" + "-" * 22 + "b"))  # the longest pool name


def test_the_per_pool_quota_refuses_the_ninth_trainer_of_a_kubectl_rayjob_of_16_train_and_1_rollout():
    """Beta may hold 64 train GPUs (8 nodes) and 128 rollout GPUs; summed, 192. A RayJob of 16 train and 1
    rollout nodes asks 136 GPUs, within the sum: a quota of sums admits every pod. Per pool, the ninth trainer
    takes beta past its train cap: every team GPU pod requests its pool's resource (the run's own,
    test_a_run_pod_on_a_gpu_pool_requests_its_pool_resource; any other, admission:
    test_a_pod_of_nvidia_gpus_alone_or_of_another_pools_resource_is_refused)."""
    cfg = variant(SHARED, {})
    m = derive(cfg)
    beta = next(t for t in cfg.workloads.teams if t.name == "beta")
    hard = team_resource_quota(beta, m.pools, m.head)["spec"]["hard"]
    kubernetes_validate.validate(team_resource_quota(beta, m.pools, m.head), k8s_version(cfg), strict=True)
    assert hard[f"requests.{pool_gpu_resource('train')}"] == "64"
    assert hard[f"requests.{pool_gpu_resource('rollout')}"] == "128"
    assert hard[f"requests.{pool_gpu_resource('reward')}"] == "0"  # no quota there: none of it
    pods = [_gpu_pod("train")] * 16 + [_gpu_pod("rollout")]
    assert _quota_admits(hard, pods) == 8
    # the team's own runs stay within it: 8 train and 16 rollout nodes are all admitted
    assert _quota_admits(hard, [_gpu_pod("train")] * 8 + [_gpu_pod("rollout")] * 16) == 24


def test_a_run_pod_on_a_gpu_pool_requests_its_pool_resource(rayjob):
    """Without it, the per-pool quota lines and queue dimensions count nothing of a team's run."""
    for pod in run_pods(rayjob)[1:]:
        pool = pod["spec"]["nodeSelector"][POOL_LABEL]
        for part in ("requests", "limits"):
            resources = pod["spec"]["containers"][0]["resources"][part]
            assert resources.get(pool_gpu_resource(pool)) == resources[GPU], (pool, part)


OWN_RESOURCE = "requests its GPU pool's own resource"


def _resources(pod: dict, edit) -> dict:
    """``pod`` with ``edit`` applied to its first container's requests and limits (both, as the run's are)."""
    out = copy.deepcopy(pod)
    for part in ("requests", "limits"):
        edit(out["spec"]["containers"][0]["resources"][part])
    return out


def test_a_pod_of_nvidia_gpus_alone_or_of_another_pools_resource_is_refused(policies, rayjob):
    """A pod asking ``nvidia.com/gpu`` without its pool's resource would escape the Queue's and the quota's
    per-pool dimensions; one asking another pool's too would count against a pool it does not run on."""
    head, trainer, rollout = run_pods(rayjob)
    policy = policies[POD_POLICY]
    assert refused(policy, trainer) == [] and refused(policy, rollout) == [] and refused(policy, head) == []
    gpus_only = _resources(trainer, lambda r: r.pop(pool_gpu_resource("train")))
    assert OWN_RESOURCE in " ".join(refused(policy, gpus_only))
    other_pool = _resources(trainer, lambda r: r.update({pool_gpu_resource("rollout"): "8"}))
    assert [m for m in refused(policy, other_pool) if OWN_RESOURCE in m] == refused(policy, other_pool)
    fewer = _resources(trainer, lambda r: r.update({GPU: "8", pool_gpu_resource("train"): "4"}))
    assert OWN_RESOURCE in " ".join(refused(policy, fewer))
    init_gpus = copy.deepcopy(trainer)  # the main container is the run's; an init container takes GPUs alone
    init_gpus["spec"]["initContainers"][0]["resources"] = {"requests": {GPU: "8"}, "limits": {GPU: "8"}}
    assert [m for m in refused(policy, init_gpus) if OWN_RESOURCE in m] == refused(policy, init_gpus) != []
    head_gpu = _resources(head, lambda r: r.update({GPU: "1"}))
    assert OWN_RESOURCE in " ".join(refused(policy, head_gpu))


def test_each_team_queue_counts_gpus_per_pool_only():
    cfg = variant(SHARED, {})
    m = derive(cfg)
    alpha = next(t for t in cfg.workloads.teams if t.name == "alpha")
    spec = team_queue(alpha, m.pools)["spec"]
    train, rollout = pool_gpu_resource("train"), pool_gpu_resource("rollout")
    assert spec["capability"] == {train: 128, rollout: 256} and spec["deserved"] == {train: 80, rollout: 168}
    assert spec["guarantee"] == {"resource": {train: 64, rollout: 128}}


def test_two_honest_beta_runs_no_longer_hold_every_train_node_and_alpha_starts():
    """Each beta run keeps within beta's train cap (64); summed, the quota let the two hold all 16 train nodes. Per
    pool, beta's ResourceQuota refuses the second, and alpha's run starts on the nodes it leaves."""
    cfg = variant(SHARED, {})
    runs = [run("b-1", "beta", train=8, rollout=4), run("b-2", "beta", train=8, rollout=4),
            run("a-1", "alpha", train=8, rollout=8)]
    planner = Planner(cfg)
    decisions = planner.plan(runs)
    assert [d.action for d in decisions] == ["starts", "waits", "starts"]
    assert "would request 128 GPUs of pool train, more than its 64" in decisions[1].why
    assert unmet_guarantees(planner, runs, decisions) == []


def test_beta_holding_every_train_node_loses_them_to_alphas_train_guarantee_by_reclaim():
    """Runs admitted before the quota counted pools (``--running``): beta holds all 16 train nodes, 128 GPUs
    above its train deserved 48, and its rollout guarantee (64) without them. Alpha's run within its train
    deserved reclaims beta's train nodes; nothing is reported unmet."""
    cfg = variant(SHARED, {})
    runs = [run("b-1", "beta", train=8, rollout=4), run("b-2", "beta", train=8, rollout=4),
            run("a-1", "alpha", train=8, rollout=8)]
    planner = Planner(cfg)
    decisions = planner.plan(runs, frozenset({"b-1", "b-2"}))
    assert [d.action for d in decisions] == ["running", "preempted", "starts"]
    assert unmet_guarantees(planner, runs, decisions) == []


def test_a_team_below_its_guarantee_on_one_pool_keeps_every_pool_and_the_plan_says_so():
    """Volcano keeps a victim's queue at its guarantee on every dimension (capacity.go:1842-1851): beta, holding
    32 rollout GPUs of its 64 guaranteed, loses no train node, though 80 above its train deserved. Alpha's run
    fits its train guarantee and waits: the plan says so."""
    cfg = variant(SHARED, {})
    runs = [run("b-1", "beta", train=8, rollout=2), run("b-2", "beta", train=8, rollout=2),
            run("a-1", "alpha", train=8, rollout=8)]
    planner = Planner(cfg)
    decisions = planner.plan(runs, frozenset({"b-1", "b-2"}))
    assert [d.action for d in decisions] == ["running", "running", "waits"]
    (unmet,) = unmet_guarantees(planner, runs, decisions)
    assert (unmet.team, unmet.pool, unmet.guarantee, unmet.held, unmet.run, unmet.asks, unmet.others) == \
        ("alpha", "train", 64, 0, "a-1", 64, {"beta": 128})
    assert unmet.line() == ("guarantee unmet: team alpha pool train: 0 of its 64 guaranteed GPUs held and run a-1 "
                            "waits for 64 more within it; team beta 128 GPUs on the pool")


def test_a_run_above_its_guarantee_or_on_a_pool_without_one_is_not_reported():
    cfg = variant(SHARED, {})
    planner = Planner(cfg)
    # alpha asks 16 train nodes, above its 64 guaranteed train GPUs: not a guarantee
    runs = [run("b-1", "beta", train=8, rollout=2), run("b-2", "beta", train=8, rollout=2),
            run("a-1", "alpha", train=16, rollout=8)]
    assert unmet_guarantees(planner, runs, planner.plan(runs, frozenset({"b-1", "b-2"}))) == []
    # beta has no train guarantee (alpha, below its rollout guarantee, keeps the train nodes)
    runs = [run("a-1", "alpha", train=8, rollout=4), run("a-2", "alpha", train=8, rollout=4),
            run("b-1", "beta", train=1, rollout=1)]
    decisions = Planner(cfg).plan(runs, frozenset({"a-1", "a-2"}))
    assert decisions[2].action == "waits" and unmet_guarantees(Planner(cfg), runs, decisions) == []


def _plan_beta_on_train(tmp_path, capsys) -> list[str]:
    """``runs plan`` of beta's two runs holding all 16 train nodes, running, and alpha's run after them."""
    files = []
    for name, team, train, rollout in (("b-1", "beta", 8, 2), ("b-2", "beta", 8, 2), ("a-1", "alpha", 8, 8)):
        f = tmp_path / f"{name}.yaml"
        f.write_text(f"name: {name}\nteam: {team}\nnodes: {{train: {train}, rollout: {rollout}}}\n"
                     f"software: miles-0.1\nmodel: Qwen/Qwen3-30B-A3B\nparallel: {{tensor: 4, expert: 8}}\n")
        files.append(str(f))
    assert main(["plan", SHARED, *files, "--running", "b-1,b-2"]) == 0
    return capsys.readouterr().out.splitlines()


def test_runs_plan_prints_the_unmet_guarantee(tmp_path, capsys):
    assert ("guarantee unmet: team alpha pool train: 0 of its 64 guaranteed GPUs held and run a-1 waits for 64 "
            "more within it; team beta 128 GPUs on the pool") in _plan_beta_on_train(tmp_path, capsys)


GUARANTEE_RULE = ("Volcano reclaims no pod of a queue that would be under its guarantee on any pool without it "
                  "(capacity.go:1840-1851)")


def test_a_team_above_its_deserved_but_under_another_pools_guarantee_is_named_as_the_reason_a_claim_waits():
    """Beta's runs hold 64 train GPUs, 16 above its train deserved (48), and 16 rollout GPUs, under its rollout
    guarantee (64). Alpha's claim keeps alpha within its train deserved (64 + 16 = 80), so only Volcano's guarantee
    check keeps beta's train pods (``checkGuaranteeConstraint``: every dimension of the guarantee, capacity.go:
    1840-1851, read at :516 and :630). The plan names that rule, the team and the pool it is under its guarantee
    on, not "no reclaimable team above its deserved". With beta's rollout at its guarantee the same claim reclaims."""
    cfg = variant(SHARED, {})
    running = frozenset({"beta-1", "beta-2", "alpha-base"})

    def runs(beta_rollout: int) -> list:
        return [run("beta-1", "beta", train=4, rollout=beta_rollout),
                run("beta-2", "beta", train=4, rollout=beta_rollout),
                run("alpha-base", "alpha", train=8, rollout=16), run("alpha-claim", "alpha", train=2, rollout=1)]
    decisions = Planner(cfg).plan(runs(1), running)
    assert [d.action for d in decisions] == ["running", "running", "running", "waits"]
    assert decisions[3].why.endswith(
        "reclaim: team beta holds 64 GPUs of pool train, above its deserved 48 there, but is under its guarantee on "
        f"pool rollout (16 of its 64 guaranteed GPUs held): {GUARANTEE_RULE}, so team beta keeps its pods on every "
        "pool")
    decisions = Planner(cfg).plan(runs(4), running)  # beta's rollout 64: its guarantee, no less
    assert [d.action for d in decisions] == ["running", "preempted", "running", "starts"]


def test_the_guarantee_check_spans_every_pool_and_the_pods_own_pool():
    """``QueueShare.under_guarantee``: the pools where the queue would hold less than its guarantee without the
    pod; any makes the pod stay (``may_lose``), whatever its pool's deserved."""
    beta = Planner(variant(SHARED, {})).queues["beta"]
    assert beta.under_guarantee({"train": 64, "rollout": 16}, "train", 8) == ["rollout"]
    assert not beta.may_lose({"train": 64, "rollout": 16}, "train", 8)
    assert beta.under_guarantee({"train": 64, "rollout": 64}, "train", 8) == []
    assert beta.may_lose({"train": 64, "rollout": 64}, "train", 8)
    assert beta.under_guarantee({"train": 64, "rollout": 64}, "rollout", 8) == ["rollout"]  # the pod's own pool
    assert not beta.may_lose({"train": 48, "rollout": 64}, "train", 8)  # at its deserved: not above it


def test_runs_plan_names_the_guarantee_that_keeps_the_other_teams_pods(tmp_path, capsys):
    (line,) = [x for x in _plan_beta_on_train(tmp_path, capsys) if x.startswith("a-1 ")]
    assert line.endswith("reclaim: team beta holds 128 GPUs of pool train, above its deserved 48 there, but is under "
                         f"its guarantee on pool rollout (32 of its 64 guaranteed GPUs held): {GUARANTEE_RULE}, so "
                         "team beta keeps its pods on every pool")

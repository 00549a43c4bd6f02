"""The Volcano rules the platform relies on, encoded from the upstream sources (volcano v1.15.1,
commit 0a56ed331897f5455916a44d3075671376d731d6): the queue admission webhook on every Queue the
stacks render, and one scenario per scheduling rule the offline plan (``workloads.checks.run_plan``)
follows, each naming the upstream lines it follows. docs/design/scheduling.md ("Scheduling rules") states them."""

from __future__ import annotations

import math

import pytest
import yaml
from conftest import ROOT
from stackconfig.stack import StackConfigError
from test_workloads import custom_objects, variant, variant_graph

from workloads.render import volcano_values
from workloads.checks.run_plan import plan_runs
from workloads.cli.runs import main
from workloads.checks.run_plan import Planner
from workloads.schema.run import RunFile

SHARED = "p5en-shared"
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
# staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go:26-28
HIERARCHY, HIERARCHY_WEIGHTS = "volcano.sh/hierarchy", "volcano.sh/hierarchy-weights"


# --- the queue admission webhook ------------------------------------------------------------------

def _quantity(value) -> float:
    """A resource quantity as the webhook reads it (plain numbers and decimal suffixes suffice here)."""
    if isinstance(value, (int, float)):
        return float(value)
    for suffix, scale in (("m", 1e-3), ("k", 1e3), ("M", 1e6), ("G", 1e9)):
        if value.endswith(suffix):
            return float(value[:-1]) * scale
    return float(value)


def queue_webhook_errors(queue: dict, queues: list[dict]) -> list[str]:
    """What Volcano's validating webhook for Queues (pkg/webhooks/admission/queues/validate/
    validate_queue.go; chart templates/webhooks.yaml:340-385, failurePolicy Fail) refuses on CREATE,
    with ``queues`` the other queues of the cluster."""
    spec, errors = queue.get("spec", {}), []
    capability, deserved = spec.get("capability") or {}, spec.get("deserved") or {}
    guarantee = (spec.get("guarantee") or {}).get("resource") or {}
    # :230-247: every quantity passes Kubernetes' ValidateResourceQuantityValue: not negative, and a
    # whole number for an extended resource such as nvidia.com/gpu.
    for field, values in (("capability", capability), ("deserved", deserved), ("guarantee", guarantee)):
        for name, value in values.items():
            q = _quantity(value)
            if q < 0 or ("/" in name and q != math.floor(q)):
                errors.append(f"{field}[{name}]={value}: must be a non-negative (whole, for {name}) quantity")
    # :242-269: each guaranteed resource needs a deserved at least as large.
    for name, value in guarantee.items():
        if name not in deserved:
            errors.append(f"deserved[{name}] must be >= guarantee[{name}]={value} (deserved missing)")
        elif _quantity(deserved[name]) < _quantity(value):
            errors.append(f"deserved[{name}]={deserved[name]} must be >= guarantee[{name}]={value}")
    # :271-290: a deserved within the capability of the same resource.
    for name, value in deserved.items():
        if name in capability and _quantity(value) > _quantity(capability[name]):
            errors.append(f"deserved[{name}]={value} must be <= capability[{name}]={capability[name]}")
    # :205-224: a state, if any, is Open or Closed.
    if (state := queue.get("status", {}).get("state")) not in (None, "", "Open", "Closed"):
        errors.append(f"status.state {state!r}: must be Open or Closed")
    # :147-203: the hierarchy annotations, when set, have one positive weight per level.
    notes = queue["metadata"].get("annotations") or {}
    if HIERARCHY in notes or HIERARCHY_WEIGHTS in notes:
        levels, weights = notes.get(HIERARCHY, "").split("/"), notes.get(HIERARCHY_WEIGHTS, "").split("/")
        if len(levels) != len(weights) or any(float(w) <= 0 for w in weights):
            errors.append("hierarchy annotations: one positive weight per level")
    # :95-100, :373-376, :531-571: without a parent (or under root) only the queue's children are
    # checked against it; a parent is a case this model does not cover.
    if spec.get("parent") not in (None, "", "root"):
        errors.append(f"parent {spec['parent']!r}: hierarchical queues are not modelled here")
    children = [q["metadata"]["name"] for q in queues if q.get("spec", {}).get("parent") == queue["metadata"]["name"]]
    if children:
        errors.append(f"children {children}: hierarchical queues are not modelled here")
    return errors


def test_the_webhook_model_refuses_what_the_webhook_refuses():
    md = {"name": "q"}
    assert queue_webhook_errors({"metadata": md, "spec": {"capability": {"nvidia.com/gpu": 64},
                                                          "guarantee": {"resource": {"nvidia.com/gpu": 16}}}}, []) == [
        "deserved[nvidia.com/gpu] must be >= guarantee[nvidia.com/gpu]=16 (deserved missing)"]
    assert queue_webhook_errors({"metadata": md, "spec": {"deserved": {"nvidia.com/gpu": 8},
                                                          "guarantee": {"resource": {"nvidia.com/gpu": 16}}}}, []) == [
        "deserved[nvidia.com/gpu]=8 must be >= guarantee[nvidia.com/gpu]=16"]
    assert queue_webhook_errors({"metadata": md, "spec": {"capability": {"nvidia.com/gpu": 8},
                                                          "deserved": {"nvidia.com/gpu": 16}}}, []) == [
        "deserved[nvidia.com/gpu]=16 must be <= capability[nvidia.com/gpu]=8"]
    assert queue_webhook_errors({"metadata": md, "spec": {"capability": {"nvidia.com/gpu": 1.5}}}, [])
    assert queue_webhook_errors({"metadata": md, "spec": {"parent": "research"}}, [])


@pytest.mark.parametrize("stack", STACKS)
def test_every_queue_a_stack_renders_passes_the_queue_webhook(stack):
    queues = custom_objects(variant_graph(stack, {}), "Queue")
    assert queues
    for q in queues:
        assert queue_webhook_errors(q, queues) == [], q["metadata"]["name"]


def test_team_settings_keep_guarantee_deserved_and_cap_in_order():
    def teams(alpha: dict) -> dict:
        return {"workloads": {"teams": [{"name": "alpha", "gpus": {"train": alpha}}]}}
    with pytest.raises(StackConfigError,
                       match=r"teams\[alpha\].gpus.train.deserved: 200 is outside guarantee..cap; allowed: 16..128"):
        variant(SHARED, teams({"guarantee": 16, "deserved": 200, "cap": 128}))
    with pytest.raises(StackConfigError, match=r"deserved: 8 is outside guarantee..cap; allowed: 16..128"):
        variant(SHARED, teams({"guarantee": 16, "deserved": 8, "cap": 128}))
    with pytest.raises(StackConfigError,
                       match=r"workloads.teams\[alpha\].weight: the capacity plugin the scheduler runs does not read"):
        variant(SHARED, {"workloads": {"teams": [{"name": "alpha", "weight": 2, "gpus": {"train": {"cap": 8}}}]}})
    with pytest.raises(StackConfigError, match=r"workloads.teams\[b\].gpus.train.deserved: deserved shares over pool "
                                               r"train sum to 136 \(a 80 \+ b 56\), more than its 128 GPUs"):
        variant(SHARED, {"workloads": {"teams": [{"name": "a", "gpus": {"train": {"deserved": 80, "cap": 128}}},
                                                 {"name": "b", "gpus": {"train": {"deserved": 56, "cap": 64}}}]}})


# --- the scheduler configuration ------------------------------------------------------------------

def test_the_scheduler_runs_capacity_not_proportion_with_preempt_and_reclaim():
    """capacity and proportion cannot run together (docs/user-guide/how_to_use_capacity_plugin.md);
    the chart's default (installer/helm/chart/volcano/config/volcano-scheduler.conf) has proportion."""
    from workloads.derive.model import derive
    conf = yaml.safe_load(volcano_values(derive(variant(SHARED, {})))["custom"]["scheduler_config_override"])
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert "capacity" in plugins and "proportion" not in plugins and "overcommit" not in plugins
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "preempt", "reclaim", "backfill"]


# --- one scenario per scheduling rule ---------------------------------------------------------------
# p5en-shared: train 16 and rollout 32 p5en nodes (8 GPUs each: 128 and 256 GPUs); a queue dimension per pool.
# alpha: train guarantee 64, deserved 80, capability 128; rollout 128, 168, 256;
# beta:  train guarantee  0, deserved 48, capability  64; rollout  64,  88, 128.

def run(name, team, priority="normal", **nodes) -> RunFile:
    return RunFile(name=name, team=team, priority=priority, nodes=nodes)


def decisions(runs, running=(), override=None):
    return {d.run: d for d in plan_runs(variant(SHARED, override or {}), runs, frozenset(running))}


def test_queue_numbers_are_the_capacity_plugins():
    """realCapability = min(capability, cluster - all guarantees + own guarantee) (capacity.go:1081-1088);
    deserved within it and at least the guarantee (:1136-1141); each per pool dimension."""
    queues = Planner(variant(SHARED, {})).queues
    alpha, beta = queues["alpha"].pools, queues["beta"].pools
    assert (alpha["train"].limit, alpha["train"].deserved) == (min(128, 128 - 64 + 64), 80) == (128, 80)
    assert (alpha["rollout"].limit, alpha["rollout"].deserved) == (min(256, 256 - 192 + 128), 168) == (192, 168)
    assert (beta["train"].limit, beta["train"].deserved) == (min(64, 128 - 64 + 0), 48) == (64, 48)
    assert (beta["rollout"].limit, beta["rollout"].deserved) == (min(128, 256 - 192 + 64), 88) == (128, 88)
    assert queues["alpha"].share({"train": 40, "rollout": 126}) == 0.75  # the largest pool's, 126/168


def test_a_team_at_its_cap_has_its_pods_refused_by_its_resource_quota_and_preempts_nothing():
    """Kubernetes' ResourceQuota admission refuses a pod that takes the namespace's requests over
    ``hard`` (the team's gpu-quota holds each pool's resource at its cap there, ``render.teams.pool_gpu_quota``)."""
    d = decisions([run("b-low", "beta", "low", train=8, rollout=16), run("b-high", "beta", "high", train=1, rollout=1)],
                  running=["b-low"])
    assert d["b-low"].action == "running" and d["b-high"].action == "waits"
    assert d["b-high"].why == ("ResourceQuota gpu-quota refuses its pods: team beta's pods would request 72 GPUs "
                               "of pool train, more than its 64")


def test_the_pods_kuberay_made_of_a_run_the_quota_refuses_hold_quota_against_the_runs_after_it():
    """KubeRay creates a run's worker pods one by one, trainers first, and ends a reconcile at the first pod
    the quota refuses (ray-project/kuberay v1.7.0 raycluster_controller.go:1069, 1203-1211): the 4 trainers and 8
    rollout engines it made of b-2 hold beta's train quota (32 of its 64 GPUs besides b-1's 32) and rollout quota, so
    b-3, small enough for what b-1 leaves, waits too (found by tests/controlplane/test_cp_planner.py against the
    real API server)."""
    d = decisions([run("b-1", "beta", "normal", train=4, rollout=8), run("b-2", "beta", "normal", train=4, rollout=12),
                   run("b-3", "beta", "normal", train=1, rollout=1)], running=["b-1"])
    assert [d[r].action for r in ("b-1", "b-2", "b-3")] == ["running", "waits", "waits"]
    assert d["b-3"].why == ("ResourceQuota gpu-quota refuses its pods: team beta's pods would request 72 GPUs "
                            "of pool train, more than its 64")


def test_a_run_the_quota_refused_starts_only_after_kuberays_retry_once_its_team_frees_quota():
    """b-2 is refused by beta's quota while b-1 holds 64 train GPUs; alpha reclaims b-1 and b-2 fits the quota
    again, but its pods exist only once KubeRay reconciles the RayCluster again, after the backoff its failed
    reconciles built up (``AFTER_RETRY``; found by tests/controlplane/test_cp_planner.py: the run still waited
    three quiet Volcano sessions after its team's victim stopped)."""
    d = decisions([run("b-1", "beta", "low", train=8, rollout=16), run("b-2", "beta", "normal", train=1, rollout=1),
                   run("a-1", "alpha", "normal", train=1, rollout=20)], running=["b-1"])
    assert [d[r].action for r in ("b-1", "b-2", "a-1")] == ["preempted", "starts", "starts"]
    assert d["b-2"].why.startswith("starts on free nodes after KubeRay's retry of the pods the quota refused "
                                   "(its backoff, up to 1000 s after the quota frees; an annotation on its "
                                   "RayCluster retries at once)")
    assert "KubeRay" not in d["a-1"].why


def test_a_run_over_its_queues_limit_stays_pending_and_never_preempts_its_own_team_even_on_free_nodes():
    """enqueue admits a job only while allocated + inqueue + its minimum fit realCapability
    (actions/enqueue/enqueue.go:95, capacity.go:1687-1689); preempt skips Pending jobs
    (actions/preempt/preempt.go:113-115), and so does reclaim (actions/reclaim/reclaim.go:72-74)."""
    d = decisions([run("a-low", "alpha", "low", train=8, rollout=24),
                   run("a-high", "alpha", "high", train=4, rollout=8)],
                  running=["a-low"])  # 192 rollout GPUs held; 8 train and 8 rollout nodes free
    assert d["a-low"].action == "running" and d["a-high"].action == "waits"
    assert d["a-high"].why.startswith("Pending: queue team-alpha holds 192 GPUs of pool rollout, 256 with this run, "
                                      "above its limit 192 there (capability 256")


def test_free_nodes_go_to_the_queue_with_the_lowest_share_of_its_deserved_not_to_the_first_submitted():
    """allocate serves queues by QueueOrderFn (actions/allocate/allocate.go:283-300): queue priority,
    then allocated/deserved (capacity.go:1183-1193, 1800-1827); the queue is ordered again after each job."""
    runs = [run("a0", "alpha", train=2, rollout=2), run("a1", "alpha", train=8, rollout=1),
            run("b1", "beta", train=8, rollout=1)]
    d = decisions(runs, running=["a0"])  # alpha 32/248, beta 0/136: beta first; 14 train nodes free
    assert d["b1"].action == "starts" and d["a1"].action == "waits"
    assert d["a1"].why.startswith("whole gang or nothing: pool train: 8 nodes needed, 6 free")
    first = {"workloads": {"teams": [
        {"name": "alpha", "priority": 1, "gpus": {"train": {"cap": 128}, "rollout": {"cap": 256}}},
        {"name": "beta", "gpus": {"train": {"cap": 64}, "rollout": {"cap": 128}}}]}}
    d = decisions(runs, running=["a0"], override=first)  # a higher queue priority goes first
    assert d["a1"].action == "starts" and d["b1"].action == "waits"


def test_a_higher_priority_run_preempts_a_lower_one_of_its_team_which_checkpoints_first():
    """preempt: a starving Inqueue job evicts Running tasks of lower-priority jobs of its own queue
    (actions/preempt/preempt.go:198-216, plugins/priority/priority.go:111-149)."""
    runs = [run("a-low", "alpha", "low", train=8, rollout=8), run("b", "beta", train=8, rollout=8),
            run("a-high", "alpha", "high", train=8, rollout=8)]
    d = decisions(runs, running=["a-low", "b"])
    assert d["a-low"].action == "preempted" and d["a-high"].action == "starts" and d["b"].action == "running"
    assert d["a-low"].why == "preempt by a-high (high): asked to checkpoint, stops within 30 min"
    assert d["a-high"].why == ("starts after a-low checkpoint and stop; queue team-alpha holds GPUs of pool train 64 "
                               "(deserved 80, limit 128), rollout 64 (deserved 168, limit 192)")
    same = decisions([runs[0], runs[1], run("a-same", "alpha", "low", train=8, rollout=8)], running=["a-low", "b"])
    assert same["a-low"].action == "running" and same["a-same"].action == "waits"  # the same priority never preempts


def test_a_run_started_in_one_session_is_a_victim_in_the_next():
    """Reclaim takes only Running tasks (actions/reclaim/reclaim.go:189; preempt also takes bound ones not yet
    Running, actions/preempt/preempt.go:200, api/helpers.go:70-76):
    beta's new run takes the free nodes first (share max(8/48, 16/88) < 104/168), alpha's cannot reclaim it in
    that session (b0's two rollout engines are not enough), and does in the next, once it runs and holds beta's
    rollout pool above its deserved (112 > 88: three engines may go, capacity.go:536-547)."""
    runs = [run("a0", "alpha", train=1, rollout=13), run("b0", "beta", train=1, rollout=2),
            run("b-new", "beta", train=1, rollout=12), run("a-new", "alpha", train=1, rollout=8)]
    d = decisions(runs, running=["a0", "b0"])  # a-new needs 8 rollout nodes, 5 left free once b-new starts
    assert d["a-new"].action == "starts" and d["b0"].action == "running" and d["b-new"].action == "preempted"
    assert d["b-new"].why == ("starts, then reclaim by a-new (normal): asked to checkpoint, stops within 30 min; "
                              "may wait: kept if a-new's reclaim waits (Volcano's task order)")  # a-new's train pod is on a free node


def test_a_team_within_its_deserved_reclaims_from_a_reclaimable_team_above_its_own():
    """reclaim: the claimant's queue stays within deserved (capacity.go:648-715); a victim's queue is
    above its deserved (:536-547) and keeps its guarantee (:515-518); any priority (the priority plugin
    registers no ReclaimableFn), only reclaimable queues (actions/reclaim/reclaim.go:195-199)."""
    runs = [run("b-big", "beta", "high", train=8, rollout=16), run("a0", "alpha", train=8, rollout=16),
            run("a-new", "alpha", "low", train=1, rollout=1)]  # beta 192 > 136; alpha 192 + 16 <= 248
    d = decisions(runs, running=["b-big", "a0"])
    assert d["a-new"].action == "starts" and d["b-big"].action == "preempted" and d["a0"].action == "running"
    assert d["b-big"].why == "reclaim by a-new (low): asked to checkpoint, stops within 30 min"
    closed = {"workloads": {"teams": [t if t["name"] == "alpha" else {**t, "reclaimable": False}
                                      for t in _shared_teams()]}}
    d = decisions(runs, running=["b-big", "a0"], override=closed)
    assert d["a-new"].action == "waits" and d["b-big"].action == "running"
    assert d["a-new"].why.endswith("reclaim: no reclaimable team above its deserved frees enough")


def test_no_team_reclaims_beyond_its_deserved():
    d = decisions([run("b-big", "beta", train=8, rollout=16), run("a0", "alpha", train=8, rollout=16),
                   run("a-new", "alpha", "low", train=8, rollout=8)], running=["b-big", "a0"])
    assert d["a-new"].action == "waits" and d["b-big"].action == "running"
    assert d["a-new"].why.endswith("reclaim: team alpha would hold 128 GPUs of pool train, above its deserved 80 "
                                   "there")  # per pool: its rollout (128 + 64 <= 168) does not make up for it


def test_reclaim_never_takes_a_team_below_its_guarantee_on_any_pool():
    """checkGuaranteeConstraint (capacity.go:1842-1851, read at :515-518): allocated less the victim's pod keeps
    every dimension of the guarantee (``guarantee.LessEqual``), so a team below its guarantee on one pool loses
    no pod on any pool."""
    teams = [{"name": "alpha", "gpus": {"train": {"guarantee": 64, "deserved": 72, "cap": 128},
                                        "rollout": {"deserved": 128, "cap": 256}}},
             {"name": "beta", "gpus": {"train": {"guarantee": 56, "cap": 64},
                                       "rollout": {"guarantee": 120, "cap": 128}}}]
    runs = [run("b-big", "beta", train=8, rollout=16), run("a0", "alpha", train=8, rollout=8),
            run("a-new", "alpha", "low", train=1, rollout=1)]  # beta train 64 > its 56; 64 - 8 >= 56
    d = decisions(runs, running=["b-big", "a0"], override={"workloads": {"teams": teams}})
    assert d["a-new"].action == "starts" and d["b-big"].action == "preempted"
    runs[0] = run("b-big", "beta", train=8, rollout=14)  # beta's rollout 112, below its guarantee there
    d = decisions(runs, running=["b-big", "a0"], override={"workloads": {"teams": teams}})
    assert d["a-new"].action == "waits" and d["b-big"].action == "running"


def test_per_pool_caps_bound_the_team_not_only_one_run():
    """The Queue and the ResourceQuota count each pool's own resource (``rl.platform/gpu-<pool>``): beta's 64
    training GPUs bound its runs together, not only each (``check_run``)."""
    d = decisions([run("b1", "beta", train=8, rollout=1), run("b2", "beta", train=1, rollout=1)])
    assert d["b1"].action == "starts" and d["b2"].action == "waits"
    assert d["b2"].why == ("ResourceQuota gpu-quota refuses its pods: team beta's pods would request 72 GPUs "
                           "of pool train, more than its 64")


def _shared_teams() -> list[dict]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{SHARED}.yaml").read_text())[
        "config"]["moe-rl-platform:platform"]["workloads"]["teams"]


def _plan(tmp_path, extra: str, running: str) -> dict[str, str]:
    """``python -m workloads.cli.runs plan p5en-shared runs/grpo-qwen3-30b.yaml runs/beta-lr-sweep.yaml <extra
    run>``: run name -> its line."""
    probe = tmp_path / "probe.yaml"
    probe.write_text(extra + "model: Qwen/Qwen3-30B-A3B\nparallel: {tensor: 4, expert: 8}\n")
    out: list[str] = []
    files = [str(ROOT / "runs" / f"{name}.yaml") for name in ("grpo-qwen3-30b", "beta-lr-sweep")] + [str(probe)]
    assert main(["plan", SHARED, *files, "--running", running], out=out.append) == 0
    return {line.split()[0]: line for line in out if line and not line.startswith(" ")} | {"": "\n".join(out)}


def test_the_plan_command_follows_the_rules_on_two_teams_overlapping_demand(tmp_path):
    """The sample runs (alpha's grpo-qwen3-30b, 8 train nodes, normal; beta's beta-lr-sweep, 4, low)
    and a third run already running. With alpha's probe holding 8 of the 16 training nodes, only one
    of the two fits: beta's queue, at share 0, is served before alpha's at max(64/80, 64/168),
    whatever the runs' priorities, and alpha (64 + 64 > 80 train GPUs) may not reclaim."""
    lines = _plan(tmp_path, "name: alpha-probe\nteam: alpha\nnodes: {train: 8, rollout: 8}\n", "alpha-probe")
    assert " starts " in lines["beta-lr-sweep"] and " waits " in lines["grpo-qwen3-30b"]
    assert lines["grpo-qwen3-30b"].endswith("pool train: 8 nodes needed, 4 free; preempt: no lower-priority run of "
                                            "team alpha frees enough; reclaim: team alpha would hold 128 GPUs of pool "
                                            "train, above its deserved 80 there")
    # With beta's probe instead (beta's train pool 96 GPUs, 48 above its deserved; 12 training nodes), alpha's
    # run is within its deserved on each pool and reclaims beta's lowest-priority run.
    lines = _plan(tmp_path, "name: beta-probe\nteam: beta\nnodes: {train: 8, rollout: 4}\n",
                  "beta-lr-sweep,beta-probe")
    assert "preempted" in lines["beta-lr-sweep"] and "reclaim by grpo-qwen3-30b (normal)" in lines["beta-lr-sweep"]
    assert " starts " in lines["grpo-qwen3-30b"] and "after beta-lr-sweep checkpoint" in lines["grpo-qwen3-30b"]
    assert " running " in lines["beta-probe"] and "pool train: 16/16 nodes claimed by running" in lines[""]

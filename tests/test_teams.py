"""Teams: quota validation against the pools, and every rendered object against its schema."""

from __future__ import annotations

import kubernetes_validate
import pytest
from conftest import load
from pydantic import ValidationError

from workloads.checks.crds import crd_schema, validate
from components.faults import fault_lease
from workloads.render.faults import fault_leases, member_rules
from workloads.render.teams import team_namespace, team_objects, team_queue, team_resource_quota
from workloads.derive.layout import Group
from workloads.checks.teams import validate_teams
from workloads.schema.teams import GpuQuota, TeamSettings

K8S = "1.35.0"


@pytest.fixture(scope="module")
def pools():
    return load("p5en-prod").pools  # train 16 x p5en (128 GPUs), rollout 32 x p5en (256 GPUs)


def head(pools) -> Group:
    """A run's head: 8 cores, 32 GB."""
    return Group(name="head", pool=pools[0], replicas=1, cpu=8, memory_g=32)


def team(name: str, **gpus: tuple[int, int]) -> TeamSettings:
    return TeamSettings(name=name, gpus={p: GpuQuota(guarantee=g, cap=c) for p, (g, c) in gpus.items()})


@pytest.fixture(scope="module")
def teams():
    return [team("alpha", train=(64, 128), rollout=(32, 64)),
            TeamSettings.model_validate({"name": "beta", "priority": 5, "reclaimable": False,
                                         "gpus": {"rollout": {"guarantee": 128, "cap": 256}}})]


def test_two_teams_validate_and_render_valid_objects(teams, pools):
    validate_teams(teams, pools)
    queue_schema = crd_schema("scheduling.volcano.sh/v1beta1", "Queue")
    for t in teams:
        objs = team_objects(t, pools, "rl", 8000, head(pools))
        assert objs[0] == team_namespace(t)
        assert [o["kind"] for o in objs] == (["Namespace", "Queue", "ResourceQuota", "LimitRange", "ServiceAccount"]
                                               + ["NetworkPolicy"] * 5
                                               + ["Role", "RoleBinding", "ClusterRoleBinding"])
        for o in objs:
            if o["kind"] == "Queue":
                assert validate(o, queue_schema) == []
            else:
                kubernetes_validate.validate(o, K8S, strict=True)
                if o["kind"] not in ("Namespace", "ClusterRoleBinding"):
                    assert o["metadata"]["namespace"] == f"team-{t.name}"
        labels = objs[0]["metadata"]["labels"]
        assert labels == {"app.kubernetes.io/part-of": "moe-rl-platform", "rl.platform/team": t.name}
        assert {p["metadata"]["name"] for p in objs[5:10]} == {"default-deny", "allow-dns", "allow-team-tcp",
                                                                  "ray-external", "ray-head-operator"}


def test_quota_numbers(teams, pools):
    alpha, beta = teams
    q = team_queue(alpha, pools)
    assert q["metadata"]["name"] == "team-alpha" and "namespace" not in q["metadata"]
    # one dimension per pool (docs/design/scheduling.md, "Per-pool guarantees"), no nvidia.com/gpu sum
    train, rollout = "rl.platform/gpu-train", "rl.platform/gpu-rollout"
    assert q["spec"] == {"reclaimable": True, "priority": 0, "capability": {train: 128, rollout: 64},
                         "deserved": {train: 64, rollout: 32}, "guarantee": {"resource": {train: 64, rollout: 32}}}
    assert team_queue(beta, pools)["spec"]["priority"] == 5
    assert team_queue(beta, pools)["spec"]["reclaimable"] is False
    rq = team_resource_quota(alpha, pools, head(pools))
    assert rq["metadata"]["name"] == "gpu-quota"
    # p5en: 8 GPUs and 16 EFA devices per node; 128 + 64 GPUs -> 24 nodes' worth -> 384 EFA
    assert rq["spec"]["hard"].items() >= {"requests.nvidia.com/gpu": "192", "requests.vpc.amazonaws.com/efa": "384"}.items()
    rollout64 = team_resource_quota(team("gamma", rollout=(0, 64)), pools, head(pools))
    assert rollout64["spec"]["hard"].items() >= {"requests.nvidia.com/gpu": "64", "requests.vpc.amazonaws.com/efa": "128"}.items()
    no_guarantee = team_queue(team("gamma", rollout=(0, 64)), pools)["spec"]
    assert "guarantee" not in no_guarantee


@pytest.mark.parametrize("teams_, message", [
    ([team("a", rollout=(200, 256)), team("b", rollout=(100, 100))],
     ("workloads.teams[b].gpus.rollout.guarantee: guarantees over pool rollout sum to 300 (a 200 + b 100), "
      "more than its 256 GPUs at desired size; allowed: a sum <= 256")),
    ([team("a", nope=(0, 8))], "workloads.teams[a].gpus.nope: no such pool; allowed: train, rollout, reward"),
    ([team("a", cpu=(0, 8))], ("workloads.teams[a].gpus.cpu: pool cpu (c7i.16xlarge) has no GPUs; "
                               "allowed: train, rollout, reward")),
    ([team("a", train=(0, 136))], ("workloads.teams[a].gpus.train.cap: 136 exceeds the pool's 128 GPUs at "
                                   "desired size; allowed: 1..128")),
    ([team("a", train=(0, 8)), team("a", rollout=(0, 8))],
     "workloads.teams[a].name: duplicate team name; allowed: one entry per team"),
])
def test_refusals(teams_, message, pools):
    with pytest.raises(ValueError) as e:
        validate_teams(teams_, pools)
    assert str(e.value) == message


def test_model_refusals():
    with pytest.raises(ValidationError, match="guarantee: 9 exceeds cap 8"):
        GpuQuota(guarantee=9, cap=8)
    with pytest.raises(ValidationError):
        GpuQuota(guarantee=0, cap=0)
    with pytest.raises(ValidationError):
        TeamSettings(name="x" * 41)
    with pytest.raises(ValidationError):
        TeamSettings(name="Bad_Name")
    with pytest.raises(ValidationError):
        TeamSettings(name="ok", unknown=1)
    assert TeamSettings(name="x" * 40).name == "x" * 40


def test_teams_declared_in_the_stack_are_registered_and_refused_when_too_large():
    """workloads.teams in a stack file: each team's namespace, queue, quota and policies are registered
    (the queue once Volcano is installed); a guarantee beyond a pool is refused before anything exists."""
    import pytest
    from test_workloads import variant, variant_graph

    from stackconfig.stack import StackConfigError
    teams = {"workloads": {"teams": [{"name": "alpha", "gpus": {"train": {"guarantee": 64, "cap": 128}}},
                                     {"name": "beta", "gpus": {"rollout": {"guarantee": 32, "cap": 256}}}],
                           "images": {"requireDigest": False}}}
    graph = variant_graph("p5en-prod", teams)
    kinds = {(r.inputs.get("kind"), (r.inputs.get("metadata") or {}).get("namespace") or
              (r.inputs.get("metadata") or {}).get("name")) for r in graph.resources if r.type.startswith("kubernetes:")}
    for team in ("alpha", "beta"):
        assert ("Namespace", f"team-{team}") in kinds and ("ResourceQuota", f"team-{team}") in kinds
        assert ("Queue", f"team-{team}") in kinds and ("NetworkPolicy", f"team-{team}") in kinds
    with pytest.raises(StackConfigError, match=r"workloads.teams\[alpha\]"):
        variant("p5en-prod", {"workloads": {"teams": [{"name": "alpha", "gpus": {"train": {"guarantee": 200, "cap": 200}}}],
                                            "images": {"requireDigest": False}}})


def test_a_teams_role_reaches_only_its_own_checkpoint_prefix():
    """Each team's service account gets a Pod Identity role whose S3 access is its prefix only
    (objects under it, listing limited to it): one team cannot read or write another's checkpoints.
    The stack's policy pack passes on it (pod roles bound to named service accounts, S3 scoped)."""
    import json

    from test_workloads import variant_graph

    from policy.adapter import evaluate
    from policy.rules import MANDATORY
    teams = {"workloads": {"teams": [{"name": "alpha", "gpus": {"train": {"guarantee": 64, "cap": 128}}},
                                     {"name": "beta", "gpus": {"rollout": {"cap": 64}}}],
                           "images": {"requireDigest": False}}}
    graph = variant_graph("p5en-prod", teams)
    assocs = {(a.inputs["namespace"], a.inputs["serviceAccount"])
              for a in graph.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")}
    assert {("team-alpha", "checkpoint-writer"), ("team-beta", "checkpoint-writer")} <= assocs
    for team, other in (("alpha", "beta"), ("beta", "alpha")):
        (policy,) = [json.loads(r.inputs["policy"]) for r in graph.of_type("aws:iam/rolePolicy:RolePolicy")
                     if r.name.endswith(f"team-{team}-writer")]
        resources = [s["Resource"] for s in policy["Statement"]]
        assert any(str(r).endswith(f"/checkpoints/teams/{team}/*") for r in resources), resources
        assert not any(other in str(r) for r in resources) and not any(str(r).endswith("/*") and "teams" not in str(r)
                                                                         for r in resources)
        listing = next(s for s in policy["Statement"] if "s3:ListBucket" in s["Action"])
        assert listing["Condition"]["StringLike"] == {"s3:prefix": [f"checkpoints/teams/{team}/*"]}
    sa = {r.inputs["metadata"]["namespace"] for r in graph.resources if r.inputs.get("kind") == "ServiceAccount"}
    assert {"team-alpha", "team-beta"} <= sa
    import yaml
    from conftest import ROOT
    raw = yaml.safe_load((ROOT / "stacks" / "Pulumi.p5en-prod.yaml").read_text())["config"]["moe-rl-platform:platform"]
    assert evaluate(graph, MANDATORY, platform_config=raw) == []


# --- issue 26: huge pages, ephemeral storage, counts, S3 keys ----------------------------------------

def test_huge_pages_ephemeral_storage_and_object_counts_have_a_quota(teams, pools):
    """Huge pages: each GPU node's pre-allocated pages (``resources.allocatable``) times the nodes the
    caps span; EFA devices likewise, with the GPUs' share; RayJobs, Ray clusters, pods and Services by
    count (``maxRuns``); ephemeral storage per container from the LimitRange, in total by the quota."""
    from workloads.derive.resources import allocatable
    alpha = teams[0]
    hard = team_resource_quota(alpha, pools, head(pools))["spec"]["hard"]
    by_name = {p.name: p for p in pools}
    nodes = {n: -(-q.cap // by_name[n].instance.gpus) for n, q in alpha.gpus.items()}
    assert hard["requests.hugepages-2Mi"] == str(sum(allocatable(by_name[n]).hugepages * k for n, k in nodes.items()))
    runs, gpu_nodes = alpha.max_runs, sum(nodes.values())
    assert hard["count/rayjobs.ray.io"] == hard["count/rayclusters.ray.io"] == str(runs)
    assert hard["pods"] == str(2 * (runs + gpu_nodes))
    assert hard["services"] == str(2 * runs)
    leases = [fault_lease("rollout"), fault_lease("trainer")]  # the pod-fault groups' Leases
    rendered = [o["metadata"]["name"] for o in fault_leases(alpha)]  # the quota admits exactly these, no other
    assert hard["count/leases.coordination.k8s.io"] == str(len(leases)) and sorted(rendered) == sorted(leases)
    assert next(r for r in member_rules() if r["resources"] == ["leases"])["resourceNames"] == rendered
    per = alpha.ephemeral_storage_gib * 1024 ** 3
    assert hard["limits.ephemeral-storage"] == hard["requests.ephemeral-storage"] == str(per * int(hard["pods"]))


def test_every_container_of_a_team_gets_an_ephemeral_storage_limit(teams, pools):
    from workloads.render.teams import team_limit_range
    lr = team_limit_range(teams[0])
    kubernetes_validate.validate(lr, K8S, strict=True)
    (limit,) = lr["spec"]["limits"]
    size = f"{teams[0].ephemeral_storage_gib}Gi"
    assert limit["type"] == "Container"
    assert limit["default"] == limit["defaultRequest"] == limit["max"] == {"ephemeral-storage": size}
    assert any(o["kind"] == "LimitRange" for o in team_objects(teams[0], pools, "rl", 8000, head(pools)))


def test_a_team_writer_cannot_put_keys_that_climb_out_of_its_prefix():
    """S3 keeps ``..`` in a key as two characters, so the prefix Allow matches
    ``checkpoints/teams/alpha/../beta/x``; a file system import or ``aws s3 sync`` to disk resolves it into
    another team's directory."""
    import json

    from analysis.rules.iam_eval import ALLOW, DENY, decide
    from components.checkpoints import writer_policy
    bucket, key = "arn:aws:s3:::rl-ckpt", "arn:aws:kms:us-east-1:123456789012:key/k"
    doc = json.loads(writer_policy(bucket, key, "checkpoints/teams/alpha/"))
    assert decide([doc], "s3:PutObject", f"{bucket}/checkpoints/teams/alpha/step-10/model.pt") == ALLOW
    for climb in ("../beta/x", "a/../../beta/x", "a/..", ".."):
        assert decide([doc], "s3:PutObject", f"{bucket}/checkpoints/teams/alpha/{climb}") == DENY, climb
    assert decide([doc], "s3:PutObject", f"{bucket}/checkpoints/teams/alpha/model..bin") == ALLOW

"""AWS behaviour over time (issue 23 item 14): provider timeouts that fit the real operations, the
backup plan ordered after its Vault Lock, the S3 endpoint that passes ECR's layers only, and
the add-on pod roles trusted by cluster ARN, not only by name."""

from __future__ import annotations

import json

import pytest
from conftest import graph_of, load

from analysis.rules.iam_eval import ALLOW, decide
from components import node_pool
from components.network import s3_endpoint_policy

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"


def minutes(duration: str) -> int:
    assert duration.endswith("m"), duration
    return int(duration[:-1])


@pytest.mark.parametrize("stack", ["p5en-prod", "p6-b300", "dev"])
def test_node_group_updates_have_time_for_one_node_at_a_time(stack):
    """EKS replaces max_unavailable (1) node at a time, each drained (up to 15 min) then ready; the
    provider's default (60 min, terraform-provider-aws eks/node_group.go) gives up mid-update."""
    cfg, graph = load(stack), graph_of(stack)
    per_node = node_pool.DRAIN_MINUTES + node_pool.NODE_READY_MINUTES
    for pool in cfg.pools:
        ng = graph.named(NODE_GROUP, f"{cfg.cluster_name}-{pool.name}")
        timeouts = ng.custom_timeouts
        assert minutes(timeouts["update"]) >= max(pool.nodes.max * per_node, node_pool.NODE_GROUP_DEFAULT_MINUTES)
        assert minutes(timeouts["create"]) > node_pool.NODE_GROUP_DEFAULT_MINUTES
    biggest = max(cfg.pools, key=lambda p: p.nodes.max)
    if biggest.nodes.max * per_node > node_pool.NODE_GROUP_DEFAULT_MINUTES:
        ng = graph.named(NODE_GROUP, f"{cfg.cluster_name}-{biggest.name}")
        assert minutes(ng.custom_timeouts["update"]) > node_pool.NODE_GROUP_DEFAULT_MINUTES


def test_the_data_repository_association_outlasts_the_providers_ten_minutes():
    (dra,) = graph_of("p5en-prod").of_type(DRA)
    assert all(minutes(dra.custom_timeouts[k]) > 10 for k in ("create", "update", "delete"))


@pytest.mark.parametrize("mode", ["governance", "compliance"])
def test_the_backup_plan_waits_for_its_vault_lock(mode):
    """A later noncurrentVersionDays change moves the lock's bounds and the rules' lifetimes: under a
    compliance lock past its grace time AWS refuses the lock's change, and the plan, ordered after
    it, is not updated to lifetimes outside the lock."""
    from test_checkpoint_backup import _bucket_graph
    graph = _bucket_graph(backupVaultLock=mode)
    lock = graph.named("aws:backup/vaultLockConfiguration:VaultLockConfiguration", "ckpt-backup")
    plan = graph.named("aws:backup/plan:Plan", "ckpt-backup")
    assert lock.urn in plan.dependencies


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-2"])
def test_ecr_layers_pass_the_s3_endpoint_read_only_and_no_public_registrys_bucket(region):
    """Every image comes through ECR (stackconfig.images): registry.k8s.io's and quay.io's buckets,
    which a pull straight from them would be redirected to, are not reachable."""
    policy = json.loads(s3_endpoint_policy(region, ["arn:aws:s3:::platform"]))
    assert decide([policy], "s3:GetObject", f"arn:aws:s3:::prod-{region}-starport-layer-bucket/x") == ALLOW
    assert decide([policy], "s3:PutObject", f"arn:aws:s3:::prod-{region}-starport-layer-bucket/x") is None
    for bucket in (f"prod-registry-k8s-io-{region}", "quayio-production-s3", "someone-elses-bucket"):
        assert decide([policy], "s3:GetObject", f"arn:aws:s3:::{bucket}/x") is None


@pytest.mark.parametrize("role, namespace, account", [("vpc-cni", "kube-system", "aws-node"),
                                                      ("cloudwatch", "amazon-cloudwatch", "cloudwatch-agent")])
def test_add_on_pod_roles_trust_the_cluster_by_arn(role, namespace, account):
    graph = graph_of("p5en-prod")
    cluster = graph.named("aws:eks/cluster:Cluster", "rl-p5en-prod").outputs
    trust = json.loads(graph.named("aws:iam/role:Role", f"rl-p5en-prod-{role}").inputs["assumeRolePolicy"])
    pod = {"Service": "pods.eks.amazonaws.com"}

    def session(arn):
        return {"aws:RequestTag/eks-cluster-arn": arn, "aws:RequestTag/eks-cluster-name": cluster["name"],
                "aws:RequestTag/kubernetes-namespace": namespace, "aws:RequestTag/kubernetes-service-account": account}

    assert decide([trust], "sts:AssumeRole", "*", session(cluster["arn"]), pod) == ALLOW
    elsewhere = cluster["arn"].replace("123456789012", "999999999999")  # same name, another account
    assert decide([trust], "sts:AssumeRole", "*", session(elsewhere), pod) is None


def test_the_backup_opt_in_shows_no_diff_on_the_next_up():
    """DescribeRegionSettings answers every resource type of the region (pulumi-aws 7.51.1's
    RegionSettings example names all of them), the program sets S3 alone: without ignoring the
    maps, every ``pulumi up`` would plan to drop the other types from them."""
    opt_in = graph_of("p5en-prod").named("aws:backup/regionSettings:RegionSettings", "rl-p5en-prod-backup-opt-in")
    assert opt_in.inputs["resourceTypeOptInPreference"] == {"S3": True}
    assert set(opt_in.ignore_changes) == {"resourceTypeOptInPreference", "resourceTypeManagementPreference"}

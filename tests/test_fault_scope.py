"""Fault injection scoped to the team (issue 35 item 7): a member of beta can start, watch and stop only
beta's experiments, and change no template's tags (alpha's, or the operators' node-terminate one) to
make it beta's; the FIS pod in a team namespace reaches the API server, as every pod fault needs. The
IAM documents are played through the repository's evaluator (``analysis.rules.iam_eval``), the
NetworkPolicies through the test evaluator of ``test_workloads_security``."""

from __future__ import annotations

import kubernetes_validate
import pytest
from test_workloads import k8s_version, variant
from test_workloads_security import Pod, allowed

from analysis.rules.iam_eval import ALLOW, DENY, decide
from components.faults import CLUSTER_TAG, FAULT_KIND_TAG, TEAM_TAG, team_policy_statements
from workloads import render as M
from workloads.derive.model import derive
from workloads.render.faults import fault_injector_policy
from workloads.render.teams import team_network_policies

TEMPLATE, EXPERIMENT = "arn:aws:fis:us-east-1:1:experiment-template/EXT1", "arn:aws:fis:us-east-1:1:experiment/EXP1"
BETA = [{"Version": "2012-10-17", "Statement": team_policy_statements("c", "beta")}]


def tags(prefix: str, **kv: str) -> dict:
    return {f"aws:{prefix}/{k}": v for k, v in kv.items()}


ALPHA_TEMPLATE = tags("ResourceTag", **{CLUSTER_TAG: "c", TEAM_TAG: "alpha", FAULT_KIND_TAG: "delete-trainer-pod"})
BETA_TEMPLATE = tags("ResourceTag", **{CLUSTER_TAG: "c", TEAM_TAG: "beta", FAULT_KIND_TAG: "delete-trainer-pod"})
NODE_TEMPLATE = tags("ResourceTag", **{CLUSTER_TAG: "c", FAULT_KIND_TAG: "terminate-gpu-node"})


@pytest.mark.parametrize("resource, context", [
    (TEMPLATE, {**ALPHA_TEMPLATE, **tags("RequestTag", **{TEAM_TAG: "beta"}), "aws:TagKeys": [TEAM_TAG]}),
    (TEMPLATE, {**NODE_TEMPLATE, **tags("RequestTag", **{TEAM_TAG: "beta"}), "aws:TagKeys": [TEAM_TAG]}),
    (TEMPLATE, {**BETA_TEMPLATE, **tags("RequestTag", **{FAULT_KIND_TAG: "terminate-gpu-node"}),
                "aws:TagKeys": [FAULT_KIND_TAG]}),  # its own template, made a node fault
])
def test_beta_changes_no_templates_tags(resource, context):
    assert decide(BETA, "fis:TagResource", resource, context) == DENY
    assert decide(BETA, "fis:UntagResource", resource, {**context, "aws:TagKeys": [TEAM_TAG]}) == DENY


def test_beta_starts_only_its_own_templates_and_only_under_its_tag():
    own = {**BETA_TEMPLATE, **tags("RequestTag", **{TEAM_TAG: "beta"})}
    assert decide(BETA, "fis:StartExperiment", TEMPLATE, own) == ALLOW
    assert decide(BETA, "fis:StartExperiment", TEMPLATE, {**ALPHA_TEMPLATE, **tags("RequestTag", **{TEAM_TAG: "beta"})}) is None
    assert decide(BETA, "fis:StartExperiment", TEMPLATE, NODE_TEMPLATE) is None
    assert decide(BETA, "fis:StartExperiment", EXPERIMENT, tags("RequestTag", **{TEAM_TAG: "beta"})) == ALLOW
    assert decide(BETA, "fis:StartExperiment", EXPERIMENT, tags("RequestTag", **{TEAM_TAG: "alpha"})) is None
    assert decide(BETA, "fis:StartExperiment", EXPERIMENT, {}) is None  # an experiment nobody could stop


def test_the_tags_the_bench_sets_at_start_are_allowed_and_no_others():
    start = {**tags("RequestTag", **{TEAM_TAG: "beta", "rl.platform/run": "r1"}), "aws:TagKeys": [TEAM_TAG, "rl.platform/run"]}
    assert decide(BETA, "fis:TagResource", EXPERIMENT, start) == ALLOW
    assert decide(BETA, "fis:TagResource", EXPERIMENT, {**start, "aws:TagKeys": [TEAM_TAG, "owner"]}) is None
    # alpha's experiment re-tagged as beta's, to stop it afterwards
    steal = {**start, **tags("ResourceTag", **{TEAM_TAG: "alpha"})}
    assert decide(BETA, "fis:TagResource", EXPERIMENT, steal) is None


@pytest.mark.parametrize("action", ["fis:StopExperiment", "fis:GetExperiment", "fis:ListExperimentResolvedTargets"])
def test_beta_watches_and_stops_only_its_own_experiments(action):
    assert decide(BETA, action, EXPERIMENT, tags("ResourceTag", **{TEAM_TAG: "beta"})) == ALLOW
    assert decide(BETA, action, EXPERIMENT, tags("ResourceTag", **{TEAM_TAG: "alpha"})) is None
    assert decide(BETA, action, EXPERIMENT, {}) is None  # an operator's node fault, untagged


def test_the_evaluator_reads_set_operators():
    doc = {"Statement": [{"Effect": "Allow", "Action": "x:Y", "Resource": "*",
                          "Condition": {"ForAllValues:StringLike": {"aws:TagKeys": ["a/*"]}}},
                         {"Effect": "Allow", "Action": "x:Z", "Resource": "*",
                          "Condition": {"ForAnyValue:StringEquals": {"aws:TagKeys": ["k"]}}}]}
    assert decide([doc], "x:Y", "r", {"aws:TagKeys": ["a/1", "a/2"]}) == ALLOW
    assert decide([doc], "x:Y", "r", {"aws:TagKeys": ["a/1", "b"]}) is None
    assert decide([doc], "x:Y", "r", {}) == ALLOW  # ForAllValues over no values holds (IAM user guide)
    assert decide([doc], "x:Z", "r", {"aws:TagKeys": ["j", "k"]}) == ALLOW
    assert decide([doc], "x:Z", "r", {}) is None


def test_the_fis_pod_reaches_the_api_server_and_ray_pods_gain_nothing():
    cfg = variant("p5en-shared", {"workloads": {"faultInjection": True}})
    m = derive(cfg)
    beta = next(t for t in m.settings.teams if t.name == "beta")
    kubernetes_validate.validate(fault_injector_policy(beta), k8s_version(cfg), strict=True)
    policies = team_network_policies(beta, m.namespace, 8002)
    fis = Pod("aws-fis-pod-x", "team-beta", {"app": "fis"})  # labels FIS chooses; not KubeRay's
    trainer = Pod("trainer", "team-beta", {**M.RAY_PODS, "ray.io/node-type": "worker"})
    api_server = "10.0.12.7"
    assert not allowed(policies, fis, api_server, 443)  # the team's policies alone: every pod fault fails
    with_fis = [*policies, fault_injector_policy(beta)]
    assert allowed(with_fis, fis, api_server, 443)
    assert not allowed(with_fis, fis, api_server, 80) and not allowed(with_fis, fis, "52.1.1.1", 22)
    assert not allowed(with_fis, Pod("x", "team-alpha", {}), fis, 443)  # no ingress from elsewhere
    gained = [(trainer, dst, port) for dst, port in ((api_server, 443), ("52.1.1.1", 80), ("10.0.0.9", 22))
              if allowed(with_fis, trainer, dst, port) != allowed(policies, trainer, dst, port)]
    assert gained == []

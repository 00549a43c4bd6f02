"""The IAM lint (parliament) as the stacks meet it: every kind of document a stack emits is found and
linted as its kind, every justification still matches a finding, the pinned parliament is the one
justified against, and the offline plan reports a finding. Breaks of real stacks (a condition key
its action never carries, a misspelt action, a trust policy with a Resource, a key-policy statement
without a Principal) are in tests/test_policy_security.py; every stack passes in tests/test_policy.py."""

from __future__ import annotations

import copy
import json

import parliament
import yaml
from conftest import ROOT, graph_of

from analysis.rules import iam_lint as L
from analysis.rules.plan import check_iam_documents

STACK = "p5en-shared"
"""The stack with every kind of document, team writers included."""
ROLE_ARN = "arn:aws:iam::123456789012:role/r"
NODE_TRUST = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}


def _stack_findings(stack: str = STACK) -> list[L.Finding]:
    return [f for r in graph_of(stack).resources for _, f in L.findings(r.type, r.name, r.inputs)]


def test_the_pinned_parliament_is_the_one_justified_against():
    pinned = yaml.safe_load(L.JUSTIFICATIONS.read_text())["parliament"]
    assert parliament.__version__ == pinned
    assert f"parliament=={pinned}" in (ROOT / "requirements.txt").read_text().split()


def test_every_kind_is_found_and_linted_clean():
    graph = graph_of(STACK)
    kinds = {kind for r in graph.resources for _, kind, _ in L.documents(r.type, r.name, r.inputs)}
    assert kinds == {L.IDENTITY, L.TRUST, L.BUCKET, L.KEY, L.ENDPOINT}
    assert [p for r in graph.resources for p in L.problems(r.type, r.name, r.inputs)] == []


def test_every_justification_still_matches_a_finding():
    found = _stack_findings()
    stale = [j for j in L.justifications() if not any(j.covers(f) for f in found)]
    assert stale == [], "delete these from iam-lint-justifications.yaml"
    assert all(j.reason for j in L.justifications())


def test_a_trust_policy_is_linted_with_its_role_as_resource():
    """parliament alone refuses every trust policy (no Resource); with the role it lints the
    actions and condition keys, and finds a misspelt one."""
    raw = parliament.analyze_policy_string(json.dumps(NODE_TRUST), ignore_private_auditors=True)
    assert {f.issue for f in raw.findings} == {"MALFORMED"}
    assert L.lint(L.TRUST, json.dumps(NODE_TRUST), ROLE_ARN) == ()
    typo = copy.deepcopy(NODE_TRUST)
    typo["Statement"][0]["Action"] = "sts:AssumeRoles"
    assert [f.issue for f in L.lint(L.TRUST, json.dumps(typo), ROLE_ARN)] == ["UNKNOWN_ACTION"]


def test_each_kind_keeps_its_own_rules():
    objects = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}
    with_principal = {**objects, "Principal": {"AWS": "arn:aws:iam::123456789012:root"}}

    def issues(kind, *sts):
        return [f.issue for f in L.lint(kind, json.dumps({"Version": "2012-10-17", "Statement": list(sts)}), ROLE_ARN)]
    assert issues(L.IDENTITY, objects) == [] and issues(L.BUCKET, with_principal) == []
    assert issues(L.IDENTITY, with_principal) == ["PRINCIPAL_IN_IDENTITY_POLICY"]
    assert issues(L.BUCKET, objects) == ["NO_PRINCIPAL"]
    assert "RESOURCE_IN_TRUST_POLICY" in issues(L.TRUST, {**NODE_TRUST["Statement"][0], "Resource": "*"})


def test_not_applicable_is_kept_to_its_kind():
    """Resource "*" is the key itself in a key policy, not in a bucket policy."""
    st = {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "s3:GetObject",
          "Resource": "*"}
    text = json.dumps({"Version": "2012-10-17", "Statement": [st]})
    assert L.problems(L.BUCKET_POLICY, "b", {"policy": text})
    assert L.problems(L.KEY_POLICY, "k", {"policy": text.replace("s3:GetObject", "kms:Decrypt")}) == []


def test_the_offline_plan_reports_a_finding():
    graph = copy.deepcopy(graph_of(STACK))
    (pol,) = [r for r in graph.of_type(L.ROLE_POLICY) if r.name == f"rl-{STACK}-team-alpha-writer"]
    document = json.loads(pol.inputs["policy"])
    document["Statement"][0]["Action"].append("s3:ListBucketMultipartUploads")
    pol.inputs["policy"] = json.dumps(document)
    (violation,) = check_iam_documents(graph)
    assert violation.rule == L.POLICY_NAME and pol.name in violation.subject
    assert "Unknown condition s3:prefix for action s3:ListBucketMultipartUploads" in violation.message

"""Tear down (issue 32 item 4), against the rendered objects: the documented steps leave nothing that
bills except what the page names as kept, each with the command that deletes it."""

from __future__ import annotations

import json
import re

from conftest import ROOT, graph_of
from test_workloads import variant_graph

PAGE = ROOT / "docs" / "getting-started" / "first-deploy.md"
CLUSTER = "aws:eks/cluster:Cluster"


def teardown_section() -> str:
    text = PAGE.read_text()
    return text[text.index("## Tear down"):]


def plain(inputs: dict) -> str:
    """Inputs as JSON, an asset by what it points at (assets compare by identity)."""
    return json.dumps(inputs, sort_keys=True, default=lambda o: getattr(o, "uri", None) or getattr(o, "path", repr(o)))


def test_the_cluster_protects_itself_until_the_documented_update_turns_it_off():
    """EKS refuses DeleteCluster while deletion protection is on (the default here): the page's first
    step turns it off with a `pulumi up` that changes that one input and nothing else."""
    on, off = graph_of("p5en-prod"), variant_graph("p5en-prod", {"cluster": {"deletionProtection": False}})
    assert on.named(CLUSTER, "rl-p5en-prod").inputs["deletionProtection"] is True
    assert off.named(CLUSTER, "rl-p5en-prod").inputs["deletionProtection"] is False
    before = {r.urn: plain(r.inputs) for r in on.resources}
    changed = [r.urn.rsplit("::", 1)[1] for r in off.resources if before.get(r.urn) != plain(r.inputs)]
    assert changed == ["rl-p5en-prod"]
    assert "pulumi config set --path platform.cluster.deletionProtection false" in teardown_section()


def test_destroy_deletes_the_repository_with_its_images():
    """An ECR repository that holds images is deleted only with force (DeleteRepository ``force``)."""
    for stack in ("p5en-prod", "dev"):
        (repo,) = graph_of(stack).of_type("aws:ecr/repository:Repository")
        assert repo.inputs["forceDelete"] is True, stack


def test_every_kept_resource_and_the_caches_repositories_have_a_documented_delete():
    """What destroy leaves on purpose (retainOnDelete) and what ECR made outside the graph (the pull
    through caches' repositories) each have a command on the page."""
    section = teardown_section()
    kept = {r.type for r in graph_of("p5en-prod").resources if r.retain_on_delete}
    commands = {"aws:s3/bucket:Bucket": "aws s3 rb", "aws:kms/key:Key": "aws kms schedule-key-deletion",
                "aws:backup/vault:Vault": "aws backup delete-backup-vault",
                "aws:backup/plan:Plan": "aws backup delete-backup-plan",
                "aws:backup/regionSettings:RegionSettings": "aws backup update-region-settings",
                "aws:iam/role:Role": "aws iam delete-role"}
    billing = {"aws:s3/bucket:Bucket", "aws:kms/key:Key", "aws:backup/vault:Vault", "aws:backup/plan:Plan"}
    assert billing <= kept
    for kind in kept & set(commands):
        assert commands[kind] in section, kind
    assert re.search(r"aws ecr describe-repositories .*rl-p5en-prod/.*\n.*aws ecr delete-repository --force", section)

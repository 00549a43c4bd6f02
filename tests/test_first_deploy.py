"""The first deploy on an empty account, offline: ``deploy.phase: bootstrap`` registers the image
repository and the AWS Backup opt-in and nothing that pulls an image; ``full`` registers those same
resources (same URNs) and the rest; the reward Deployment does not hold ``pulumi up`` for its image."""

from __future__ import annotations

import pytest
from conftest import graph_of
from test_workloads import one, variant, variant_graph

from stackconfig.stack import StackConfigError, load_stack
from stackconfig.files import raw_stack

BOOTSTRAP = {"deploy": {"phase": "bootstrap"}}
FIRST = {"aws:ecr/repository:Repository", "aws:ecr/lifecyclePolicy:LifecyclePolicy",
         "aws:backup/regionSettings:RegionSettings"}


@pytest.mark.parametrize("stack", ["p5en-prod", "dev"])
def test_bootstrap_registers_only_the_repository_and_the_backup_opt_in(stack):
    graph = variant_graph(stack, BOOTSTRAP)
    custom = {r.type for r in graph.resources if r.custom}
    kept = variant(stack, {}).checkpoints.retain_on_destroy
    assert custom == (FIRST if kept else FIRST - {"aws:backup/regionSettings:RegionSettings"})
    assert not [r for r in graph.resources if r.type.startswith(("kubernetes:", "eks:"))]


@pytest.mark.parametrize("stack", ["p5en-prod", "dev"])
def test_full_registers_the_bootstrap_resources_unchanged_and_everything_else(stack):
    first, full = variant_graph(stack, BOOTSTRAP), graph_of(stack)
    full_urns = {r.urn: r for r in full.resources}
    for r in (r for r in first.resources if r.custom):
        assert r.urn in full_urns, r.urn  # the second `pulumi up` adds to the first, replaces nothing
        assert full_urns[r.urn].inputs == r.inputs
    assert len([r for r in full.resources if r.custom]) > len([r for r in first.resources if r.custom])
    assert {"aws:eks/cluster:Cluster", "aws:eks/nodeGroup:NodeGroup"} <= {r.type for r in full.resources}


def test_backup_opt_in_is_s3_only_kept_and_can_be_left_to_another_stack():
    graph = graph_of("p5en-prod")
    opt_in = graph.named("aws:backup/regionSettings:RegionSettings", "rl-p5en-prod-backup-opt-in")
    assert opt_in.inputs["resourceTypeOptInPreference"] == {"S3": True} and opt_in.retain_on_delete
    off = variant_graph("p5en-prod", {"deploy": {"backupOptIn": False}})
    assert off.of_type("aws:backup/regionSettings:RegionSettings") == []


def test_an_unknown_phase_is_refused_by_name():
    with pytest.raises(StackConfigError, match=r"deploy\.phase: 'images' is not allowed; allowed: 'bootstrap' or 'full'"):
        load_stack("p5en-prod", {**raw_stack("p5en-prod"), "deploy": {"phase": "images"}})


def test_the_reward_deployment_does_not_hold_pulumi_up():
    """pulumi-kubernetes awaits a Deployment's rollout (provider/pkg/await/deployment.go, 10 min):
    its image is the stack's own repository, empty or still being pulled on a first deploy."""
    deployment = one(graph_of("p5en-prod"), "Deployment")
    assert deployment["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"

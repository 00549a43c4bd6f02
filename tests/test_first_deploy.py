"""The first deploy on an empty account, offline: ``deploy.phase: bootstrap`` registers the image
repository, its pull-through caches and the AWS Backup opt-in and nothing that pulls an image; ``full`` registers those same
resources (same URNs) and the rest; the reward Deployment does not hold ``pulumi up`` for its image."""

from __future__ import annotations

import grpc
import pytest
from conftest import graph_of, load
from test_workloads import merge, one, variant, variant_graph

from stackconfig.stack import StackConfigError, load_stack
from stackconfig.files import raw_stack

BOOTSTRAP = {"deploy": {"phase": "bootstrap"}}
FIRST = {"aws:ecr/repository:Repository", "aws:ecr/lifecyclePolicy:LifecyclePolicy",
         "aws:ecr/pullThroughCacheRule:PullThroughCacheRule", "aws:backup/regionSettings:RegionSettings"}


@pytest.mark.parametrize("stack", ["p5en-prod", "dev"])
def test_bootstrap_registers_only_the_repository_its_caches_and_the_backup_opt_in(stack):
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
    deployment = one(graph_of("p5en-prod"), "Deployment", load("p5en-prod").checkpoints.namespace)
    assert deployment["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


# --- placeholders and reservations: the plan warns, a deploy refuses ------------------------------

REAL = "a3" * 32


def pinned_profiles(stack: str) -> dict:
    """``stack`` with every image it pins given a digest that is not a placeholder, a Docker Hub
    credential and principals outside the example account: what is left is what a test adds."""
    from stackconfig.versions import CHART_IMAGES
    cfg = load(stack)
    images = {name: ref.split("@")[0] + f"@sha256:{REAL}" for name, ref in cfg.versions.software.images.items()}
    charts = {name: ref.split("@")[0] + f"@sha256:{REAL}" for name, ref in CHART_IMAGES.items()}
    override = {"versions": {"software": {"images": images}, "charts": {"images": charts}},
                "cluster": {"adminRoleArns": ["arn:aws:iam::210987654321:role/platform-admin"]},
                "registries": {"credentials": {"docker-hub": f"arn:aws:secretsmanager:{cfg.region}:210987654321:"
                                                             f"secret:ecr-pullthroughcache/docker-hub"}}}
    if cfg.workloads.teams:
        override["workloads"] = {"teams": [{**t.model_dump(by_alias=True, exclude_defaults=True),
                                            "members": [f"arn:aws:iam::210987654321:role/{t.name}"]}
                                           for t in cfg.workloads.teams],
                                 "images": {"checkpointTrigger": f"public.ecr.aws/docker/library/busybox:1.37.0@sha256:{REAL}"}}
    return override


def pinned_stack_dir(tmp_path, stack: str = "p5en-shared"):
    """A stack folder holding every shipped stack, ``stack`` with ``pinned_profiles`` merged in."""
    import shutil

    import yaml
    from conftest import ROOT, raw_config
    from test_workloads import merge
    from stackconfig.files import PROJECT
    folder = tmp_path / "stacks"
    if not folder.exists():
        shutil.copytree(ROOT / "stacks", folder)
    raw = merge(raw_config(stack), pinned_profiles(stack))
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": {f"{PROJECT}:platform": raw}}))
    return folder


PINNED = pinned_profiles("p5en-prod")
"""p5en-prod with every digest and principal its deploy needs (none a placeholder)."""


def _deploy(cfg, answer=None, graph=None):
    """``program.build(cfg, deploy=True)`` under mocks whose invokes ``answer`` (token, args) -> outputs."""
    import program
    from analysis import mocks

    class Answering(mocks._Mocks):
        def call(self, args):
            return answer(args.token, args.args)

    graph = mocks.Graph() if graph is None else graph
    original = mocks._Mocks
    mocks._Mocks = Answering
    try:
        mocks.run(lambda: program.build(cfg, deploy=True), region=cfg.region, stack=cfg.stack, graph=graph)
    finally:
        mocks._Mocks = original
    return graph


class NotFound(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNKNOWN

    def details(self):
        return "InvalidCapacityReservationId.NotFound: The capacity reservation ID does not exist"


class NoCluster(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNKNOWN

    def details(self):
        return "ResourceNotFoundException: No cluster found for name: rl-p5en-prod."


def _aws(zone="us-east-1a", instance_type="p5en.48xlarge", known=True, block_state="scheduled", block_count=16,
         odcr_state="active", odcr_count=32, odcr_free=32, running=None, service_cidr="172.20.0.0/16"):
    """What AWS answers for the stack's reservations: the Capacity Block invoke and the Cloud
    Control read of an ODCR, in the shapes pulumi-aws 7.51.1 deserialises."""
    import json

    def answer(token, args):
        if token == "aws:eks/getCluster:getCluster":  # the cluster as EKS runs it; none on a first deploy
            if running is None:
                raise NoCluster()
            return {"id": args["name"], "name": args["name"], "version": running,
                    "kubernetesNetworkConfigs": [{"ipFamily": "ipv4", "serviceIpv4Cidr": service_cidr}]}
        if not known:  # how the engine reports a data source's error: a gRPC error of the Invoke call
            raise NotFound()
        if token == "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation":
            return {"id": args["id"], "availabilityZone": zone, "instanceType": instance_type,
                    "reservationType": "capacity-block", "state": block_state, "instanceCount": block_count,
                    "availableInstanceCount": block_count}
        if token == "aws:cloudcontrol/getResource:getResource":
            assert args["typeName"] == "AWS::EC2::CapacityReservation"
            return {"id": args["identifier"], "identifier": args["identifier"], "typeName": args["typeName"],
                    "properties": json.dumps({"Id": args["identifier"], "AvailabilityZone": zone,
                                              "InstanceType": instance_type, "InstanceCount": odcr_count,
                                              "TotalInstanceCount": odcr_count, "AvailableInstanceCount": odcr_free,
                                              "State": odcr_state})}
        raise NotImplementedError(token)
    return answer


def test_the_plan_warns_of_placeholders_instead_of_saying_nothing():
    from analysis.plan import plan_stack, render_text
    plan, _ = plan_stack("p5en-prod")
    text = render_text(plan)
    assert ("WARNING stacks/Pulumi.p5en-prod.yaml: versions.software.images.miles-deepep-v2: image "
            "{imageRepository}:miles-sglang0.5.19") in text and "placeholder digest" in text
    assert "WARNING pools[train].capacity.reservationId: cr-0a1b2c3d4e5f60001" in text
    assert text.index("Warnings") < text.index("Violations")
    assert plan.to_json()["warnings"] == plan.warnings


def test_a_deploy_refuses_a_placeholder_digest_naming_field_image_and_what_pulls_it():
    cfg = variant("p5en-prod", {})
    with pytest.raises(StackConfigError, match=r"stacks/Pulumi.p5en-prod.yaml: versions.software.images.miles-deepep-v2: "
                                               r"image \{imageRepository\}:miles-sglang0.5.19\S+@sha256:0{64} has a "
                                               r"placeholder digest \(pulled by [^)]*RayCluster rl/miles") as err:
        _deploy(cfg, _aws())
    assert "cannot deploy" in str(err.value)


def test_a_deploy_with_pinned_images_and_matching_reservations_goes_through():
    graph = _deploy(variant("p5en-prod", PINNED), _aws())
    assert graph.of_type("aws:eks/nodeGroup:NodeGroup")


@pytest.mark.parametrize("aws, expect", [
    (_aws(zone="us-east-1b"), r"pools\[train\]\.capacity\.reservationId: cr-0a1b2c3d4e5f60001 is in us-east-1b, "
                              r"not the stack's availabilityZone us-east-1a"),
    (_aws(zone="us-east-1b"), r"pools\[rollout\]\.capacity\.reservationId: cr-0a1b2c3d4e5f60002 is in us-east-1b"),
    (_aws(instance_type="p5.48xlarge"), r"pools\[train\]\.capacity\.reservationId: cr-0a1b2c3d4e5f60001 reserves "
                                        r"p5.48xlarge, not the pool's instanceType p5en.48xlarge"),
    (_aws(instance_type="p5.48xlarge"), r"pools\[rollout\]\.capacity\.reservationId: \S+ reserves p5.48xlarge"),
    (_aws(known=False), r"pools\[train\]\.capacity\.reservationId: cr-0a1b2c3d4e5f60001 \(CAPACITY_BLOCK\) is not a "
                        r"reservation AWS knows in us-east-1"),
    (_aws(block_state="expired"), r"pools\[train\]\.capacity\.reservationId: cr-0a1b2c3d4e5f60001 is expired; "
                                  r"allowed: an active or scheduled reservation"),
    (_aws(odcr_state="cancelled"), r"pools\[rollout\]\.capacity\.reservationId: cr-0a1b2c3d4e5f60002 is cancelled"),
    (_aws(odcr_count=24, odcr_free=24), r"pools\[rollout\]\.capacity\.reservationId: cr-0a1b2c3d4e5f60002 holds 24 "
                                        r"instances \(24 free\), the pool runs 32"),
    (_aws(block_count=8), r"pools\[train\]\.capacity\.reservationId: cr-0a1b2c3d4e5f60001 holds 8 instances"),
], ids=["block-zone", "odcr-zone", "block-type", "odcr-type", "unknown", "block-expired", "odcr-cancelled",
        "odcr-small", "block-small"])
def test_a_deploy_refuses_a_reservation_elsewhere_naming_the_pool(aws, expect):
    from analysis import mocks
    graph = mocks.Graph()
    with pytest.raises(StackConfigError, match=expect):
        _deploy(variant("p5en-prod", PINNED), aws, graph)
    assert graph.resources == []  # refused before anything is registered


def test_the_bootstrap_phase_pushes_first_so_placeholders_do_not_block_it():
    graph = _deploy(variant("p5en-prod", BOOTSTRAP), _aws(known=False))
    assert graph.of_type("aws:ecr/repository:Repository")


def test_a_control_plane_eks_upgraded_is_refused_before_a_downgrade_is_asked():
    """With supportType STANDARD, EKS upgrades the control plane itself at the end of standard support
    (EKS user guide, "Learn about Kubernetes version lifecycle"); a stack still pinned to the older
    minor would then plan a downgrade, which EKS refuses only after the update starts."""
    from analysis import mocks
    from components.cluster import Running, control_plane_problems
    cfg = variant("p5en-prod", PINNED)
    found = (None, Running("1.35"), Running("1.34"), Running("1.35", "172.20.0.0/16"))
    assert [control_plane_problems(cfg, lambda name, v=v: v) for v in found] == [[], [], [], []]
    graph = mocks.Graph()
    with pytest.raises(StackConfigError) as err:
        _deploy(cfg, _aws(running="1.36"), graph)
    assert graph.resources == []
    assert str(err.value).splitlines()[1:] == [
        "  versions.kubernetes: 1.35, but EKS runs cluster rl-p5en-prod at 1.36 (it upgrades a cluster at the end "
        "of standard support) and cannot downgrade it; allowed: 1.36, with add-on versions for it (versions.addons)"]


def test_a_service_range_other_than_the_clusters_is_refused_before_a_replacement_is_planned():
    """EKS sets a cluster's Service range only at creation (API reference, KubernetesNetworkConfigRequest): a
    stack naming another would plan to replace the cluster (deletion protection refuses it, minutes in)."""
    from analysis import mocks
    graph = mocks.Graph()
    with pytest.raises(StackConfigError) as err:
        _deploy(variant("p5en-prod", PINNED), _aws(running="1.35", service_cidr="10.100.0.0/16"), graph)
    assert graph.resources == []
    assert str(err.value).splitlines()[1:] == [
        "  network.serviceIpv4Cidr: 172.20.0.0/16, but EKS runs cluster rl-p5en-prod with 10.100.0.0/16, set only at "
        "creation (another value replaces the cluster); allowed: 10.100.0.0/16"]


def test_a_first_deploy_with_a_private_endpoint_only_says_how_the_deployer_reaches_the_api():
    """The Kubernetes objects are created through the API endpoint; with endpointPublicAccess false
    that is the private one, reachable only from the VPC the first deploy is about to create."""
    from analysis import mocks
    private = merge(PINNED, {"cluster": {"endpointPublicAccess": False, "publicAccessCidrs": []}})
    graph = mocks.Graph()
    with pytest.raises(StackConfigError) as err:
        _deploy(variant("p5en-prod", private), _aws(running=None), graph)
    assert graph.resources == []
    assert str(err.value).splitlines()[1:] == [
        "  cluster.endpointPublicAccess: false on a first deploy: the program creates the Kubernetes objects through "
        "the private endpoint, reachable only from inside the VPC this deploy creates; allowed: true with "
        "publicAccessCidrs naming the deploying network for the first deploy, then false from a machine in the "
        "VPC or connected to it (VPN, Direct Connect, peering)"]
    from components.cluster import Running, control_plane_problems
    assert control_plane_problems(variant("p5en-prod", private), lambda name: Running("1.35")) == []  # it exists

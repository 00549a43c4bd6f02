"""Image registry: an immutable, scanned ECR repository; ECR reachable through private endpoints that
admit only the nodes; node pulls scoped to the platform's repositories; digest-pinned refs."""

from __future__ import annotations

import json

import pytest

from analysis import mocks
from components.registry import ImageRegistry, eks_addon_account, image_ref
from workloads.schema.services import IMAGE_DIGEST

REGION = "us-west-2"
ACCOUNT = mocks.ACCOUNT
HOST = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
HEX = "0123456789abcdef" * 4
NODE_SG = "sg-nodes"
SUBNETS = ["subnet-private-a", "subnet-private-b"]
BASE = {"region": REGION, "vpc_id": "vpc-1", "subnet_ids": SUBNETS, "node_security_group_id": NODE_SG}


def build(**overrides):
    """Run an ImageRegistry alone under the mocks; return the graph and the outputs it resolved."""
    seen: dict = {}

    def program():
        reg = ImageRegistry("rl", **{**BASE, **overrides})
        reg.repository_url.apply(lambda v: seen.__setitem__("url", v))
        reg.registry_id.apply(lambda v: seen.__setitem__("registry", v))
        image_ref(reg.repository_url, "v1", HEX).apply(lambda v: seen.__setitem__("ref", v))

    return mocks.run(program, region=REGION, stack="registry"), seen


@pytest.fixture(scope="module")
def default():
    return build()


def test_repository_is_immutable_scanned_encrypted_and_expires_untagged(default):
    graph, seen = default
    repo = graph.named("aws:ecr/repository:Repository", "rl")
    assert repo.inputs["imageTagMutability"] == "IMMUTABLE"
    assert repo.inputs["imageScanningConfiguration"] == {"scanOnPush": True}
    assert repo.inputs["encryptionConfigurations"] == [{"encryptionType": "AES256"}]
    policy = json.loads(graph.named("aws:ecr/lifecyclePolicy:LifecyclePolicy", "rl-untagged").inputs["policy"])
    [rule] = policy["rules"]
    assert rule["selection"] == {"tagStatus": "untagged", "countType": "sinceImagePushed",
                                 "countUnit": "days", "countNumber": 14}
    assert rule["action"] == {"type": "expire"}
    assert seen["registry"] == ACCOUNT and seen["url"] == f"{HOST}/rl"


def test_kms_key_when_given():
    graph, _ = build(kms_key_arn="arn:aws:kms:us-west-2:123456789012:key/k", untagged_days=3,
                     repository_name="team/miles-efa")
    repo = graph.named("aws:ecr/repository:Repository", "rl")
    assert repo.inputs["encryptionConfigurations"] == [
        {"encryptionType": "KMS", "kmsKey": "arn:aws:kms:us-west-2:123456789012:key/k"}]
    assert repo.inputs["name"] == "team/miles-efa"
    policy = json.loads(graph.named("aws:ecr/lifecyclePolicy:LifecyclePolicy", "rl-untagged").inputs["policy"])
    assert policy["rules"][0]["selection"]["countNumber"] == 3


def test_both_ecr_endpoints_private_in_the_given_subnets(default):
    graph, _ = default
    endpoints = {e.inputs["serviceName"]: e for e in graph.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")}
    assert set(endpoints) == {f"com.amazonaws.{REGION}.ecr.api", f"com.amazonaws.{REGION}.ecr.dkr"}
    sg = graph.named("aws:ec2/securityGroup:SecurityGroup", "rl-ecr-endpoints")
    for e in endpoints.values():
        assert e.inputs["vpcEndpointType"] == "Interface" and e.inputs["privateDnsEnabled"] is True
        assert e.inputs["subnetIds"] == SUBNETS and e.inputs["vpcId"] == "vpc-1"
        assert e.inputs["securityGroupIds"] == [sg.outputs["id"]]


def test_endpoint_security_group_admits_https_from_nodes_only(default):
    graph, _ = default
    sg = graph.named("aws:ec2/securityGroup:SecurityGroup", "rl-ecr-endpoints")
    assert not sg.inputs.get("ingress") and not sg.inputs.get("egress")
    rules = [r for r in graph.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
             if r.inputs["securityGroupId"] == sg.outputs["id"]]
    assert [(r.inputs["ipProtocol"], r.inputs["fromPort"], r.inputs["toPort"],
             r.inputs["referencedSecurityGroupId"]) for r in rules] == [("tcp", 443, 443, NODE_SG)]
    assert all("cidrIpv4" not in r.inputs and "cidrIpv6" not in r.inputs for r in rules)
    assert graph.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule") == []


def test_no_pull_through_cache_and_no_grant_without_a_puller(default):
    graph, _ = default
    assert graph.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule") == []
    assert graph.of_type("aws:iam/rolePolicy:RolePolicy") == []


def test_node_pulls_only_the_platform_repository_and_the_eks_registries():
    """A team pod runs on a node whose role pulls: it must not reach another private repository of
    the account (AmazonEC2ContainerRegistryPullOnly would allow ``repository/*``)."""
    graph, _ = build(puller_role_name="node-role")
    policy = graph.named("aws:iam/rolePolicy:RolePolicy", "rl-node-pulls")
    assert policy.inputs["role"] == "node-role"
    token, pulls, deny = json.loads(policy.inputs["policy"])["Statement"]
    assert (token["Action"], token["Resource"]) == ("ecr:GetAuthorizationToken", "*")
    repo_arn = graph.named("aws:ecr/repository:Repository", "rl").outputs["arn"]
    assert pulls["Resource"] == [
        repo_arn, f"arn:aws:ecr:{REGION}:{eks_addon_account(REGION)}:repository/*"]
    assert not any(ACCOUNT in r and r.endswith("repository/*") for r in pulls["Resource"])
    assert set(pulls["Action"]) == {"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer",
                                    "ecr:BatchCheckLayerAvailability"}
    # The managed AmazonEC2ContainerRegistryReadOnly allows them on "*": the Deny keeps the scope.
    assert (deny["Effect"], set(deny["Action"]), deny["NotResource"]) == ("Deny", set(pulls["Action"]),
                                                                          pulls["Resource"])
    assert "ecr:GetAuthorizationToken" not in deny["Action"]


def test_a_region_without_a_known_add_on_registry_is_refused():
    with pytest.raises(Exception, match="no EKS add-on image registry"):
        mocks.run(lambda: ImageRegistry("rl", **{**BASE, "region": "xx-moon-1"}, puller_role_name="r"),
                  region=REGION, stack="registry")


@pytest.mark.parametrize("kwargs, match", [
    ({"region": "us-west"}, "not an AWS region"),
    ({"subnet_ids": []}, "at least one subnet"),
    ({"subnet_ids": ["subnet-a", "subnet-a"]}, "twice"),
    ({"repository_name": "Miles"}, "not a valid ECR repository name"),
    ({"untagged_days": 0}, "untagged_days"),
])
def test_bad_arguments_refused(kwargs, match):
    args = {**BASE, **kwargs}
    with pytest.raises(Exception, match=match):
        mocks.run(lambda: ImageRegistry("rl", **args), region=REGION, stack="registry")


def test_image_ref_is_the_digest_form_the_workloads_require(default):
    _, seen = default
    url = f"{HOST}/rl"
    assert image_ref(url, "v0.1.0-efa1.50", HEX) == f"{url}:v0.1.0-efa1.50@sha256:{HEX}"
    assert image_ref(url, "v1", f"sha256:{HEX}") == f"{url}:v1@sha256:{HEX}"
    assert seen["ref"] == f"{url}:v1@sha256:{HEX}"
    assert IMAGE_DIGEST.search(seen["ref"])


@pytest.mark.parametrize("digest", [
    HEX[:-1], HEX + "0", HEX.upper(), f"sha512:{HEX}", f"sha256:{HEX[:12]}", f"sha256-{HEX}", "", None,
    f"sha256:{'g' * 64}"])
def test_image_ref_refuses_a_bad_digest(digest):
    with pytest.raises(ValueError, match="digest"):
        image_ref(f"{HOST}/rl", "v1", digest)


@pytest.mark.parametrize("url, tag", [
    (f"{HOST}/rl", "-v1"), (f"{HOST}/rl", "a" * 129), (f"{HOST}/rl", "v 1"),
    (f"{HOST}/rl:v1", "v2"), (f"{HOST}/rl@sha256:{HEX}", "v2"), ("rl", "v1")])
def test_image_ref_refuses_bad_tag_or_url(url, tag):
    with pytest.raises(ValueError):
        image_ref(url, tag, HEX)


def test_every_pod_of_the_reference_stack_pulls_from_its_ecr_repository():
    """Default image: the recipe's tag in the stack's own repository (no Docker Hub, no NAT)."""
    from conftest import graph_of

    from software import profile
    from stackconfig.versions import SoftwareStack
    graph = graph_of("p5en-prod")
    images = set()

    def collect(value):
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "image" and isinstance(v, str):
                    images.add(v)
                collect(v)
        elif isinstance(value, list):
            for v in value:
                collect(v)
    for r in graph.resources:
        if r.type.startswith("kubernetes:") and r.type != "kubernetes:helm.sh/v3:Release":
            collect(r.inputs)
    repo = next(r for r in graph.resources if r.type == "aws:ecr/repository:Repository")
    assert images and all(".dkr.ecr.us-east-1.amazonaws.com/" in i and repo.inputs["name"] in i for i in images), images
    # the tag of the stack's profile (software/profiles.yaml), pinned by the digest the stack names,
    # and the DCGM image the GPU burn-in runs
    tags = {i.rsplit("/", 1)[1].split("@")[0].split(":", 1)[1] for i in images}
    assert tags == {profile("miles-deepep-v2").image.tag, f"dcgm-{SoftwareStack().dcgm}"}

"""Image registry: an immutable, scanned ECR repository; ECR reachable through private endpoints that
admit only the nodes; pull-through cache rules for exactly the upstreams given; digest-pinned refs."""

from __future__ import annotations

import json
import re

import pytest

from analysis import mocks
from components.registry import (
    ANONYMOUS_UPSTREAMS,
    UPSTREAMS,
    ImageRegistry,
    image_ref,
    pull_through_prefix,
)
from workloads.settings import IMAGE_DIGEST

REGION = "us-west-2"
ACCOUNT = mocks.ACCOUNT
HOST = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
HEX = "0123456789abcdef" * 4
DOCKER_SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:ecr-pullthroughcache/docker-hub-AbCdEf"
GHCR_SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:ecr-pullthroughcache/ghcr-123456"
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
        if "ecr-public" in reg.rules:
            reg.cached("public.ecr.aws/neuron/foo:1").apply(lambda v: seen.__setitem__("cached", v))
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


def test_default_rules_are_the_anonymous_upstreams(default):
    graph, seen = default
    rules = {r.inputs["ecrRepositoryPrefix"]: r.inputs for r in
             graph.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")}
    assert rules == {"ecr-public": {"ecrRepositoryPrefix": "ecr-public", "upstreamRegistryUrl": "public.ecr.aws"},
                     "k8s": {"ecrRepositoryPrefix": "k8s", "upstreamRegistryUrl": "registry.k8s.io"},
                     "quay": {"ecrRepositoryPrefix": "quay", "upstreamRegistryUrl": "quay.io"}}
    assert set(ANONYMOUS_UPSTREAMS) == set(rules)
    assert seen["cached"] == f"{HOST}/ecr-public/neuron/foo:1"
    assert graph.of_type("aws:iam/rolePolicy:RolePolicy") == []


def test_rules_only_for_upstreams_given_with_credentials_where_required():
    graph, _ = build(upstreams={"ecr-public": None, "docker-hub": DOCKER_SECRET, "ghcr": GHCR_SECRET},
                     puller_role_name="node-role")
    rules = {r.inputs["ecrRepositoryPrefix"]: r.inputs for r in
             graph.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")}
    assert set(rules) == {"ecr-public", "docker-hub", "ghcr"}
    assert "credentialArn" not in rules["ecr-public"]
    assert rules["docker-hub"]["upstreamRegistryUrl"] == "registry-1.docker.io"
    assert rules["docker-hub"]["credentialArn"] == DOCKER_SECRET
    assert rules["ghcr"] == {"ecrRepositoryPrefix": "ghcr", "upstreamRegistryUrl": "ghcr.io",
                             "credentialArn": GHCR_SECRET}
    policy = graph.named("aws:iam/rolePolicy:RolePolicy", "rl-pull-through")
    assert policy.inputs["role"] == "node-role"
    [stmt] = json.loads(policy.inputs["policy"])["Statement"]
    assert stmt["Action"] == ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"]
    assert stmt["Resource"] == [f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/{p}/*"
                                for p in ("docker-hub", "ecr-public", "ghcr")]


def test_only_upstreams_given():
    graph, _ = build(upstreams={"k8s": None})
    rules = graph.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")
    assert [r.inputs["upstreamRegistryUrl"] for r in rules] == ["registry.k8s.io"]
    graph, _ = build(upstreams={})
    assert graph.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule") == []


@pytest.mark.parametrize("upstreams, match", [
    ({"docker-hub": None}, "needs a Secrets Manager credential"),
    ({"ghcr": None}, "needs a Secrets Manager credential"),
    ({"quay": DOCKER_SECRET}, "takes no credential"),
    ({"docker-hub": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:dockerhub"}, "ecr-pullthroughcache/"),
    ({"docker-hub": DOCKER_SECRET.replace(REGION, "us-east-1")}, "rule's region us-west-2"),
    ({"nvcr": None}, "not a supported upstream"),
])
def test_bad_upstreams_refused_before_anything_is_registered(upstreams, match):
    graph = mocks.Graph()
    with pytest.raises(Exception, match=match):
        mocks.run(lambda: ImageRegistry("rl", REGION, "vpc-1", SUBNETS, NODE_SG, upstreams=upstreams),
                  region=REGION, stack="registry", graph=graph)
    assert graph.resources == []


@pytest.mark.parametrize("kwargs, match", [
    ({"region": "us-west"}, "not an AWS region"),
    ({"subnet_ids": []}, "at least one subnet"),
    ({"subnet_ids": ["subnet-a", "subnet-a"]}, "twice"),
    ({"repository_name": "Miles"}, "not a valid ECR repository name"),
    ({"repository_name": "quay/miles"}, "pull-through cache prefix"),
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


@pytest.mark.parametrize("image, cached", [
    ("public.ecr.aws/neuron/foo:1", "ecr-public/neuron/foo:1"),
    ("public.ecr.aws/docker/library/busybox:1.37.0", "ecr-public/docker/library/busybox:1.37.0"),
    ("registry.k8s.io/pause:3.10", "k8s/pause:3.10"),
    (f"quay.io/prometheus/node-exporter@sha256:{HEX}", f"quay/prometheus/node-exporter@sha256:{HEX}"),
    ("nginx:1.27", "docker-hub/library/nginx:1.27"),
    ("docker.io/nginx", "docker-hub/library/nginx"),
    (f"nginx@sha256:{HEX}", f"docker-hub/library/nginx@sha256:{HEX}"),
    ("docker.io/bitnami/redis:7", "docker-hub/bitnami/redis:7"),
    ("ghcr.io/radixark/miles:v0.1.0", "ghcr/radixark/miles:v0.1.0"),
])
def test_pull_through_prefix_maps_upstream_images(image, cached):
    assert pull_through_prefix(image, ACCOUNT, REGION) == f"{HOST}/{cached}"


def test_pull_through_prefix_refuses_registries_without_a_rule():
    with pytest.raises(ValueError, match="nvcr.io.*not an ECR pull-through cache upstream"):
        pull_through_prefix("nvcr.io/nvidia/pytorch:25.01-py3", ACCOUNT, REGION)
    with pytest.raises(ValueError, match="no pull-through cache rule for registry docker.io"):
        pull_through_prefix("nginx:1", ACCOUNT, REGION, upstreams=ANONYMOUS_UPSTREAMS)
    with pytest.raises(ValueError, match="registry.example"):
        pull_through_prefix("registry.example/x:1", ACCOUNT, REGION)
    with pytest.raises(ValueError, match="12-digit"):
        pull_through_prefix("quay.io/x:1", "12345", REGION)
    with pytest.raises(ValueError, match="region"):
        pull_through_prefix("quay.io/x:1", ACCOUNT, "moon-1")
    with pytest.raises(ValueError, match="known cache prefixes"):
        pull_through_prefix("quay.io/x:1", ACCOUNT, REGION, upstreams=["nvcr"])


def test_every_upstream_needs_credentials_exactly_as_aws_documents():
    """ECR Public, registry.k8s.io, Quay: no authentication; Docker Hub, GHCR, GitLab: a secret
    (https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache.html)."""
    assert {k for k, u in UPSTREAMS.items() if u.credential} == {"docker-hub", "ghcr", "gitlab"}
    for upstream in UPSTREAMS.values():
        assert re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*", upstream.prefix) and 2 <= len(upstream.prefix) <= 30


def test_every_pod_of_the_reference_stack_pulls_from_its_ecr_repository():
    """Default image: the recipe's tag in the stack's own repository (no Docker Hub, no NAT)."""
    from conftest import graph_of

    from software import profile
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
    # the tag of the stack's profile (software/profiles.yaml), pinned by the digest the stack names
    assert {i.rsplit("/", 1)[1].split("@")[0].split(":", 1)[1] for i in images} == {profile("miles-deepep-v2").image.tag}

"""Image registry: the workload image in ECR in the cluster's region, pulled over private endpoints.

Guarantees:
- the workload image lives in one ECR repository with IMMUTABLE tags (a pushed tag names one
  digest forever), scan on push, KMS encryption (AES256 when no key is given), and untagged
  images expired after ``untagged_days``;
- nodes reach ECR without the NAT gateway: interface endpoints ``com.amazonaws.<region>.ecr.api``
  (auth token, API) and ``com.amazonaws.<region>.ecr.dkr`` (registry v2 API: manifests), private
  DNS on, in the given subnets, behind a security group that admits TCP 443 from the node
  security group and nothing else. ECR serves image layers from S3, so the S3 gateway endpoint is
  the third required piece; ``components.network.Network`` already creates it and it is assumed
  here. Both interface endpoints plus the S3 gateway endpoint are AWS's documented set:
  https://docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html
- public images come through pull-through cache rules, one per upstream given and no others.
  ECR Public, registry.k8s.io and Quay need no credential; Docker Hub, GitHub Container Registry,
  GitLab Container Registry (and Azure, Chainguard, not offered here) need a Secrets Manager
  secret whose name starts with ``ecr-pullthroughcache/``, in the rule's account and region:
  https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache.html
  https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache-creating-rule.html
  nvcr.io (NGC) is not a supported upstream: copy NGC images into the repository instead.

Limits, per the same AWS pages: the FIRST pull of an image through a cache rule makes ECR fetch it
from the upstream, and with ECR reached through interface endpoints AWS documents that this first
pull needs a NAT route from the pulling subnet (the network keeps its NAT for that); every later
pull is served from the cache in-region. The pulling principal needs
``ecr:BatchImportUpstreamImage`` and, for the first pull of a new repository,
``ecr:CreateRepository`` (https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache-iam.html);
``puller_role_name`` grants exactly those, on the cache prefixes only.

Nothing here calls a provider function (the offline mocks refuse them): the region is an argument
and the registry id is read from the repository ARN.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import pulumi
import pulumi_aws as aws

HTTPS = 443
ECR_SERVICES = ("ecr.api", "ecr.dkr")
"""Both are required: ecr.api for GetAuthorizationToken, ecr.dkr for the registry v2 API."""


class Upstream(NamedTuple):
    prefix: str
    """The rule's ``ecr_repository_prefix``: cached images live under ``<registry>/<prefix>/``."""
    url: str
    """The rule's ``upstream_registry_url``."""
    hosts: tuple[str, ...]
    """Registry hosts as written in image references."""
    credential: bool
    """AWS requires a Secrets Manager credential (``ecr-pullthroughcache/...``) for this upstream."""


UPSTREAMS: dict[str, Upstream] = {u.prefix: u for u in (
    Upstream("ecr-public", "public.ecr.aws", ("public.ecr.aws",), False),
    Upstream("k8s", "registry.k8s.io", ("registry.k8s.io",), False),
    Upstream("quay", "quay.io", ("quay.io",), False),
    Upstream("docker-hub", "registry-1.docker.io", ("docker.io", "index.docker.io", "registry-1.docker.io"), True),
    Upstream("ghcr", "ghcr.io", ("ghcr.io",), True),
    Upstream("gitlab", "registry.gitlab.com", ("registry.gitlab.com",), True),
)}
"""Upstreams ECR pull-through cache supports, keyed by the cache prefix this component gives them."""

ANONYMOUS_UPSTREAMS: dict[str, None] = {k: None for k, u in UPSTREAMS.items() if not u.credential}
"""The default: every upstream that needs no credential."""

DOCKER_HUB = "docker-hub"
UNSUPPORTED_HOSTS = {"nvcr.io": "NGC (nvcr.io) is not an ECR pull-through cache upstream; copy the image "
                                "into the workload repository"}

REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
ACCOUNT = re.compile(r"^\d{12}$")
REPOSITORY_NAME = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")
CREDENTIAL_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"secret:ecr-pullthroughcache/[A-Za-z0-9/_+=.@-]+$")
"""The API's credentialArn pattern (CreatePullThroughCacheRule), with the region captured."""


def _check_region(region: str) -> str:
    if not isinstance(region, str) or not REGION.match(region):
        raise ValueError(f"region: {region!r} is not an AWS region name (e.g. us-west-2)")
    return region


def registry_host(registry_id: str, region: str) -> str:
    if not ACCOUNT.match(str(registry_id)):
        raise ValueError(f"registry id: {registry_id!r} is not a 12-digit AWS account id")
    return f"{registry_id}.dkr.ecr.{_check_region(region)}.amazonaws.com"


def image_ref(repository_url: pulumi.Input[str], tag: str, digest: str) -> pulumi.Output[str] | str:
    """``<repository_url>:<tag>@sha256:<digest>``: the form ``workloads.images.requireDigest`` accepts.

    ``digest`` is ``sha256:<64 lowercase hex>`` or the 64 hex digits alone; anything else (another
    algorithm, upper case, a short or truncated digest) is refused with ValueError, as is a tag
    Docker would refuse or a repository URL that already carries a tag or digest. An Output URL
    (``ImageRegistry.repository_url``) gives an Output.
    """
    if not isinstance(tag, str) or not TAG.match(tag):
        raise ValueError(f"tag: {tag!r} is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})")
    found = DIGEST.match(digest) if isinstance(digest, str) else None
    if not found:
        raise ValueError(f"digest: {digest!r} is not sha256:<64 lowercase hex digits>")

    def build(url: str) -> str:
        last = url.rsplit("/", 1)[-1]
        if "@" in url or ":" in last or "/" not in url:
            raise ValueError(f"repository_url: {url!r} must be <registry>/<repository> without tag or digest")
        return f"{url}:{tag}@sha256:{found.group(1)}"

    if isinstance(repository_url, str):
        return build(repository_url)
    return pulumi.Output.from_input(repository_url).apply(build)


def _split_host(image: str) -> tuple[str | None, str]:
    """(registry host or None for Docker Hub's implicit one, the rest of the reference)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first.lower(), rest
    return None, image


def pull_through_prefix(image: str, registry_id: str, region: str,
                        upstreams: Iterable[str] | None = None) -> str:
    """The cached ECR path of upstream ``image``: ``<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<rest>``.

    ``public.ecr.aws/neuron/foo:1`` -> ``<registry>/ecr-public/neuron/foo:1``; a Docker Hub
    reference without a host (``nginx:1``, ``docker.io/nginx:1``) maps to
    ``docker-hub/library/nginx:1`` (official images need ``library/``). Tag and digest are kept.
    ``upstreams`` (cache prefixes, default all of ``UPSTREAMS``) limits the mapping to the rules a
    registry actually has; an image from any other registry is refused with ValueError.
    """
    host_name = registry_host(registry_id, region)
    if not isinstance(image, str) or not image or any(c.isspace() for c in image):
        raise ValueError(f"image: {image!r} is not an image reference")
    allowed = set(UPSTREAMS) if upstreams is None else set(upstreams)
    unknown = allowed - set(UPSTREAMS)
    if unknown:
        raise ValueError(f"upstreams: {sorted(unknown)} are not known cache prefixes; allowed: {sorted(UPSTREAMS)}")
    host, rest = _split_host(image)
    key = DOCKER_HUB if host is None else next(
        (k for k, u in UPSTREAMS.items() if host in u.hosts), None)
    if key is None or key not in allowed:
        reason = UNSUPPORTED_HOSTS.get(host or "", "")
        have = ", ".join(sorted(allowed)) or "none"
        raise ValueError(f"image {image!r}: no pull-through cache rule for registry {host or 'docker.io'} "
                         f"(rules: {have}){'; ' + reason if reason else ''}")
    if key == DOCKER_HUB and "/" not in rest.split("@")[0].split(":")[0]:
        rest = f"library/{rest}"
    return f"{host_name}/{UPSTREAMS[key].prefix}/{rest}"


def _check_upstreams(upstreams: Mapping[str, pulumi.Input[str] | None], region: str) -> None:
    for key, credential in upstreams.items():
        if key not in UPSTREAMS:
            raise ValueError(f"upstreams: {key!r} is not a supported upstream; allowed: {sorted(UPSTREAMS)} "
                             f"({UNSUPPORTED_HOSTS['nvcr.io']})")
        upstream = UPSTREAMS[key]
        if upstream.credential and credential is None:
            raise ValueError(f"upstreams: {key!r} ({upstream.url}) needs a Secrets Manager credential ARN "
                             f"(secret named ecr-pullthroughcache/...); leave it out to create no rule")
        if not upstream.credential and credential is not None:
            raise ValueError(f"upstreams: {key!r} ({upstream.url}) takes no credential")
        if isinstance(credential, str):
            found = CREDENTIAL_ARN.match(credential)
            if not found:
                raise ValueError(f"upstreams: {key!r}: {credential!r} is not a Secrets Manager secret ARN "
                                 f"named ecr-pullthroughcache/...")
            if found.group("region") != region:
                raise ValueError(f"upstreams: {key!r}: the secret is in {found.group('region')}; "
                                 f"ECR requires it in the rule's region {region}")


class ImageRegistry(pulumi.ComponentResource):
    """ECR repository, pull-through cache rules and private ECR endpoints for one cluster's VPC."""

    def __init__(self, name: str, region: str, vpc_id: pulumi.Input[str],
                 subnet_ids: Sequence[pulumi.Input[str]], node_security_group_id: pulumi.Input[str],
                 upstreams: Mapping[str, pulumi.Input[str] | None] = ANONYMOUS_UPSTREAMS,
                 repository_name: str | None = None, kms_key_arn: pulumi.Input[str] | None = None,
                 untagged_days: int = 14, puller_role_name: pulumi.Input[str] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        """
        :param region: the cluster's region (the endpoints' service names; ECR is regional).
        :param subnet_ids: where the endpoint interfaces go, AT MOST ONE PER AVAILABILITY ZONE
            (AWS refuses two subnets of one zone for an interface endpoint). Private DNS makes the
            endpoints answer for the whole VPC, so nodes in other subnets use them too.
        :param node_security_group_id: the security group every node carries; the only source
            admitted on 443.
        :param upstreams: cache prefix (a key of ``UPSTREAMS``) -> credential ARN, None for the
            upstreams that take none. A rule is created for each entry and for nothing else.
        :param repository_name: the workload repository (default ``name``).
        :param kms_key_arn: KMS key for the repository; AES256 when None.
        :param untagged_days: untagged images are expired this many days after push.
        :param puller_role_name: role (the node role) granted what the first pull through a cache
            rule needs; nothing is granted when None.
        """
        _check_region(region)
        repository_name = repository_name or name
        if not REPOSITORY_NAME.match(repository_name) or not 2 <= len(repository_name) <= 256:
            raise ValueError(f"repository_name: {repository_name!r} is not a valid ECR repository name")
        _check_upstreams(upstreams, region)
        if repository_name.split("/")[0] in upstreams:
            raise ValueError(f"repository_name: {repository_name!r} lies under the pull-through cache "
                             f"prefix {repository_name.split('/')[0]!r}")
        if isinstance(untagged_days, bool) or not isinstance(untagged_days, int) or untagged_days < 1:
            raise ValueError(f"untagged_days: {untagged_days!r} must be a whole number of days >= 1")
        subnet_ids = list(subnet_ids)
        if not subnet_ids:
            raise ValueError("subnet_ids: the ECR endpoints need at least one subnet")
        plain = [s for s in subnet_ids if isinstance(s, str)]
        if len(set(plain)) != len(plain):
            raise ValueError(f"subnet_ids: {plain} lists a subnet twice")
        super().__init__("rlplatform:registry:ImageRegistry", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {"Name": name}

        self.repository = aws.ecr.Repository(
            name, name=repository_name, image_tag_mutability="IMMUTABLE",
            image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(scan_on_push=True),
            encryption_configurations=[aws.ecr.RepositoryEncryptionConfigurationArgs(
                encryption_type="KMS", kms_key=kms_key_arn) if kms_key_arn is not None else
                aws.ecr.RepositoryEncryptionConfigurationArgs(encryption_type="AES256")],
            tags=tags, opts=child)
        aws.ecr.LifecyclePolicy(
            f"{name}-untagged", repository=self.repository.name,
            policy=json.dumps({"rules": [{
                "rulePriority": 1, "description": f"expire untagged images after {untagged_days} days",
                "selection": {"tagStatus": "untagged", "countType": "sinceImagePushed",
                              "countUnit": "days", "countNumber": untagged_days},
                "action": {"type": "expire"}}]}),
            opts=child)
        arn_parts = self.repository.arn.apply(lambda arn: arn.split(":"))
        # The ARN's account field is the registry id of a repository in one's own registry; read
        # it there rather than from a provider call (refused offline).
        self.registry_id: pulumi.Output[str] = arn_parts.apply(lambda p: p[4])
        self.repository_url: pulumi.Output[str] = pulumi.Output.all(self.registry_id, self.repository.name).apply(
            lambda a: f"{registry_host(a[0], region)}/{a[1]}")

        self.rules = {
            key: aws.ecr.PullThroughCacheRule(
                f"{name}-{key}", ecr_repository_prefix=UPSTREAMS[key].prefix,
                upstream_registry_url=UPSTREAMS[key].url, credential_arn=credential, opts=child)
            for key, credential in upstreams.items()}
        self.region = region

        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-ecr-endpoints", vpc_id=vpc_id,
            description="ECR interface endpoints: HTTPS from cluster nodes only",
            tags={"Name": f"{name}-ecr-endpoints"}, opts=child)
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-ecr-endpoints-https", security_group_id=self.security_group.id, ip_protocol="tcp",
            from_port=HTTPS, to_port=HTTPS, referenced_security_group_id=node_security_group_id,
            description="HTTPS from cluster nodes", opts=child)
        self.endpoints = {
            service: aws.ec2.VpcEndpoint(
                f"{name}-{service.replace('.', '-')}", vpc_id=vpc_id, vpc_endpoint_type="Interface",
                service_name=f"com.amazonaws.{region}.{service}", private_dns_enabled=True,
                subnet_ids=subnet_ids, security_group_ids=[self.security_group.id],
                tags={"Name": f"{name}-{service}"}, opts=child)
            for service in ECR_SERVICES}
        self.endpoint_ids = {service: e.id for service, e in self.endpoints.items()}

        if puller_role_name is not None and self.rules:
            prefixes = sorted(UPSTREAMS[k].prefix for k in self.rules)
            aws.iam.RolePolicy(
                f"{name}-pull-through", role=puller_role_name,
                policy=arn_parts.apply(lambda p: json.dumps({"Version": "2012-10-17", "Statement": [{
                    "Sid": "FirstPullThroughCache", "Effect": "Allow",
                    "Action": ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
                    "Resource": [f"arn:{p[1]}:ecr:{region}:{p[4]}:repository/{prefix}/*"
                                 for prefix in prefixes]}]})),
                opts=child)

        self.register_outputs({"repositoryUrl": self.repository_url, "registryId": self.registry_id,
                               "ecrApiEndpointId": self.endpoint_ids["ecr.api"],
                               "ecrDkrEndpointId": self.endpoint_ids["ecr.dkr"]})

    def cached(self, image: str) -> pulumi.Output[str]:
        """``image`` as pulled through this registry's cache rules (see ``pull_through_prefix``)."""
        rules = list(self.rules)
        return self.registry_id.apply(lambda account: pull_through_prefix(image, account, self.region, rules))

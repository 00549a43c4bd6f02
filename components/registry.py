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
- one pull-through cache rule per public upstream (``stackconfig.images.UPSTREAMS``) under the
  stack's namespace (``cache_namespace``: ``<namespace>/<prefix>``, so two stacks of one account and
  region never share a rule), the ones that need a credential only when the stack names it: a node
  pulls a public image from the stack's registry, ECR fetching it from upstream on the first pull
  (ECR user guide, "Sync an upstream registry with an Amazon ECR private registry");
- the node role (``puller_role_name``) pulls from this repository, its caches and the region's EKS
  add-on registry (the EKS add-ons and the EFA device plugin come from it), and from no other
  repository, even with the ``AmazonEC2ContainerRegistryReadOnly`` EKS requires on it (an explicit
  Deny, ``node_pull_policy``): a team pod cannot run a private image the platform does not own;
- ``pulumi destroy`` deletes the repository with the images in it (``force_delete``): they are
  rebuilt or copied again from their sources, and an ECR repository that holds images is not
  deleted otherwise (DeleteRepository without ``force``). The caches' repositories are ECR's, made
  on first pull: the teardown deletes them (docs/getting-started/first-deploy.md, Tear down).

Nothing here calls a provider function (the offline mocks refuse them): the region is an argument
and the registry id is read from the repository ARN.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources

import pulumi
import pulumi_aws as aws

from stackconfig.images import UPSTREAMS, fill, localize, with_url

HTTPS = 443
ECR_SERVICES = ("ecr.api", "ecr.dkr")
"""Both are required: ecr.api for GetAuthorizationToken, ecr.dkr for the registry v2 API."""

@cache
def _addon_registries() -> dict:
    """catalog/data/eks-addon-registries.json (scripts/generate_eks_registries.py; its origin inside):
    per region, the AWS account whose ECR registry serves the EKS add-on images (VPC CNI, kube-proxy,
    CoreDNS, Pod Identity agent, CloudWatch observability) and the EFA device plugin."""
    return json.loads((resources.files("catalog") / "data" / "eks-addon-registries.json").read_text())


def eks_addon_account(region: str) -> str:
    """The account of ``region``'s EKS add-on registry (EKS User Guide, "View Amazon container image
    registries for Amazon EKS add-ons"). ValueError naming the regions that have one when ``region``
    has none this program can derive."""
    table = _addon_registries()
    if region not in table["accounts"]:
        listed = table["notDerivable"].get(region)
        why = f"its listed registry {listed} is not in that region's ECR" if listed else "none is listed"
        raise ValueError(f"region: no EKS add-on image registry for {region!r} ({why}); allowed: "
                         f"{', '.join(table['accounts'])}")
    return table["accounts"][region]


def eks_addon_registry(region: str) -> str:
    """The registry host EKS replicates its add-on images to in ``region``."""
    return registry_host(eks_addon_account(region), region)


PULL_ACTIONS = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
"""What the kubelet's ECR credential provider and containerd need per repository (the actions of
AmazonEC2ContainerRegistryPullOnly less the pull-through cache import)."""
CACHE_ACTIONS = ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"]
"""What the puller of an image not yet cached needs besides a pull: ECR user guide, "IAM permissions
required to sync an upstream registry with an Amazon ECR private registry" (the import, and the
repository ECR creates for it on the first pull)."""
CACHE_PREFIX = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")
"""An ECR repository prefix of a pull-through cache rule: 2-30 characters (ECR API reference,
CreatePullThroughCacheRule ``ecrRepositoryPrefix``)."""


def cache_prefixes(namespace: str, credentials: Mapping[str, str]) -> dict[str, str]:
    """Upstream URL -> the repository prefix of its cache: every upstream that needs no credential,
    and those the stack names one for. ValueError when the namespace makes a prefix ECR refuses."""
    out = {}
    for upstream in UPSTREAMS.values():
        prefix = f"{namespace}/{upstream.prefix}"
        if not (CACHE_PREFIX.match(prefix) and 2 <= len(prefix) <= 30):
            raise ValueError(f"cache_namespace: {namespace!r} makes the pull-through cache prefix {prefix!r}, which "
                             f"ECR refuses (2-30 characters, lowercase); allowed: a namespace of at most "
                             f"{29 - max(len(u.prefix) for u in UPSTREAMS.values())} characters (the cluster name)")
        if not upstream.credential or upstream.prefix in credentials:
            out[upstream.url] = prefix
    return out


def platform_pull_resources(repository_arn: str, region: str, caches: Sequence[str] = ()) -> list[str]:
    """The repositories a node may pull from: the platform's, its caches' and the region's EKS add-on registry."""
    partition = repository_arn.split(":")[1]
    return [repository_arn, *cache_resources(repository_arn, caches),
            f"arn:{partition}:ecr:{region}:{eks_addon_account(region)}:repository/*"]


def cache_resources(repository_arn: str, caches: Sequence[str]) -> list[str]:
    """The repositories ECR makes under each cache prefix, in the platform repository's registry."""
    registry = repository_arn.split(":repository/")[0]
    return [f"{registry}:repository/{prefix}/*" for prefix in caches]


def node_pull_policy(repository_arn: str, region: str, caches: Sequence[str] = ()) -> str:
    """The node role's ECR permissions beside ``AmazonEC2ContainerRegistryReadOnly`` (which EKS
    requires on a node role, ``platform.NODE_POLICIES``, and which allows every ECR read on ``*``):
    a token and pulls from the platform's repository and the region's EKS add-on registry (which
    also serves the EFA device plugin, ``device_plugins.efa_plugin_values``), and an explicit Deny of
    the pull actions on every other repository, which wins over the managed Allow (IAM user guide,
    "Policy evaluation logic": an explicit deny overrides any allow). ``ecr:GetAuthorizationToken``
    is never denied: without a token no image can be pulled at all. ``caches``: the prefixes of the
    stack's pull-through caches, where the first pull of an image imports it (``CACHE_ACTIONS``)."""
    allowed = platform_pull_resources(repository_arn, region, caches)
    statements = [
        {"Sid": "EcrToken", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
        {"Sid": "PullPlatformImages", "Effect": "Allow", "Action": PULL_ACTIONS, "Resource": allowed},
        {"Sid": "DenyPullsElsewhere", "Effect": "Deny", "Action": PULL_ACTIONS, "NotResource": allowed}]
    if caches:
        statements.insert(2, {"Sid": "ImportThroughCaches", "Effect": "Allow", "Action": CACHE_ACTIONS,
                              "Resource": cache_resources(repository_arn, caches)})
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
ACCOUNT = re.compile(r"^\d{12}$")
REPOSITORY_NAME = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")


def filled(value, repository_url: pulumi.Input[str]):
    """``value`` (a manifest, chart values) with every container image localized
    (``stackconfig.images.localized``) and the stack repository's URL, an Output at deployment, in
    place of ``{imageRepository}`` and ``{imageRegistry}``."""
    url = pulumi.Output.from_input(repository_url)
    return fill(localize(value), lambda image: url.apply(lambda u: with_url(image, u)))


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


class ImageRegistry(pulumi.ComponentResource):
    """ECR repository, private ECR endpoints and the nodes' pull permissions for one cluster's VPC."""

    def __init__(self, name: str, region: str, vpc_id: pulumi.Input[str] | None = None,
                 subnet_ids: Sequence[pulumi.Input[str]] = (), node_security_group_id: pulumi.Input[str] | None = None,
                 repository_name: str | None = None, kms_key_arn: pulumi.Input[str] | None = None,
                 untagged_days: int = 14, puller_role_name: pulumi.Input[str] | None = None,
                 cache_namespace: str | None = None, credentials: Mapping[str, str] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        """
        :param region: the cluster's region (the endpoints' service names; ECR is regional).
        :param vpc_id: None for the repository alone (the first deploy's ``bootstrap`` phase: images
            are pushed before anything pulls them); then no endpoints and no grant are made.
        :param subnet_ids: where the endpoint interfaces go, AT MOST ONE PER AVAILABILITY ZONE
            (AWS refuses two subnets of one zone for an interface endpoint). Private DNS makes the
            endpoints answer for the whole VPC, so nodes in other subnets use them too.
        :param node_security_group_id: the security group every node carries; the only source
            admitted on 443.
        :param repository_name: the workload repository (default ``name``).
        :param kms_key_arn: KMS key for the repository; AES256 when None.
        :param untagged_days: untagged images are expired this many days after push.
        :param puller_role_name: role (the node role) granted ``node_pull_policy``; nothing is
            granted when None.
        :param cache_namespace: the folder of the pull-through cache rules (``cache_prefixes``);
            no rule when None. Made in the bootstrap phase too: the copy and pin steps go through them.
        :param credentials: upstream prefix (``docker-hub``, ...) -> the ARN of its Secrets Manager secret.
        """
        _check_region(region)
        caches = {} if cache_namespace is None else cache_prefixes(cache_namespace, credentials or {})
        if puller_role_name is not None:
            eks_addon_account(region)
        repository_name = repository_name or name
        if not REPOSITORY_NAME.match(repository_name) or not 2 <= len(repository_name) <= 256:
            raise ValueError(f"repository_name: {repository_name!r} is not a valid ECR repository name")
        if isinstance(untagged_days, bool) or not isinstance(untagged_days, int) or untagged_days < 1:
            raise ValueError(f"untagged_days: {untagged_days!r} must be a whole number of days >= 1")
        subnet_ids = list(subnet_ids)
        if vpc_id is not None and not subnet_ids:
            raise ValueError("subnet_ids: the ECR endpoints need at least one subnet")
        plain = [s for s in subnet_ids if isinstance(s, str)]
        if len(set(plain)) != len(plain):
            raise ValueError(f"subnet_ids: {plain} lists a subnet twice")
        super().__init__("rlplatform:registry:ImageRegistry", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {"Name": name}

        self.repository = aws.ecr.Repository(
            name, name=repository_name, image_tag_mutability="IMMUTABLE", force_delete=True,
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
        self.cache_rules = [aws.ecr.PullThroughCacheRule(
            f"{name}-cache-{prefix.rsplit('/', 1)[1]}", ecr_repository_prefix=prefix, upstream_registry_url=url,
            credential_arn=(credentials or {}).get(prefix.rsplit("/", 1)[1]), opts=child)
            for url, prefix in caches.items()]

        if vpc_id is None:
            self.endpoint_ids, self.pull_policy = {}, None
            self.register_outputs({"repositoryUrl": self.repository_url, "registryId": self.registry_id})
            return
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

        self.pull_policy = None if puller_role_name is None else aws.iam.RolePolicy(
            f"{name}-node-pulls", role=puller_role_name,
            policy=self.repository.arn.apply(lambda arn: node_pull_policy(arn, region, list(caches.values()))),
            opts=child)
        """Nodes need it to pull any image: node groups wait for it."""

        self.register_outputs({"repositoryUrl": self.repository_url, "registryId": self.registry_id,
                               "ecrApiEndpointId": self.endpoint_ids["ecr.api"],
                               "ecrDkrEndpointId": self.endpoint_ids["ecr.dkr"]})

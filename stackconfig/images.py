"""Image references: every image a node pulls comes from the stack's own ECR registry or the
region's EKS registry, and what a deploy or a submission refuses before anything is created.

An image is written in a stack or chart pin by its public name; ``localized`` moves it into the
stack's registry:
- from an upstream ECR can cache (``UPSTREAMS``) to the stack's pull-through cache of it,
  ``{imageRegistry}/<prefix>/<path>`` (ECR user guide, "Pulling an image with a pull through cache
  rule in Amazon ECR": ``<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<repository>:<tag>``;
  Docker Hub's official images keep their ``library/`` folder). ``components.registry`` creates one
  rule per upstream under the stack's namespace (``{imageRegistry}`` stands for
  ``<account>.dkr.ecr.<region>.amazonaws.com/<cluster name>``, the folder of ``{imageRepository}``);
- from a registry ECR has no rule for (``COPIED``: nvcr.io) to a tag of the stack's own repository,
  ``{imageRepository}:<name>-<tag>`` (the documented copy step, ``copy_command``; ``crane copy``
  keeps the manifest, so the digest stays the upstream's);
- anything else stays as written and is refused (``problems``).
The nodes then need ECR and its layer bucket only (``components.network.s3_endpoint_policy``).

``pulls`` walks any Kubernetes object (pods, Jobs, CronJobs, Deployments, DaemonSets, RayClusters,
RayJobs, Volcano Jobs; init and ephemeral containers) for the images its containers name; the
stack's inventory (``program.stack_pulls``), ``runs submit`` and ``bench run`` (``sendable``) all
judge what it finds by ``problems``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPOSITORY_OUTPUT = "imageRepository"
"""The stack output (``pulumi stack output``) that holds the URL of the stack's ECR repository."""
STACK_REPOSITORY = "{" + REPOSITORY_OUTPUT + "}"
"""Stands for the stack's ECR repository URL in image references until registration fills it in."""
STACK_REGISTRY = "{imageRegistry}"
"""Stands for the folder of the stack's repository (``<registry host>/<cluster name>``), which
holds the pull-through caches."""
EKS_REGISTRY = "{eksRegistry}"
"""Stands for the region's EKS add-on registry host (``components.registry.eks_addon_registry``)."""
LOCAL = (STACK_REPOSITORY, STACK_REGISTRY, EKS_REGISTRY)


@dataclass(frozen=True)
class Upstream:
    prefix: str
    """The cache's folder under the stack's namespace: the ECR repository prefix of its rule."""
    url: str
    """``upstreamRegistryUrl`` of the rule (ECR API reference, CreatePullThroughCacheRule)."""
    credential: bool
    """ECR needs a Secrets Manager secret (named ``ecr-pullthroughcache/...``) to pull from it
    (ECR user guide, "Creating a pull through cache rule in Amazon ECR")."""


UPSTREAMS: Mapping[str, Upstream] = {
    "public.ecr.aws": Upstream("ecr-public", "public.ecr.aws", False),
    "registry.k8s.io": Upstream("k8s", "registry.k8s.io", False),
    "quay.io": Upstream("quay", "quay.io", False),
    "docker.io": Upstream("docker-hub", "registry-1.docker.io", True),
    "ghcr.io": Upstream("github", "ghcr.io", True),
    "registry.gitlab.com": Upstream("gitlab", "registry.gitlab.com", True),
}
"""The public registries ECR's pull-through cache supports, by the host an image reference names
(ECR API reference, CreatePullThroughCacheRule ``upstreamRegistryUrl``; Azure and cross-account ECR
need a registry name or a role and are not offered here)."""
COPIED = ("nvcr.io",)
"""Registries ECR cannot cache: their images are copied into the stack's repository."""
CREDENTIAL_SECRET = "ecr-pullthroughcache/"
"""The name prefix ECR requires of an upstream credential's secret."""

PLACEHOLDER_BELOW = 16 ** 4
"""A digest whose value is below this is a placeholder (the shipped files' ``sha256:000...0``,
``...01``): a real sha256 is that small with probability 2**-240."""
PLACEHOLDER_ACCOUNT = "123456789012"
"""The AWS documentation's example account, which the shipped stack files name in their principals."""
_DIGEST = re.compile(r"@sha256:([0-9a-f]{64})$")
_PLACEHOLDER_ARN = re.compile(rf"arn:aws[\w-]*:[a-z0-9-]+:[a-z0-9-]*:{PLACEHOLDER_ACCOUNT}:\S*")
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def placeholder_digest(image: str) -> str | None:
    """``sha256:<hex>`` of ``image`` when its digest is a placeholder, else None."""
    found = _DIGEST.search(image) if isinstance(image, str) else None
    return f"sha256:{found.group(1)}" if found and int(found.group(1), 16) < PLACEHOLDER_BELOW else None


def placeholder_principal(value: str) -> bool:
    """An ARN in the documentation's example account (``arn:aws:iam::123456789012:role/...``)."""
    return isinstance(value, str) and _PLACEHOLDER_ARN.fullmatch(value) is not None


def split(ref: str) -> tuple[str, str, str]:
    """(host, path, ``:tag`` and/or ``@digest``) as the Docker reference grammar reads ``ref``: a
    first part without ``.`` or ``:`` (and not ``localhost``) is a Docker Hub path, one part alone
    an official image under ``library/``."""
    at = ref.find("@")
    name, digest = (ref, "") if at < 0 else (ref[:at], ref[at:])
    colon = name.rfind(":")
    name, tag = (name, "") if colon <= name.rfind("/") else (name[:colon], name[colon:])
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest, tag + digest
    return "docker.io", name if rest else f"library/{name}", tag + digest


def localized(ref: str) -> str:
    """``ref`` as a node pulls it: from the stack's cache of its upstream or from the stack's
    repository (a copied registry's image); a reference already local, or from a registry neither
    caches nor copies, unchanged."""
    if not isinstance(ref, str) or ref.startswith(LOCAL):
        return ref
    host, path, suffix = split(ref)
    if host in UPSTREAMS:
        return f"{STACK_REGISTRY}/{UPSTREAMS[host].prefix}/{path}{suffix}"
    if host in COPIED:
        return f"{STACK_REPOSITORY}:{copy_tag(path, suffix)}"
    return ref


def copy_tag(path: str, suffix: str) -> str:
    """``<last path part>-<tag>`` and the digest: the DCGM copy's naming (``dcgm-<tag>``)."""
    tag, _, digest = suffix.lstrip(":").partition("@")
    return f"{path.rsplit('/', 1)[-1]}-{tag}" + (f"@{digest}" if digest else "")


def copy_command(ref: str) -> str | None:
    """The copy step for an image of a registry in ``COPIED`` (None for any other): by its digest
    where the pin has one (so the copy is what the stack pins), else by its tag. ``crane copy`` keeps
    the manifest, digest included; ``$REPO`` is the stack's ``imageRepository`` output."""
    host, path, suffix = split(ref)
    if host not in COPIED:
        return None
    tag, _, digest = suffix.partition("@")
    source = f"{host}/{path}{'@' + digest if digest and not placeholder_digest(ref) else tag}"
    return f'crane copy {source} "$REPO:{copy_tag(path, tag)}"'


def warm_command(image: str) -> str | None:
    """The first pull of a localized cache image, from outside the VPC (None for any other image):
    ECR fetches it from upstream then, which needs a NAT route when it happens through the VPC's
    interface endpoints (ECR user guide, "Amazon ECR interface VPC endpoints", considerations: the
    first pull through a pull through cache rule), and every later pull is served by the cache."""
    if upstream_cache(image) is None or placeholder_digest(image):
        return None
    return f'docker pull "${{REPO%/*}}{image[len(STACK_REGISTRY):]}"'


def upstream_cache(image: str) -> Upstream | None:
    """The upstream whose cache ``image`` (localized) is pulled through, if any."""
    if not image.startswith(STACK_REGISTRY + "/"):
        return None
    prefix = image[len(STACK_REGISTRY) + 1:].split("/", 1)[0]
    return next((u for u in UPSTREAMS.values() if u.prefix == prefix), None)


def upstream_name(image: str) -> str:
    """The public name of a localized cache image (what ``crane digest`` resolves), else ``image``."""
    cache = upstream_cache(image)
    if cache is None:
        return image
    host = next(h for h, u in UPSTREAMS.items() if u is cache)
    return f"{host}/{image[len(STACK_REGISTRY) + len(cache.prefix) + 2:]}"


def fill(value: Any, fill_one: Callable[[str], Any]) -> Any:
    """``value`` (a manifest, a list, an image) with ``fill_one(s)`` in place of every string that
    starts with ``{imageRepository}`` or ``{imageRegistry}``."""
    if isinstance(value, dict):
        return {k: fill(v, fill_one) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, fill_one) for v in value]
    if isinstance(value, str) and value.startswith((STACK_REPOSITORY, STACK_REGISTRY)):
        return fill_one(value)
    return value


def with_url(image: str, repository_url: str) -> str:
    """``image`` with the stack repository's URL (and its folder) in place of the tokens."""
    if image.startswith(STACK_REPOSITORY):
        return image.replace(STACK_REPOSITORY, repository_url, 1)
    return image.replace(STACK_REGISTRY, repository_url.rsplit("/", 1)[0], 1)


def localize(obj: Any) -> Any:
    """``obj`` with every container's image ``localized`` (nothing else is touched)."""
    if isinstance(obj, list):
        return [localize(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: localize(v) for k, v in obj.items()}
    for key in CONTAINER_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [{**c, "image": localized(c["image"])} if isinstance(c, dict) and "image" in c else c
                        for c in out[key]]
    return out


def with_repository(value: Any, repository: str, stack: str = "<stack>") -> Any:
    """``value`` localized, with the stack repository's URL in place of the tokens; ValueError when
    it is needed and not given, naming the flag and the stack output that holds the URL (it contains
    the AWS account id, which no stack file holds) and the stack field that names another image
    instead. At deployment the program fills in the repository's Output the same way."""
    def fill_one(image: str) -> str:
        if not repository:
            raise ValueError(f"image {image!r} is in stack {stack}'s own ECR registry, whose URL only the deployed "
                             f"stack knows: pass --repository \"$(pulumi stack output {REPOSITORY_OUTPUT} --stack "
                             f"{stack})\", or name a full image reference for the profile under "
                             f"versions.software.images in the stack file")
        return with_url(image, repository)
    return fill(localized(value) if isinstance(value, str) else localize(value), fill_one)


@dataclass(frozen=True)
class Pull:
    """One image an object's container (or a chart's template) names, localized."""

    image: str
    owner: str
    """``<kind> <namespace>/<name>``, or ``helm release <name>``."""
    part: str = ""
    """The container, or the chart's image slot."""


def pulls(obj: Any, owner: str = "") -> Iterator[Pull]:
    """Every container image ``obj`` names, at any depth (pod templates of workloads, of custom
    resources, of templates of templates)."""
    if isinstance(obj, list):
        for v in obj:
            yield from pulls(v, owner)
        return
    if not isinstance(obj, dict):
        return
    md = obj.get("metadata")
    if isinstance(md, dict) and "kind" in obj and md.get("name"):
        owner = f"{obj['kind']} {md['namespace'] + '/' if md.get('namespace') else ''}{md['name']}"
    for key, value in obj.items():
        if key in CONTAINER_LISTS and isinstance(value, list):
            yield from (Pull(localized(c["image"]), owner, c.get("name", ""))
                        for c in value if isinstance(c, dict) and isinstance(c.get("image"), str))
        else:
            yield from pulls(value, owner)


def principals(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, ARN) of every placeholder-account ARN anywhere in ``value``; a list item with a
    ``name`` is named by it (``workloads.teams[alpha].members[0]``)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from principals(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from principals(v, f"{path}[{v.get('name', i) if isinstance(v, dict) else i}]")
    elif placeholder_principal(value):
        yield path, value


@dataclass(frozen=True)
class Origin:
    """Where an image reference is set: the field, the file that holds it now (the stack file, or
    the module of its default) and the stack file, where a stack sets another."""

    field: str
    file: str
    stack_file: str


def problems(found: Sequence[Pull], origins: Mapping[str, Origin] = {}, credentials: Mapping[str, str] | None = None,
             stack_file: str = "", local_hosts: Sequence[str] = ()) -> list[str]:
    """One line per image a node could not pull as named (a placeholder digest; a registry outside
    the stack's, ``{imageRepository}`` and ``{imageRegistry}``, and ``local_hosts``, the region's EKS
    registry) and, given the stack's ``credentials`` (a deploy), one per cache whose upstream needs a
    credential the stack does not name. ``origins``: image -> where it is set."""
    owners: dict[str, list[str]] = {}
    for p in found:
        owners.setdefault(p.image, []).append(p.owner)
    local = LOCAL + tuple(f"{h}/" for h in local_hosts)
    lines = [line for image, places in owners.items() for line in _image_problem(image, places, origins.get(image), local)]
    uncredited: dict[Upstream, list[str]] = {}
    for image in owners:
        cache = upstream_cache(image)
        if credentials is not None and cache and cache.credential and not credentials.get(cache.prefix):
            uncredited.setdefault(cache, []).append(upstream_name(image).partition("@")[0])
    return lines + [f"{stack_file}: registries.credentials.{cache.prefix}: ECR needs a credential to cache {cache.url} "
                    f"for {', '.join(names)}; allowed: the ARN of a Secrets Manager secret named "
                    f"{CREDENTIAL_SECRET}<name> in the stack's account and region" for cache, names in uncredited.items()]


def _image_problem(image: str, places: list[str], origin: Origin | None, local: tuple[str, ...]) -> list[str]:
    at = f"{origin.file}: {origin.field}: " if origin else ""
    there = f" as {origin.field} in {origin.stack_file}" if origin and origin.file != origin.stack_file else ""
    by = f" (pulled by {', '.join(dict.fromkeys(places))})"
    if not image.startswith(local):
        return [f"{at}image {image} is not in the stack's ECR registry or the region's EKS registry{by}; allowed{there}: "
                f"an image of {', '.join(UPSTREAMS)} (pulled through the stack's cache of it), of "
                f"{', '.join(COPIED)} (copied into {STACK_REPOSITORY}), or one pushed to {STACK_REPOSITORY}"]
    if placeholder_digest(image):
        name = upstream_name(image).partition("@")[0].replace(STACK_REPOSITORY, "$REPO", 1)
        return [f"{at}image {image} has a placeholder digest{by}; allowed{there}: the digest `crane digest {name}` prints"]
    return []

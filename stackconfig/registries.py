"""The stack's ``registries:`` block: the credentials ECR's pull-through cache needs for the public
registries that refuse anonymous caching (``stackconfig.images.UPSTREAMS``: Docker Hub, GHCR, GitLab).

Each is the ARN of a Secrets Manager secret the stack does not create (it holds a password): its
name starts with ``ecr-pullthroughcache/`` and it lives in the stack's account and region (ECR user
guide, "Creating a pull through cache rule in Amazon ECR", prerequisites; "Storing your upstream
repository credentials in an AWS Secrets Manager secret": a JSON ``{"username": ..., "accessToken": ...}``).
"""

from __future__ import annotations

import re

from pydantic import field_validator

from .base import SchemaModel
from .images import CREDENTIAL_SECRET, UPSTREAMS

NEEDS_CREDENTIAL = tuple(u.prefix for u in UPSTREAMS.values() if u.credential)
SECRET_ARN = rf"^arn:aws[\w-]*:secretsmanager:([a-z0-9-]+):\d{{12}}:secret:{CREDENTIAL_SECRET}[\w/+=.@-]+$"


class RegistrySettings(SchemaModel):
    credentials: dict[str, str] = {}
    """Upstream (``docker-hub``, ``github``, ``gitlab``) -> the ARN of its Secrets Manager secret
    (``arn:aws:secretsmanager:<region>:<account>:secret:ecr-pullthroughcache/<name>``). A deploy whose
    images come from one of them refuses to go on without it (``stackconfig.images.problems``)."""

    @field_validator("credentials")
    @classmethod
    def _credentials(cls, credentials: dict[str, str]) -> dict[str, str]:
        for upstream, arn in credentials.items():
            if upstream not in NEEDS_CREDENTIAL:
                raise ValueError(f"credentials.{upstream}: not an upstream that needs one; allowed: "
                                 f"{', '.join(NEEDS_CREDENTIAL)}")
            if not re.fullmatch(SECRET_ARN, arn):
                raise ValueError(f"credentials.{upstream}: {arn!r} is not a Secrets Manager secret ARN named "
                                 f"{CREDENTIAL_SECRET}<name>; allowed: arn:aws:secretsmanager:<region>:<account>:"
                                 f"secret:{CREDENTIAL_SECRET}<name>")
        return credentials

    def problem(self, region: str) -> str | None:
        """ECR takes a credential only from its own region."""
        for upstream, arn in self.credentials.items():
            where = re.fullmatch(SECRET_ARN, arn).group(1)
            if where != region:
                return (f"registries.credentials.{upstream}: the secret is in {where}, not the stack's region "
                        f"{region}; allowed: a secret in {region}")
        return None

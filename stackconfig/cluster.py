"""The stack's ``cluster`` settings: who reaches the Kubernetes API and from where.

Guarantees: a public API endpoint names the networks allowed to reach it, and 0.0.0.0/0 among them
only with the stack's own name in ``publicAccessFromAnywhere``; cluster admins are named IAM
principals (the cluster creator gets no implicit admin access).
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field, field_validator

from .base import SchemaModel

IAM_PRINCIPAL_ARN = r"^arn:aws[\w-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$"


class ClusterSettings(SchemaModel):
    endpoint_public_access: bool = True
    """Expose the Kubernetes API on a public endpoint, reachable only from ``publicAccessCidrs``;
    ``false`` leaves the private endpoint alone (deploy from inside the VPC then)."""
    public_access_cidrs: list[str] = []
    """Networks allowed to reach the public endpoint; required when it is on. EKS would default an
    empty list to 0.0.0.0/0, which a stack gets only through ``publicAccessFromAnywhere``."""
    public_access_from_anywhere: str | None = None
    """The stack's own name, to allow 0.0.0.0/0 in ``publicAccessCidrs`` (an opt-in by name)."""
    admin_role_arns: list[str] = []
    """IAM roles (or users) granted cluster-admin through EKS access entries; at least one, the
    identity that deploys included: the cluster creator gets no implicit admin access."""
    log_types: list[str] = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    deletion_protection: bool = True
    """EKS refuses to delete the cluster until this is turned off (a stack opts out, e.g. dev)."""
    support_type: str = Field("STANDARD", pattern="^(STANDARD|EXTENDED)$")
    """EKS upgrade policy. An API-created cluster defaults to EXTENDED support (billed extra once its
    version leaves standard support); STANDARD upgrades it automatically at the end instead."""

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, cidrs: list[str]) -> list[str]:
        for cidr in cidrs:
            ipaddress.IPv4Network(cidr)
        return cidrs

    @field_validator("admin_role_arns")
    @classmethod
    def _admins(cls, arns: list[str]) -> list[str]:
        for arn in arns:
            if not re.fullmatch(IAM_PRINCIPAL_ARN, arn):
                raise ValueError(f"{arn!r} is not an IAM role or user ARN; allowed: arn:aws:iam::<account>:role/<name>")
        return arns

    def problem(self, stack: str) -> str | None:
        """Why these settings are refused for ``stack``, or None: admins are named (no implicit
        creator admin), a public endpoint needs explicit CIDRs, and a /0 among them needs
        ``publicAccessFromAnywhere: <stack>``."""
        if not self.admin_role_arns:
            return ("cluster.adminRoleArns: at least one IAM role ARN is required: the cluster creator gets no "
                    "implicit admin access (bootstrapClusterCreatorAdminPermissions is off); allowed: the "
                    "deploying role, e.g. arn:aws:iam::123456789012:role/platform-admin")
        if not self.endpoint_public_access:
            if self.public_access_cidrs:
                return "cluster.publicAccessCidrs: only with endpointPublicAccess: true; allowed: []"
            return None
        if not self.public_access_cidrs:
            return ("cluster.publicAccessCidrs: the public API endpoint needs the networks allowed to reach it "
                    "(EKS would open an empty list to 0.0.0.0/0); allowed: CIDRs such as 203.0.113.0/24, or "
                    "endpointPublicAccess: false")
        if self.public_access_from_anywhere not in (None, stack):
            return (f"cluster.publicAccessFromAnywhere: {self.public_access_from_anywhere!r} is not this stack's "
                    f"name; allowed: {stack}")
        anywhere = [c for c in self.public_access_cidrs if ipaddress.IPv4Network(c).prefixlen == 0]
        if anywhere and self.public_access_from_anywhere != stack:
            return (f"cluster.publicAccessCidrs: {anywhere[0]} opens the Kubernetes API to the internet; allowed: "
                    f"narrower CIDRs, endpointPublicAccess: false, or cluster.publicAccessFromAnywhere: {stack}")
        return None

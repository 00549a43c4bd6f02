"""The stack's ``deploy:`` block: which part of the stack ``pulumi up`` deploys, for a first deploy
on an empty account that works in one documented order (docs/getting-started/first-deploy.md, "Deploy").

``phase: bootstrap`` registers only what must exist before anything pulls an image: the ECR
repository the images are pushed to (``components.registry.ImageRegistry`` without endpoints) and
the region's AWS Backup opt-in for S3. Between the two phases the user builds, copies and pushes
the images (the workload image, DCGM) and pins their digests in the stack file. ``phase: full``
(the default) registers everything; the repository keeps its URN, so the second ``pulumi up`` adds
to the first and replaces nothing.
"""

from __future__ import annotations

from enum import StrEnum

from .base import SchemaModel


class DeployPhase(StrEnum):
    BOOTSTRAP = "bootstrap"
    FULL = "full"


class DeploySettings(SchemaModel):
    phase: DeployPhase = DeployPhase.FULL
    """``bootstrap``: the image repository and the AWS Backup opt-in only; ``full``: the whole stack."""
    backup_opt_in: bool = True
    """Manage the region's AWS Backup opt-in for S3 (``aws.backup.RegionSettings``, S3 only) when the
    stack keeps its checkpoint bucket. Off where another stack of the same account and region holds
    it, or where the account's administrators set it (``aws backup update-region-settings``)."""

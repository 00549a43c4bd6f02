"""Deployable Pulumi components for MoE RL post-training on AWS (EKS + EFA + S3 checkpoints).

``Platform`` composes them for a whole stack; each one is usable alone (see ``multilang`` for the
typed components other languages and other programs attach to their own clusters)."""

from .platform import Platform

__all__ = ["Platform"]

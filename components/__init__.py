"""Reusable Pulumi components for MoE RL post-training on AWS (EKS + EFA + S3 checkpoints)."""

from .catalog import CATALOG, InstanceType, instance
from .config import Pool, Role, StackConfig, StackConfigError, load_stack
from .platform import Platform

__all__ = ["CATALOG", "InstanceType", "instance", "Pool", "Role", "StackConfig", "StackConfigError",
           "load_stack", "Platform"]

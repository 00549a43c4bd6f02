"""The software profile of a run: ``run_profile`` is the one lookup every derivation uses (image,
argv dialect, MoE rules, env, preflight); ``workloads.checks.profile`` holds a run to it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from software import Profile, profile, version_tuple


if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

MULTI_NODE_ENGINE_MIN_NCCL = (2, 30, 7)
"""Miles 49cac7b5 docs/models/qwen/qwen3-8.md:196-199: rollout engines across nodes need NCCL >=
2.30.7 (2.28.x deadlocks CUDA-graph-captured cross-node collectives), loaded through
``SGLANG_NCCL_SO_PATH``."""

def run_profile(cfg: "ProgramConfig") -> Profile:
    return profile(cfg.workloads.run.software)


def image_field(p: Profile) -> str:
    """The stack field that overrides the image of profile ``p``."""
    return f"versions.software.images.{p.name}"


def multi_node_engines(p: Profile) -> bool:
    return version_tuple(p.nccl) >= MULTI_NODE_ENGINE_MIN_NCCL

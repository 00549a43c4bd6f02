"""The program behind every stack: the platform components plus the workloads, one graph."""

from __future__ import annotations

import pulumi

from components import Platform, StackConfig


def build(cfg: StackConfig) -> Platform:
    platform = Platform(cfg)
    for key, value in platform.outputs().items():
        pulumi.export(key, value)
    return platform

"""The argv an attempt ran, from its RayJob: ``spec.runtimeEnvYAML`` holds ``env_vars.MILES_ARGV``, the
entry point and flags as JSON (``workloads.derive.argv.driver``, read by ``workloads.pod.miles_launcher``).

Guarantees: pure functions of the RayJob objects; None where the RayJob does not say (the caller
refuses, naming the attempt).
"""

from __future__ import annotations

import json

from stackconfig.files import load_yaml
from workloads.pod.miles_launcher import ARGV_ENV, layout


def rayjob_argv(job: dict) -> list[str] | None:
    """``[entry point, *flags]`` of one RayJob, or None."""
    env = load_yaml(((job.get("spec") or {}).get("runtimeEnvYAML")) or "") or {}
    raw = (env.get("env_vars") or {}).get(ARGV_ENV)
    return None if raw is None else json.loads(raw)


def flag(words: list[str], name: str) -> str | None:
    """The value after ``name`` (or ``name=value``); ``""`` for a flag with no value; None when absent."""
    for i, w in enumerate(words):
        if w == name:
            nxt = words[i + 1] if i + 1 < len(words) else ""
            return "" if nxt.startswith("--") else nxt
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def rollout_num_gpus(words: list[str]) -> int | None:
    """``--rollout-num-gpus`` (``workloads.pod.miles_launcher.layout``), the GPUs Miles divides its
    ``perf/tokens_per_gpu_per_sec`` by (radixark/miles@49cac7b5 ``miles/ray/rollout/metrics.py:142-149``)."""
    lay = layout(words[1:])
    return None if lay is None else lay[1]

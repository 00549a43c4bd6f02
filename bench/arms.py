"""What an experiment arm runs, read from its rendered RayJob, and what differs between two arms.

An arm's run file says what was asked; its rendered RayJob (``workloads.deploy.submit.run_objects``, the
object ``bench run`` submits) says what runs: each Ray group's image and container environment, the
Ray job's environment, the Miles/Slime argv (``MILES_ARGV``) and the rollout engine's span in nodes.
``changes`` lists every difference between two arms as ``{key: [from, to]}``, so a decomposition link
names what it really changes, including what a run-file field turns into (``deepep.version: v2`` is
a dispatcher flag, an SGLang backend and NCCL GIN variables).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from stackconfig.files import STACKS_DIR

from workloads.pod.miles_launcher import ARGV_ENV

from .experiment import Experiment, arm_run

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


def flag_values(argv: list[str]) -> dict[str, str | None]:
    """``--flag value...`` pairs of an argv (a flag without a value maps to None; repeated values joined)."""
    out: dict[str, str | None] = {}
    flag = None
    for token in argv:
        if token.startswith("--") and not _number(token):
            flag = token
            out[flag] = None
        elif flag is not None:
            out[flag] = token if out[flag] is None else f"{out[flag]} {token}"
    return out


def _number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", f"<{next(iter(e.get('valueFrom', {'?': 0})))}>")
            for e in container.get("env", [])}


def rendered(rayjob: dict) -> dict[str, Any]:
    """The arm as it runs: ``image.<group>``, ``env.<group>.<NAME>``, ``jobEnv.<NAME>``, ``argv.<flag>``,
    ``entryPoint`` and ``engineSpanNodes`` (rollout GPUs per engine / GPUs per node)."""
    spec = rayjob["spec"]
    groups = {"head": spec["rayClusterSpec"]["headGroupSpec"]}
    groups.update({g["groupName"]: g for g in spec["rayClusterSpec"]["workerGroupSpecs"]})
    out: dict[str, Any] = {}
    for name, group in groups.items():
        (container,) = [c for c in group["template"]["spec"]["containers"] if c["name"].startswith("ray-")]
        out[f"image.{name}"] = container["image"]
        out.update({f"env.{name}.{k}": v for k, v in _env(container).items()})
    job_env = dict(yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"])
    argv = [str(t) for t in json.loads(job_env.pop(ARGV_ENV))]
    out.update({f"jobEnv.{k}": v for k, v in job_env.items()})
    out["entryPoint"] = argv[0]
    out.update({f"argv.{k}": v for k, v in flag_values(argv[1:]).items()})
    p = argparse.ArgumentParser(add_help=False)
    for flag in ("--rollout-num-gpus-per-engine", "--num-gpus-per-node"):
        p.add_argument(flag, type=int)
    a, _ = p.parse_known_args(argv[1:])
    if a.rollout_num_gpus_per_engine and a.num_gpus_per_node:
        out["engineSpanNodes"] = max(1, a.rollout_num_gpus_per_engine // a.num_gpus_per_node)
    return out


def render_arm(exp: Experiment, arm: str, cfg: "ProgramConfig") -> dict[str, Any]:
    """``rendered`` of the RayJob ``bench run`` would submit for ``arm`` on stack ``cfg``."""
    from workloads.deploy.submit import run_objects
    run = arm_run(exp, arm)
    rayjob = run_objects(cfg, run).rayjob
    # The run's own name (checkpoint dir, labels) differs by construction: compare as the same name.
    return {k: _unname(v, run.name) for k, v in rendered(rayjob).items()}


def _unname(value: Any, name: str) -> Any:
    return value.replace(name, "<run>") if isinstance(value, str) else value


def changes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list]:
    """``{key: [a's value, b's value]}`` for every key whose value differs (None where absent)."""
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def arm_changes(exp: Experiment, a: str, b: str, cfg: "ProgramConfig") -> dict[str, list]:
    return changes(render_arm(exp, a, cfg), render_arm(exp, b, cfg))


def rendered_link_changes(report: dict, exp: Experiment, stack: str, stack_dir: Path = STACKS_DIR) -> None:
    """Replace each decomposition link's ``changes`` (run-file fields) with the differences of the two
    arms as rendered on ``stack`` (its file in ``stack_dir``)."""
    from workloads.checks import gate
    cfg = gate.read(stack, stack_dir)
    for link in (report.get("decomposition") or {}).get("links", []):
        link["changes"] = arm_changes(exp, link["from"], link["to"], cfg)

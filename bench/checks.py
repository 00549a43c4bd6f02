"""What a collected attempt must show before any figure is computed from it; each refusal is one
``ArtifactError`` naming the attempt and what is missing.

- **Its own log**: every ``Running entrypoint for job <id>:`` line of ``driver.log`` (Ray's job
  supervisor writes it before it starts the entrypoint, ray 2.53.0
  ``ray/dashboard/modules/job/job_supervisor.py``) and every ``Driver log of job <id>:`` line (the
  first line of the launcher's tee, ``workloads.pod.miles_launcher.JOB_LINE``) names a job of this attempt's RayJobs
  (``status.jobId``, KubeRay v1.7.0); a log with no such line is not known to be this attempt's.
- **Complete**: every RayJob of a compared arm SUCCEEDED (a fault arm's last one did); the log holds
  every planned step from its first one to the run's last (``grpo.numRollout`` - 1); after the warm-up
  (the first ``warmupSteps`` steps the attempt logged, so a resumed attempt warms up again) at least
  ``minMeasuredSteps`` remain, each with its ``perf/rollout_time``.
- **Finite**: every value a figure uses is a finite number (NaN or inf is refused, naming step and key).
- **Same nodes**: the compared attempts ran on the node set of the first attempt (node names per
  role, with their EKS ``topology.k8s.aws/network-node-layer-{1,2,3}`` labels), unless the comparison
  across node sets is asked for.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from workloads.derive.topology import EKS_NETWORK_LAYERS

from .artifacts import ArtifactError, Collected
from .experiment import Experiment

TOKENS = "perf/tokens_per_gpu_per_sec"
ROLLOUT_TIME = "perf/rollout_time"
USED_KEYS = (TOKENS, ROLLOUT_TIME, "perf/step_time", "perf/train_time", "perf/train_wait_time",
             "perf/update_weights_time", "rollout/response_len/mean", "rollout/truncated_ratio", "rollout/raw_reward")
"""Every per-step key a figure of the report reads."""
ZONE_LABEL = "topology.kubernetes.io/zone"
_JOB_LINE = re.compile(r"^(?:Running entrypoint for job|Driver log of job) (\S+?):", re.MULTILINE)
"""Ray's supervisor line (``ray job logs``) or the launcher's tee's first line (``miles_launcher.JOB_LINE``)."""


def check_own_log(c: Collected, text: str) -> None:
    jobs = {(j.get("status") or {}).get("jobId") for j in c.rayjobs} - {None}
    named = set(_JOB_LINE.findall(text))
    if not named:
        raise ArtifactError(f"{c.attempt.folder}: driver.log names no Ray job (no 'Running entrypoint for job' "
                            f"or 'Driver log of job' line): cannot tell it is this attempt's log")
    foreign = sorted(named - jobs)
    if foreign:
        raise ArtifactError(f"{c.attempt.folder}: driver.log is of job {foreign[0]}, not of this attempt's "
                            f"RayJobs (jobs {', '.join(sorted(jobs)) or 'none'})")


def check_complete(exp: Experiment, c: Collected) -> None:
    where, faulted = c.attempt.folder, bool(exp.arm(c.attempt.arm).faults)
    status = [((j.get("metadata") or {}).get("name"), (j.get("status") or {}).get("jobStatus")) for j in c.rayjobs]
    failed = [(n, s) for n, s in (status[-1:] if faulted else status) if s != "SUCCEEDED"]
    if failed:
        raise ArtifactError(f"{where}: RayJob {failed[0][0]} ended {failed[0][1] or 'without a job status'}, not "
                            f"SUCCEEDED: the attempt is incomplete")
    firsts = c.log.first()
    have = {i for i, s in firsts.items() if TOKENS in s.metrics}
    start = min(have, default=0)
    missing = [i for i in range(start, exp.total_steps) if i not in have]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ArtifactError(f"{where}: driver.log lacks planned step(s) {shown} of {start}..{exp.total_steps - 1} "
                            f"(log cut short or steps not logged)")
    timeless = [s.rollout_id for s in c.measured(exp.warmup_steps) if ROLLOUT_TIME not in s.metrics]
    if timeless:
        raise ArtifactError(f"{where}: step {timeless[0]} logged {TOKENS} without {ROLLOUT_TIME} (its tokens are "
                            f"rate x time: no throughput without it)")
    got = len(c.measured(exp.warmup_steps))
    if got < exp.min_measured_steps:
        raise ArtifactError(f"{where}: {got} measured steps after {exp.warmup_steps} warm-up steps from step {start}; "
                            f"minMeasuredSteps is {exp.min_measured_steps}")


def check_finite(exp: Experiment, c: Collected) -> None:
    for s in c.log.first().values():
        for key in USED_KEYS:
            v = s.metrics.get(key)
            if v is not None and not math.isfinite(v):
                raise ArtifactError(f"{c.attempt.folder}: step {s.rollout_id}: {key} is {v} (not a finite number)")
    for n, m in c.log.train:
        for key, v in m.items():
            if key == "train/ppo_kl" and not math.isfinite(v):
                raise ArtifactError(f"{c.attempt.folder}: train step {n}: {key} is {v} (not a finite number)")


def node_set(root: Path, c: Collected) -> dict:
    """The attempt's nodes per role, each node's EKS network-node layers and availability zone (the
    well-known ``topology.kubernetes.io/zone`` label, else the zone in ``spec.providerID``), from
    ``nodes.json``."""
    doc = json.loads((root / c.attempt.folder / "nodes.json").read_text())
    items = doc.get("items") or [] if "items" in doc else [doc]
    layers, zones = {}, {}
    for n in items:
        name, labels = n["metadata"]["name"], n["metadata"].get("labels", {})
        layers[name] = [labels.get(k) for k in EKS_NETWORK_LAYERS]
        provider = (n.get("spec") or {}).get("providerID", "")
        zones[name] = labels.get(ZONE_LABEL) or (provider.split("/")[-2] if provider.count("/") >= 4 else "")
    roles: dict[str, list[str]] = {}
    for node in c.nodes:
        roles.setdefault(node.role, []).append(node.name)
    return {"nodes": {r: sorted(v) for r, v in sorted(roles.items())}, "network_node_layers": layers, "zones": zones}


def check_same_nodes(sets: dict[str, dict], allow: bool) -> str | None:
    """Refuse (or, when ``allow``, describe) compared attempts on a node set other than the first's."""
    first_name, first = next(iter(sets.items()))
    for name, got in sets.items():
        if got["nodes"] != first["nodes"]:
            role = next(r for r in sorted(set(got["nodes"]) | set(first["nodes"]))
                        if got["nodes"].get(r) != first["nodes"].get(r))
            extra = sorted(set(got["nodes"].get(role, [])) - set(first["nodes"].get(role, [])))
            text = (f"{name} ran its {role} pods on other nodes than {first_name} "
                    f"({', '.join(extra) or 'fewer nodes'})")
            if not allow:
                raise ArtifactError(f"{text}: a comparison across node sets is refused (bench report "
                                    f"--across-node-sets to make it anyway)")
            return text
    return None

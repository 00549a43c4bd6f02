"""A submitted run's objects: a RayJob that brings up its own Ray cluster in the team's namespace as
one Volcano gang held to its network tier; the stack's PriorityClasses.

- Gang and queue (KubeRay v1.7.0 batchscheduler/volcano/volcano_scheduler.go, operator started with
  ``--batch-scheduler=volcano``): the RayJob's labels ``volcano.sh/queue-name`` and
  ``ray.io/priority-class-name`` become the PodGroup ``ray-<rayjob>-pg``'s queue and priority; its
  minMember is the head plus every worker, so Volcano places all of the run's pods or none.
- Release: ``shutdownAfterJobFinishes`` deletes the run's Ray cluster when the job ends.
- Checkpoint before preemption: Volcano evicts with a plain DELETE and no grace override
  (pkg/scheduler/cache/cache.go:270-316, v1.15.1), so each pod's preStop hook runs within its
  termination grace period. While the run is in progress (the entrypoint keeps ``RUNNING`` in the
  checkpoint directory), the hook creates the save sentinel Miles polls once per step
  (``--save-trigger-sentinel``) and waits until Miles has saved and removed it, then stops Ray. The
  grace period is ``capacityBlockEnd.checkpointMinutes``: the bound on that wait.
"""

from __future__ import annotations

import copy
import json
import shlex

import yaml

from ..layout import RUNNING_MARKER
from ..model import WorkloadModel
from ..settings import RunFile, Submission, TopologyMode
from ..teams import TEAM_LABEL
from .common import RAY_GROUP_LABEL, labels
from .operators import EKS_NETWORK_LAYERS
from .ray import cluster_spec, entrypoint_resources, submitter_template
from .services import stage_template
from .teams import namespace_of

RUN_LABEL = "rl.platform/run"
QUEUE_LABEL = "volcano.sh/queue-name"
PRIORITY_LABEL = "ray.io/priority-class-name"
TOPOLOGY_MODE_LABEL = "volcano.sh/network-topology-mode"
TOPOLOGY_TIER_LABEL = "volcano.sh/network-topology-highest-tier-allowed"
TRAINER = "trainer"
PRIORITY_CLASS_PREFIX = "rl-"

RUN_WRAPPER = ('marker="$1"; shift; mkdir -p "${marker%/*}" && touch "$marker"; "$@"; rc=$?; '
               'rm -f "$marker"; exit $rc')
"""The run's entrypoint: ``RUNNING`` exists exactly while Miles runs."""
SAVE_ON_STOP = ('if [ -e "$1" ]; then touch "$2"; while [ -e "$2" ] && [ -e "$1" ]; do sleep 5; done; fi; '
                'ray stop')
"""preStop of every pod of a run: ask for a checkpoint and wait for it while the run is in progress."""


def rayjob_name(run: RunFile) -> str:
    return f"{run.name}-{run.attempt}"


def podgroup_name(run: RunFile) -> str:
    """The PodGroup KubeRay creates for the run (``ray-<rayjob>-pg``, volcano_scheduler.go:110-120)."""
    return f"ray-{rayjob_name(run)}-pg"


def tier_label(tier: int) -> str:
    """The EKS node label of a Volcano tier (tier 1 = layer 3, ``render.operators.hypernode_discovery``)."""
    return EKS_NETWORK_LAYERS[len(EKS_NETWORK_LAYERS) - tier]


def priority_class_name(priority: str) -> str:
    return f"{PRIORITY_CLASS_PREFIX}{priority}"


def run_labels(run: RunFile, component: str = "miles-run") -> dict[str, str]:
    return {**labels(component), TEAM_LABEL: run.team, RUN_LABEL: run.name}


def _marker(m: WorkloadModel) -> str:
    return f"{m.paths.checkpoints}/{RUNNING_MARKER}"


def _save_on_stop(m: WorkloadModel, run: RunFile, template: dict) -> dict:
    t = copy.deepcopy(template)
    t["metadata"]["labels"].update({TEAM_LABEL: run.team, RUN_LABEL: run.name})
    spec = t["spec"]
    spec["terminationGracePeriodSeconds"] = m.settings.capacity_block_end.checkpoint_minutes * 60
    spec["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": [
        "/bin/sh", "-c", SAVE_ON_STOP, "save-on-stop", _marker(m), m.paths.save_trigger]}}}
    return t


def _stage_first(m: WorkloadModel, head: dict) -> None:
    """The head stages the run's model and data in the team's directory before Ray starts
    (idempotent: ``snapshot_download`` skips complete files)."""
    if m.stage is None:
        return
    stage = stage_template(m)["spec"]
    container = {**stage["containers"][0], "resources": head["spec"]["containers"][0]["resources"]}
    head["spec"]["initContainers"] = [container, *head["spec"].get("initContainers", [])]
    have = {v["name"] for v in head["spec"]["volumes"]}
    head["spec"]["volumes"] += [v for v in stage["volumes"] if v["name"] not in have]


def trainer_affinity(run: RunFile, tier: int) -> dict:
    """Every trainer pod of the run under one network node of ``tier``'s EKS layer: inter-pod
    affinity on that layer's label, which Volcano's predicates plugin evaluates with the pods it has
    placed in the same session (v1.15.1 plugins/predicates/predicates.go:345-348)."""
    term = {"labelSelector": {"matchLabels": {RUN_LABEL: run.name, RAY_GROUP_LABEL: TRAINER}},
            "topologyKey": tier_label(tier)}
    if run.topology is TopologyMode.HARD:
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}


def run_cluster_spec(m: WorkloadModel, run: RunFile, trainer_tier: int | None = None) -> dict:
    """The run's own Ray cluster: head and the GPU groups at the run's node counts, every pod
    labelled with team and run and checkpointing before it stops; the trainers held to their tier."""
    spec = cluster_spec(m, tuple(g for g in m.workers if g.gpus))
    head = _save_on_stop(m, run, spec["headGroupSpec"]["template"])
    _stage_first(m, head)
    spec["headGroupSpec"]["template"] = head
    for group in spec["workerGroupSpecs"]:
        group["template"] = _save_on_stop(m, run, group["template"])
        if group["groupName"] == TRAINER and trainer_tier is not None and run.topology is not TopologyMode.NONE:
            group["template"]["spec"]["affinity"] = trainer_affinity(run, trainer_tier)
    return spec


def topology_labels(mode: TopologyMode, tier: int | None) -> dict[str, str]:
    """KubeRay copies these into the PodGroup's ``spec.networkTopology`` (volcano_scheduler.go:238-250)."""
    if mode is TopologyMode.NONE or tier is None:
        return {}
    return {TOPOLOGY_MODE_LABEL: mode.value, TOPOLOGY_TIER_LABEL: str(tier)}


def run_rayjob(m: WorkloadModel, run: RunFile, gang_tier: int | None = None,
               trainer_tier: int | None = None) -> dict:
    """The run as a RayJob with its own cluster, in the team's queue at the run's priority."""
    md = {"name": rayjob_name(run), "namespace": namespace_of(run.team),
          "labels": {**run_labels(run), QUEUE_LABEL: namespace_of(run.team),
                     PRIORITY_LABEL: priority_class_name(run.priority), **topology_labels(run.topology, gang_tier)}}
    submitter = submitter_template(m)
    submitter["metadata"]["labels"].update({TEAM_LABEL: run.team, RUN_LABEL: run.name})
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": md,
        "spec": {
            "entrypoint": shlex.join(["/bin/sh", "-c", RUN_WRAPPER, "miles-run", _marker(m), *m.run_argv()]),
            "entrypointResources": json.dumps(entrypoint_resources()),
            "runtimeEnvYAML": yaml.safe_dump({"env_vars": m.runtime_env}, sort_keys=True),
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 600,
            "backoffLimit": 0,
            "rayClusterSpec": run_cluster_spec(m, run, trainer_tier),
            "submitterPodTemplate": submitter,
        },
    }


def priority_classes(m: WorkloadModel) -> list[dict]:
    """With ``submit: runs``, one PriorityClass per run priority; Volcano orders and preempts runs by
    its value (the priority plugin reads the PodGroup's priorityClassName)."""
    if m.settings.submit is not Submission.RUNS:
        return []
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": priority_class_name(name), "labels": labels("run-priority")},
             "value": value, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority",
             "description": f"Runs of priority {name!r} (runs/*.yaml priority)."}
            for name, value in m.settings.priority_classes.items()]


"""A submitted run's objects: a RayJob that brings up its own Ray cluster in the team's namespace as
one Volcano gang, its GPU pods held to their network tiers; the stack's PriorityClasses.

- Gang and queue (KubeRay v1.7.0 batchscheduler/volcano/volcano_scheduler.go, operator started with
  ``--batch-scheduler=volcano``): the RayJob's labels ``volcano.sh/queue-name`` and
  ``ray.io/priority-class-name`` become the PodGroup ``ray-<rayjob>-pg``'s queue and priority; its
  minMember is the head plus every worker, so Volcano places all of the run's pods or none.
- Submission (``HTTPMode``): the operator posts the job to the run's own head and polls it
  (rayjob_controller.go:225-236 and 296-330, v1.7.0), sending the entrypoint, ``runtimeEnvYAML`` and
  ``entrypointResources`` as the Jobs API request (utils/dashboardclient/dashboard_httpclient.go:358-380;
  the entrypoint then meets only Ray's shell); no submitter Job, whose failures or early exit
  would end a healthy run (K8sJobMode, ray-project/kuberay#4921) and whose pods outlive the cluster.
- Release: ``shutdownAfterJobFinishes`` deletes the run's Ray cluster when the job ends.
- A lost head is not recreated once the cluster is provisioned, every pod ready once
  (``ray.io/disable-provisioned-head-restart``, copied from the RayJob's annotations to its RayCluster,
  KubeRay v1.6.2 rayjob_controller.go:979, raycluster_controller.go:730-748; before that, no job runs and KubeRay
  makes a new head): a new
  head would kill the workers or find the submission id used, and the operator would resubmit onto a
  partial cluster (rayjob_controller.go:1305-1321) where Miles waits for its placement group forever.
  Instead the operator's status polls fail, after 300 s the RayJob is Failed (utils/constant.go:288-290)
  and its cluster is deleted: the nodes are free and ``submit --resume`` continues from the checkpoint.
- Checkpoint before preemption: Volcano evicts with a plain DELETE and no grace override
  (pkg/scheduler/cache/cache.go:270-316, v1.15.1), so each pod's preStop hook runs within its
  termination grace period. While the run is in progress (the entrypoint keeps ``RUNNING`` in the
  checkpoint directory, refreshed every 30 s by the launcher), the hook creates the save sentinel
  Miles polls once per step (``--save-trigger-sentinel``) and waits until Miles has saved and
  removed it, then stops Ray. The grace period is ``capacityBlockEnd.checkpointMinutes``: the
  bound on that wait.
"""

from __future__ import annotations

import copy
import json

from workloads.schema.labels import ATTEMPT_LABEL, RUN_LABEL
from workloads.derive.paths import CHECKPOINT_DIR, RUNNING_MARKER
from workloads.derive.argv import driver
from workloads.pod.miles_launcher import LEASE_STALE_MIN
from workloads.derive.model import WorkloadModel
from workloads.schema.settings import Submission
from workloads.schema.run import RunFile, TopologyMode
from workloads.schema.teams import TEAM_LABEL, TeamSettings
from workloads.render.common import FSX_VOLUME, RAY_GROUP_LABEL, RAY_NODE_TYPE_LABEL, labels
from workloads.derive.topology import tier_label
from workloads.render.ray import SUBMISSION_MODE, cluster_spec, entrypoint_resources, runtime_env_yaml
from workloads.render.services import stage_template
from workloads.render.teams import TEAM_CHECKPOINT_CLAIM, namespace_of, team_labels

QUEUE_LABEL = "volcano.sh/queue-name"
PRIORITY_LABEL = "ray.io/priority-class-name"
TRAINER, ROLLOUT = "trainer", "rollout"
NAME_LABEL = "app.kubernetes.io/name"
TASK_PRIORITY = "volcano.sh/task-priority"
"""Order of a job's pods within a Volcano session (pkg/scheduler/api/job_info.go:188-233, v1.15.1)."""
TASK_ORDER = {TRAINER: "2", ROLLOUT: "1"}
"""Trainers first: a trainer's two affinity terms let the first one in only while no pod of the
attempt is placed (upstream InterPodAffinity's first-pod rule); placed after a rollout pod, none fits."""
PRIORITY_CLASS_PREFIX = "rl-"
NO_HEAD_RESTART = "ray.io/disable-provisioned-head-restart"
"""KubeRay v1.7.0 utils/constant.go:33-34."""

LEASE_ARGS = 'lease="$1"; sentinel="$2"; attempt="$3"; '
FRESH = (f'fresh() {{ [ -n "$(find "$lease" -mmin -{LEASE_STALE_MIN} 2>/dev/null)" ] && '
         '[ "$(cat "$lease" 2>/dev/null)" = "$attempt" ]; }; ')
"""Shell: is this attempt's lease fresh (``workloads.pod.miles_launcher.Lease``)?"""
SAVE_ON_STOP = (LEASE_ARGS + FRESH +
                'if fresh; then touch "$sentinel"; while [ -e "$sentinel" ] && fresh; do sleep 5; done; fi; ray stop')
"""preStop of every pod of a run: while this attempt's driver holds a fresh lease
(``workloads.pod.miles_launcher``), ask for a checkpoint and wait until Miles has saved and removed the
sentinel (or the lease lapses)."""


def rayjob_name(run: RunFile) -> str:
    return f"{run.name}-{run.attempt}"


def podgroup_name(rayjob: str) -> str:
    """The PodGroup KubeRay creates for a RayJob (``ray-<rayjob>-pg``, volcano_scheduler.go:110-120)."""
    return f"ray-{rayjob}-pg"


def priority_class_name(priority: str) -> str:
    return f"{PRIORITY_CLASS_PREFIX}{priority}"


def run_labels(run: RunFile, component: str = "miles-run") -> dict[str, str]:
    return {**labels(component), TEAM_LABEL: run.team, RUN_LABEL: run.name}


def _marker(m: WorkloadModel) -> str:
    return f"{m.paths.checkpoints}/{RUNNING_MARKER}"


def pod_labels(run: RunFile) -> dict[str, str]:
    """What every pod of one attempt of the run carries besides the stack's Ray labels."""
    return {TEAM_LABEL: run.team, RUN_LABEL: run.name, ATTEMPT_LABEL: str(run.attempt)}


SAVE_STATE = (LEASE_ARGS + FRESH +
              'if [ ! -e "$sentinel" ]; then echo saved; elif fresh; then echo waiting; else echo lapsed; fi')
"""Shell, run in the head pod by ``runs cancel``: has Miles saved (removed the sentinel), is it still
saving (lease fresh), or did its driver stop (lease lapsed)?"""


def _save_on_stop(m: WorkloadModel, run: RunFile, template: dict) -> dict:
    t = copy.deepcopy(template)
    # KubeRay's stable head Service of a RayJob selects app.kubernetes.io/name=kuberay (common/job.go,
    # common/service.go, v1.7.0): leave that label to KubeRay.
    t["metadata"]["labels"].pop(NAME_LABEL, None)
    t["metadata"]["labels"].update(pod_labels(run))
    if not m.profile.checkpoint_on_stop:
        return t  # Slime: no sentinel to wait for; a stopped attempt resumes from its last periodic save
    spec = t["spec"]
    spec["terminationGracePeriodSeconds"] = m.settings.capacity_block_end.checkpoint_minutes * 60
    spec["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": [
        "/bin/sh", "-c", SAVE_ON_STOP, "save-on-stop", _marker(m), m.paths.save_trigger, str(run.attempt)]}}}
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


CHECKPOINTS_VOLUME = "checkpoints"


def _team_checkpoints(m: WorkloadModel, template: dict) -> None:
    """The team's checkpoint volume (``render.teams.team_volumes``) over ``<mount>/checkpoints`` in every
    container that mounts the file system: checkpoints go to the exported directory, the staged model
    and data stay in the team's own."""
    spec = template["spec"]
    spec["volumes"].append({"name": CHECKPOINTS_VOLUME, "persistentVolumeClaim": {"claimName": TEAM_CHECKPOINT_CLAIM}})
    for c in [*spec["containers"], *spec.get("initContainers", [])]:
        if any(v["name"] == FSX_VOLUME for v in c.get("volumeMounts", [])):
            c["volumeMounts"] = [*c["volumeMounts"],
                                 {"name": CHECKPOINTS_VOLUME, "mountPath": f"{m.paths.mount}/{CHECKPOINT_DIR}"}]


def _term(run: RunFile, groups: list[str], tier: int) -> dict:
    return {"labelSelector": {"matchLabels": {RUN_LABEL: run.name, ATTEMPT_LABEL: str(run.attempt)},
                              "matchExpressions": [{"key": RAY_GROUP_LABEL, "operator": "In", "values": groups}]},
            "topologyKey": tier_label(tier)}


def network_affinity(run: RunFile, group: str, gang_tier: int | None, trainer_tier: int | None) -> dict | None:
    """Inter-pod affinity on the EKS network labels: every GPU pod of this attempt under one network
    node of the gang's tier, and the trainers under one of theirs. Required in ``hard`` mode,
    preferred in ``soft``. Volcano's predicates plugin evaluates it with the pods placed earlier in
    the same session (plugins/predicates/predicates.go, AllocateFunc, v1.15.1). No PodGroup
    ``networkTopology``: the head runs on CPU nodes, which carry no network labels and so sit in no
    HyperNode, and Volcano's preempt action skips jobs that have one (actions/preempt/preempt.go:131-137)."""
    terms = []
    if gang_tier is not None:
        terms.append(_term(run, [TRAINER, ROLLOUT], gang_tier))
    if group == TRAINER and trainer_tier is not None and trainer_tier != gang_tier:
        terms.append(_term(run, [TRAINER], trainer_tier))
    if not terms or run.topology is TopologyMode.NONE:
        return None
    if run.topology is TopologyMode.HARD:
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}
    return {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": t} for t in terms]}}


def run_cluster_spec(m: WorkloadModel, run: RunFile, gang_tier: int | None = None,
                     trainer_tier: int | None = None) -> dict:
    """The run's own Ray cluster: head and the GPU groups at the run's node counts, every pod
    labelled with team, run and attempt, writing checkpoints to the team's exported directory and
    checkpointing before it stops; the GPU pods held to their network tiers. Every pod names the run's
    PriorityClass, the one its PodGroup carries (KubeRay copies ``ray.io/priority-class-name`` to the
    PodGroup, volcano_scheduler.go:253-258): Volcano orders and preempts by the PodGroup's, the kubelet's
    node-pressure eviction reads the pod's own ``spec.priority``."""
    spec = cluster_spec(m, tuple(g for g in m.workers if g.gpus))
    head = _save_on_stop(m, run, spec["headGroupSpec"]["template"])
    _stage_first(m, head)
    _team_checkpoints(m, head)
    spec["headGroupSpec"]["template"] = head
    templates = [head]
    for group in spec["workerGroupSpecs"]:
        group["template"] = _save_on_stop(m, run, group["template"])
        _team_checkpoints(m, group["template"])
        templates.append(group["template"])
        affinity = network_affinity(run, group["groupName"], gang_tier, trainer_tier)
        if affinity:
            group["template"]["spec"]["affinity"] = affinity
            group["template"]["metadata"].setdefault("annotations", {})[TASK_PRIORITY] = TASK_ORDER[group["groupName"]]
    for template in templates:  # the pod's own priority is its PodGroup's: the kubelet evicts under node
        template["spec"]["priorityClassName"] = priority_class_name(run.priority)  # pressure by the pod's
    return spec


def run_rayjob(m: WorkloadModel, run: RunFile, gang_tier: int | None = None,
               trainer_tier: int | None = None) -> dict:
    """The run as a RayJob with its own cluster, in the team's queue at the run's priority."""
    md = {"name": rayjob_name(run), "namespace": namespace_of(run.team),
          "labels": {**run_labels(run), QUEUE_LABEL: namespace_of(run.team),
                     PRIORITY_LABEL: priority_class_name(run.priority)}}
    md["annotations"] = {NO_HEAD_RESTART: "true"}
    entrypoint, env = driver(m.run_argv(), dict(m.runtime_env), marker=_marker(m), attempt=run.attempt)
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": md,
        "spec": {
            "entrypoint": entrypoint,
            "entrypointResources": json.dumps(entrypoint_resources()),
            "runtimeEnvYAML": runtime_env_yaml(env),
            "submissionMode": SUBMISSION_MODE,
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 60,
            "backoffLimit": 0,
            "rayClusterSpec": run_cluster_spec(m, run, gang_tier, trainer_tier),
        },
    }


RUN_BUDGET = "runs"


def team_run_budget(m: WorkloadModel, team: TeamSettings) -> dict:
    """One PodDisruptionBudget per team namespace, the platform's (teams may not create budgets):
    maxUnavailable 0 over every run's head, trainers and (unless Spot) rollout pods, so a node group
    update or ``kubectl drain`` waits instead of evicting them. Volcano's preemption deletes pods
    without the Eviction API, so it is not held up.

    It selects only on labels KubeRay sets on the pods it makes and no pod template can override
    (``ray.io/node-type``, ``ray.io/group``: ray-operator/controllers/ray/common/pod.go:1167-1189, v1.7.0),
    never on a label a team writes (``rl.platform/run`` is the team's, in its RayJob): a team creates no
    pods itself (``render.teams.SUBMITTER_RULES``), so every pod held is a Ray pod KubeRay made for one
    of its RayJobs, on the pools admission allows it (GPU pools, heads on the head pool)."""
    groups = ["headgroup", TRAINER] + ([] if m.rollout_spot else [ROLLOUT])
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": RUN_BUDGET, "namespace": namespace_of(team.name),
                         "labels": team_labels(team, "run-budget")},
            "spec": {"maxUnavailable": 0, "unhealthyPodEvictionPolicy": "AlwaysAllow", "selector": {
                "matchExpressions": [{"key": RAY_NODE_TYPE_LABEL, "operator": "In", "values": ["head", "worker"]},
                                     {"key": RAY_GROUP_LABEL, "operator": "In", "values": groups}]}}}


KUBERAY_OWNED_LABELS = (RAY_NODE_TYPE_LABEL, RAY_GROUP_LABEL, "ray.io/cluster")
"""Pod labels KubeRay v1.7.0 sets and a pod template cannot override (common/pod.go:1178-1183)."""


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


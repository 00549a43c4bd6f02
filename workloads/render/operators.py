"""Helm values of the operators (KubeRay, Volcano, FSx CSI) and the Volcano queue."""

from __future__ import annotations

from typing import Any

import yaml

from stackconfig.chart_images import SLOTS, values as image_values
from stackconfig.images import localized
from workloads.derive.model import WorkloadModel
from workloads.derive.topology import EKS_NETWORK_LAYERS
from workloads.schema.settings import Submission
from workloads.render.common import PART_OF, VOLCANO_QUEUE, labels, placement

# --- operators -------------------------------------------------------------------------------

PLATFORM_PRIORITY_CLASS = f"{PART_OF}-critical"
"""The platform's own pods (the KubeRay operator, the shared reward service): outside the runs' ``rl-``
names, so no run (and no team pod, ``render.admission``) can name it."""
PLATFORM_PRIORITY = 1_000_000_000
"""The highest value a PriorityClass outside ``system-`` may take (Kubernetes "Pod Priority and
Preemption"); run priorities stay below it (``WorkloadSettings.priority_classes``)."""


def platform_priority_class() -> dict:
    """Above every run: under node pressure the kubelet evicts pods by priority, so a team filling a
    node's memory or disk loses its own pods before the operator or the reward service. ``Never``
    preempts: the platform's pods have their own pools and never displace a run."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": PLATFORM_PRIORITY_CLASS, "labels": labels("platform-priority")},
            "value": PLATFORM_PRIORITY, "globalDefault": False, "preemptionPolicy": "Never",
            "description": "The platform's operators and shared services, above every run."}

def system_placement(m: WorkloadModel) -> dict:
    return placement(m.system_pool)


def chart_images(m: WorkloadModel, chart: str) -> dict:
    """The values that point every image of ``chart`` (a ``versions.charts`` field) at its pin,
    pulled through the stack's registry (``stackconfig.images.localized``), by digest."""
    return image_values(chart, {s.pin: localized(m.charts.image(s.pin)) for s in SLOTS[chart]})


def kuberay_values(m: WorkloadModel) -> dict:
    """System-pool placement, the platform's priority. With ``submit: runs``, gang scheduling through Volcano (chart 1.7.0
    ``batchScheduler.name`` -> ``--batch-scheduler=volcano``): every run's RayJob gets a PodGroup in
    its team's queue. Not otherwise: a RayJob that selects an existing RayCluster never leaves
    Initializing under a batch scheduler (batchscheduler/volcano/volcano_scheduler.go:74-76)."""
    p = system_placement(m)
    values: dict[str, Any] = {"nodeSelector": p["nodeSelector"], "tolerations": p.get("tolerations", []),
                              "priorityClassName": PLATFORM_PRIORITY_CLASS,  # chart 1.7.0 values.yaml:33-34
                              **chart_images(m, "kuberay_operator")}
    if m.settings.submit is Submission.RUNS:
        values["batchScheduler"] = {"name": "volcano"}
    return values


TOPOLOGY_TYPE = "eks-network"


def hypernode_discovery() -> dict:
    """Volcano's controller builds HyperNodes from node labels (volcano v1.15.1
    pkg/controllers/hypernode/discovery/label/label.go, example pkg/controllers/hypernode/api/example.yaml):
    labels listed from the top tier down, the hostname last; the label before it becomes tier 1. So
    layer 3 (nodes under one network node) is tier 1 and layer 1 tier 3."""
    labels = [{"nodeLabel": label} for label in (*EKS_NETWORK_LAYERS, "kubernetes.io/hostname")]
    return {"networkTopologyDiscovery": [
        {"source": "label", "enabled": True, "interval": "10m",
         "config": {"networkTopologyTypes": {TOPOLOGY_TYPE: labels}}}]}


SCHEDULER_ACTIONS = "enqueue, allocate, preempt, reclaim, backfill"


def scheduler_config() -> dict:
    """Volcano 1.15.1's default scheduler configuration (installer/helm/chart/volcano/config/
    volcano-scheduler.conf: enqueue, allocate, backfill; overcommit, proportion) changed three ways:

    - ``capacity`` instead of ``proportion``: each team queue's share is the ``deserved`` the stack
      sets, not one derived each session from the weights and every queue's pending requests
      (proportion.go:197-264). A queue may borrow idle GPUs up to its capability (capacity.go:1629-1660,
      no OverusedFn), reclaims up to its deserved (:648-715) from queues above theirs, never below their
      guarantee (:515-547). The two plugins cannot run together (docs/user-guide/how_to_use_capacity_plugin.md);
    - the ``preempt`` action (a higher PriorityClass takes a lower run's nodes within a queue) and
      ``reclaim`` (a queue under its deserved takes nodes back from reclaimable queues above theirs);
    - no ``overcommit``: preempt and reclaim only consider jobs already Inqueue (actions/preempt/
      preempt.go:112-115, actions/reclaim/reclaim.go:71-74), and overcommit keeps a job Pending while its
      minimum resources exceed 1.2 x the cluster's idle ones, which on a full cluster is every run that
      would need to preempt. The queue capability (``capacity``'s enqueue check) and the gang still
      bound what is admitted.

    ``workloads.checks.run_plan`` follows these rules."""
    return {"actions": SCHEDULER_ACTIONS, "tiers": [
        {"plugins": [{"name": "priority"}, {"name": "gang", "enablePreemptable": False}, {"name": "conformance"}]},
        {"plugins": [{"name": "drf", "enablePreemptable": False}, {"name": "predicates"}, {"name": "capacity"},
                     {"name": "nodeorder"}, {"name": "binpack"}]}]}


def volcano_values(m: WorkloadModel) -> dict:
    """System-pool placement, the controller's HyperNode discovery from the EKS network labels
    (chart 1.15.1 renders ``custom.controller_config_override`` as ``volcano-controller.conf``,
    templates/controllers.yaml:265-268; a mapping, so it renders as YAML inside the block), and the
    scheduler configuration (``custom.scheduler_config_override``, which templates/scheduler.yaml:18-20
    inserts as text: a YAML string)."""
    p = system_placement(m)
    custom: dict[str, Any] = {"default_ns": p["nodeSelector"], "controller_config_override": hypernode_discovery(),
                              "scheduler_config_override": yaml.safe_dump(scheduler_config(), sort_keys=False)}
    if p.get("tolerations"):
        custom["default_tolerations"] = p["tolerations"]
    return {"custom": custom, **chart_images(m, "volcano")}


def fsx_csi_values(m: WorkloadModel) -> dict:
    """Node plugin only: static provisioning needs no controller (and so no AWS credentials). Chart
    1.17.0 renders the controller Deployment whatever ``nodeComponentOnly`` says (that value only
    drops its disruption budget), so its replicas go to 0. Its service account stays: with
    ``controller.serviceAccount.create: false`` the chart looks the account up and fails when it is
    missing (templates/controller-serviceaccount.yaml:12-16); without replicas it holds no credentials.
    The node DaemonSet tolerates every taint (chart default), so GPU and Spot nodes mount the volume."""
    return {"nodeComponentOnly": True, "controller": {"replicaCount": 0}, "node": {"tolerateAllTaints": True},
            **chart_images(m, "fsx_csi_driver")}


def volcano_queue(m: WorkloadModel) -> dict:
    """The platform's own queue: no guarantee, deserved or capability (the ``capacity`` plugin lets it
    use what no other queue is guaranteed, capacity.go:1081-1088), and never reclaimed from."""
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": VOLCANO_QUEUE, "labels": labels("volcano-queue")},
            "spec": {"reclaimable": False}}

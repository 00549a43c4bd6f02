"""Helm values of the operators (KubeRay, Volcano, FSx CSI) and the Volcano queue."""

from __future__ import annotations

from typing import Any

from ..model import WorkloadModel
from .common import VOLCANO_QUEUE, labels, placement

# --- operators -------------------------------------------------------------------------------

def system_placement(m: WorkloadModel) -> dict:
    return placement(m.system_pool)


def kuberay_values(m: WorkloadModel) -> dict:
    p = system_placement(m)
    return {"nodeSelector": p["nodeSelector"], "tolerations": p.get("tolerations", [])}


def volcano_values(m: WorkloadModel) -> dict:
    p = system_placement(m)
    custom: dict[str, Any] = {"default_ns": p["nodeSelector"]}
    if p.get("tolerations"):
        custom["default_tolerations"] = p["tolerations"]
    return {"custom": custom}


def fsx_csi_values() -> dict:
    """Node plugin only: static provisioning needs no controller (and so no AWS credentials). Chart
    1.17.0 renders the controller Deployment whatever ``nodeComponentOnly`` says (that value only
    drops its disruption budget), so its replicas go to 0. Its service account stays: with
    ``controller.serviceAccount.create: false`` the chart looks the account up and fails when it is
    missing (templates/controller-serviceaccount.yaml:12-16); without replicas it holds no credentials.
    The node DaemonSet tolerates every taint (chart default), so GPU and Spot nodes mount the volume."""
    return {"nodeComponentOnly": True, "controller": {"replicaCount": 0}, "node": {"tolerateAllTaints": True}}


def volcano_queue(m: WorkloadModel) -> dict:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": VOLCANO_QUEUE, "labels": labels("volcano-queue")},
            "spec": {"weight": 1, "reclaimable": False}}

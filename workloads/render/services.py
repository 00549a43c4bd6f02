"""Namespace, service account, scripts, the checkpoint file system's static PV/PVC, the reward
service and the preprocessing (staging) Job."""

from __future__ import annotations

import json
from typing import Any

from workloads.derive.argv import REWARD_SERVICE
from workloads.derive.model import WorkloadModel
from workloads.render.operators import PLATFORM_PRIORITY_CLASS
from workloads.render.common import (
    scripts_volume,
    FSX_CLAIM,
    FSX_VOLUME,
    HERE,
    HF_TOKEN_DIR,
    SCRIPTS,
    TMP_HOME_ENV,
    TMP_MOUNT,
    container_resources,
    env_list,
    fsx_volume,
    labels,
    meta,
    placement,
    pod_security_context,
    security_context,
    tmp_volume,
)

# --- storage ---------------------------------------------------------------------------------

def fsx_pv(m: WorkloadModel, file_system_id: Any, dns_name: Any, mount_name: Any) -> dict:
    """Static PV of the FSx for Lustre file system (the CSI driver only mounts it)."""
    gib = m.settings.storage.capacity_gib
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{m.namespace}-fsx", "labels": labels("fsx")},
        "spec": {
            "capacity": {"storage": f"{gib}Gi"}, "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "", "mountOptions": ["flock"],
            "claimRef": {"namespace": m.namespace, "name": FSX_CLAIM},
            "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": file_system_id,
                    "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name}},
        },
    }


def fsx_pvc(m: WorkloadModel) -> dict:
    gib = m.settings.storage.capacity_gib
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(m, FSX_CLAIM),
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "volumeName": f"{m.namespace}-fsx",
                     "resources": {"requests": {"storage": f"{gib}Gi"}}}}


# --- namespace, identity, scripts ------------------------------------------------------------

def namespace(m: WorkloadModel) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": m.namespace, "labels": labels("rl")}}


def service_account(m: WorkloadModel) -> dict:
    """The service account the bucket's Pod Identity role is bound to (Ray pods and the Job)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(m, m.service_account)}


def scripts_configmap(m: WorkloadModel) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(m, SCRIPTS),
            "data": {"reward-server.py": (HERE / "reward_server.py").read_text(),
                     "stage.py": (HERE / "stage.py").read_text(),
                     "preflight.py": (HERE / "preflight.py").read_text(),
                     "fabric_bench.py": (HERE / "fabric_bench.py").read_text(),
                     "miles_launcher.py": (HERE / "miles_launcher.py").read_text()}}




# --- reward service --------------------------------------------------------------------------

def reward_ports(m: WorkloadModel) -> dict[str, int]:
    """Who calls the reward service on which port: the platform's namespace on ``port``, each team on
    its own (``RewardSettings.team_ports``). The server knows a request's team by the port alone."""
    s = m.settings.reward
    return {m.namespace: s.port, **{f"team {t}": p for t, p in s.team_ports([t.name for t in m.settings.teams]).items()}}


def reward_template(m: WorkloadModel) -> dict:
    g = m.reward
    s = m.settings.reward
    command = s.command or ["python3", "/opt/scripts/reward-server.py"]
    probe = {"httpGet": {"path": "/health", "port": "http"}}
    ports = reward_ports(m)
    env = {"RM_TYPE": m.settings.run.rm_type, "PORT": str(s.port), "REWARD_PORTS": json.dumps(ports),
           "MAX_BODY_BYTES": str(s.max_body_kib * 1024), "QUEUE_PER_TEAM": str(s.queue_per_team)}
    c = {
        "name": "reward", "image": m.software.reward_image or m.image,
        "imagePullPolicy": "IfNotPresent", "command": command,
        "env": env_list({**env, **TMP_HOME_ENV}),
        "ports": [{"name": "http" if p == s.port else f"team-{i}", "containerPort": p}
                  for i, p in enumerate(ports.values())],
        "resources": container_resources(g),
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 20, "failureThreshold": 3},
        "startupProbe": {**probe, "periodSeconds": 10, "failureThreshold": 60},
        # Root in the Miles image (it imports miles from /root/miles), with no capability at all.
        "securityContext": security_context(g, read_only=True),
        "volumeMounts": [{"name": "scripts", "mountPath": "/opt/scripts", "readOnly": True}, TMP_MOUNT],
    }
    spec = {
        "securityContext": pod_security_context(),
        "containers": [c], "volumes": [scripts_volume(), tmp_volume()], "automountServiceAccountToken": False,
        # A Spot notice gives two minutes; the service drains in well under that.
        "terminationGracePeriodSeconds": 30,
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": labels(REWARD_SERVICE)}}],
        **placement(g.pool),
        "priorityClassName": PLATFORM_PRIORITY_CLASS,  # shared by every team's runs
    }
    return {"metadata": {"labels": labels(REWARD_SERVICE)}, "spec": spec}


def reward_deployment(m: WorkloadModel) -> dict:
    """``pulumi.com/skipAwait``: pulumi-kubernetes (v4.34.2, its provider's ``pkg/await/deployment.go``)
    waits up to 10 minutes for a Deployment's rollout and fails the update when it does not become
    available; the reward pods pull the stack's own ECR image, which the first deploy creates empty
    and a new pool pulls for minutes. The annotation skips that wait (pulumi-kubernetes docs,
    "pulumi.com/skipAwait" annotation); the rollout is watched with ``kubectl rollout status``."""
    g = m.reward
    md = meta(m, REWARD_SERVICE)
    md["annotations"] = {"pulumi.com/skipAwait": "true"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": md,
            "spec": {"replicas": g.replicas, "selector": {"matchLabels": labels(REWARD_SERVICE)},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                     "template": reward_template(m)}}


def reward_service(m: WorkloadModel) -> dict:
    """One Service, one port per caller (``reward_ports``): a team's runs call ``reward:<its port>``."""
    ports = [{"name": c["name"], "port": c["containerPort"], "targetPort": c["name"]}
             for c in reward_template(m)["spec"]["containers"][0]["ports"]]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(m, REWARD_SERVICE),
            "spec": {"selector": labels(REWARD_SERVICE), "ports": ports}}


def reward_pdb(m: WorkloadModel) -> dict:
    """Voluntary disruptions (drains before a Spot replacement, upgrades) take one replica at a time."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(m, REWARD_SERVICE),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels(REWARD_SERVICE)}}}


# --- preprocessing Job -----------------------------------------------------------------------

def stage_template(m: WorkloadModel) -> dict:
    g, p, run = m.stage, m.paths, m.settings.run
    data_dir = p.data.rsplit("/", 1)[0]
    # The Hugging Face token (gated models) is read from a file of the optional Secret hf-token,
    # not from an environment variable.
    env = env_list({"MODEL": run.model, "MODEL_DIR": p.model, "REF_MODEL": m.ref_model, "REF_MODEL_DIR": p.ref_model,
                    "DATASET": run.dataset, "DATA_DIR": data_dir,
                    "PROMPT_FILE": run.prompt_file, "HF_HOME": f"{p.mount}/hf-cache",
                    "HF_TOKEN_FILE": f"{HF_TOKEN_DIR}/token", **TMP_HOME_ENV})
    c = {"name": "stage", "image": m.image, "imagePullPolicy": "IfNotPresent",
         "command": ["python3", "/opt/scripts/stage.py"], "env": env,
         "resources": container_resources(g),
         # Root (the FSx root directory is root-owned; see CKV_K8S_23), with no capability at all.
         "securityContext": security_context(read_only=True),
         "volumeMounts": [{"name": FSX_VOLUME, "mountPath": p.mount},
                          {"name": "scripts", "mountPath": "/opt/scripts", "readOnly": True},
                          {"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True}, TMP_MOUNT]}
    token = {"name": "hf-token", "secret": {"secretName": "hf-token", "optional": True,
                                            "items": [{"key": "token", "path": "token"}]}}
    spec = {"restartPolicy": "OnFailure", "serviceAccountName": m.service_account,
            "securityContext": pod_security_context(), "containers": [c],
            "volumes": [fsx_volume(), scripts_volume(), token, tmp_volume("4Gi")], **placement(g.pool)}
    return {"metadata": {"labels": labels("stage")}, "spec": spec}


def preprocess_job(m: WorkloadModel) -> dict:
    md = meta(m, f"stage-{m.settings.run.name}", "stage")
    # Downloading a large model takes longer than `pulumi up` should wait.
    md["annotations"] = {"pulumi.com/skipAwait": "true"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": md,
            "spec": {"backoffLimit": 4, "template": stage_template(m)}}

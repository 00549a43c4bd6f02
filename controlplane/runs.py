"""Runs on the test platform the way a team member submits them: the real ``runs submit`` command, its
kubeconfig acting as the member's IAM session, and what KubeRay and Volcano then make of the RayJob."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client

from workloads.cli import runs as runs_cli
from workloads.render.teams import namespace_of

from controlplane.kube import Kube, eventually
from controlplane.platform import Platform
from controlplane.session import STACK_DIR

REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rl-platform"
"""What ``pulumi stack output imageRepository`` gives (a stack's ECR repository URL); kwok pulls nothing."""
RAYJOB = ("ray.io/v1", "RayJob")
PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")


def member_of(platform: Platform, team: str) -> str:
    """The principal ARN of the team's first member (an access-entry key of the platform's users)."""
    team_settings = next(t for t in platform.cfg.workloads.teams if t.name == team)
    return team_settings.members[0]


def submit(platform: Platform, run_file: Path, as_principal: str, *extra: str) -> list[str]:
    """``python -m workloads.cli.runs submit`` as ``as_principal``; its printed lines (exit status asserted 0)."""
    kubeconfig = platform.cp.kubeconfig(as_principal)
    printed: list[str] = []
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig)
    try:
        status = runs_cli.main(["submit", platform.cfg.stack, str(run_file), "--repository", REPOSITORY,
                                "--stack-dir", str(STACK_DIR), "--context", as_principal, *extra], out=printed.append)
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old
    assert status == 0, printed
    return printed


def run_pods(platform: Platform, team: str, rayjob: str) -> list[client.V1Pod]:
    core = client.CoreV1Api(platform.cp.client())
    cluster = rayjob_cluster(platform, team, rayjob)
    if not cluster:
        return []
    return core.list_namespaced_pod(namespace_of(team), label_selector=f"ray.io/cluster={cluster}").items


def rayjob_cluster(platform: Platform, team: str, rayjob: str) -> str | None:
    job = platform.admin.get(*RAYJOB, rayjob, namespace_of(team))
    return ((job or {}).get("status") or {}).get("rayClusterName")


def cluster_running(platform: Platform, namespace: str, cluster: str, expected: int,
                    timeout: float = 120) -> list[client.V1Pod]:
    """The ``expected`` pods of Ray cluster ``namespace/cluster``, once all of them are Running."""
    core = client.CoreV1Api(platform.cp.client())

    def running():
        pods = core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={cluster}").items
        return pods if len(pods) == expected and all(p.status.phase == "Running" for p in pods) else None
    return eventually(f"Ray cluster {namespace}/{cluster}: {expected} pods Running", running, timeout)


def all_running(platform: Platform, team: str, rayjob: str, expected: int, timeout: float = 120) -> list[client.V1Pod]:
    """The pods of the RayJob's cluster, once all ``expected`` of them are Running."""
    cluster = eventually(f"{team}/{rayjob}'s cluster", lambda: rayjob_cluster(platform, team, rayjob), timeout)
    return cluster_running(platform, namespace_of(team), cluster, expected, timeout)


def rayjobs(kube: Kube, team: str) -> list[dict]:
    return kube.list(*RAYJOB, namespace=namespace_of(team))


def delete_run(platform: Platform, team: str, rayjob: str, timeout: float = 120) -> None:
    """Delete the RayJob and, once KubeRay has deleted its pods, let their grace period elapse (kwok ends a
    deleted pod at a random moment before its deletion time, up to the run's ``checkpointMinutes``): the
    pods are then gone, as after a kubelet's graceful stop."""
    ns, core = namespace_of(team), client.CoreV1Api(platform.cp.client())
    cluster = rayjob_cluster(platform, team, rayjob)
    assert cluster, f"RayJob {ns}/{rayjob} has no cluster yet"
    platform.admin.delete(*RAYJOB, rayjob, ns)
    eventually(f"RayJob {ns}/{rayjob} gone", lambda: platform.admin.get(*RAYJOB, rayjob, ns) is None, timeout)

    def terminating():
        pods = core.list_namespaced_pod(ns, label_selector=f"ray.io/cluster={cluster}").items
        for pod in pods:
            if pod.metadata.deletion_timestamp:
                core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
        return not pods
    eventually(f"the pods of {ns}/{rayjob} gone", terminating, timeout)


def node_pool(platform: Platform, node_name: str) -> str:
    node = client.CoreV1Api(platform.cp.client()).read_node(node_name)
    return node.metadata.labels["rl.platform/pool"]

"""Runs on the test platform the way a team member submits them: the real ``runs`` command (submit, plan,
cancel), its kubeconfig acting as the member's IAM session, and what KubeRay and Volcano then make of the
RayJob; Volcano's scheduling sessions as a clock; a drain's evictions; a deleted run's pods let stop as a kubelet
would; and ``finish``, the one thing a kwok head cannot do (answer that its job ended)."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import yaml
from kubernetes import client

from workloads.checks.runs import load_run
from workloads.cli import runs as runs_cli
from workloads.schema.run import RunFile
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


def command(platform: Platform, argv: list[str], as_principal: str | None = None) -> tuple[int, list[str]]:
    """``python -m workloads.cli.runs <argv>`` as ``as_principal`` (its kubeconfig current; none for
    ``plan``, which reads no cluster), ``plan`` and ``submit`` reading the built stack files: its exit status
    and printed lines."""
    printed: list[str] = []
    if argv[0] in ("plan", "submit"):
        argv = [*argv, "--stack-dir", str(STACK_DIR)]
    old = os.environ.get("KUBECONFIG")
    if as_principal is not None:
        os.environ["KUBECONFIG"] = str(platform.cp.kubeconfig(as_principal))
        argv = [*argv, "--context", as_principal]
    try:
        status = runs_cli.main(argv, out=printed.append)
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old
    return status, printed


def submit(platform: Platform, run_file: Path, as_principal: str, *extra: str) -> list[str]:
    """``runs submit`` as ``as_principal``; its printed lines (exit status asserted 0)."""
    status, printed = command(platform, ["submit", platform.cfg.stack, str(run_file), "--repository", REPOSITORY,
                                         *extra], as_principal)
    assert status == 0, printed
    return printed


def run_file(run: RunFile, directory: Path) -> Path:
    """``run`` written as a run file (an experiment arm's run as ``bench`` makes it, ``bench.experiment.arm_run``),
    for ``runs submit``; it reads back as the same run."""
    path = directory / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(run.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False))
    assert load_run(path) == run, f"{path} does not read back as run {run.name}"
    return path


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


def delete_run(platform: Platform, team: str, rayjob: str, by: Kube | None = None, timeout: float = 120) -> None:
    """Delete the RayJob (as ``by``, default the admin) and let its pods stop (``stopped``)."""
    ns = namespace_of(team)
    cluster = rayjob_cluster(platform, team, rayjob)
    assert cluster, f"RayJob {ns}/{rayjob} has no cluster yet"
    (by or platform.admin).delete(*RAYJOB, rayjob, ns)
    eventually(f"RayJob {ns}/{rayjob} gone", lambda: platform.admin.get(*RAYJOB, rayjob, ns) is None, timeout)
    stopped(platform, ns, cluster, timeout)


def stopped(platform: Platform, namespace: str, cluster: str, timeout: float = 120) -> None:
    """Once KubeRay has deleted the pods of Ray cluster ``namespace/cluster``, let their grace period elapse
    (kwok ends a deleted pod at its deletion time, ``checkpointMinutes`` after the delete: skipped here by a
    delete with grace 0): the pods are then gone, as after a kubelet's graceful stop."""
    core = client.CoreV1Api(platform.cp.client())

    def terminating():
        pods = core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={cluster}").items
        for pod in pods:
            if pod.metadata.deletion_timestamp:
                core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        return not pods
    eventually(f"the pods of Ray cluster {namespace}/{cluster} gone", terminating, timeout)


def node_pool(platform: Platform, node_name: str) -> str:
    node = client.CoreV1Api(platform.cp.client()).read_node(node_name)
    return node.metadata.labels["rl.platform/pool"]


def through_sessions(platform: Platform, count: int, check: Callable[[], str | None], timeout: float = 120) -> None:
    """``check()`` (a complaint, or None) holds from now until ``count`` more Volcano scheduling sessions have
    closed (``Volcano.sessions``); AssertionError with the first complaint."""
    start, deadline = platform.volcano.sessions(), time.monotonic() + timeout
    while (closed := platform.volcano.sessions() - start) < count:
        complaint = check()
        assert complaint is None, f"after {closed} scheduling sessions: {complaint}"
        assert time.monotonic() < deadline, f"{closed} of {count} scheduling sessions within {timeout:.0f} s"
        time.sleep(0.2)
    complaint = check()
    assert complaint is None, f"after {count} scheduling sessions: {complaint}"


def evictions(platform: Platform, nodes: set[str]) -> dict[str, str]:
    """Evict every pod on ``nodes`` through the Eviction API (what ``kubectl drain`` sends); pod -> refusal
    of those refused (429: a disruption budget allows none)."""
    core = client.CoreV1Api(platform.cp.client())
    refused = {}
    for node in sorted(nodes):
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
            md = pod.metadata
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": md.name, "namespace": md.namespace}}
            try:
                core.create_namespaced_pod_eviction(md.name, md.namespace, body)
            except client.ApiException as e:
                if e.status != 404:
                    refused[f"{md.namespace}/{md.name}"] = f"{e.status} {e.reason}"
    return refused


def finish(platform: Platform, team: str, rayjob: str, job_status: str = "SUCCEEDED") -> None:
    """Stand-in for the one thing a kwok head cannot do, answer KubeRay's job-status poll: the RayJob's status
    as KubeRay writes it when the head reports the job ended with ``job_status`` (v1.6.2 rayjob_controller.go:
    333-368, terminal -> Complete, FAILED -> Failed), with ``endTime`` one ``ttlSecondsAfterFinished`` ago
    (KubeRay sets it at the transition, :907), so KubeRay deletes the run's Ray cluster and empties its
    PodGroup at once (:418-437, :1367-1400) instead of a minute later. Written by the admin to the status
    subresource; everything after it is KubeRay's own."""
    ns = namespace_of(team)
    job = platform.admin.get(*RAYJOB, rayjob, ns)
    ended = datetime.now(timezone.utc) - timedelta(seconds=job["spec"].get("ttlSecondsAfterFinished", 0))
    status = {"jobStatus": job_status, "jobDeploymentStatus": "Failed" if job_status == "FAILED" else "Complete",
              "endTime": ended.strftime("%Y-%m-%dT%H:%M:%SZ")}
    client.CustomObjectsApi(platform.cp.client()).patch_namespaced_custom_object_status(
        "ray.io", "v1", ns, "rayjobs", rayjob, {"status": status})

"""Tenancy on p5en-shared against the real API server: team beta's member against team alpha, and the pods
KubeRay would create from beta's RayJob, each judged by RBAC and the stack's own ValidatingAdmissionPolicies
(the CEL the API server compiles, not cel-python's reading of it)."""

from __future__ import annotations

import copy

import pytest
from conftest import ROOT, recorded
from kubernetes import client
from test_admission import _pod_attacks

from stackconfig.versions import with_repository
from workloads.checks.runs import load_run
from workloads.deploy.submit import run_objects
from workloads.render.teams import namespace_of

from controlplane import runs, stack
from controlplane.kube import Kube, refusal
from controlplane.operators import KUBERAY_SERVICE_ACCOUNT
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane
BETA_RUN = ROOT / "runs" / "beta-lr-sweep.yaml"


@pytest.fixture(scope="module")
def shared():
    return platform_of("p5en-shared", recorded)


@pytest.fixture(scope="module")
def beta(shared) -> Kube:
    return shared.member(runs.member_of(shared, "beta"))


@pytest.fixture(scope="module")
def operator(shared) -> Kube:
    """The KubeRay operator's identity: it creates every Ray pod of every team."""
    ns = stack.release(shared.graph, "kuberay-operator")["namespace"]
    return Kube(shared.cp.client(token=shared.cp.service_account_token(ns, KUBERAY_SERVICE_ACCOUNT)))  # made at install


@pytest.fixture(scope="module")
def beta_pods(shared) -> list[dict]:
    """The pods of beta's run as KubeRay makes them: its RayJob's templates with the labels, scheduler and
    environment the operator adds (``test_admission.run_pods``, checked against KubeRay in test_cp_runs)."""
    from test_admission import run_pods
    rayjob = with_repository(run_objects(shared.cfg, load_run(BETA_RUN)).rayjob, runs.REPOSITORY)
    pods = []
    for i, pod in enumerate(run_pods(rayjob)):
        pod = copy.deepcopy(pod)
        pod["apiVersion"], pod["kind"] = "v1", "Pod"
        pod["metadata"] = {**pod["metadata"], "name": f"attack-{i}", "namespace": namespace_of("beta")}
        pods.append(pod)
    return pods


def _refused(kube: Kube, obj: dict) -> str | None:
    return refusal(lambda: kube.create(obj))


@pytest.mark.parametrize("kind, api_version, namespace", [
    ("Pod", "v1", "team-beta"), ("PodGroup", "scheduling.volcano.sh/v1beta1", "team-beta"),
    ("RayCluster", "ray.io/v1", "team-beta"), ("RayJob", "ray.io/v1", "team-alpha"),
    ("Queue", "scheduling.volcano.sh/v1beta1", None), ("ResourceQuota", "v1", "team-beta"),
    ("PriorityClass", "scheduling.k8s.io/v1", None), ("Role", "rbac.authorization.k8s.io/v1", "team-beta"),
])
def test_rbac_gives_a_member_no_object_but_its_own_teams_rayjobs(shared, beta, kind, api_version, namespace):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", **({"namespace": namespace} if namespace else {})}}
    message = _refused(beta, obj)
    assert message and message.startswith("403"), message


def test_each_pod_attack_is_refused_by_the_api_server_and_the_run_pods_are_admitted(shared, operator, beta_pods):
    core = client.CoreV1Api(operator.api)
    for pod in beta_pods:  # KubeRay's own pods of beta's run pass (dry run: nothing is left behind)
        core.create_namespaced_pod(pod["metadata"]["namespace"], pod, dry_run="All")
    worker = beta_pods[1]
    failures = []
    for name, (attack, part) in _pod_attacks(worker).items():
        attack = {**copy.deepcopy(attack), "apiVersion": "v1", "kind": "Pod"}
        message = refusal(lambda: core.create_namespaced_pod(attack["metadata"]["namespace"], attack, dry_run="All"))
        if not message or part not in message:
            failures.append(f"{name}: {message or 'admitted'}")
    assert not failures, "\n".join(failures)

"""Tenancy on p5en-shared against the real API server, as team beta's member against team alpha and as the
KubeRay operator that makes every Ray object of beta's runs: RBAC (the rules the API server reports, and its
refusals in its own words), and every attack of the admission tests' tables (``tests/test_admission*.py``,
imported, not copied) on pods, RayJobs, RayClusters, PodGroups and Services, at CREATE, UPDATE and DELETE,
each refused by the policy that names it, while beta's own run objects are admitted. The API server answers
a policy's refusal with its first failing validation, ``ValidatingAdmissionPolicy '<name>' with binding ...
denied request: <message>`` (apiserver v0.35.3 pkg/admission/plugin/policy/validating/dispatcher.go:289-304),
so each attack is held to the policy's name and its rule's words. Writes are dry runs (``dryRun=All``:
admission runs, nothing is stored) except the objects an UPDATE or DELETE needs."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import ROOT, recorded
from kubernetes import client
from test_admission import (HEAD_SERVICE, RAYJOB_ATTACKS, SERVICE_ATTACKS, changed_rayjob, changed_service,
                            operator_cluster, pod_attacks, run_pods)
from test_admission_holds import hold_attacks, pod_update_attacks, rayjob_attacks
from test_admission_tenants import (CLUSTER_FIELD_ATTACKS, NOT_PREEMPTABLE, PODGROUP_ATTACKS, RELABEL_ATTACKS,
                                    changed_podgroup, not_preemptable, podgroup, tenant_pod_attacks,
                                    with_cluster_field)

from nodes.marks import RESULT_LABEL
from nodes.policy import OWN_NODE, WATCH_PREFIX
from nodes.render import NAMESPACE as BURN_IN_NAMESPACE, WATCH_ACCOUNT
from stackconfig.versions import with_repository
from workloads.checks.runs import load_run
from workloads.deploy.submit import run_objects
from workloads.render.admission import (DELETION_POLICY, PODGROUP_POLICY, POD_POLICY, RAYCLUSTER_POLICY,
                                        RAYJOB_POLICY, SERVICE_POLICY)
from workloads.render.teams import CLUSTER_READ_RULES, SUBMITTER_RULES, namespace_of

from controlplane import runs, stack
from controlplane.kube import Kube, eventually, refusal
from controlplane.operators import KUBERAY_SERVICE_ACCOUNT
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane
BETA_RUN = ROOT / "runs" / "beta-lr-sweep.yaml"
ALPHA, BETA = namespace_of("alpha"), namespace_of("beta")
SELF_REVIEWS = {("authorization.k8s.io", "selfsubjectaccessreviews", "create"),
                ("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
                ("authentication.k8s.io", "selfsubjectreviews", "create")}
"""What every authenticated user may do (the ``system:basic-user`` ClusterRole Kubernetes bootstraps)."""


@pytest.fixture(scope="module")
def shared():
    return platform_of("p5en-shared", recorded)


@pytest.fixture(scope="module")
def beta(shared) -> Kube:
    return shared.member(runs.member_of(shared, "beta"))


@pytest.fixture(scope="module")
def operator(shared) -> Kube:
    """The KubeRay operator's identity: it creates every Ray pod, RayCluster, PodGroup and Service of every team."""
    ns = stack.release(shared.graph, "kuberay-operator")["namespace"]
    return Kube(shared.cp.client(token=shared.cp.service_account_token(ns, KUBERAY_SERVICE_ACCOUNT)))  # made at install


@pytest.fixture(scope="module")
def rayjob(shared) -> dict:
    """Beta's RayJob as ``runs submit`` renders it."""
    return with_repository(run_objects(shared.cfg, load_run(BETA_RUN)).rayjob, runs.REPOSITORY)


@pytest.fixture(scope="module")
def beta_pods(rayjob) -> list[dict]:
    """The pods of beta's run as KubeRay makes them (``test_admission.run_pods``): head, trainer, rollout."""
    return [_named(pod, "v1", "Pod", f"attack-{i}") for i, pod in enumerate(run_pods(rayjob))]


@pytest.fixture(scope="module")
def grace(shared) -> int:
    return shared.cfg.workloads.capacity_block_end.checkpoint_minutes * 60


def _named(obj: dict, api_version: str, kind: str, name: str) -> dict:
    out = copy.deepcopy(obj)
    out["apiVersion"], out["kind"] = api_version, kind
    out["metadata"] = {**out["metadata"], "name": name, "namespace": BETA}
    return out


def _elsewhere(value):
    """A table's value, seen from beta's namespace: the tables are written from alpha's (``test_admission.TEAM_NS``),
    where ``team-beta`` is another team's queue; here it is ``team-alpha``."""
    if isinstance(value, dict):
        return {k: _elsewhere(v) for k, v in value.items()}
    return ALPHA if value == BETA else value


def _message(refused: str | None) -> str | None:
    """The API server's message of a refusal (``controlplane.kube.refusal``'s ``<code>: <Status body>``)."""
    if refused is None:
        return None
    code, _, body = refused.partition(": ")
    try:
        return f"{code}: {json.loads(body)['message']}"
    except (ValueError, KeyError):
        return refused


def _dry_create(kube: Kube, obj: dict) -> str | None:
    res = kube.resource(obj["apiVersion"], obj["kind"])
    return _message(refusal(lambda: res.create(body=obj, namespace=obj["metadata"]["namespace"], dry_run="All")))


def _misses(kube: Kube, policy: str, attacks: dict[str, tuple[dict, str]]) -> list[str]:
    """The attacks the API server admits, or refuses otherwise than by ``policy``'s rule the table names."""
    out = []
    for name, (obj, part) in attacks.items():
        message = _dry_create(kube, obj)
        if not message or f"ValidatingAdmissionPolicy '{policy}'" not in message or part not in message:
            out.append(f"{name}: {message or 'admitted'}")
    return out


# --- RBAC ------------------------------------------------------------------------------------------

def _triples(rules: list[dict]) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) of each rule that names no single object."""
    return {(g, r, v) for rule in rules if not rule.get("resourceNames")
            for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_a_members_rules_are_the_rendered_ones_and_none_in_another_team(beta):
    """SelfSubjectRulesReview: in alpha's namespace beta has only what every user has and the cluster-wide
    reads (``CLUSTER_READ_RULES``); in its own, exactly ``SUBMITTER_RULES`` more."""
    auth = client.AuthorizationV1Api(beta.api)

    def rules(ns: str) -> set[tuple[str, str, str]]:
        review = auth.create_self_subject_rules_review({"spec": {"namespace": ns}})
        assert not review.status.incomplete, review.status.evaluation_error
        return _triples([{"apiGroups": r.api_groups or [], "resources": r.resources or [], "verbs": r.verbs,
                          "resourceNames": r.resource_names} for r in review.status.resource_rules])
    alpha, own = rules(ALPHA), rules(BETA)
    cluster = _triples(CLUSTER_READ_RULES) | SELF_REVIEWS
    assert alpha == cluster, sorted(alpha ^ cluster)
    assert own == cluster | _triples(SUBMITTER_RULES), sorted(own ^ (cluster | _triples(SUBMITTER_RULES)))


@pytest.mark.parametrize("verb, resource, subresource, group", [
    ("create", "pods", "exec", ""), ("get", "pods", "log", ""), ("create", "pods", "eviction", ""),
    ("patch", "pods", "ephemeralcontainers", ""), ("create", "serviceaccounts", "token", ""),
    ("get", "secrets", "", ""), ("list", "secrets", "", ""), ("get", "rayjobs", "", "ray.io"),
    ("patch", "rayjobs", "", "ray.io"), ("delete", "rayjobs", "", "ray.io"), ("list", "pods", "", ""),
    ("create", "poddisruptionbudgets", "", "policy"), ("delete", "pods", "", ""),
])
def test_a_member_reaches_nothing_in_another_teams_namespace(beta, verb, resource, subresource, group):
    review = client.AuthorizationV1Api(beta.api).create_self_subject_access_review({"spec": {"resourceAttributes": {
        "namespace": ALPHA, "verb": verb, "resource": resource, "subresource": subresource, "group": group}}})
    assert not review.status.allowed, review.status.reason


@pytest.mark.parametrize("call", ["secret", "rayjob get", "rayjob patch", "rayjob delete", "pod log", "token"])
def test_rbac_refuses_a_members_calls_into_another_team_in_its_own_words(beta, call):
    """The refusal is RBAC's ("... is forbidden: User ... cannot <verb> resource ..."), not a quota's or a
    policy's (a quota refusal is 403 too)."""
    core, custom = client.CoreV1Api(beta.api), client.CustomObjectsApi(beta.api)
    calls = {"secret": lambda: core.read_namespaced_secret("ray-token", ALPHA),
             "rayjob get": lambda: custom.get_namespaced_custom_object("ray.io", "v1", ALPHA, "rayjobs", "r-1"),
             "rayjob patch": lambda: custom.patch_namespaced_custom_object("ray.io", "v1", ALPHA, "rayjobs", "r-1",
                                                                           {"spec": {"suspend": True}}),
             "rayjob delete": lambda: custom.delete_namespaced_custom_object("ray.io", "v1", ALPHA, "rayjobs", "r-1"),
             "pod log": lambda: core.read_namespaced_pod_log("r-1-head", ALPHA),
             "token": lambda: core.create_namespaced_service_account_token("checkpoint-writer", ALPHA,
                                                                           {"spec": {"audiences": ["sts"]}})}
    message = _message(refusal(calls[call]))
    assert message and message.startswith("403") and " is forbidden: User " in message and " cannot " in message \
        and f'in the namespace "{ALPHA}"' in message, message


@pytest.mark.parametrize("kind, api_version, namespace", [
    ("Pod", "v1", BETA), ("PodGroup", "scheduling.volcano.sh/v1beta1", BETA),
    ("RayCluster", "ray.io/v1", BETA), ("RayJob", "ray.io/v1", ALPHA),
    ("Queue", "scheduling.volcano.sh/v1beta1", None), ("ResourceQuota", "v1", BETA),
    ("PriorityClass", "scheduling.k8s.io/v1", None), ("Role", "rbac.authorization.k8s.io/v1", BETA),
    ("PodDisruptionBudget", "policy/v1", BETA), ("Service", "v1", BETA), ("Secret", "v1", BETA),
])
def test_rbac_gives_a_member_no_object_but_its_own_teams_rayjobs(beta, kind, api_version, namespace):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", **({"namespace": namespace} if namespace else {})}}
    message = _message(refusal(lambda: beta.create(obj)))
    assert message and message.startswith("403") and " is forbidden: User " in message and \
        " cannot create resource " in message, message


# --- admission: CREATE -----------------------------------------------------------------------------

@pytest.fixture
def fault_engine_account(shared):
    """The fault engine's account in beta's namespace, as the FIS set-up makes it where it targets pods: without
    it the ServiceAccount admission plugin refuses the attack before any policy sees it."""
    from components.faults import FIS_SERVICE_ACCOUNT
    core = client.CoreV1Api(shared.cp.client())
    core.create_namespaced_service_account(BETA, {"metadata": {"name": FIS_SERVICE_ACCOUNT}})
    yield
    core.delete_namespaced_service_account(FIS_SERVICE_ACCOUNT, BETA)


def test_every_pod_attack_is_refused_by_the_pod_policy_and_the_runs_pods_are_admitted(operator, beta_pods, grace,
                                                                                    fault_engine_account):
    for pod in beta_pods:  # KubeRay's own pods of beta's run pass
        assert _dry_create(operator, pod) is None, pod["metadata"]["name"]
    attacks = {**pod_attacks(beta_pods[1]), **tenant_pod_attacks(beta_pods), **hold_attacks(beta_pods, grace)}
    assert len(attacks) == 19 + 35 + 20
    misses = _misses(operator, POD_POLICY, attacks)
    assert not misses, "\n".join(misses)


def test_every_rayjob_attack_by_the_member_is_refused_and_its_own_rayjob_admitted(beta, rayjob, grace):
    assert _dry_create(beta, rayjob) is None
    attacks = {f"{path}={value}": (changed_rayjob(rayjob, path, _elsewhere(value)), part)
               for path, value, part in RAYJOB_ATTACKS}
    attacks |= {f"{path} on": (with_cluster_field(rayjob, path, value), "creates no other object")
                for path, value in CLUSTER_FIELD_ATTACKS}
    attacks |= {f"not preemptable {w}={v}": (not_preemptable(rayjob, w, v), "preemptable") for w, v in NOT_PREEMPTABLE}
    attacks |= rayjob_attacks(rayjob, grace)
    misses = _misses(beta, RAYJOB_POLICY, attacks)
    assert not misses, "\n".join(misses)


def _cluster(rayjob: dict, name: str = "beta-cluster") -> dict:
    """The RayCluster KubeRay makes from ``rayjob`` (``test_admission.operator_cluster``)."""
    out = _named(operator_cluster(rayjob), "ray.io/v1", "RayCluster", name)
    if rayjob["metadata"].get("finalizers"):
        out["metadata"]["finalizers"] = list(rayjob["metadata"]["finalizers"])
    return out


def test_every_ray_cluster_podgroup_and_service_attack_is_refused_as_the_operator_makes_them(operator, rayjob, grace):
    """The operator copies what a RayJob asks for: its RayCluster, PodGroup and head Service are judged again."""
    assert _dry_create(operator, _cluster(rayjob)) is None
    group = _named(podgroup(rayjob), "scheduling.volcano.sh/v1beta1", "PodGroup", "ray-beta-pg")
    assert _dry_create(operator, group) is None
    service = _named(HEAD_SERVICE, "v1", "Service", "beta-head-svc")
    assert _dry_create(operator, service) is None
    clusters = {f"{p}={v}": (_cluster(changed_rayjob(rayjob, p, v)), part) for p, v, part in RAYJOB_ATTACKS
                if p.startswith("spec.rayClusterSpec")}
    clusters |= {f"{p} on": (_cluster(with_cluster_field(rayjob, p, v)), "creates no other object")
                 for p, v in CLUSTER_FIELD_ATTACKS}
    clusters |= {f"label {k}={v}": (_relabelled(_cluster(rayjob), k, _elsewhere(v)), part)
                 for k, v, part in RELABEL_ATTACKS}
    clusters |= {n: (_cluster(bad), part) for n, (bad, part) in rayjob_attacks(rayjob, grace).items()}
    groups = {f"{change}": (changed_podgroup(group, _elsewhere(change)), part) for change, part in PODGROUP_ATTACKS}
    groups |= {f"not preemptable {w}={v}": (not_preemptable(group, w, v), "preemptable") for w, v in NOT_PREEMPTABLE}
    services = {f"{change}": (_allocated(changed_service(change)) | {"metadata": service["metadata"]}, part)
                for change, part in SERVICE_ATTACKS}
    misses = [*_misses(operator, RAYCLUSTER_POLICY, clusters), *_misses(operator, PODGROUP_POLICY, groups),
              *_misses(operator, SERVICE_POLICY, services)]
    assert not misses, "\n".join(misses)


def _allocated(service: dict) -> dict:
    """A Service attack with a cluster IP of its own (KubeRay's head Service is headless, which the API server
    refuses with a load balancer, a node port or an external name before any policy sees it)."""
    out = copy.deepcopy(service)
    out["spec"].pop("clusterIP", None)
    return out


def _relabelled(obj: dict, key: str, value: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"][key] = value
    return out


# --- admission: UPDATE and DELETE ---------------------------------------------------------------------

def test_a_metadata_only_update_of_a_running_pod_is_judged(shared, operator, beta_pods):
    """Created as KubeRay creates it (its PodGroup absent, so it stays Pending), then patched: a label or an
    annotation that moves it out of reclaim, into another gang or another order is refused; so is a
    privileged debug container, whoever adds it (the admin here)."""
    core = client.CoreV1Api(operator.api)
    pod = _named(beta_pods[1], "v1", "Pod", "update-target")
    core.create_namespaced_pod(BETA, pod)
    try:
        misses = []
        for name, (changed, part) in pod_update_attacks(pod).items():
            patch = {"metadata": {k: changed["metadata"].get(k) for k in ("labels", "annotations")}}
            message = _message(refusal(lambda: core.patch_namespaced_pod("update-target", BETA, patch, dry_run="All")))
            if not message or f"ValidatingAdmissionPolicy '{POD_POLICY}'" not in message or part not in message:
                misses.append(f"{name}: {message or 'admitted'}")
        assert misses == []
        admin = client.CoreV1Api(shared.cp.client())
        debug = {"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox", "securityContext": {
            "privileged": True, "capabilities": {"drop": ["ALL"]}}}]}}
        message = _message(refusal(lambda: admin.patch_namespaced_pod_ephemeralcontainers(
            "update-target", BETA, debug, dry_run="All")))
        assert message and f"ValidatingAdmissionPolicy '{POD_POLICY}'" in message and "privileged" in message, message
        harmless = {"metadata": {"labels": {"example.com/note": "x"}}}
        assert refusal(lambda: core.patch_namespaced_pod("update-target", BETA, harmless, dry_run="All")) is None
    finally:
        core.delete_namespaced_pod("update-target", BETA, grace_period_seconds=0)


def test_a_member_cannot_move_resume_or_orphan_its_rayjob(beta, rayjob):
    """Beta's RayJob, suspended (KubeRay makes nothing for it): relabelled into alpha's queue, resumed once
    cancelled, given the orphan finalizer or deleted leaving its dependents, each refused; deleted with its
    dependents, gone."""
    res = beta.resource("ray.io/v1", "RayJob")
    job = copy.deepcopy(rayjob)
    job["metadata"]["name"] = "beta-suspended"
    job["spec"]["suspend"] = True
    res.create(body=job, namespace=BETA)
    merge = "application/merge-patch+json"

    def patched(patch: dict) -> str | None:
        return _message(refusal(lambda: res.patch(body=patch, name="beta-suspended", namespace=BETA,
                                                  content_type=merge, dry_run="All")))

    def deleted(options: dict) -> str | None:
        return _message(refusal(lambda: res.delete(name="beta-suspended", namespace=BETA,
                                                   body={**options, "dryRun": ["All"]})))
    try:
        refusals = {"queue": (patched({"metadata": {"labels": {"volcano.sh/queue-name": ALPHA}}}),
                              RAYJOB_POLICY, "own team's queue"),
                    "resume": (patched({"spec": {"suspend": False}}), RAYJOB_POLICY, "stays cancelled"),
                    "orphan finalizer": (patched({"metadata": {"finalizers": ["orphan"]}}), RAYJOB_POLICY, "orphan"),
                    "delete Orphan": (deleted({"propagationPolicy": "Orphan"}), DELETION_POLICY, "with its dependents"),
                    "delete orphanDependents": (deleted({"orphanDependents": True}), DELETION_POLICY,
                                                "with its dependents")}
        wrong = {k: m for k, (m, policy, part) in refusals.items()
                 if not m or f"ValidatingAdmissionPolicy '{policy}'" not in m or part not in m}
        assert wrong == {}
        assert deleted({"propagationPolicy": "Foreground"}) is None
    finally:
        res.delete(name="beta-suspended", namespace=BETA, body={"propagationPolicy": "Background"})


# --- the burn-in's node policy, and what the API server says of the policies --------------------------------

def test_a_burn_in_token_bound_to_a_pod_on_one_node_cannot_write_another(shared):
    """The watcher's token bound to its pod on node A (the API server adds the node's name to the user's
    extra): the same write of A and of B, the first refused only as the watcher may write nothing but a
    re-test (``nodes.policy.retest_rules``), the second by ``nodes.policy.OWN_NODE``."""
    core = client.CoreV1Api(shared.cp.client())
    pod = eventually("a Running watcher pod", lambda: next(
        (p for p in core.list_namespaced_pod(BURN_IN_NAMESPACE).items
         if p.spec.service_account_name == WATCH_ACCOUNT and p.status.phase == "Running" and p.spec.node_name), None))
    a = pod.spec.node_name
    pool = core.read_node(a).metadata.labels["rl.platform/pool"]
    b = next(n.metadata.name for n in core.list_node(label_selector=f"rl.platform/pool={pool}").items
             if n.metadata.name != a)
    watcher = client.CoreV1Api(shared.cp.client(
        token=shared.cp.service_account_token(BURN_IN_NAMESPACE, WATCH_ACCOUNT, pod)))

    def same_label(node: str) -> dict:
        return {"metadata": {"labels": {RESULT_LABEL: core.read_node(node).metadata.labels.get(RESULT_LABEL)}}}
    policy = f"ValidatingAdmissionPolicy '{WATCH_PREFIX}-own-node'"
    own = _message(refusal(lambda: watcher.patch_node(a, same_label(a), dry_run="All")))
    assert own and policy in own and OWN_NODE[1] not in own and "re-test" in own, own  # its own node: past OWN_NODE
    other = _message(refusal(lambda: watcher.patch_node(b, same_label(b), dry_run="All")))
    assert other and policy in other and OWN_NODE[1] in other, other


def test_the_api_server_type_checks_every_policy_without_a_warning(shared):
    """Each ValidatingAdmissionPolicy's status.typeChecking (the API server's own type check of its CEL
    against the schemas of what it matches) has no expression warning."""
    api = client.AdmissionregistrationV1Api(shared.cp.client())

    def checked():
        policies = api.list_validating_admission_policy().items
        return policies if all(p.status and p.status.type_checking is not None for p in policies) else None
    policies = eventually("every policy type-checked", checked, 60)
    assert len(policies) >= 6
    warnings = {p.metadata.name: [f"{w.field_ref}: {w.warning}" for w in p.status.type_checking.expression_warnings or []]
                for p in policies}
    warned = [f"{k}: {w}" for k, v in warnings.items() for w in v]
    assert not warned, "\n".join(warned)

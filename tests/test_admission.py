"""The team namespaces' admission policies, their CEL evaluated by a CEL interpreter (cel-python: the
expressions as the API server runs them, with a model of Kubernetes' quantity library and no other of its
CEL extensions) against the objects the platform and KubeRay make for a run, and against each attack a team
member could play. The attack tables are module constants: the control-plane tier plays the same ones
against the real API server (tests/controlplane/test_cp_tenancy.py)."""

from __future__ import annotations

import copy
import functools
import itertools

import celpy
import kubernetes_validate
import pytest
from celpy import celtypes, json_to_cel
from conftest import ROOT
from test_workloads import k8s_version, variant

from workloads.derive.resources import parse_quantity
from workloads.render.admission import (DELETION_POLICY, PODGROUP_POLICY, POD_POLICY, RAYCLUSTER_POLICY, RAYJOB_POLICY,
                                        SERVICE_POLICY, team_admission)
from workloads.render.pod_rules import GROUP_ANNOTATION
from workloads.render.runs import PRIORITY_LABEL, QUEUE_LABEL, podgroup_name
from workloads.derive.model import derive
from workloads.checks.runs import load_run
from workloads.deploy.submit import run_objects

SHARED = "p5en-shared"
TEAM_NS = "team-alpha"
ENV = celpy.Environment()


class Quantity:
    """A value of Kubernetes' CEL quantity library (apiserver pkg/cel/library/quantity.go): made by
    ``quantity(string)``, compared by ``compareTo``; nothing else of it is used."""

    def __init__(self, text: celtypes.StringType):
        if not isinstance(text, celtypes.StringType):
            raise TypeError(f"quantity() takes a string, not {type(text).__name__}")
        self.value = parse_quantity(str(text))


def _compare_to(a: Quantity, b: Quantity) -> celtypes.IntType:
    return celtypes.IntType((a.value > b.value) - (a.value < b.value))


KUBERNETES_CEL = {"quantity": Quantity, "compareTo": _compare_to}


@pytest.fixture(scope="module")
def cfg():
    return variant(SHARED, {})


@pytest.fixture(scope="module")
def policies(cfg):
    objs = team_admission(derive(cfg))
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"}


@pytest.fixture(scope="module")
def rayjob(cfg):
    return run_objects(cfg, load_run(ROOT / "runs" / "grpo-qwen3-30b.yaml")).rayjob


@functools.lru_cache(maxsize=None)
def _program(expression: str):
    """Each expression compiled once: the policies repeat them across every attack."""
    return ENV.program(ENV.compile(expression), functions=KUBERNETES_CEL)


def _value(expression: str, activation: dict):
    try:
        out = _program(expression).evaluate(activation)
    except celpy.CELEvalError as err:
        return err
    return out


OPERATOR_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kuberay-system", "system:authenticated")
"""``request.userInfo.groups`` of the KubeRay operator's requests (its service account's)."""


def refused(policy: dict, obj: dict | None, operation: str = "CREATE", old: dict | None = None,
            options: dict | None = None, first: bool = False, groups: tuple[str, ...] = OPERATOR_GROUPS) -> list[str]:
    """The messages of ``policy``'s validations that ``obj`` fails (``first``: the first only, as the API server
    reports it, the rest not evaluated); an evaluation error fails too (``failurePolicy: Fail``). ``options``:
    the request's (a DELETE's DeleteOptions); ``groups``: the requester's."""
    spec = policy["spec"]
    assert operation in [o for r in spec["matchConstraints"]["resourceRules"] for o in r["operations"]]
    activation = {"object": json_to_cel(obj), "oldObject": json_to_cel(old),
                  "request": json_to_cel({"operation": operation, "namespace": TEAM_NS, "options": options,
                                          "userInfo": {"username": "u", "groups": list(groups)}})}
    variables = {v["name"]: _value(v["expression"], activation) for v in spec.get("variables", [])}
    activation["variables"] = celtypes.MapType({celtypes.StringType(k): v for k, v in variables.items()})
    failed = (v["message"] for v in spec["validations"] if not _holds(_value(v["expression"], activation)))
    return list(itertools.islice(failed, 1 if first else None))


def _holds(result) -> bool:
    return isinstance(result, (bool, celtypes.BoolType)) and bool(result)


def as_kuberay_makes(template: dict, node_type: str = "worker", parent: dict | None = None) -> dict:
    """A Ray pod as KubeRay v1.7.0 creates it from ``template`` of the RayJob ``parent``: schedulerName
    volcano, the parent's queue and priority labels over the template's and the PodGroup annotation
    (volcano_scheduler.go:263-268; v1.6.2 the same), RAY_AUTH_MODE/RAY_AUTH_TOKEN in the Ray container
    (common/pod.go:387-425) and its node type label, which a template cannot override (common/pod.go:1167-1191)."""
    pod = {"metadata": copy.deepcopy(template["metadata"]), "spec": copy.deepcopy(template["spec"])}
    pod["metadata"]["labels"]["ray.io/node-type"] = node_type
    if parent is not None:
        labels = parent["metadata"]["labels"]
        pod["metadata"]["labels"].update({k: labels[k] for k in (QUEUE_LABEL, PRIORITY_LABEL) if labels.get(k)})
        pod["metadata"].setdefault("annotations", {})[GROUP_ANNOTATION] = podgroup_name(parent["metadata"]["name"])
    pod["spec"]["schedulerName"] = "volcano"
    ray = pod["spec"]["containers"][0]
    ray["env"] = [*ray.get("env", []), {"name": "RAY_AUTH_MODE", "value": "token"},
                  {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "r-1", "key": "auth_token"}}}]
    return pod


def run_pods(rayjob: dict) -> list[dict]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    return [as_kuberay_makes(cluster["headGroupSpec"]["template"], "head", rayjob),
            *(as_kuberay_makes(g["template"], "worker", rayjob) for g in cluster["workerGroupSpecs"])]


def operator_cluster(rayjob: dict) -> dict:
    """The RayCluster KubeRay makes from a RayJob: the RayJob's labels and annotations, its spec
    (rayjob_controller.go:997-1018, v1.7.0)."""
    return {"metadata": {"labels": {**rayjob["metadata"]["labels"], "ray.io/originated-from-crd": "RayJob"},
                         "annotations": dict(rayjob["metadata"]["annotations"])},
            "spec": copy.deepcopy(rayjob["spec"]["rayClusterSpec"])}


HEAD_SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "r-1-head-svc"},
                "spec": {"clusterIP": "None", "type": "ClusterIP", "selector": {"ray.io/node-type": "head"},
                         "ports": [{"name": "dashboard", "port": 8265}]}}
"""The head Service KubeRay builds for a cluster without a custom one (common/service.go:113-130)."""


def test_every_policy_is_valid_and_bound_with_deny_on_every_team_namespace(cfg):
    objs = team_admission(derive(cfg))
    for o in objs:
        kubernetes_validate.validate(o, k8s_version(cfg), strict=True)
    policies = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
    bindings = {o["spec"]["policyName"]: o["spec"] for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert sorted(bindings) == sorted(p["metadata"]["name"] for p in policies) == sorted(
        [POD_POLICY, SERVICE_POLICY, RAYJOB_POLICY, RAYCLUSTER_POLICY, PODGROUP_POLICY, DELETION_POLICY])
    for b in bindings.values():
        assert b["validationActions"] == ["Deny"]
        assert b["matchResources"] == {"namespaceSelector": {"matchExpressions": [
            {"key": "rl.platform/team", "operator": "Exists"}]}}
    for p in policies:
        assert p["spec"]["failurePolicy"] == "Fail"
        operations = ["DELETE"] if p["metadata"]["name"] == DELETION_POLICY else ["CREATE", "UPDATE"]
        assert all(r["operations"] == operations for r in p["spec"]["matchConstraints"]["resourceRules"])


def test_what_the_platform_and_kuberay_make_for_a_run_passes(policies, rayjob):
    assert refused(policies[RAYJOB_POLICY], rayjob) == []
    suspended = copy.deepcopy(rayjob)
    suspended["spec"]["suspend"] = True
    assert refused(policies[RAYJOB_POLICY], suspended, "UPDATE", rayjob) == []  # cancel
    assert refused(policies[RAYCLUSTER_POLICY], operator_cluster(rayjob)) == []
    assert refused(policies[SERVICE_POLICY], HEAD_SERVICE) == []
    for pod in run_pods(rayjob):
        assert refused(policies[POD_POLICY], pod) == []
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = "ip-10-0-0-1"
        assert refused(policies[POD_POLICY], bound, "UPDATE", pod) == []  # a label update after binding


def pod_attacks(pod: dict) -> dict[str, tuple[dict, str]]:
    """Every Pod Security Standards baseline control (kubernetes.io/docs/concepts/security/pod-security-standards,
    in its order) and what the platform adds, each as one change to a run's own pod: name -> (pod, message part)."""
    def changed(edit) -> dict:
        p = copy.deepcopy(pod)
        edit(p["spec"], p["spec"]["containers"][0], p)
        return p

    def sc(c: dict) -> dict:
        return c.setdefault("securityContext", {})
    return {
        # each a valid pod (the API server's validation would refuse it before any policy otherwise)
        "HostProcess": (changed(lambda s, c, p: s.update(hostNetwork=True, securityContext={
            **s["securityContext"], "windowsOptions": {"hostProcess": True}})), "HostProcess"),
        "hostNetwork": (changed(lambda s, c, p: s.update(hostNetwork=True)), "network, PID or IPC"),
        "hostPID": (changed(lambda s, c, p: s.update(hostPID=True)), "network, PID or IPC"),
        "privileged": (changed(lambda s, c, p: sc(s["initContainers"][0]).update(
            privileged=True, allowPrivilegeEscalation=True)), "privileged"),
        "SYS_ADMIN": (changed(lambda s, c, p: sc(c)["capabilities"].update(add=["IPC_LOCK", "SYS_ADMIN"])),
                      "IPC_LOCK"),
        "hostPath": (changed(lambda s, c, p: s["volumes"].append({"name": "h", "hostPath": {"path": "/var/lib/kubelet"}})),
                     "hostPath"),
        "hostPort": (changed(lambda s, c, p: c.setdefault("ports", []).append({"containerPort": 80, "hostPort": 80})),
                     "hostPort"),
        "AppArmor field": (changed(lambda s, c, p: sc(c).update(appArmorProfile={"type": "Unconfined"})), "AppArmor"),
        "AppArmor annotation": (changed(lambda s, c, p: p["metadata"].setdefault("annotations", {}).update(
            {"container.apparmor.security.beta.kubernetes.io/ray-worker": "unconfined"})), "AppArmor"),
        "SELinux type": (changed(lambda s, c, p: s["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
                         "SELinux"),
        "SELinux user": (changed(lambda s, c, p: sc(c).update(seLinuxOptions={"user": "system_u"})), "SELinux"),
        "procMount": (changed(lambda s, c, p: (sc(c).update(procMount="Unmasked"), s.update(hostUsers=False))),
                      "Unmasked"),
        "seccomp pod": (changed(lambda s, c, p: s["securityContext"].update(seccompProfile={"type": "Unconfined"})),
                        "seccomp"),
        "seccomp container": (changed(lambda s, c, p: sc(c).update(seccompProfile={"type": "Unconfined"})), "seccomp"),
        "sysctl": (changed(lambda s, c, p: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
                   "sysctls"),
        "nodeName": (changed(lambda s, c, p: s.update(nodeName="ip-10-0-0-1")), "bound to a node"),
        "schedulerName": (changed(lambda s, c, p: s.update(schedulerName="default-scheduler")), "Volcano"),
        "priorityClassName": (changed(lambda s, c, p: s.update(priorityClassName="system-node-critical")),
                              "priorities"),
        "RAY_AUTH_MODE": (changed(lambda s, c, p: c["env"].insert(0, {"name": "RAY_AUTH_MODE", "value": "disabled"})),
                          "token authentication"),
    }


def test_each_pod_security_baseline_control_and_scheduler_bypass_is_refused(policies, rayjob):
    trainer = run_pods(rayjob)[1]
    attacks = pod_attacks(trainer)
    for name, (pod, part) in attacks.items():
        messages = refused(policies[POD_POLICY], pod)  # the API server answers with the first refusal
        assert messages and part in messages[0], (name, messages)
    ephemeral = copy.deepcopy(trainer)
    ephemeral["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox",
                                                 "securityContext": {"privileged": True}}]
    assert refused(policies[POD_POLICY], ephemeral, "UPDATE", trainer)[0] == "a team's containers may not be privileged"
    resources = policies[POD_POLICY]["spec"]["matchConstraints"]["resourceRules"][0]["resources"]
    assert resources == ["pods", "pods/ephemeralcontainers"]


SERVICE_ATTACKS = [
    ({"type": "LoadBalancer"}, "ClusterIP only"),
    ({"type": "NodePort"}, "ClusterIP only"),
    ({"type": "ExternalName", "externalName": "platform-head-svc.rl.svc.cluster.local"}, "ClusterIP only"),
    ({"externalIPs": ["10.0.0.10"]}, "externalIPs"),
]
"""(change to the head Service's spec, what the refusal says)."""


def changed_service(change: dict) -> dict:
    svc = copy.deepcopy(HEAD_SERVICE)
    svc["spec"].update(change)
    return svc


@pytest.mark.parametrize("change, part", SERVICE_ATTACKS)
def test_a_team_namespace_gets_no_load_balancer_node_port_external_name_or_external_ip(policies, change, part):
    messages = refused(policies[SERVICE_POLICY], changed_service(change))
    assert len(messages) == 1 and part in messages[0]


def _set(doc: dict, path: str, value) -> dict:
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return out


HEAD = "spec.rayClusterSpec.headGroupSpec"


RAYJOB_ATTACKS = [
    ("metadata.labels.volcano.sh/queue-name", "team-beta", "own team's queue"),
    ("metadata.labels.ray.io/priority-class-name", "system-cluster-critical", "run priorities"),
    ("metadata.labels.ray.io/priority-class-name", None, "run priorities"),
    ("spec.submissionMode", "K8sJobMode", "HTTPMode"),
    ("metadata.annotations", None, "disable-provisioned-head-restart"),
    ("spec.clusterSelector", {"ray.io/cluster": "ray"}, "clusterSelector"),
    (f"{HEAD}.headService", {"spec": {"type": "ExternalName", "externalName": "ray-head-svc.rl.svc.cluster.local"}},
     "no headGroupSpec.headService"),
    (f"{HEAD}.serviceType", "LoadBalancer", "ClusterIP"),
    ("spec.rayClusterSpec.authOptions", None, "token authentication"),
    ("spec.rayClusterSpec.authOptions", {"mode": "disabled"}, "token authentication"),
    ("spec.rayClusterSpec.authOptions", {"mode": "token", "secretName": "known"}, "token authentication"),
]
"""(path in the run's RayJob, value there (None: removed), what the first refusal says)."""


def changed_rayjob(rayjob: dict, path: str, value) -> dict:
    """``rayjob`` with ``path`` set to ``value`` (None: removed); a label path names the label whole."""
    if not path.startswith("metadata.labels."):
        return _set(rayjob, path, value)
    bad = copy.deepcopy(rayjob)
    key = path.removeprefix("metadata.labels.")
    if value is None:
        del bad["metadata"]["labels"][key]
    else:
        bad["metadata"]["labels"][key] = value
    return bad


@pytest.mark.parametrize("path, value, part", RAYJOB_ATTACKS)
def test_a_team_rayjob_cannot_steer_the_operator_or_pick_another_queue_or_priority(policies, rayjob, path, value, part):
    bad = changed_rayjob(rayjob, path, value)
    messages = refused(policies[RAYJOB_POLICY], bad)
    assert messages and all(part in m for m in messages[:1]), messages
    if path.startswith("spec.rayClusterSpec"):  # the operator's own copy is refused too
        cluster = operator_cluster(bad)
        assert refused(policies[RAYCLUSTER_POLICY], cluster) == messages


def test_the_confused_deputy_external_name_head_is_refused_at_every_step(policies, rayjob):
    """KubeRay keeps a user head Service and its type (common/service.go:79-110) and posts the job to that
    Service's DNS name (utils/util.go:1022-1053): refused as a RayJob, as the operator's RayCluster and as
    the Service the operator would then create."""
    hostile = _set(rayjob, f"{HEAD}.headService", {"spec": {"type": "ExternalName",
                                                            "externalName": "ray-head-svc.rl.svc.cluster.local"}})
    assert refused(policies[RAYJOB_POLICY], hostile)
    assert refused(policies[RAYCLUSTER_POLICY], operator_cluster(hostile))
    service = _set(HEAD_SERVICE, "spec.type", "ExternalName")
    assert refused(policies[SERVICE_POLICY], _set(service, "spec.externalName", "ray-head-svc.rl.svc.cluster.local"))


def test_a_cancelled_attempt_stays_cancelled(policies, rayjob):
    suspended = _set(rayjob, "spec.suspend", True)
    resumed = _set(rayjob, "spec.suspend", False)
    assert "stays cancelled" in refused(policies[RAYJOB_POLICY], resumed, "UPDATE", suspended)[0]
    assert refused(policies[RAYJOB_POLICY], suspended, "UPDATE", suspended) == []


def test_an_update_that_keeps_the_spec_is_not_held_but_one_that_moves_the_queue_is(policies, rayjob):
    """Objects admitted before the policies (a K8sJobMode RayJob, its submitter pod without Volcano) can
    still lose their finalizers; a relabelling into another team's queue cannot pass as such an update."""
    old = _set(rayjob, "spec.submissionMode", "K8sJobMode")
    assert refused(policies[RAYJOB_POLICY], _set(old, "metadata.finalizers", []), "UPDATE", old) == []
    submitter = {"metadata": {"finalizers": ["batch.kubernetes.io/job-tracking"]},
                 "spec": {"containers": [{"name": "ray-job-submitter", "image": "x"}]}}
    assert refused(policies[POD_POLICY], _set(submitter, "metadata.finalizers", []), "UPDATE", submitter) == []
    assert refused(policies[POD_POLICY], submitter)  # as a new pod it is refused (no Volcano)
    moved = copy.deepcopy(rayjob)
    moved["metadata"]["labels"]["volcano.sh/queue-name"] = "team-beta"
    assert "own team's queue" in refused(policies[RAYJOB_POLICY], moved, "UPDATE", rayjob)[0]

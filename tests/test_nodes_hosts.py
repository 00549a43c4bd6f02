"""A lone new node is checked with a proven node of its pool (``nodes.pairs``): the controller starts the
pool's host pod on an idle proven node, pairs the two once the pod has its address, and ends the pod when the
check is over; the host pod is a valid Pod that the controller's admission policy admits, and nothing else
is; the host side runs rank 0 of the all-reduce and serves the ping-pong."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import kubernetes_validate
import pytest
from conftest import graph_of, load
from test_nodes import evaluate, request_from
from test_nodes_agent import merge, new_node, node_env, train_plan  # noqa: F401 - fixtures
from test_nodes_controller import NOW, _pod, cluster  # noqa: F401 - fixture

from test_nodes_pairs import _pair_plan
from test_workloads import k8s_version
from test_workloads_security import registered_objects

from nodes import controller, incluster, marks, pairs
from nodes.render import NAMESPACE, REPLACE, REPLACE_ACCOUNT

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


@pytest.fixture(scope="module")
def rendered():
    """The p5en-prod stack's controller plan and its admission policies."""
    objects = registered_objects(graph_of("p5en-prod"))
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == REPLACE)
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    return json.loads(command[command.index("--plan") + 1]), policies


@pytest.fixture(scope="module")
def deployed():
    """The p5en-prod stack's deployed host images (the controller's environment) and the objects the host-pod
    policy's binding names."""
    objects = registered_objects(graph_of("p5en-prod"))
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == REPLACE)
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    return env, objects


def _lone(name, waited, address="10.0.1.1", pool="train"):
    n = new_node(name, pool)
    n["metadata"]["annotations"][marks.WAITING_ANNOTATION] = json.dumps(
        {"address": address, "until": marks.stamp(NOW + timedelta(minutes=8)), "since": marks.stamp(NOW - waited)})
    return n


def _proven(name, pool="train", **extra):
    n = new_node(name, pool)
    n["metadata"]["labels"][marks.RESULT_LABEL] = marks.PASSED
    n["spec"]["taints"] = [t for t in n["spec"]["taints"] if t["key"] not in ("rl.platform/burn-in",)]
    return merge(n, extra) if extra else n


def test_a_lone_node_is_checked_from_an_idle_proven_node_of_its_pool(cluster, rendered):
    plan, _ = rendered
    busy, tainted, idle = _proven("p-a-busy"), _proven("p-b-tainted"), _proven("p-c-idle")
    tainted["spec"]["taints"].append({"key": "rl.platform/burn-in", "value": "pending", "effect": "NoSchedule"})
    c = cluster([_lone("n-new", timedelta(minutes=3)), busy, tainted, _proven("p-a2-cordoned", spec={"unschedulable": True}),
                 idle, _proven("r-idle", pool="rollout")])
    c.put("/api/v1/namespaces/team-a/pods", _pod("miles-worker", "p-a-busy"))
    c.put("/api/v1/namespaces/team-a/pods", _pod("miles-done", "p-c-idle", phase="Succeeded"))
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == ["n-new: proven node p-c-idle asked to check it"]
    pod = c.pods[f"{PODS}/host-n-new"]
    assert pod["spec"]["nodeName"] == "p-c-idle" and pod["metadata"]["labels"][pairs.HOST_LABEL] == "n-new"
    assert {"name": "PEER_NODE", "value": "n-new"} in pod["spec"]["containers"][0]["env"]
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == []  # the pod has no address yet
    c.change(f"{PODS}/host-n-new", {"status": {"phase": "Running", "podIP": "10.0.9.9"}})
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == [
        "n-new and p-c-idle: paired for the check with a proven neighbour"]
    assert marks.annotation(c.nodes["n-new"], marks.PEER_ANNOTATION) == {"node": "p-c-idle", "address": "10.0.9.9", "rank": 1}
    assert marks.annotation(c.nodes["p-c-idle"], marks.PEER_ANNOTATION) == {"node": "n-new", "address": "10.0.1.1", "rank": 0}
    assert c.nodes["p-c-idle"]["metadata"]["labels"][marks.RESULT_LABEL] == marks.PASSED  # the proven node is not marked
    c.change("/api/v1/nodes/n-new", {"metadata": {"annotations": {marks.PEER_ANNOTATION: None,  # its result written
                                                                  marks.WAITING_ANNOTATION: None}}})
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == ["n-new: the check from p-c-idle is over"]
    assert f"{PODS}/host-n-new" not in c.pods and not marks.annotation(c.nodes["p-c-idle"], marks.PEER_ANNOTATION)


def test_no_host_for_a_node_that_waited_briefly_for_two_new_nodes_or_without_an_idle_proven_node(cluster, rendered):
    plan, _ = rendered
    c = cluster([_lone("n-new", timedelta(seconds=pairs.LONE_SECONDS - 1)), _proven("p-idle")])
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == []
    c = cluster([_lone("n-a", timedelta(minutes=3)), _lone("n-b", timedelta(minutes=3), "10.0.1.2"), _proven("p-idle")])
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == ["n-a and n-b: paired for the check with a neighbour"]
    c = cluster([_lone("n-new", timedelta(minutes=3)), _proven("p-busy"), _proven("r-idle", pool="rollout")])
    c.put("/api/v1/namespaces/team-a/pods", _pod("miles-worker", "p-busy"))
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == []
    assert not c.pods.keys() - {"/api/v1/namespaces/team-a/pods/miles-worker"}


def test_a_host_pod_that_ended_is_deleted_and_a_lone_node_can_get_another(cluster, rendered):
    plan, _ = rendered
    c = cluster([_lone("n-new", timedelta(minutes=3)), _proven("p-idle")])
    controller.reconcile(c.api, plan, NOW, mark=lambda n: None)
    c.change(f"{PODS}/host-n-new", {"status": {"phase": "Failed"}})
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == ["n-new: the check from p-idle is over"]
    assert f"{PODS}/host-n-new" not in c.pods
    assert controller.reconcile(c.api, plan, NOW, mark=lambda n: None) == ["n-new: proven node p-idle asked to check it"]


def test_the_host_pod_is_a_valid_pod_the_controllers_policy_admits_and_nothing_else(rendered, deployed):
    plan, policies = rendered
    env, objects = deployed
    assert set(plan["hosts"]) == {"train", "rollout"}  # the pools with EFA: checked with a neighbour
    image = env[pairs.host_image_env("train")]  # what the controller creates the pod with
    pod = pairs.host_pod(plan["hosts"]["train"], NAMESPACE, "p-idle", "n-new", image)
    kubernetes_validate.validate(pod, k8s_version(load("p5en-prod")), strict=True)
    policy = policies["rl-burn-in-replace-pods"]
    (binding,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"
                  and o["spec"]["policyName"] == policy["metadata"]["name"]]
    ref = binding["spec"]["paramRef"]
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert ref["parameterNotFoundAction"] == "Deny"  # no images to admit: no host pod
    (params,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref["name"]
                 and o["metadata"]["namespace"] == ref["namespace"]]
    assert params["data"] == {k: v for k, v in env.items() if k.startswith("HOST_IMAGE_")}  # filled alike
    request = {**request_from(None, f"system:serviceaccount:{NAMESPACE}:{REPLACE_ACCOUNT}"), "namespace": NAMESPACE}
    assert evaluate(policy, request, pod, None, params) == []
    spec = pod["spec"]
    for bad, message in (
            ({"spec": {"containers": [{**spec["containers"][0], "image": "evil.example/x:1"}]}},
             "a pool's deployed host image only"),
            ({"spec": {"containers": [{**spec["containers"][0], "image": plan["hosts"]["train"]["spec"]["containers"][0]
                                       ["image"]}]}}, "a pool's deployed host image only"),
            ({"metadata": {"labels": {pairs.HOST_LABEL: None}}}, "the burn-in controller creates only host pods"),
            ({"spec": {"automountServiceAccountToken": True}}, "a host pod holds no service-account token"),
            ({"spec": {"containers": [{**spec["containers"][0], "command": ["sh", "-c", "x"]}]}}, "runs /opt/burn-in/pairs.py"),
            ({"spec": {"volumes": [*spec["volumes"], {"name": "h", "hostPath": {"path": "/"}}]}}, "ConfigMaps and emptyDirs"),
            ({"spec": {"hostNetwork": True}}, "shares nothing"),
            *(({"spec": {"containers": [{**spec["containers"][0], **change}]}}, message) for change, message in (
                ({"command": ["/evil", *spec["containers"][0]["command"][1:]]}, "one container running python3"),
                ({"args": ["-c", "id"]}, "no args"),
                ({"envFrom": [{"secretRef": {"name": "s"}}]}, "no environment from Secrets"),
                ({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
                 "no environment from Secrets"),
                ({"securityContext": {**spec["containers"][0]["securityContext"], "privileged": True}}, "not privileged"),
                ({"securityContext": {**spec["containers"][0]["securityContext"], "allowPrivilegeEscalation": True}},
                 "escalates nothing"),
                ({"securityContext": {**spec["containers"][0]["securityContext"],
                                      "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK", "SYS_ADMIN"]}}},
                 "adds no capability but IPC_LOCK"))),
            ({"spec": {"containers": [spec["containers"][0], {**spec["containers"][0], "name": "second"}]}},
             "one container running python3")):
        found = evaluate(policy, request, merge(pod, bad), None, params)
        assert found and message in found[0], (bad, found)
    assert evaluate(policy, {**request_from(None, "system:serviceaccount:x:y"), "namespace": NAMESPACE}, pod, None) is None


def test_the_controller_creates_no_configmap_but_its_breaker(rendered):
    """RBAC's ``create`` cannot name the object: the policy keeps the controller from making the host images'
    ConfigMap (were it missing) or any other."""
    from nodes.breaker import BREAKER
    from nodes.policy import HOST_IMAGES_PARAM
    _, policies = rendered
    policy = policies["rl-burn-in-replace-configmaps"]
    request = {**request_from(None, f"system:serviceaccount:{NAMESPACE}:{REPLACE_ACCOUNT}"), "namespace": NAMESPACE}
    cm = lambda name: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}}  # noqa: E731
    assert evaluate(policy, request, cm(BREAKER), None) == []
    assert evaluate(policy, request, cm(HOST_IMAGES_PARAM), None) == [f"the burn-in controller creates only ConfigMap {BREAKER}"]


def test_a_lone_agent_passes_with_the_proven_node_it_was_checked_from(node_env, train_plan, cluster, rendered, monkeypatch):
    plan, _ = rendered
    me = "ip-10-0-1-5.ec2.internal"
    c = cluster([new_node(me), _proven("p-idle")])
    monkeypatch.setenv("POD_IP", "10.0.1.5")
    monkeypatch.setattr(pairs, "MARGIN_SECONDS", -10 ** 9)  # the test's NOW is not the agent's clock
    monkeypatch.setattr(pairs, "LONE_SECONDS", -10 ** 9)

    def sleep(seconds):
        if seconds == pairs.POLL_SECONDS:  # the agent waits: the controller's pass, and the kubelet starting the host
            controller.reconcile(c.api, plan, NOW, mark=lambda n: None)
            if f"{PODS}/host-{me}" in c.pods:
                c.change(f"{PODS}/host-{me}", {"status": {"phase": "Running", "podIP": "10.0.9.9"}})
    monkeypatch.setattr(time, "sleep", sleep)
    node = node_env["run"](_pair_plan(train_plan), node=c.nodes[me], cluster=c).nodes[me]
    figures = json.loads(node["metadata"]["annotations"][marks.FIGURES_ANNOTATION])
    assert node["metadata"]["labels"][marks.RESULT_LABEL] == "passed", node["metadata"]["annotations"]
    assert figures["neighbour"] == "p-idle" and "warnings" not in figures
    clients = [ln for ln in node_env["calls"].read_text().splitlines() if " -P " in ln and "10.0.9.9" in ln]
    assert [ln.split(" -P ")[1] for ln in clients] == ["47600 10.0.9.9", "47601 10.0.9.9"]  # rank 1 to the host


def test_the_host_side_is_rank_zero_and_serves_each_device(node_env, train_plan, monkeypatch, capsys):
    monkeypatch.setenv("PEER_NODE", "n-new")
    monkeypatch.setenv("POD_IP", "10.0.9.9")
    node_env["run"](train_plan)  # the fakes' environment
    (node_env["calls"]).write_text("")
    assert pairs.main(["--plan", json.dumps(_pair_plan(train_plan)), "--results", str(node_env["results"])]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["checked"] == "n-new" and said["problems"] == [] and said["figures"]["pairAllReduceGBs"] > 0
    served = [ln.split(" -B ")[1] for ln in node_env["calls"].read_text().splitlines() if " -B " in ln]
    assert sorted(served) == ["47600", "47601"]


def test_a_refused_host_pod_is_reported_and_the_pass_goes_on(cluster, rendered):
    """A 403 on the host pod's create (its admission policy) was raised out of ``reconcile``: replacement in
    every pool was skipped on every pass while it lasted."""
    plan, _ = rendered
    c = cluster([_lone("n-new", timedelta(minutes=3)), _proven("p-c-idle")])

    def refuse(pod):
        raise incluster.ApiError(403, "denied by ValidatingAdmissionPolicy rl-burn-in-host-pods")
    c.api.create_pod = refuse
    done = controller.reconcile(c.api, plan, NOW, mark=lambda n: None)
    assert any(line.startswith("pairing not done") and "403" in line for line in done), done


def test_the_host_image_reaches_the_controller_where_the_deploy_fills_the_registry():
    """The plan is one JSON string the deploy never fills (``stackconfig.images.fill`` replaces strings that start
    with the registry token): a host pod made from it alone named ``{imageRepository}:...`` and was never
    pulled. The recorded graph is the deployed one: the controller's environment holds each pool's image with
    the stack registry's URL."""
    objects = registered_objects(graph_of("p5en-prod"))
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == REPLACE)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    plan = json.loads(container["command"][container["command"].index("--plan") + 1])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert plan["hosts"]
    for pool, spec in plan["hosts"].items():
        rendered = spec["spec"]["containers"][0]["image"]
        deployed = env[pairs.host_image_env(pool)]
        assert "{" not in deployed and deployed.endswith(rendered.split("}", 1)[1]), (pool, deployed)

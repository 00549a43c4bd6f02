"""The burn-in in every GPU stack's graph: the startup taint, the DaemonSets, their RBAC and the
admission policy (its CEL evaluated with cel-python on the agent's own writes and on others), the plan
and the replacement role."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import kubernetes_validate
import pytest
from conftest import STACKS, graph_of, load
from test_nodes_agent import BURN_IN, GPU_TAINT, merge, new_node
from test_workloads import k8s_version, variant, variant_graph
from test_workloads_security import pod_specs, registered_objects

from components.device_plugins import gpu_taints, tolerations
from components.node_pool import EKS_TAINT_EFFECT
from nodes import marks
from nodes.burn_in import QUARANTINE_TAINT, plans
from nodes.policy import burn_in_policies
from nodes.pool_resources import NAME as ADVERTISER
from nodes.render import NAMESPACE, REPLACE_ACCOUNT, SERVICE_ACCOUNT, WATCH_ACCOUNT
from stackconfig.stack import LABEL_PREFIX, StackConfigError

NODE = "ip-10-0-1-5.ec2.internal"
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
NOW = datetime(2026, 12, 1, 15, 0, tzinfo=timezone.utc)
QUARANTINE = {"key": QUARANTINE_TAINT.key, "value": QUARANTINE_TAINT.value, "effect": QUARANTINE_TAINT.effect}


def named(objects, kind: str, name: str) -> dict:
    """The one object of ``kind`` called ``name`` (never the first of a kind: registration order is not a contract)."""
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def container(pod: dict, name: str, init: bool = False) -> dict:
    (found,) = [c for c in pod["initContainers" if init else "containers"] if c["name"] == name]
    return found


def _registered_taints(graph, cfg, pool) -> set[tuple[str, str, str]]:
    effect = {v: k for k, v in EKS_TAINT_EFFECT.items()}
    ng = graph.named("aws:eks/nodeGroup:NodeGroup", f"{cfg.cluster_name}-{pool.name}")
    return {(t["key"], t["value"], effect[t["effect"]]) for t in ng.inputs.get("taints") or []}


@pytest.mark.parametrize("stack", STACKS)
def test_every_gpu_pool_registers_tainted_and_has_its_burn_in(stack):
    cfg, graph = load(stack), graph_of(stack)
    burn_in = (BURN_IN["key"], BURN_IN["value"], BURN_IN["effect"])
    objects = registered_objects(graph)
    daemonsets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "DaemonSet"}
    for pool in cfg.pools:
        assert (burn_in in _registered_taints(graph, cfg, pool)) == pool.instance.is_gpu, pool.name
        assert (f"burn-in-{pool.name}" in daemonsets) == pool.instance.is_gpu, pool.name
    kinds = [o["kind"] for o in objects if o["metadata"].get("namespace") == NAMESPACE or o["kind"].startswith("Validating")]
    assert {"ServiceAccount", "ConfigMap", "Role", "RoleBinding", "DaemonSet"} <= set(kinds)
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    assert {"rl-burn-in-own-node", "rl-burn-in-own-events"} <= names
    for o in objects:
        if o["metadata"].get("namespace") == NAMESPACE or o["metadata"]["name"].startswith("rl-burn-in"):
            kubernetes_validate.validate(o, k8s_version(cfg), strict=True)
    plugins = {r.urn for r in graph.of_type("kubernetes:helm.sh/v3:Release")
               if r.inputs["name"] in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin")}
    for r in graph.of_type("kubernetes:apps/v1:DaemonSet"):
        assert plugins <= set(r.dependencies), "a burn-in pod needs its node's GPUs and EFA devices advertised"


@pytest.mark.parametrize("stack", STACKS)
def test_no_pod_of_a_run_tolerates_the_burn_in_taint_and_the_burn_in_tolerates_only_its_pools(stack):
    cfg = load(stack)
    pods = [(w, p) for o in registered_objects(graph_of(stack)) for w, p in pod_specs(o)]
    for where, pod in pods:
        tolerated = pod.get("tolerations") or []
        assert all(t.get("key") for t in tolerated), f"{where}: tolerates every taint"
        if where == f"DaemonSet/{ADVERTISER}":  # every GPU node, proven or not, as the device plugins
            assert tolerated == tolerations(gpu_taints(cfg.pools)) and "nvidia.com/gpu" not in json.dumps(
                container(pod, "advertise")["resources"])
            continue
        if not where.startswith("DaemonSet/burn-in-"):
            assert not {BURN_IN["key"], QUARANTINE["key"]} & {t["key"] for t in tolerated}, where
            continue
        if where == "DaemonSet/burn-in-watch":  # on passed GPU nodes of every pool, tainted again or not
            assert {(t["key"], t["value"], t["effect"]) for t in tolerated} == {
                *((t.key, t.value, t.effect) for p in cfg.pools if p.instance.is_gpu for t in p.taints),
                (BURN_IN["key"], BURN_IN["value"], BURN_IN["effect"])}
            assert not container(pod, "watch")["resources"]["limits"].get("nvidia.com/gpu")
            continue
        pool = next(p for p in cfg.pools if where == f"DaemonSet/burn-in-{p.name}")
        assert {(t["key"], t["value"], t["effect"]) for t in tolerated} == {  # the quarantine: a re-test of a failed node
            *((t.key, t.value, t.effect) for t in pool.taints), (BURN_IN["key"], BURN_IN["value"], BURN_IN["effect"]),
            (QUARANTINE["key"], QUARANTINE["value"], QUARANTINE["effect"])}
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [
            {"key": f"{LABEL_PREFIX}/pool", "operator": "In", "values": [pool.name]},
            {"key": marks.RESULT_LABEL, "operator": "NotIn", "values": ["passed", "failed"]}]}]


def test_the_burn_in_pod_is_the_pools_ray_pod_with_dcgm_first():
    cfg = load("p5en-prod")
    objects = registered_objects(graph_of("p5en-prod"))
    ds = named(objects, "DaemonSet", "burn-in-train")
    trainer = next(o for o in objects if o["kind"] == "RayCluster")["spec"]["workerGroupSpecs"]
    trainer = next(g for g in trainer if g["groupName"] == "trainer")["template"]["spec"]["containers"][0]
    pod = ds["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["dcgm"]  # DCGM before the agent
    dcgm, agent = container(pod, "dcgm", init=True), container(pod, "agent")
    assert dcgm["image"].endswith(f":dcgm-{cfg.versions.software.dcgm}") and "dcgmi diag -r 2 -j" in dcgm["command"][2]
    own = "rl.platform/gpu-train"  # the pool's resource: 0 on the tainted nodes the burn-in runs on (nodes.advertise)
    assert all(own not in agent["resources"][part] and own not in dcgm["resources"][part] for part in ("requests", "limits"))
    assert agent["resources"] == {part: {k: v for k, v in r.items() if k != own} for part, r in trainer["resources"].items()}
    assert agent["image"] == trainer["image"]
    assert {e["name"]: e.get("value") for e in trainer["env"] if "value" in e}.items() <= \
        {e["name"]: e.get("value") for e in agent["env"]}.items()
    plan = json.loads(agent["command"][agent["command"].index("--plan") + 1])
    ray_pod = next(o for o in objects if o["kind"] == "RayCluster")["spec"]["workerGroupSpecs"]
    ray_pod = next(g for g in ray_pod if g["groupName"] == "trainer")["template"]["spec"]
    (check,) = [c for c in ray_pod["initContainers"] if c["name"] == "preflight"]
    run_args = check["command"][check["command"].index("--gpus"):check["command"].index("--boot-record")]
    assert plan["preflight"] == run_args  # the run's own arguments (the boot record is the run pod's own)
    assert plan["preflight"][:4] == ["--gpus", "8", "--efa", "16"] and "--nccl" in plan["preflight"]
    assert str(plan["budgetSeconds"] + 60) in agent["livenessProbe"]["exec"]["command"][2]
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "burn-in-scripts")
    from conftest import ROOT
    assert cm["data"]["preflight.py"] == (ROOT / "workloads" / "pod" / "preflight.py").read_text()
    assert cm["data"]["fabric_bench.py"] == (ROOT / "workloads" / "pod" / "fabric_bench.py").read_text()


def test_the_dcgm_container_never_runs_as_root_and_writes_only_its_results_volume():
    """As root NVVS would add the closed EUD plugin at level 3 (DCGM v4.5.2 NvidiaValidationSuite.cpp:1151-1157),
    which fails without capabilities on every node; the kubelet holds the user (``runAsNonRoot``), and the host
    engine, whose defaults are root's paths, writes its pid file, log and the diagnostic's logs in the results
    emptyDir."""
    from nodes.render import RESULTS_DIR
    objects = registered_objects(graph_of("p5en-prod"))
    pod = named(objects, "DaemonSet", "burn-in-train")["spec"]["template"]["spec"]
    dcgm = container(pod, "dcgm", init=True)
    sc = dcgm["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0
    assert {"name": "results", "emptyDir": {}} in pod["volumes"]
    assert {"name": "results", "mountPath": RESULTS_DIR} in dcgm["volumeMounts"]
    lines = dcgm["command"][2].splitlines()
    start, term = next(line for line in lines if "nv-hostengine" in line and "--term" not in line), \
        next(line for line in lines if "--term" in line)
    for flag in ("--pid", "--log-filename", "--home-dir"):
        assert start.split(flag + " ", 1)[1].startswith(RESULTS_DIR), (flag, start)
    assert term.split("--pid ", 1)[1].split()[0] == start.split("--pid ", 1)[1].split()[0]


def test_burn_in_off_leaves_gpu_pools_untainted_and_registers_nothing():
    off = {"burnIn": {"enabled": False}}
    graph = variant_graph("p4d", off)
    cfg = variant("p4d", off)
    assert all(BURN_IN["key"] not in {t[0] for t in _registered_taints(graph, cfg, p)} for p in cfg.pools)
    assert [o["metadata"]["name"] for o in registered_objects(graph) if o["kind"] == "DaemonSet"] == [ADVERTISER]


def test_a_dcgm_level_for_a_pool_that_is_not_a_gpu_pool_is_refused():
    from workloads.derive.model import derive
    cfg = variant("p4d", {"burnIn": {"dcgmLevels": {"system": 3}}})
    with pytest.raises(StackConfigError, match=r"burnIn.dcgmLevels.system: not a GPU pool; allowed: train, rollout"):
        plans(derive(cfg), cfg)
    with pytest.raises(Exception, match="dcgmLevels"):
        variant("p4d", {"burnIn": {"dcgmLevels": {"train": 5}}})


def test_the_plan_adds_the_dcgm_level_of_each_pool():
    from workloads.derive.model import derive
    cfg = variant("p4d", {"burnIn": {"dcgmLevels": {"train": 3}}})
    found = {b.pool.name: b for b in plans(derive(cfg), cfg)}
    assert found["train"].steps["dcgm"] - found["rollout"].steps["dcgm"] == 1800 - 420
    assert found["train"].node_seconds == sum(found["train"].steps.values())


def test_the_agents_budget_leaves_out_the_image_pull_and_the_dcgm_diagnostic():
    from workloads.derive.model import derive

    from nodes.burn_in import AGENT_STEPS, PULL_SECONDS
    cfg = load("p5en-prod")
    b = next(p for p in plans(derive(cfg), cfg) if p.pool.name == "train")
    assert b.steps["pull"] == PULL_SECONDS and "pull" not in AGENT_STEPS and "dcgm" not in AGENT_STEPS
    assert b.budget_seconds == sum(b.steps[s] for s in AGENT_STEPS) == b.node_seconds - PULL_SECONDS - b.steps["dcgm"]
    assert b.agent_plan["nodeSeconds"] == b.node_seconds
    pod = named(registered_objects(graph_of("p5en-prod")), "DaemonSet", "burn-in-train")["spec"]["template"]["spec"]
    assert "started" not in container(pod, "dcgm", init=True)["command"][2]  # the agent starts the clock


# --- the admission policy, evaluated ---------------------------------------------------------------------

def evaluate(policy: dict, request: dict, obj: dict, old: dict | None, params: dict | None = None) -> list[str] | None:
    """The messages of the validations ``policy`` fails, or None when it does not match the request; ``params``:
    the object its binding's ``paramRef`` names."""
    import celpy
    from celpy import celtypes, json_to_cel
    env = celpy.Environment()
    act = {"request": json_to_cel(request), "object": json_to_cel(obj), "oldObject": json_to_cel(old),
           "params": json_to_cel(params)}
    spec = policy["spec"]
    if not all(env.program(env.compile(c["expression"])).evaluate(act) for c in spec["matchConditions"]):
        return None
    variables: dict = {}
    for v in spec["variables"]:
        variables[celtypes.StringType(v["name"])] = env.program(env.compile(v["expression"])).evaluate(
            {**act, "variables": celtypes.MapType(variables)})
    act["variables"] = celtypes.MapType(variables)
    return [v["message"] for v in spec["validations"] if not env.program(env.compile(v["expression"])).evaluate(act)]


def request_from(node_name: str | None, user: str = USER) -> dict:
    extra = {"authentication.kubernetes.io/node-name": [node_name]} if node_name else {}
    return {"userInfo": {"username": user, "extra": extra}}


@pytest.fixture(scope="module")
def policies():
    objects = burn_in_policies(NAMESPACE, SERVICE_ACCOUNT, WATCH_ACCOUNT, REPLACE_ACCOUNT, BURN_IN["key"],
                               QUARANTINE["key"], ("rl.platform/gdrcopy",))
    found = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in found)
    return {p["metadata"]["name"]: p for p in found}


def test_the_burn_in_may_write_its_own_result_and_only_on_its_own_node(policies):
    node_policy = policies["rl-burn-in-own-node"]
    old = new_node(NODE)
    for result in ("passed", "failed"):
        patch = marks.result_patch(old, BURN_IN, QUARANTINE, result, {"seconds": 1}, "why", NOW, fault="hardware",
                                   capabilities={"rl.platform/gdrcopy": "true"})
        assert evaluate(node_policy, request_from(NODE), merge(old, patch), old) == []
    retest = merge(old, marks.retest_patch(old, BURN_IN))
    assert evaluate(node_policy, request_from(NODE), retest, old) == []
    failed = merge(old, marks.result_patch(old, BURN_IN, QUARANTINE, "failed", {}, "why", NOW))
    passed_again = merge(failed, marks.result_patch(failed, BURN_IN, QUARANTINE, "passed", {}, None, NOW))
    assert evaluate(node_policy, request_from(NODE), passed_again, failed) == []  # a pass lifts the quarantine
    passed = merge(old, marks.result_patch(old, BURN_IN, QUARANTINE, "passed", {}, None, NOW))
    own, msgs = passed["metadata"], {}
    bad = {
        "another node": (request_from("ip-10-0-9-9.ec2.internal"), passed),
        "no node in the token": (request_from(None), passed),
        "another label": (request_from(NODE), merge(passed, {"metadata": {"labels": {"rl.platform/pool": "rollout"}}})),
        "a label removed": (request_from(NODE), merge(passed, {"metadata": {"labels": {"rl.platform/pool": None}}})),
        "another annotation": (request_from(NODE), merge(passed, {"metadata": {"annotations": {"x": "y"}}})),
        "the replacement annotation": (request_from(NODE), merge(passed, {"metadata": {"annotations": {
            marks.REPLACEMENT_ANNOTATION: "{}"}}})),
        "the GPU taint removed": (request_from(NODE), merge(passed, {"spec": {"taints": []}})),
        "cordoned": (request_from(NODE), merge(passed, {"spec": {"unschedulable": True}})),
    }
    for name, (req, new) in bad.items():
        msgs[name] = evaluate(node_policy, req, new, old)
        assert len(msgs[name]) == 1, (name, msgs[name])
    assert "own pod runs on" in msgs["another node"][0] == msgs["no node in the token"][0]
    assert "labels" in msgs["another label"][0] and "labels" in msgs["a label removed"][0]
    assert "taint" in msgs["the GPU taint removed"][0] and "cordon" in msgs["cordoned"][0]
    assert own["labels"][marks.RESULT_LABEL] == "passed"
    # Not the burn-in's account: the policy does not apply (kubelet, controllers, admins).
    assert evaluate(node_policy, request_from(NODE, "system:node:x"), merge(passed, {"spec": {"taints": []}}), old) is None


def test_the_burn_in_may_report_events_only_about_its_own_node(policies):
    event_policy = policies["rl-burn-in-own-events"]
    node = new_node(NODE)
    own = marks.event(node, "failed", "burn-in failed: x", NOW)
    assert evaluate(event_policy, request_from(NODE), own, None) == []
    other = {**own, "involvedObject": {**own["involvedObject"], "name": "ip-10-0-9-9.ec2.internal"}}
    assert evaluate(event_policy, request_from(NODE), other, None) == [
        "the burn-in may report only on the node its own pod runs on"]
    kubernetes_validate.validate(own, "1.35.0", strict=True)


def test_the_taint_marks_keep_the_other_taints_and_carry_the_resource_version():
    node = new_node(NODE)
    passed = marks.result_patch(node, BURN_IN, QUARANTINE, "passed", {"a": 1}, "ignored", NOW)
    assert passed["spec"]["taints"] == [GPU_TAINT] and passed["metadata"]["resourceVersion"] == "100"
    assert passed["metadata"]["annotations"][marks.REASON_ANNOTATION] is None
    assert marks.stamp(NOW) == "20261201T150000Z" and marks.RESULT_LABEL.startswith(f"{LABEL_PREFIX}/")
    with pytest.raises(ValueError):
        marks.result_patch(node, BURN_IN, QUARANTINE, "retest", {}, None, NOW)


def test_a_failure_quarantines_with_its_own_taint_and_leaves_the_node_groups_taint_alone():
    registered = new_node(NODE)  # GPU and burn-in taints from the node group
    failed = merge(registered, marks.result_patch(registered, BURN_IN, QUARANTINE, "failed", {}, "why", NOW))
    assert failed["spec"]["taints"] == [GPU_TAINT, BURN_IN, QUARANTINE]
    assert QUARANTINE["key"] == "rl.platform/quarantine" and QUARANTINE["effect"] == "NoSchedule"
    # burnIn.enabled toggled: EKS rewrites the node group's taints (the burn-in taint goes): the quarantine stays
    untoggled = merge(failed, {"spec": {"taints": [t for t in failed["spec"]["taints"] if t["key"] != BURN_IN["key"]]}})
    again = merge(untoggled, marks.result_patch(untoggled, BURN_IN, QUARANTINE, "failed", {}, "why", NOW))
    assert again["spec"]["taints"] == [GPU_TAINT, QUARANTINE]  # failure handling never adds the burn-in taint back
    retest = merge(failed, marks.retest_patch(failed, BURN_IN))
    assert QUARANTINE in retest["spec"]["taints"] and BURN_IN in retest["spec"]["taints"]
    passed = merge(retest, marks.result_patch(retest, BURN_IN, QUARANTINE, "passed", {}, None, NOW))
    assert passed["spec"]["taints"] == [GPU_TAINT]


# --- replacement -------------------------------------------------------------------------------------------

REPLACING = {"burnIn": {"replaceFailed": True, "breaker": {"maxFailedNodes": 3, "maxReplacementsPerHour": 4}}}


def test_replacement_is_opt_in_and_scoped_to_the_clusters_auto_scaling_groups():
    assert not graph_of("p4d").of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation") or all(
        a.inputs["namespace"] != NAMESPACE for a in graph_of("p4d").of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation"))
    on = REPLACING
    graph, cfg = variant_graph("p4d", on), variant("p4d", on)
    assoc = [a for a in graph.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
             if a.inputs["namespace"] == NAMESPACE]
    assert [a.inputs["serviceAccount"] for a in assoc] == [REPLACE_ACCOUNT]  # the controller's, not the burn-in's
    policy = json.loads(next(r for r in graph.of_type("aws:iam/rolePolicy:RolePolicy")
                             if r.name == f"{cfg.cluster_name}-burn-in-replace").inputs["policy"])
    assert policy["Statement"] == [{"Effect": "Allow", "Action": ["autoscaling:SetInstanceHealth"], "Resource": "*",
                                    "Condition": {"StringEquals": {
                                        "aws:ResourceTag/eks:cluster-name": cfg.cluster_name,
                                        # held to the controller's own Pod Identity session (components.iam)
                                        "aws:PrincipalTag/eks-cluster-name": cfg.cluster_name,
                                        "aws:PrincipalTag/kubernetes-namespace": NAMESPACE,
                                        "aws:PrincipalTag/kubernetes-service-account": REPLACE_ACCOUNT}}}]
    objects = registered_objects(graph)
    ds = named(objects, "DaemonSet", "burn-in-train")  # by name: the watcher's DaemonSet may come first
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT and "replace" not in json.loads(
        container(pod, "agent")["command"][container(pod, "agent")["command"].index("--plan") + 1])
    cm = named(objects, "ConfigMap", "burn-in-scripts")
    assert "SetInstanceHealth" not in cm["data"]["agent.py"] and "import replace" not in cm["data"]["agent.py"]


def test_the_replacement_controller_runs_on_the_system_pool_after_its_pod_identity_association():
    graph, cfg = variant_graph("p4d", REPLACING), variant("p4d", REPLACING)
    objects = registered_objects(graph)
    dep = named(objects, "Deployment", "burn-in-replace")
    pod = dep["spec"]["template"]["spec"]
    assert dep["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"} and dep["spec"]["replicas"] == 1
    assert pod["serviceAccountName"] == REPLACE_ACCOUNT and pod["nodeSelector"] == {f"{LABEL_PREFIX}/pool": "system"}
    c = container(pod, "controller")
    plan = json.loads(c["command"][c["command"].index("--plan") + 1])
    assert plan["pools"]["train"] == {"replace": True, "maxFailedNodes": 3, "maxFailedPercent": None,
                                      "maxReplacementsPerHour": 4, "windowMinutes": 120}
    assert plan["quarantine"] == QUARANTINE
    for o in (dep, named(objects, "ValidatingAdmissionPolicy", "rl-burn-in-replace-nodes"),
              named(objects, "Role", "burn-in-breaker"), named(objects, "NetworkPolicy", "allow-pod-identity")):
        kubernetes_validate.validate(o, k8s_version(cfg), strict=True)
    (assoc,) = [a for a in graph.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
                if a.inputs["namespace"] == NAMESPACE]
    (resource,) = [r for r in graph.of_type("kubernetes:apps/v1:Deployment") if r.inputs["metadata"]["name"] == "burn-in-replace"]
    assert assoc.urn in resource.dependencies
    # Only the controller reaches the Pod Identity agent; the burn-in pods hold no AWS credentials.
    reach = named(objects, "NetworkPolicy", "allow-pod-identity")
    assert reach["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "burn-in-replace"
    api = named(objects, "NetworkPolicy", "allow-api")
    assert all("169.254" not in json.dumps(rule) for rule in api["spec"]["egress"])


def test_the_burn_in_daemonsets_are_not_awaited_by_pulumi():
    objects = registered_objects(graph_of("p5en-prod"))
    daemonsets = [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"].get("namespace") == NAMESPACE]
    assert {o["metadata"]["name"] for o in daemonsets} >= {"burn-in-train", "burn-in-watch"}
    assert all(o["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true" for o in daemonsets)


def test_a_breaker_setting_out_of_range_is_refused_before_any_resource():
    with pytest.raises(Exception, match="maxReplacementsPerHour"):
        variant("p4d", {"burnIn": {"breaker": {"maxReplacementsPerHour": 0}}})
    with pytest.raises(Exception, match="maxFailedPercent"):
        variant("p4d", {"burnIn": {"breaker": {"maxFailedPercent": 150}}})


def test_set_instance_health_is_signed_as_botocore_signs_it():
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from nodes.replace import CONTENT_TYPE, instance_id, set_instance_health_body, signed_headers
    body = set_instance_health_body(instance_id(new_node(NODE)))
    assert "InstanceId=i-0123456789abcdef0" in body and "HealthStatus=Unhealthy" in body
    creds = {"AccessKeyId": "AKIDEXAMPLE", "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "Token": "t"}
    req = AWSRequest(method="POST", url="https://autoscaling.us-east-1.amazonaws.com/", data=body,
                     headers={"Content-Type": CONTENT_TYPE})
    SigV4Auth(Credentials(creds["AccessKeyId"], creds["SecretAccessKey"], creds["Token"]), "autoscaling",
              "us-east-1").add_auth(req)
    when = datetime.strptime(req.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    assert signed_headers("us-east-1", body, creds, when)["authorization"] == req.headers["Authorization"]
    with pytest.raises(ValueError, match="names no EC2 instance"):
        instance_id(merge(new_node(NODE), {"spec": {"providerID": "kind://x"}}))


def test_the_watcher_may_only_ask_for_a_retest_of_its_own_node(policies):
    watch_policy = policies["rl-burn-in-watch-own-node"]
    user = f"system:serviceaccount:{NAMESPACE}:{WATCH_ACCOUNT}"
    old = merge(new_node(NODE), {"metadata": {"labels": {marks.RESULT_LABEL: "passed"}}, "spec": {"taints": [GPU_TAINT]}})
    retest = merge(old, marks.retest_patch(old, BURN_IN))
    assert evaluate(watch_policy, request_from(NODE, user), retest, old) == []
    assert evaluate(policies["rl-burn-in-own-node"], request_from(NODE, user), retest, old) is None
    passed = merge(old, marks.result_patch(old, BURN_IN, QUARANTINE, "passed", {}, None, NOW))
    untainted_retest = merge(old, {"metadata": {"labels": {marks.RESULT_LABEL: "retest"}}})
    bad = {"another node": (request_from("ip-10-0-9-9.ec2.internal", user), retest),
           "a result": (request_from(NODE, user), passed),
           "retest without the taint": (request_from(NODE, user), untainted_retest)}
    for name, (req, new) in bad.items():
        assert evaluate(watch_policy, req, new, old), name


def test_the_controller_may_write_only_its_replacement_annotation(policies):
    replace_policy = policies["rl-burn-in-replace-nodes"]
    user = f"system:serviceaccount:{NAMESPACE}:{REPLACE_ACCOUNT}"
    old = merge(new_node(NODE), marks.result_patch(new_node(NODE), BURN_IN, QUARANTINE, "failed", {}, "why", NOW,
                                                   fault="hardware"))
    asked = merge(old, marks.replacement_patch(old, "refused", NOW, 1, "AccessDenied"))
    assert evaluate(replace_policy, request_from(None, user), asked, old) == []  # any node: it runs on the system pool
    for bad in ({"metadata": {"labels": {marks.RESULT_LABEL: "passed"}}}, {"spec": {"taints": [GPU_TAINT]}},
                {"metadata": {"annotations": {marks.REASON_ANNOTATION: None}}}):
        assert evaluate(replace_policy, request_from(None, user), merge(asked, bad), old), bad


def test_the_controller_may_evict_only_in_the_namespaces_runs_live_in():
    """RBAC, not an admission policy: the API server admits an eviction on the Eviction object, which does
    not name the pod's node (kubernetes v1.35.3 pkg/registry/core/pod/storage/eviction.go:150-154)."""
    from conftest import graph_of
    from rbac import Request, allows, rules_of
    from test_workloads_security import registered_objects

    from nodes.render import EVICT, REPLACE_ACCOUNT
    objects = registered_objects(graph_of("p5en-shared"))
    teams = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"
                   and o["metadata"]["name"].startswith("team-"))
    assert teams
    rules = rules_of(objects, REPLACE_ACCOUNT, NAMESPACE)
    evict = lambda ns: Request("create", "", "pods/eviction", ns, "p")  # noqa: E731
    assert all(allows(rules, evict(ns)) for ns in [*teams, "rl"])
    assert not any(allows(rules, evict(ns)) for ns in ("kube-system", "monitoring", NAMESPACE, "default"))
    assert sorted(o["metadata"]["namespace"] for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == EVICT
                  ) == sorted([*teams, "rl"])


def test_the_agent_offers_its_own_node_and_only_the_controller_pairs_nodes(policies):
    waiting = {marks.WAITING_ANNOTATION: json.dumps({"address": "10.0.1.5", "until": "20261201T151000Z"})}
    peer = {marks.PEER_ANNOTATION: json.dumps({"node": "ip-10-0-9-9.ec2.internal", "address": "10.0.9.9", "rank": 0})}
    old = new_node(NODE)
    offered = merge(old, {"metadata": {"annotations": waiting}})
    assert evaluate(policies["rl-burn-in-own-node"], request_from(NODE), offered, old) == []
    assert evaluate(policies["rl-burn-in-own-node"], request_from("ip-10-0-9-9.ec2.internal"), offered, old)
    controller_user = f"system:serviceaccount:{NAMESPACE}:{REPLACE_ACCOUNT}"
    paired = merge(offered, {"metadata": {"annotations": peer}})
    assert evaluate(policies["rl-burn-in-replace-nodes"], request_from(None, controller_user), paired, offered) == []
    assert evaluate(policies["rl-burn-in-replace-nodes"], request_from(None, controller_user), offered, old)
